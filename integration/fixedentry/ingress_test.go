package fixedentry_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/internal/freeport"
)

// testClient is the tests' HTTP client: http.DefaultClient's transport
// with a bound on every request, its response body read included, so a
// peer that hangs fails the request instead of holding the test until the
// package's -timeout. No request here is meant to take that long.
var testClient = &http.Client{Timeout: 2 * time.Minute}

const waitLimit = 15 * time.Second

// seen is what the upstream received.
type seen struct {
	method, path, rawQuery, host, body string
	header                             http.Header
}

type recorder struct {
	mu   sync.Mutex
	reqs []seen
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, string(b), r.Header.Clone()})
	rc.mu.Unlock()
	w.Header().Set("X-Backend", "yes")
	w.WriteHeader(http.StatusTeapot)
	_, _ = w.Write([]byte("from backend"))
}

func (rc *recorder) last(t *testing.T) seen {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.reqs) == 0 {
		t.Fatal("upstream received nothing")
	}
	return rc.reqs[len(rc.reqs)-1]
}

var noRedirect = &http.Client{Timeout: 2 * time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

type fixture struct {
	in   *fixedentry.Ingress
	url  string
	rec  *recorder
	addr string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	rec := &recorder{}
	backend := httptest.NewServer(rec)
	t.Cleanup(backend.Close)
	in := fixedentry.New()
	front := httptest.NewServer(in)
	t.Cleanup(front.Close)
	t.Cleanup(in.CloseIdleConnections)
	addr := strings.TrimPrefix(backend.URL, "http://")
	in.SetSandbox("sbx-1", fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Ports: map[int]string{44772: addr}})
	return &fixture{in: in, url: front.URL, rec: rec, addr: addr}
}

func (f *fixture) do(t *testing.T, method, target string, body io.Reader, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+target, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	return resp, b
}

// freeAddr returns a loopback address that refuses connections until the
// test ends.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, held, err := freeport.Refusing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	return addr
}

