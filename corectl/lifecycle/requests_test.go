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

	"github.com/sandgate/sandgate/corectl/fairshare"
	"github.com/sandgate/sandgate/corectl/lifecycle"
)

// requestLog records the apiserver requests corectl makes while armed.
type requestLog struct {
	armed atomic.Bool
	// callsOnly records only the requests of API calls
	// (fairshare.Tagged: what is charged to the caller's share), not
	// the reconcilers' or the caches'.
	callsOnly bool
	mu        sync.Mutex
	seen      []string
	took      map[string]time.Duration
}

// names collapses object names, so requests read "GET ingresses/<name>".
var names = regexp.MustCompile(`/(namespaces)/[^/]+|/(ingresses|networkpolicies|batchsandboxes|sandboxingressallowlists|pods)/[^/?]+`)

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if l.armed.Load() && r.URL.Query().Get("watch") != "true" && (!l.callsOnly || fairshare.Tagged(r.Context())) {
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

// TestReadPathApiserverRequests counts the apiserver requests that one
// call itself makes (fairshare.Tagged: the requests charged to the
// caller's share, not the reconcilers' meanwhile) on a ready sandbox,
// restricted (managed Ingress and ingress allowlist) and unrestricted:
// getInfo (GET /sandboxes/{id}), one page of GET /v2/sandboxes,
// setTimeout (POST /sandboxes/{id}/timeout) and kill (DELETE
// /sandboxes/{id}), each request logged as verb and path. Each call is
// held to the requests its code reads and writes, listed in the budgets
// below, so a change that adds a read fails here. It also shows the
// SDK's read-after-write expectations through the real apiserver: a
// getInfo right after the create answers it, one after setTimeout
// reports the new end, one after kill answers 404 (and is counted too).
func TestReadPathApiserverRequests(t *testing.T) {
	log := requestLog{callsOnly: true}
	w := startWorld(t, env.Config, worldOptions{wrap: log.wrap})
	w.create(restricted) // warm: discovery, informers
	for _, c := range []struct {
		name, body string
		// getInfo: the BatchSandbox read once (the ownership check's
		// read, which Status takes), then the egress view (its
		// NetworkPolicy, the namespace's policies for conflicts, the
		// sandbox's pods) and the ingress allowlist; a restricted
		// sandbox adds the managed Ingress and the two lists of the
		// Ingresses that could claim its path.
		getInfo int
		// kill: the BatchSandbox read once, the Deleting mark; the
		// managed Ingress read (restricted: and deleted and confirmed
		// gone, 2 more); the Native Browser carrier's Ingress, Service
		// and EndpointSlice read; the allowlist deleted and confirmed;
		// the policy's owner reference released (read, update,
		// read-back); the BatchSandbox deleted and confirmed; the
		// policy read, its pods listed (once: this world has none),
		// deleted and confirmed.
		kill int
	}{
		{"restricted", restricted, 8, 19},
		{"unrestricted", `{"templateID":"base"}`, 5, 17},
	} {
		calls := map[string]int{}
		sb := w.create(c.body)
		p := "/sandboxes/" + sb.SandboxID
		count := func(name, m, path, body string, out any) int {
			log.mu.Lock()
			log.seen = nil
			log.mu.Unlock()
			log.armed.Store(true)
			st, _ := w.do(m, path, "key-a", body, out)
			log.armed.Store(false)
			log.mu.Lock()
			seen := append([]string(nil), log.seen...)
			log.mu.Unlock()
			t.Logf("%s %-8s %s %s = %d: %d requests", c.name, name, m, strings.Replace(path, sb.SandboxID, "{id}", 1), st, len(seen))
			for _, s := range seen {
				t.Logf("           %s", s)
			}
			calls[name] = len(seen)
			return st
		}
		var info lifecycle.Info
		if st := count("getInfo", "GET", p, "", &info); st != http.StatusOK || info.SandboxID != sb.SandboxID {
			t.Fatalf("%s: getInfo right after the create = %d (%+v)", c.name, st, info)
		}
		created := calls["getInfo"]
		w.markReady(t.Context(), w.nsA, sb.SandboxID, 1)
		info = lifecycle.Info{}
		if st := count("getInfo", "GET", p, "", &info); st != http.StatusOK || info.LifecycleState != lifecycle.StateReady {
			t.Fatalf("%s: getInfo of the ready sandbox = %d, state %q", c.name, st, info.LifecycleState)
		}
		if got, want := info.Ingress != nil, c.name == "restricted"; got != want {
			t.Fatalf("%s: ingress view present %v, want %v", c.name, got, want)
		}
		if info.Egress == nil || !info.Egress.NetworkReady {
			t.Fatalf("%s: egress view %+v, want networkReady", c.name, info.Egress)
		}
		if st := count("list", "GET", "/v2/sandboxes?limit=100", "", nil); st != http.StatusOK {
			t.Fatalf("%s: list = %d", c.name, st)
		}
		if st := count("metrics", "GET", p+"/metrics", "", nil); st != http.StatusOK {
			t.Fatalf("%s: metrics = %d", c.name, st)
		}
		if st := count("logs", "GET", "/v2"+p+"/logs", "", nil); st != http.StatusOK {
			t.Fatalf("%s: logs = %d", c.name, st)
		}
		before := w.endAt(sb.SandboxID)
		if st := count("timeout", "POST", p+"/timeout", `{"timeout":30}`, nil); st != http.StatusNoContent {
			t.Fatalf("%s: setTimeout = %d", c.name, st)
		}
		if after := w.endAt(sb.SandboxID); !after.Before(before) {
			t.Fatalf("%s: getInfo after setTimeout(30 s) reports end %v, before it %v", c.name, after, before)
		}
		if st := count("kill", "DELETE", p, "", nil); st != http.StatusNoContent {
			t.Fatalf("%s: kill = %d", c.name, st)
		}
		if st := count("gone", "GET", p, "", nil); st != http.StatusNotFound {
			t.Fatalf("%s: getInfo after kill = %d", c.name, st)
		}
		for _, b := range []struct {
			name string
			got  int
			max  int
		}{
			{"getInfo right after the create", created, c.getInfo},
			{"getInfo", calls["getInfo"], c.getInfo},
			// list: the manager's informer cache, no request.
			{"list", calls["list"], 0},
			// metrics: the BatchSandbox read once (the ownership
			// check's, which Usage takes), its pods listed (this world
			// has none, so no PodMetrics read).
			{"metrics", calls["metrics"], 2},
			// logs: the same two.
			{"logs", calls["logs"], 2},
			// setTimeout: the BatchSandbox read once (the ownership
			// check's), the end time's patch.
			{"setTimeout", calls["timeout"], 2},
			{"kill", calls["kill"], c.kill},
			// getInfo of a sandbox that is gone: the ownership check's
			// read, answered 404 from it.
			{"getInfo after kill", calls["gone"], 1},
		} {
			if b.got > b.max {
				t.Errorf("%s: %s made %d apiserver requests, budget %d", c.name, b.name, b.got, b.max)
			}
		}
	}
}
