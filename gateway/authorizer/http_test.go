package authorizer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// corectl is a stand-in for corectl's endpoint: it records the requests
// and answers what answer returns.
type corectl struct {
	mu     sync.Mutex
	calls  int
	last   *http.Request
	answer func(r *http.Request) (int, string)
}

func (c *corectl) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.calls++
	c.last = r
	f := c.answer
	c.mu.Unlock()
	st, body := f(r)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st)
	_, _ = w.Write([]byte(body))
}

func (c *corectl) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.calls }

// start returns an authorizer against a stand-in answering fixed, with a
// manual clock.
func start(t *testing.T, answer func(*http.Request) (int, string)) (*HTTP, *corectl, *time.Time) {
	t.Helper()
	c := &corectl{answer: answer}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	h, err := NewHTTP(HTTPConfig{BaseURL: srv.URL + "/", Header: http.Header{"Authorization": {"Bearer s3cret-internal"}}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	h.now = func() time.Time { return now }
	h.cache.SetClock(func() time.Time { return now })
	return h, c, &now
}

func fixed(st int, body string) func(*http.Request) (int, string) {
	return func(*http.Request) (int, string) { return st, body }
}

// TestAuthorizeAnswers: each answer of the contract becomes its Decision;
// the request carries the IDs (escaped) and the header.
func TestAuthorizeAnswers(t *testing.T) {
	end := time.Unix(1_800_000_100, 0).UTC()
	for _, tc := range []struct {
		body string
		want Decision
	}{
		{`{"allowed":true,"endAt":"` + end.Format(time.RFC3339) + `"}`, Decision{Allowed: true, EndAt: end}},
		{`{"allowed":true}`, Decision{Allowed: true}},
		{`{"allowed":false,"reason":"not_found"}`, Decision{Reason: ReasonNotFound}},
		{`{"allowed":false,"reason":"deleting"}`, Decision{Reason: ReasonDeleting}},
		{`{"allowed":false,"reason":"expired"}`, Decision{Reason: ReasonExpired}},
		{`{"allowed":false,"reason":"not_ready"}`, Decision{Reason: ReasonNotReady}},
	} {
		h, c, _ := start(t, fixed(200, tc.body))
		d, err := h.Authorize(context.Background(), "cred/a b", "sb1")
		if err != nil || !d.EndAt.Equal(tc.want.EndAt) || d.Allowed != tc.want.Allowed || d.Reason != tc.want.Reason {
			t.Errorf("%s: %+v %v; want %+v", tc.body, d, err, tc.want)
		}
		r := c.last
		if r.URL.Path != Path || r.URL.Query().Get("credential") != "cred/a b" || r.URL.Query().Get("sandbox") != "sb1" ||
			r.Header.Get("Authorization") != "Bearer s3cret-internal" {
			t.Errorf("request %s %v", r.URL, r.Header)
		}
	}
}

// TestAuthorizeFailsClosed: anything but a well-formed 200 answer is
// ErrUnavailable, is not cached, and never echoes the header.
func TestAuthorizeFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"401", 401, `{"allowed":true}`},
		{"500", 500, `oops`},
		{"404", 404, `{"allowed":false,"reason":"not_found"}`},
		{"not JSON", 200, `allowed`},
		{"unknown member", 200, `{"allowed":true,"admin":true}`},
		{"refused without reason", 200, `{"allowed":false}`},
		{"unknown reason", 200, `{"allowed":false,"reason":"maybe"}`},
		{"allowed with a reason", 200, `{"allowed":true,"reason":"expired"}`},
		{"bad endAt", 200, `{"allowed":true,"endAt":"soon"}`},
		{"allowed as a string", 200, `{"allowed":"true"}`},
		{"trailing data", 200, `{"allowed":true} {}`},
		{"oversized", 200, `{"allowed":true,"endAt":"` + strings.Repeat("x", MaxAnswerSize) + `"}`},
	} {
		h, c, _ := start(t, fixed(tc.status, tc.body))
		for range 2 {
			d, err := h.Authorize(context.Background(), "c", "s")
			if !errors.Is(err, ErrUnavailable) || d.Allowed {
				t.Errorf("%s: %+v %v; want ErrUnavailable", tc.name, d, err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%s: the error echoes the header: %v", tc.name, err)
			}
		}
		if c.count() != 2 {
			t.Errorf("%s: %d requests for 2 calls: a failure was cached", tc.name, c.count())
		}
	}
	// Unreachable.
	h, err := NewHTTP(HTTPConfig{BaseURL: "http://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Authorize(context.Background(), "c", "s"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unreachable: %v", err)
	}
}