// TestErrors pins the §X2.6 error table byte for byte.
func TestErrors(t *testing.T) {
	f := newFixture(t)
	f.in.SetSandbox("sbx-notready", fixedentry.Sandbox{Ready: false, Endpoint: "127.0.0.1"})
	f.in.SetSandbox("sbx-noep", fixedentry.Sandbox{Ready: true})
	f.in.SetSandbox("sbx-ns", fixedentry.Sandbox{Namespace: "team-a"})
	f.in.SetSandbox("sbx-down", fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Ports: map[int]string{44772: freeAddr(t)}})
	f.in.SetSandbox("sbx-gone", fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1"})
	f.in.RemoveSandbox("sbx-gone")

	const formatErr = "OpenSandbox Ingress: invalid ingress route: invalid URI path format: expected '/<sandbox-id>/<sandbox-port>/<path-to-request>', got: "
	cases := []struct {
		path   string
		status int
		body   string
	}{
		{"/nosuch/44772/ping", 404, "OpenSandbox Ingress: sandbox not found: nosuch\n"},
		{"/sbx-gone/44772/ping", 404, "OpenSandbox Ingress: sandbox not found: sbx-gone\n"},
		{"/sbx-notready/44772/ping", 503, "OpenSandbox Ingress: sandbox not ready: default/sbx-notready (ready: 0/1)\n"},
		{"/sbx-ns/44772/ping", 503, "OpenSandbox Ingress: sandbox not ready: team-a/sbx-ns (ready: 0/1)\n"},
		{"/sbx-noep/44772/ping", 503, "OpenSandbox Ingress: sandbox not ready: default/sbx-noep: missing sandbox.opensandbox.io/endpoints annotation\n"},
		{"/sbx-1/abc/ping", 400, "OpenSandbox Ingress: invalid ingress route: invalid port format: invalid port \"abc\"\n"},
		{"/sbx-1/0/ping", 400, "OpenSandbox Ingress: invalid ingress route: invalid port format: invalid port \"0\"\n"},
		{"/sbx-1/65536/ping", 400, "OpenSandbox Ingress: invalid ingress route: invalid port format: invalid port \"65536\"\n"},
		{"/sbx-1/044772/ping", 400, "OpenSandbox Ingress: invalid ingress route: invalid port format: port must not have leading zeros\n"},
		{"/nosuch/abc/x", 400, "OpenSandbox Ingress: invalid ingress route: invalid port format: invalid port \"abc\"\n"},
		{"/sbx-1", 400, formatErr + "/sbx-1\n"},
		{"/", 400, formatErr + "/\n"},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			resp, body := f.do(t, "GET", c.path, nil, nil)
			if resp.StatusCode != c.status || string(body) != c.body {
				t.Errorf("got %d %q\nwant %d %q", resp.StatusCode, body, c.status, c.body)
			}
			if resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("headers %v", resp.Header)
			}
			if resp.Header.Get(fixedentry.PoweredByHeader) != "" {
				t.Errorf("ingress error carries %s", fixedentry.PoweredByHeader)
			}
		})
	}

	t.Run("upstream refused", func(t *testing.T) {
		resp, body := f.do(t, "GET", "/sbx-down/44772/ping", nil, nil)
		if resp.StatusCode != 502 || len(body) != 0 || resp.Header.Get(fixedentry.PoweredByHeader) != "" {
			t.Errorf("got %d %q %v", resp.StatusCode, body, resp.Header)
		}
	})
	t.Run("status.ok", func(t *testing.T) {
		resp, body := f.do(t, "GET", "/status.ok", nil, nil)
		if resp.StatusCode != 200 || string(body) != "OK" {
			t.Errorf("got %d %q", resp.StatusCode, body)
		}
	})
	t.Run("unclean path is redirected by the ServeMux", func(t *testing.T) {
		resp, _ := f.do(t, "GET", "/sbx-1/44772//files/info?path=/a", nil, nil)
		if resp.StatusCode != 307 || resp.Header.Get("Location") != "/sbx-1/44772/files/info?path=/a" {
			t.Errorf("got %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})
}

// TestProxyRewrites pins §X2.2: prefix stripping on the decoded path, query
// and body untouched, Host rewritten, two headers deleted, X-Forwarded-For
// appended, Powerby added.
func TestProxyRewrites(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		target, upPath, rawQuery string
	}{
		{"/sbx-1/44772/files/info?path=%2Fws%2Fa%20b&path=x", "/files/info", "path=%2Fws%2Fa%20b&path=x"},
		{"/sbx-1/44772", "/", ""},
		{"/sbx-1/44772/", "/", ""},
		{"/sbx-1/44772/a%2Fb?x=%2F", "/a/b", "x=%2F"},
		{"/sbx-1/44772/command/status/abc", "/command/status/abc", ""},
		{"/sbx-1/44772/files/download?path=/%C3%A9&x", "/files/download", "path=/%C3%A9&x"},
	}
	for _, c := range cases {
		t.Run(c.target, func(t *testing.T) {
			f.in.ResetRequests()
			hdr := http.Header{
				"X-Execd-Access-Token":      {"tok"},
				"Opensandbox-Ingress-To":    {"sbx-9-1"},
				"Opensandbox-Secure-Access": {"secret"},
				"X-Forwarded-For":           {"10.0.0.9"},
				"X-Custom":                  {"a", "b"},
			}
			resp, body := f.do(t, "PUT", c.target, strings.NewReader("payload"), hdr)
			if resp.StatusCode != http.StatusTeapot || string(body) != "from backend" ||
				resp.Header.Get("X-Backend") != "yes" || resp.Header.Get(fixedentry.PoweredByHeader) != fixedentry.PoweredByValue {
				t.Fatalf("response %d %q %v", resp.StatusCode, body, resp.Header)
			}
			up := f.rec.last(t)
			if up.method != "PUT" || up.path != c.upPath || up.rawQuery != c.rawQuery || up.host != "127.0.0.1:44772" || up.body != "payload" {
				t.Errorf("upstream saw %+v", up)
			}
			if up.header.Get("X-Execd-Access-Token") != "tok" || !slices.Equal(up.header["X-Custom"], []string{"a", "b"}) {
				t.Errorf("headers not forwarded: %v", up.header)
			}
			for _, h := range []string{fixedentry.IngressToHeader, fixedentry.SecureAccessHeader} {
				if _, ok := up.header[http.CanonicalHeaderKey(h)]; ok {
					t.Errorf("%s forwarded", h)
				}
			}
			if got := up.header.Get("X-Forwarded-For"); got != "10.0.0.9, 127.0.0.1" {
				t.Errorf("X-Forwarded-For %q", got)
			}

			reqs := f.in.Requests()
			if len(reqs) != 1 {
				t.Fatalf("request log %+v", reqs)
			}
			r := reqs[0]
			if r.Method != "PUT" || r.RequestURI != c.target || r.UpstreamPath != c.upPath || r.RawQuery != c.rawQuery ||
				r.SandboxID != "sbx-1" || r.Port != 44772 || r.UpstreamHost != "127.0.0.1:44772" || r.Status != http.StatusTeapot ||
				r.Header.Get(fixedentry.SecureAccessHeader) != "secret" || r.Header.Get(fixedentry.IngressToHeader) != "sbx-9-1" {
				t.Errorf("logged %+v", r)
			}
		})
	}
}

func TestParseRoute(t *testing.T) {
	for _, c := range []struct {
		in, id, up string
		port       int
		err        string
	}{
		{"/sbx/44772/files/info", "sbx", "/files/info", 44772, ""},
		{"/sbx/1", "sbx", "/", 1, ""},
		{"/sbx/+80/x", "sbx", "/x", 80, ""},
		// Signed-looking OSEP-0011 paths of a non-secure sandbox are
		// routed as legacy paths (§X2.2).
		{"/sbx/44772/1a2b3c/deadbeefk/files", "sbx", "/1a2b3c/deadbeefk/files", 44772, ""},
		{"/sbx/-1/x", "", "", 0, `invalid port format: invalid port "-1"`},
		{"//44772/x", "", "", 0, "missing sandbox-id or sandbox-port in URI path"},
	} {
		id, port, up, err := fixedentry.ParseRoute(c.in)
		if id != c.id || port != c.port || up != c.up || (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) {
			t.Errorf("ParseRoute(%q) = %q %d %q %v", c.in, id, port, up, err)
		}
	}
}

// withExecd puts an execdstub behind the ingress as sandbox "sbx-1".
func withExecd(t *testing.T) (*fixture, *execdstub.Server) {
	t.Helper()
	f := newFixture(t)
	s := execdstub.New(execdstub.Config{Root: t.TempDir(), GracefulShutdown: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close)
	f.in.SetSandbox("sbx-1", fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{44772: strings.TrimPrefix(ts.URL, "http://")}})
	return f, s
}

// TestUpstream404PassesThrough: /sbx-1/44772 reaches execd's "/" (§X2.6).
func TestUpstream404PassesThrough(t *testing.T) {
	f, _ := withExecd(t)
	resp, body := f.do(t, "GET", "/sbx-1/44772", nil, nil)
	if resp.StatusCode != 404 || string(body) != "404 page not found" || resp.Header.Get("Content-Type") != "text/plain" ||
		resp.Header.Get(fixedentry.PoweredByHeader) != fixedentry.PoweredByValue {
		t.Errorf("got %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

type event struct {
	Type, Text string
}

// TestStreamingIsIncremental: the first /command event arrives through the
// ingress while the command is still blocked on a FIFO only the test can
// open (§X2.2 "text/event-stream is flushed immediately").
func TestStreamingIsIncremental(t *testing.T) {
	f, s := withExecd(t)
	gate := filepath.Join(s.Root(), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", f.url+"/sbx-1/44772/command",
		strings.NewReader(`{"command":"echo first; cat gate >/dev/null; echo second"}`))
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get(fixedentry.PoweredByHeader) != fixedentry.PoweredByValue {
		t.Fatalf("headers %v", resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	next := func() (event, bool) {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			return event{}, false
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if blank, err := br.ReadString('\n'); err != nil || blank != "\n" {
			t.Fatalf("framing after %q: %q %v", line, blank, err)
		}
		var ev event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return ev, true
	}
	var got []string
	for {
		ev, ok := next()
		if !ok {
			t.Fatalf("stream ended early: %v", got)
		}
		if ev.Type != "ping" {
			got = append(got, ev.Type+":"+ev.Text)
		}
		if ev.Type == "stdout" {
			break
		}
	}
	recs := s.Commands()
	if len(recs) != 1 || !recs[0].Running {
		t.Fatalf("command should still be running: %+v", recs)
	}
	// Release the command.
	done := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.Write([]byte("go\n"))
			w.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("command never opened the gate")
	}
	for {
		ev, ok := next()
		if !ok {
			break
		}
		if ev.Type != "ping" {
			got = append(got, ev.Type+":"+ev.Text)
		}
	}
	want := []string{"init:" + recs[0].ID, "stdout:first", "stdout:second", "execution_complete:"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestDirectoryDownloadThroughIngress: execd's broken directory response
// (§X1.5) makes ReverseProxy abort; the ingress's recover appends the panic
// text to the already-committed 200 and the body still breaks.
func TestDirectoryDownloadThroughIngress(t *testing.T) {
	f, s := withExecd(t)
	if err := os.Mkdir(filepath.Join(s.Root(), "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	resp, err := testClient.Get(f.url + "/sbx-1/44772/files/download?path=/ws")
	if err != nil {
		t.Fatal(err)
	}
	b, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != math.MaxInt64 || rerr == nil ||
		string(b) != http.ErrAbortHandler.Error()+"\n" {
		t.Errorf("got %d CL %d body %q err %v", resp.StatusCode, resp.ContentLength, b, rerr)
	}
}
