package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/internal/waittest"
)

const portalToken = "Bearer portal-secret-value"

// fakeClock is a manually advanced clock for cache expiry.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// portal is a test Portal on 127.0.0.1 that counts requests and records
// the escaped path and Authorization header of each.
type portal struct {
	srv   *httptest.Server
	hits  atomic.Int64
	mu    sync.Mutex
	paths []string
	auth  []string
}

func newPortal(t *testing.T, handler http.HandlerFunc) *portal {
	t.Helper()
	p := &portal{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		p.mu.Lock()
		p.paths = append(p.paths, r.URL.EscapedPath())
		p.auth = append(p.auth, r.Header.Get("Authorization"))
		p.mu.Unlock()
		handler(w, r)
	}))
	p.srv.Listener = ln
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

// request returns the escaped path and Authorization header of request i.
func (p *portal) request(i int) (path, auth string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i >= len(p.paths) {
		return "", ""
	}
	return p.paths[i], p.auth[i]
}

// source returns an HTTP Source for p with a fake clock.
func (p *portal) source(t *testing.T, cfg HTTPConfig) (*HTTP, *fakeClock) {
	t.Helper()
	cfg.URL = p.srv.URL + "/api/credentials/{id}"
	if cfg.Header == nil {
		cfg.Header = http.Header{"Authorization": {portalToken}}
	}
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatalf("NewHTTP: %v", err)
	}
	clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.now = clock.Now
	return h, clock
}

// credentialsHandler serves creds by the decoded last path segment.
func credentialsHandler(creds map[string]Credential) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/api/credentials/")
		c, found := creds[id]
		if !ok || !found {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	}
}

func staticHandler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func TestHTTPFound(t *testing.T) {
	p := newPortal(t, credentialsHandler(map[string]Credential{"a": credA}))
	h, _ := p.source(t, HTTPConfig{})
	got, err := h.Lookup(context.Background(), "a")
	if err != nil || got != credA {
		t.Fatalf("Lookup = %+v, %v; want %+v", got, err, credA)
	}
	path, auth := p.request(0)
	if auth != portalToken {
		t.Errorf("Authorization sent = %q, want %q", auth, portalToken)
	}
	if path != "/api/credentials/a" {
		t.Errorf("path = %q", path)
	}
}

func TestHTTPAnswers(t *testing.T) {
	disabled := credA
	disabled.ID, disabled.Enabled = "d", false
	good, _ := json.Marshal(credA)
	big := `{"id": "a", "projectNamespace": "p", "clusterId": "` + strings.Repeat("c", MaxResponseSize) + `"}`

	cases := []struct {
		name    string
		handler http.HandlerFunc
		id      string
		want    error
		reason  string
		cached  bool
	}{
		{"404", staticHandler(http.StatusNotFound, "no such credential"), "a", ErrNotFound, "", true},
		{"disabled", credentialsHandler(map[string]Credential{"d": disabled}), "d", ErrDisabled, "", true},
		{"500", staticHandler(http.StatusInternalServerError, "boom"), "a", ErrUnavailable, "unexpected HTTP status 500", false},
		{"403", staticHandler(http.StatusForbidden, ""), "a", ErrUnavailable, "unexpected HTTP status 403", false},
		{"redirect not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, "a", ErrUnavailable, "unexpected HTTP status 302", false},
		{"truncated", staticHandler(http.StatusOK, `{"id": "a", `), "a", ErrUnavailable, "bad response: credential: invalid credential data: malformed JSON at byte 12: unexpected end of input", false},
		{"syntax error", staticHandler(http.StatusOK, `{"id" "a"}`), "a", ErrUnavailable, "bad response: credential: invalid credential data: malformed JSON at byte 6: syntax error", false},
		{"empty body", staticHandler(http.StatusOK, ""), "a", ErrUnavailable, "bad response: credential: invalid credential data: malformed JSON at byte 0: empty input", false},
		{"not an object", staticHandler(http.StatusOK, `["a"]`), "a", ErrUnavailable, "bad response: credential: invalid credential data: not a JSON object: the value is a JSON array", false},
		{"unknown field", staticHandler(http.StatusOK, `{"id": "a", "projectNamespace": "p", "clusterId": "c", "extra": 1}`), "a", ErrUnavailable, `unknown field "extra"`, false},
		{"duplicate field", staticHandler(http.StatusOK, `{"id": "a", "projectNamespace": "p", "clusterId": "c", "clusterId": "d"}`), "a", ErrUnavailable, "duplicate member name at /clusterId", false},
		// encoding/json, before beaf7f0, took these as U+FFFD (two distinct
		// ids could read as one); a file element refuses them (listfile).
		{"invalid UTF-8", staticHandler(http.StatusOK, "{\"id\": \"a\xff\", \"projectNamespace\": \"p\", \"clusterId\": \"c\"}"), "a\ufffd", ErrUnavailable, "malformed JSON at byte 9: invalid UTF-8", false},
		{"unpaired surrogate", staticHandler(http.StatusOK, `{"id": "a\ud800", "projectNamespace": "p", "clusterId": "c"}`), "a\ufffd", ErrUnavailable, "malformed JSON at byte 9: unpaired surrogate escape", false},
		{"trailing data", staticHandler(http.StatusOK, string(good)+`{}`), "a", ErrUnavailable, fmt.Sprintf("malformed JSON at byte %d: data after the top-level value", len(good)), false},
		{"invalid credential", staticHandler(http.StatusOK, `{"id": "a", "projectNamespace": "p"}`), "a", ErrUnavailable, "clusterId is empty", false},
		{"id mismatch", staticHandler(http.StatusOK, string(good)), "b", ErrUnavailable, "different credential id", false},
		{"oversize", staticHandler(http.StatusOK, big), "a", ErrUnavailable, "larger than 65536 bytes", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPortal(t, tc.handler)
			h, _ := p.source(t, HTTPConfig{})
			got, err := h.Lookup(context.Background(), tc.id)
			assertOnly(t, err, tc.want, portalToken, "portal-secret", p.srv.URL)
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q lacks %q", err, tc.reason)
			}
			if tc.want == ErrDisabled {
				if got != disabled {
					t.Errorf("Lookup returned %+v with ErrDisabled, want %+v", got, disabled)
				}
			} else if got != (Credential{}) {
				t.Errorf("Lookup returned %+v with %v", got, err)
			}
			// Second lookup within the TTL: cached answers make no request.
			_, err2 := h.Lookup(context.Background(), tc.id)
			assertOnly(t, err2, tc.want)
			wantHits := int64(2)
			if tc.cached {
				wantHits = 1
			}
			if n := p.hits.Load(); n != wantHits {
				t.Errorf("server hits = %d, want %d", n, wantHits)
			}
		})
	}
}