// TestAuthorizeCache: an answer is reused for the TTL (1 s) and asked
// again after it; an allowed answer is not reused past the sandbox's end,
// which then reads as expired without asking.
func TestAuthorizeCache(t *testing.T) {
	var allowed atomic.Bool
	allowed.Store(true)
	h, c, now := start(t, func(*http.Request) (int, string) {
		if allowed.Load() {
			return 200, `{"allowed":true,"endAt":"2027-01-15T08:00:00.5Z"}`
		}
		return 200, `{"allowed":false,"reason":"deleting"}`
	})
	*now = time.Date(2027, 1, 15, 7, 59, 58, 0, time.UTC)
	ctx := context.Background()
	if d, _ := h.Authorize(ctx, "c", "s"); !d.Allowed {
		t.Fatal("not allowed")
	}
	allowed.Store(false)
	*now = now.Add(999 * time.Millisecond)
	if d, _ := h.Authorize(ctx, "c", "s"); !d.Allowed || c.count() != 1 {
		t.Fatalf("within the TTL: %+v after %d requests", d, c.count())
	}
	*now = now.Add(time.Millisecond)
	if d, _ := h.Authorize(ctx, "c", "s"); d.Allowed || d.Reason != ReasonDeleting || c.count() != 2 {
		t.Fatalf("after the TTL: %+v after %d requests", d, c.count())
	}
	// The end time bounds an allowed answer: at 07:59:59.9 the answer is
	// cached until 08:00:00.5 (not 08:00:00.9), and after that it reads
	// as expired.
	allowed.Store(true)
	*now = time.Date(2027, 1, 15, 7, 59, 59, 900e6, time.UTC)
	if d, _ := h.Authorize(ctx, "c", "other"); !d.Allowed {
		t.Fatalf("before the end: %+v", d)
	}
	*now = time.Date(2027, 1, 15, 8, 0, 0, 500e6, time.UTC)
	n := c.count()
	d, _ := h.Authorize(ctx, "c", "other")
	if d.Allowed || c.count() != n+1 {
		t.Fatalf("at the end: %+v (%d new requests)", d, c.count()-n)
	}
	if d.Reason != ReasonExpired {
		t.Fatalf("at the end: %+v, want expired", d)
	}
}

// TestRecheck: Recheck asks corectl while an allowed answer is cached,
// the refusal it gets replaces that answer for Authorize, and a failure
// is ErrUnavailable and leaves nothing cached.
func TestRecheck(t *testing.T) {
	var answer atomic.Value
	answer.Store(`{"allowed":true}`)
	h, c, _ := start(t, func(*http.Request) (int, string) {
		b := answer.Load().(string)
		if b == "down" {
			return 500, "down"
		}
		return 200, b
	})
	ctx := context.Background()
	if d, _ := h.Authorize(ctx, "c", "s"); !d.Allowed {
		t.Fatal("not allowed")
	}
	answer.Store(`{"allowed":false,"reason":"not_found"}`)
	if d, _ := h.Authorize(ctx, "c", "s"); !d.Allowed || c.count() != 1 {
		t.Fatalf("cached answer: %+v after %d requests", d, c.count())
	}
	if d, err := h.Recheck(ctx, "c", "s"); err != nil || d.Allowed || d.Reason != ReasonNotFound || c.count() != 2 {
		t.Fatalf("Recheck = %+v %v after %d requests", d, err, c.count())
	}
	if d, _ := h.Authorize(ctx, "c", "s"); d.Allowed || d.Reason != ReasonNotFound || c.count() != 2 {
		t.Fatalf("Authorize after Recheck = %+v after %d requests, want the rechecked refusal", d, c.count())
	}
	answer.Store("down")
	if d, err := h.Recheck(ctx, "c", "s"); !errors.Is(err, ErrUnavailable) || d.Allowed {
		t.Fatalf("Recheck with corectl down = %+v %v", d, err)
	}
	answer.Store(`{"allowed":true}`)
	if d, _ := h.Authorize(ctx, "c", "s"); !d.Allowed || c.count() != 4 {
		t.Fatalf("after a failed Recheck: %+v after %d requests, want a new request", d, c.count())
	}
}

