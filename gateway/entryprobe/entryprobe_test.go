package entryprobe

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/internal/freeport"
)

const relayToken = "relay-token-0123456789abcdef0123456789"

// entry is a fixed entry that records the Host and path of every request.
type entry struct {
	mu    sync.Mutex
	seen  []string // "host path"
	srv   *httptest.Server
	fixed *url.URL
}

func newEntry(t *testing.T) *entry {
	e := &entry{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.seen = append(e.seen, r.Host+" "+r.URL.Path)
		e.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/prefix"+EchoPathPrefix) {
			_, _ = io.WriteString(w, "10.1.2.3"+strings.Repeat(" ", 2*MaxBody))
			return
		}
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(e.srv.Close)
	e.fixed, _ = url.Parse(e.srv.URL + "/prefix/")
	return e
}

func (e *entry) requests() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// relay serves a Handler for cluster-a (Host sandbox.a.example) in front
// of e; noTransport leaves the data plane's transport unset.
func relay(t *testing.T, e *entry, noTransport bool) (*httptest.Server, *Client) {
	h := &Handler{
		Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(relayToken))},
		Targets: func() map[string]Target {
			return map[string]Target{"cluster-a": {FixedEntry: e.fixed, Host: "sandbox.a.example"}}
		},
		Transport: func() http.RoundTripper {
			if noTransport {
				return nil
			}
			return http.DefaultTransport
		},
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, &Client{URL: srv.URL, Token: relayToken}
}

func TestValidPath(t *testing.T) {
	for _, p := range []string{"/sbx-1/44772/ping", "/a/44772/ping", EchoPathPrefix + strings.Repeat("0f", 16)} {
		if err := ValidPath(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{"", "/", "/sbx/44772/files", "/sbx/44772/ping/", "/Sbx/44772/ping", "/-a/44772/ping",
		"/sbx/8080/ping", "/a/b/44772/ping", "/sbx/44772/ping?x", EchoPathPrefix + "0F" + strings.Repeat("0", 30),
		EchoPathPrefix + strings.Repeat("0", 31), EchoPathPrefix + strings.Repeat("0", 33), "/../sbx/44772/ping"} {
		if err := ValidPath(p); !errors.Is(err, ErrPath) {
			t.Errorf("%q: %v, want ErrPath", p, err)
		}
	}
}

// TestRelayProbe: a probe goes to the cluster's fixed entry (its path
// prefix kept) with the data plane's Host; the answer's status and at most
// MaxBody bytes of its body come back, whatever the status.
func TestRelayProbe(t *testing.T) {
	e := newEntry(t)
	_, c := relay(t, e, false)
	echo := EchoPathPrefix + strings.Repeat("ab", 16)
	a, err := c.Probe(context.Background(), "cluster-a", echo)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != 200 || len(a.Body) != MaxBody || !strings.HasPrefix(a.Body, "10.1.2.3 ") || a.Host != "sandbox.a.example" {
		t.Fatalf("answer %+v", a)
	}
	a, err = c.Probe(context.Background(), "cluster-a", "/sbx-1/44772/ping")
	if err != nil || a.Status != http.StatusForbidden {
		t.Fatalf("ping: %+v %v", a, err)
	}
	want := []string{"sandbox.a.example /prefix" + echo, "sandbox.a.example /prefix/sbx-1/44772/ping"}
	if got := e.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the fixed entry saw %q, want %q", got, want)
	}
}

// TestRelayRefusals: every refusal has its status and code, and nothing
// reaches the fixed entry.
func TestRelayRefusals(t *testing.T) {
	e := newEntry(t)
	srv, _ := relay(t, e, false)
	_, noDP := relay(t, e, true)
	do := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	probe := Prefix + "/cluster-a/probe"
	for _, tc := range []struct {
		name, method, path, token, body string
		status                          int
		code                            string
	}{
		{"no token", "GET", Prefix, "", "", 401, "unauthorized"},
		{"wrong token", "POST", probe, relayToken + "x", `{"path":"/sbx/44772/ping"}`, 401, "unauthorized"},
		{"list with POST", "POST", Prefix, relayToken, "", 405, "method_not_allowed"},
		{"probe with GET", "GET", probe, relayToken, "", 405, "method_not_allowed"},
		{"other path", "GET", Prefix + "/cluster-a", relayToken, "", 404, "not_found"},
		{"unknown cluster", "POST", Prefix + "/cluster-z/probe", relayToken, `{"path":"/sbx/44772/ping"}`, 404, "cluster_not_found"},
		{"execd path", "POST", probe, relayToken, `{"path":"/sbx/44772/files/download"}`, 400, "path_not_allowed"},
		{"unknown member", "POST", probe, relayToken, `{"path":"/sbx/44772/ping","host":"evil"}`, 400, "bad_request"},
		{"missing path", "POST", probe, relayToken, `{}`, 400, "bad_request"},
		{"not JSON", "POST", probe, relayToken, `path=/sbx/44772/ping`, 400, "bad_request"},
		{"body over the limit", "POST", probe, relayToken, `{"path":"` + strings.Repeat("a", 1<<20) + `"}`, 400, "bad_request"},
	} {
		status, body := do(tc.method, tc.path, tc.token, tc.body)
		if status != tc.status || !strings.Contains(body, `"code":"`+tc.code+`"`) || strings.Contains(body, relayToken) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, body, tc.status, tc.code)
		}
	}
	if _, err := noDP.Probe(context.Background(), "cluster-a", "/sbx/44772/ping"); !errors.Is(err, ErrRelay) || !strings.Contains(err.Error(), "no_data_plane") {
		t.Errorf("without a data plane: %v", err)
	}
	if got := e.requests(); len(got) != 0 {
		t.Fatalf("refused requests reached the fixed entry: %q", got)
	}
	// An unreachable fixed entry is a 502 naming the entry, no body. The
	// entry's address is one held by a socket that never listens (a
	// closed server's port could be given to another server meanwhile).
	dead, held, err := freeport.Refusing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Close() })
	e.fixed = &url.URL{Scheme: "http", Host: dead, Path: "/prefix/"}
	_, c := relay(t, e, false)
	if _, err := c.Probe(context.Background(), "cluster-a", "/sbx/44772/ping"); !errors.Is(err, ErrRelay) || !strings.Contains(err.Error(), "HTTP 502 fixed_entry_unreachable") {
		t.Errorf("unreachable: %v", err)
	}
}