func TestHTTPCacheTTL(t *testing.T) {
	var enabled atomic.Bool
	enabled.Store(true)
	p := newPortal(t, func(w http.ResponseWriter, r *http.Request) {
		c := credA
		c.Enabled = enabled.Load()
		_ = json.NewEncoder(w).Encode(c)
	})
	h, clock := p.source(t, HTTPConfig{CacheTTL: 5 * time.Second})
	ctx := context.Background()
	for range 3 {
		if _, err := h.Lookup(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.hits.Load(); n != 1 {
		t.Fatalf("hits after 3 lookups within TTL = %d, want 1", n)
	}
	enabled.Store(false)
	clock.Advance(5*time.Second - time.Nanosecond)
	if _, err := h.Lookup(ctx, "a"); err != nil || p.hits.Load() != 1 {
		t.Fatalf("just before expiry: err %v, hits %d; want cached success", err, p.hits.Load())
	}
	clock.Advance(time.Nanosecond)
	_, err := h.Lookup(ctx, "a")
	assertOnly(t, err, ErrDisabled)
	if n := p.hits.Load(); n != 2 {
		t.Fatalf("hits after expiry = %d, want 2", n)
	}
}

func TestHTTPDefaultTTLIsOneSecond(t *testing.T) {
	p := newPortal(t, credentialsHandler(map[string]Credential{"a": credA}))
	h, clock := p.source(t, HTTPConfig{})
	if _, err := h.Lookup(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if _, err := h.Lookup(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if n := p.hits.Load(); n != 2 {
		t.Fatalf("hits = %d, want 2 (entry expired after 1s)", n)
	}
}

func TestHTTPTimeout(t *testing.T) {
	release := make(chan struct{})
	p := newPortal(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	h, _ := p.source(t, HTTPConfig{Timeout: 50 * time.Millisecond})
	_, err := h.Lookup(context.Background(), "a")
	assertOnly(t, err, ErrUnavailable, portalToken, p.srv.URL)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q does not wrap context.DeadlineExceeded", err)
	}
}

func TestHTTPCallerContext(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	started := make(chan struct{}, 1)
	p := newPortal(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		_ = json.NewEncoder(w).Encode(credA)
	})
	t.Cleanup(releaseAll) // runs before the server's Close
	h, _ := p.source(t, HTTPConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.Lookup(ctx, "a")
		errc <- err
	}()
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("Lookup returned (%v) before the portal was asked", err)
	}
	cancel()
	err := <-errc
	assertOnly(t, err, ErrUnavailable)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %q does not wrap context.Canceled", err)
	}
	// The detached fetch completes and fills the cache for later callers.
	releaseAll()
	waittest.Until(t, time.Second, "the detached fetch to be cached", func() bool {
		_, ok := h.cached("a")
		return ok
	})
	if got, err := h.Lookup(context.Background(), "a"); err != nil || got != credA || p.hits.Load() != 1 {
		t.Fatalf("Lookup = %+v, %v with %d hits", got, err, p.hits.Load())
	}
}

func TestHTTPTransportError(t *testing.T) {
	addr, held, err := freeport.Refusing() // connections there are refused
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	h, err := NewHTTP(HTTPConfig{URL: "http://user:pw-in-url@" + addr + "/c/{id}?key=query-secret", Header: http.Header{"Authorization": {portalToken}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Lookup(context.Background(), "a")
	assertOnly(t, err, ErrUnavailable, portalToken, "pw-in-url", "query-secret")
}

func TestHTTPPathEscaping(t *testing.T) {
	ids := []string{"a/b", "a b", "a?b=c", "a#b", "100%", "ü-ñ", "a;b,c", "..a", "%2F"}
	creds := map[string]Credential{}
	for _, id := range ids {
		c := credA
		c.ID = id
		creds[id] = c
	}
	p := newPortal(t, credentialsHandler(creds))
	h, _ := p.source(t, HTTPConfig{})
	for i, id := range ids {
		got, err := h.Lookup(context.Background(), id)
		if err != nil || got.ID != id {
			t.Errorf("Lookup(%q) = %+v, %v", id, got, err)
			continue
		}
		path, _ := p.request(i)
		if want := "/api/credentials/" + url.PathEscape(id); path != want {
			t.Errorf("Lookup(%q) requested %q, want %q", id, path, want)
		}
	}
	for _, id := range []string{"", ".", "..", strings.Repeat("x", MaxIDLength+1)} {
		_, err := h.Lookup(context.Background(), id)
		assertOnly(t, err, ErrNotFound)
	}
	if n := p.hits.Load(); n != int64(len(ids)) {
		t.Errorf("hits = %d, want %d (invalid ids must not be fetched)", n, len(ids))
	}
}

// TestHTTPSingleFlight: concurrent lookups of one id while a fetch is in
// flight share that fetch.
func TestHTTPSingleFlight(t *testing.T) {
	const n = 8
	release := make(chan struct{})
	p := newPortal(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		_ = json.NewEncoder(w).Encode(credA)
	})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // runs before the server's Close
	h, _ := p.source(t, HTTPConfig{})
	var joined atomic.Int64
	h.onJoin = func() { joined.Add(1) }

	var wg sync.WaitGroup
	results := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := h.Lookup(context.Background(), "a")
			if err == nil && got != credA {
				err = errors.New("wrong credential")
			}
			results <- err
		}()
	}
	waittest.Until(t, time.Second, "all lookups to join the in-flight fetch", func() bool {
		return joined.Load() == n && p.hits.Load() == 1
	})
	releaseAll()
	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Error(err)
		}
	}
	if hits := p.hits.Load(); hits != 1 {
		t.Fatalf("server hits = %d, want 1", hits)
	}
}