// TestNewHTTPRejects: bad configurations.
func TestNewHTTPRejects(t *testing.T) {
	for _, cfg := range []HTTPConfig{
		{BaseURL: ""}, {BaseURL: "corectl:8090"}, {BaseURL: "ftp://x"}, {BaseURL: "http://x?a=b"}, {BaseURL: "http://u:p@x"},
		{BaseURL: "http://x", CacheTTL: 2 * time.Second}, {BaseURL: "http://x", CacheTTL: -1},
		{BaseURL: "http://x", Timeout: time.Hour},
	} {
		if _, err := NewHTTP(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// BenchmarkAuthorizeCached is what the authorizer adds to a data-plane
// request whose answer is cached (every request but about one per second
// per credential and sandbox): docs/benchmarks.md "Sandbox authorizer".
func BenchmarkAuthorizeCached(b *testing.B) {
	h, c := benchAuthorizer(b)
	ctx := context.Background()
	if _, err := h.Authorize(ctx, "cred-bench", "sbxbench"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, err := h.Authorize(ctx, "cred-bench", "sbxbench"); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.ReportMetric(float64(c.count()), "corectl-requests")
}

// BenchmarkAuthorizeMiss is one question to corectl (a stand-in over
// loopback HTTP), what a request pays once per second per credential and
// sandbox.
func BenchmarkAuthorizeMiss(b *testing.B) {
	h, _ := benchAuthorizer(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := h.Authorize(ctx, "cred-bench", "sbx"+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchAuthorizer is an authorizer against a stand-in that always allows.
func benchAuthorizer(b *testing.B) (*HTTP, *corectl) {
	c := &corectl{answer: fixed(200, `{"allowed":true,"endAt":"2099-01-01T00:00:00Z"}`)}
	srv := httptest.NewServer(c)
	b.Cleanup(srv.Close)
	h, err := NewHTTP(HTTPConfig{BaseURL: srv.URL, Header: http.Header{"Authorization": {"Bearer x"}}})
	if err != nil {
		b.Fatal(err)
	}
	return h, c
}

// TestObserve: each request sent to corectl is observed once with its
// outcome; a cached answer sends none and is not observed.
func TestObserve(t *testing.T) {
	var got []string
	answers := map[string]string{"a": `{"allowed":true}`, "b": `{"allowed":false,"reason":"deleting"}`, "c": `oops`}
	c := &corectl{answer: func(r *http.Request) (int, string) { return 200, answers[r.URL.Query().Get("sandbox")] }}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	h, err := NewHTTP(HTTPConfig{BaseURL: srv.URL, Observe: func(outcome string, d time.Duration) {
		if d < 0 {
			t.Errorf("negative duration %v", d)
		}
		got = append(got, outcome)
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sbx := range []string{"a", "a", "b", "c"} {
		_, _ = h.Authorize(context.Background(), "cred", sbx)
	}
	if strings.Join(got, ",") != "allowed,deleting,unavailable" || c.count() != 3 {
		t.Fatalf("observed %v for %d requests", got, c.count())
	}
}
