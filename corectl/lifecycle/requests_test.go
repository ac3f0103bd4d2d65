package lifecycle_test

import (
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// requestLog records the apiserver requests corectl makes while armed.
type requestLog struct {
	armed atomic.Bool
	mu    sync.Mutex
	seen  []string
	took  map[string]time.Duration
}

// names collapses object names, so requests read "GET ingresses/<name>".
var names = regexp.MustCompile(`/(namespaces)/[^/]+|/(ingresses|networkpolicies|batchsandboxes|sandboxingressallowlists|pods)/[^/?]+`)

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if l.armed.Load() && r.URL.Query().Get("watch") != "true" {
			p := names.ReplaceAllStringFunc(r.URL.Path, func(m string) string {
				parts := strings.SplitN(m[1:], "/", 2)
				return "/" + parts[0] + "/<name>"
			})
			if i := strings.LastIndex(p, "/namespaces/<name>/"); i >= 0 {
				p = p[i+len("/namespaces/<name>/"):]
			} else if i := strings.Index(p, "/v1/"); i >= 0 {
				p = p[i+len("/v1/"):]
			}
			start := time.Now()
			resp, err := rt.RoundTrip(r)
			d := time.Since(start)
			l.mu.Lock()
			l.seen = append(l.seen, r.Method+" "+p)
			if l.took == nil {
				l.took = map[string]time.Duration{}
			}
			l.took[r.Method+" "+p] += d
			l.mu.Unlock()
			return resp, err
		}
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestCreateApiserverRequests counts the apiserver requests of one
// restricted create (managed Ingress, NetworkPolicy, BatchSandbox, owner
// back-fill, desired ingress state verified, readiness, lifecycle) made
// by corectl's API and its reconcilers while the create runs. The
// orchestration's latency is mostly these round trips (docs/benchmarks.md
// "Sustained creates"), so the count is held to a budget: a change that
// adds requests to the create path fails here and must justify them.
func TestCreateApiserverRequests(t *testing.T) {
	var log requestLog
	w := startWorld(t, env.Config, worldOptions{wrap: log.wrap})
	w.create(restricted) // warm: discovery, informers
	log.armed.Store(true)
	w.create(restricted)
	log.armed.Store(false)
	log.mu.Lock()
	seen := append([]string(nil), log.seen...)
	log.mu.Unlock()
	count := map[string]int{}
	for _, s := range seen {
		count[s]++
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%3d %-45s %6.1f ms each", count[k], k, float64(log.took[k].Microseconds())/1000/float64(count[k]))
	}
	t.Logf("%d requests in all", len(seen))
	const budget = 32
	if len(seen) > budget {
		t.Fatalf("one create made %d apiserver requests, budget %d", len(seen), budget)
	}
}

// TestRouteApiserverRequests counts the apiserver requests of one call
// of each sandbox route on a ready sandbox of its owner (the owner read
// included), the figures docs/corectl.md "Per-credential limits" gives
// for what each call spends of its credential's share; a route over 16
// fails, so a change that makes a read dearer must say so there.
func TestRouteApiserverRequests(t *testing.T) {
	var log requestLog
	w := startWorld(t, env.Config, worldOptions{wrap: log.wrap})
	sb := w.create(restricted)
	w.markReady(t.Context(), w.nsA, sb.SandboxID, 1)
	p := "/sandboxes/" + sb.SandboxID
	for _, rt := range []struct{ m, p, body string }{
		{"GET", p, ""},
		{"GET", p + "/network", ""},
		{"GET", p + "/network/ingress", ""},
		{"POST", p + "/connect", "{}"},
		{"POST", p + "/timeout", `{"timeout":300}`},
		{"POST", p + "/refreshes", `{}`},
		{"GET", p + "/metrics", ""},
		{"GET", p + "/logs", ""},
		{"GET", p + "/endpoints?port=8080", ""},
		{"POST", p + "/pause", ""},
		{"PUT", p + "/network", `{"allowOut":["198.51.100.7"]}`},
		{"GET", "/sandboxes/sbffffffffffffffffffff", ""},
		{"GET", "/v2/sandboxes", ""},
		{"GET", "/sandboxes/metrics?sandbox_ids=" + sb.SandboxID, ""},
	} {
		log.mu.Lock()
		log.seen = nil
		log.mu.Unlock()
		log.armed.Store(true)
		st, _ := w.do(rt.m, rt.p, "key-a", rt.body, nil)
		log.armed.Store(false)
		log.mu.Lock()
		n := len(log.seen)
		log.mu.Unlock()
		t.Logf("%-4s %-55s %d: %2d requests", rt.m, strings.Replace(rt.p, sb.SandboxID, "{id}", 1), st, n)
		if st/100 != 2 && st != http.StatusNotFound && st != http.StatusNotImplemented {
			t.Errorf("%s %s = %d", rt.m, rt.p, st)
		}
		if n > 16 {
			t.Errorf("%s %s made %d apiserver requests, budget 16", rt.m, rt.p, n)
		}
	}
}