func TestNewHTTPRejects(t *testing.T) {
	cases := []struct {
		name string
		cfg  HTTPConfig
	}{
		{"empty URL", HTTPConfig{}},
		{"no placeholder", HTTPConfig{URL: "https://portal/api/credentials"}},
		{"placeholder in query", HTTPConfig{URL: "https://portal/api/credentials?id={id}"}},
		{"placeholder in fragment", HTTPConfig{URL: "https://portal/api#{id}"}},
		{"relative URL", HTTPConfig{URL: "/api/credentials/{id}"}},
		{"ftp scheme", HTTPConfig{URL: "ftp://portal/{id}"}},
		{"negative TTL", HTTPConfig{URL: "https://portal/{id}", CacheTTL: -time.Second}},
		{"TTL above 1m", HTTPConfig{URL: "https://portal/{id}", CacheTTL: MaxCacheTTL + time.Second}},
		{"negative timeout", HTTPConfig{URL: "https://portal/{id}", Timeout: -time.Second}},
		{"timeout above max", HTTPConfig{URL: "https://portal/{id}", Timeout: MaxTimeout + time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Header = http.Header{"Authorization": {portalToken}}
			h, err := NewHTTP(tc.cfg)
			if h != nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("NewHTTP = %v, %v; want ErrInvalidConfig", h, err)
			}
			if strings.Contains(err.Error(), "portal-secret") {
				t.Fatalf("error %q contains a header value", err)
			}
		})
	}
	h, err := NewHTTP(HTTPConfig{URL: "https://portal/{id}", CacheTTL: MaxCacheTTL, Timeout: MaxTimeout})
	if err != nil || h.ttl != MaxCacheTTL || h.timeout != MaxTimeout {
		t.Fatalf("NewHTTP(max values) = %v, %v", h, err)
	}
	h, err = NewHTTP(HTTPConfig{URL: "https://portal/{id}"})
	if err != nil || h.ttl != DefaultCacheTTL || h.timeout != DefaultTimeout {
		t.Fatalf("NewHTTP(defaults) = %v, %v", h, err)
	}
}