// TestCheck: matching clusters pass; each kind of mismatch is named with
// both values.
func TestCheck(t *testing.T) {
	e := newEntry(t)
	_, c := relay(t, e, false)
	ctx := context.Background()
	ok := Cluster{ID: "cluster-a", FixedEntry: strings.TrimRight(e.fixed.String(), "/"), Host: "Sandbox.A.example."}
	if err := c.Check(ctx, []Cluster{ok}); err != nil {
		t.Fatal(err)
	}
	noHost := ok
	noHost.Host = ""
	if err := c.Check(ctx, []Cluster{noHost}); err != nil {
		t.Fatalf("no ingress host: %v", err)
	}
	otherHost, otherEntry := ok, ok
	otherHost.Host = "sandbox.b.example"
	otherEntry.FixedEntry = "http://10.9.9.9:80"
	err := c.Check(ctx, []Cluster{otherHost, {ID: "cluster-b", FixedEntry: "http://x"}})
	for _, want := range []string{"cluster cluster-a: the gateway sends Host sandbox.a.example, the managed Ingresses' host is sandbox.b.example",
		"set host sandbox.b.example in the gateway's cluster block", "cluster cluster-b: not on the gateway"} {
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	if err := c.Check(ctx, []Cluster{otherEntry}); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "the gateway's fixed entry is "+e.fixed.String()+", corectl's http://10.9.9.9:80") {
		t.Errorf("other fixed entry: %v", err)
	}
	bad := &Client{URL: c.URL, Token: "wrong-token-0123456789abcdef0123456789"}
	if err := bad.Check(ctx, []Cluster{ok}); !errors.Is(err, ErrRelay) || !strings.Contains(err.Error(), "HTTP 401 unauthorized") || strings.Contains(err.Error(), "wrong-token") {
		t.Errorf("wrong token: %v", err)
	}
}

// TestTransport: corectl's readiness and discovery clients go through the
// relay: the status and body come back as an http.Response, corectl's path
// prefix is stripped, another Host is refused, other requests are refused
// before any is sent.
func TestTransport(t *testing.T) {
	e := newEntry(t)
	_, c := relay(t, e, false)
	hc := &http.Client{Transport: c.Transport("cluster-a", "http://entry.example/prefix/")}
	echo := EchoPathPrefix + strings.Repeat("cd", 16)
	req, _ := http.NewRequest("GET", "http://entry.example/prefix"+echo, nil)
	req.Host = "sandbox.a.example"
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "10.1.2.3") {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	req, _ = http.NewRequest("GET", "http://entry.example/prefix/sbx/44772/ping", nil)
	req.Host = "sandbox.b.example"
	if _, err := hc.Do(req); !errors.Is(err, ErrHost) {
		t.Errorf("other Host: %v", err)
	}
	for _, r := range []*http.Request{
		httptest.NewRequest("POST", "http://entry.example/prefix/sbx/44772/ping", nil),
		httptest.NewRequest("GET", "http://entry.example/sbx/44772/ping", nil),
		httptest.NewRequest("GET", "http://entry.example/prefix/sbx/44772/files", nil),
	} {
		r.RequestURI = ""
		if _, err := hc.Do(r); !errors.Is(err, ErrPath) {
			t.Errorf("%s %s: %v", r.Method, r.URL, err)
		}
	}
	if got := e.requests(); len(got) != 2 {
		t.Fatalf("the fixed entry saw %q, want the echo and the ping of another Host", got)
	}
}

func TestSameEntry(t *testing.T) {
	for _, c := range [][2]string{{"http://h:80", "http://h"}, {"http://H.example/p/", "http://h.example/p"}, {"https://h:443/", "https://h"}} {
		if err := SameEntry(c[0], c[1]); err != nil {
			t.Errorf("%s ≠ %s: %v", c[0], c[1], err)
		}
	}
	for _, c := range [][2]string{{"http://h:8080", "http://h"}, {"https://h", "http://h"}, {"http://h/p", "http://h/q"}, {"http://h", "http://g"}, {"http://h:80", "https://h:80"}} {
		if SameEntry(c[0], c[1]) == nil {
			t.Errorf("%s = %s", c[0], c[1])
		}
	}
}
