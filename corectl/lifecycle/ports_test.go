package lifecycle_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/integration/fixedentry"
)

// portEcho is a process in the "sandbox" listening on one business port:
// an HTTP request is answered with what arrived (method, path, query, the
// X-Probe header, body and the port's name); a WebSocket upgrade on /ws
// echoes each message prefixed with the port's name.
func portEcho(t *testing.T, name string) string {
	t.Helper()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			for {
				mt, m, err := c.ReadMessage()
				if err != nil {
					return
				}
				if err := c.WriteMessage(mt, append([]byte(name+" "+r.URL.RawQuery+" "), m...)); err != nil {
					return
				}
			}
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(echoed{Server: name, Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Probe: r.Header.Get("X-Probe"), Body: string(body)})
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// echoed is portEcho's HTTP answer.
type echoed struct {
	Server, Method, Path, Query, Probe, Body string
}

// TestBusinessPortsThroughProjection is spec §4.4's generic path end to
// end: the projection corectl answers (GET /sandboxes/{id} and
// /endpoints?port=N, after the ownership check; 44772 and 49983 refused)
// is followed to the fixed entry stand-in (ingress-nginx matching the
// managed Ingresses corectl wrote to the real apiserver, by Host and path,
// with their whitelist-source-range; the OpenSandbox ingress in URI mode)
// and on to HTTP and WebSocket servers on ports 6080, 9222 and a custom
// one in the sandbox: method, path, query, headers and body arrive, the
// WebSocket upgrade goes through, the Host the projection names is needed,
// and a restricted sandbox's allowlist decides which source gets through.
func TestBusinessPortsThroughProjection(t *testing.T) {
	w := startWith(t, env.Config, true)
	const custom = 18080
	ports := []int{lifecycle.NoVNCPort, lifecycle.CDPPort, custom}
	w.mu.Lock()
	w.ports = map[int]string{}
	for _, p := range ports {
		w.ports[p] = portEcho(t, "port-"+strconv.Itoa(p))
	}
	w.mu.Unlock()

	open := w.create(`{"templateID":"base"}`).SandboxID
	closed := w.create(restricted).SandboxID // 203.0.113.0/24 and the probe source

	// The projection.
	var info lifecycle.Info
	if code, raw := w.do("GET", "/sandboxes/"+open, "key-a", "", &info); code != 200 ||
		info.Endpoints.BaseURL != w.entryURL || info.Endpoints.Host != w.cluster.Ingress.Host ||
		info.Endpoints.NoVNC != w.entryURL+"/"+open+"/6080/" || info.Endpoints.CDP != w.entryURL+"/"+open+"/9222/" ||
		info.Endpoints.URITemplate != lifecycle.URITemplate {
		t.Fatalf("GET = %d %s", code, raw)
	}
	endpoint := func(id string, port int) lifecycle.Endpoint {
		t.Helper()
		var ep lifecycle.Endpoint
		if code, raw := w.do("GET", "/sandboxes/"+id+"/endpoints?port="+strconv.Itoa(port), "key-a", "", &ep); code != 200 {
			t.Fatalf("endpoint %s:%d = %d %s", id, port, code, raw)
		}
		if ep.SandboxID != id || ep.Port != port || ep.Host != w.cluster.Ingress.Host ||
			ep.URL != w.entryURL+"/"+id+"/"+strconv.Itoa(port)+"/" {
			t.Fatalf("endpoint %s:%d = %+v", id, port, ep)
		}
		return ep
	}
	for _, c := range []struct {
		key, query, code string
		status           int
	}{
		{"key-a", "?port=44772", "port_reserved", 400},
		{"key-a", "?port=49983", "port_reserved", 400},
		{"key-a", "", "bad_request", 400},
		{"key-a", "?port=0", "bad_request", 400},
		{"key-a", "?port=65536", "bad_request", 400},
		{"key-a", "?port=080", "bad_request", 400},
		{"key-a", "?port=x", "bad_request", 400},
		// Not the owner (same namespace, another credential; another
		// namespace): exactly the answer for no sandbox, even for a
		// reserved port.
		{"key-a2", "?port=6080", "sandbox_not_found", 404},
		{"key-a2", "?port=49983", "sandbox_not_found", 404},
		{"key-b", "?port=6080", "sandbox_not_found", 404},
	} {
		var e struct{ Error string }
		if code, raw := w.do("GET", "/sandboxes/"+open+"/endpoints"+c.query, c.key, "", &e); code != c.status || e.Error != c.code {
			t.Errorf("%s %s = %d %s, want %d %s", c.key, c.query, code, raw, c.status, c.code)
		}
	}
	if code, _ := w.do("GET", "/sandboxes/nosuch/endpoints?port=6080", "key-a", "", nil); code != 404 {
		t.Errorf("no such sandbox = %d", code)
	}
	if code, _ := w.do("GET", "/sandboxes/"+open+"/endpoints?port=6080", "key-wide", "", nil); code != 200 {
		t.Errorf("project-wide credential = %d", code)
	}

	// From here on ingress-nginx also matches rules by Host, as in a
	// cluster whose Ingresses carry one.
	w.entry.SetNginx(&fixedentry.Nginx{Host: w.cluster.Ingress.Host, Source: w.natSource, Route: w.nginxRoute})
	seq := w.entry.Received()
	send := func(ep lifecycle.Endpoint, host string) (int, echoed) {
		t.Helper()
		req, err := http.NewRequest("PUT", ep.URL+"api/v1/items?x=1&y=two", strings.NewReader("payload "+strconv.Itoa(ep.Port)))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("X-Probe", "probe-"+ep.SandboxID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got echoed
		if resp.StatusCode == 200 {
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, got
	}
	dial := func(ep lifecycle.Endpoint, host string) (int, string) {
		t.Helper()
		h := http.Header{}
		if host != "" {
			h.Set("Host", host)
		}
		c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ep.URL, "http")+"ws?q=1", h)
		if err != nil {
			if resp == nil {
				t.Fatal(err)
			}
			return resp.StatusCode, ""
		}
		defer c.Close()
		if err := c.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		_, m, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		return http.StatusSwitchingProtocols, string(m)
	}
	reaches := func(id string, port int) {
		t.Helper()
		ep := endpoint(id, port)
		code, got := send(ep, ep.Host)
		want := echoed{Server: "port-" + strconv.Itoa(port), Method: "PUT", Path: "/api/v1/items", Query: "x=1&y=two",
			Probe: "probe-" + id, Body: "payload " + strconv.Itoa(port)}
		if code != 200 || got != want {
			t.Fatalf("%s:%d over HTTP = %d %+v, want %+v", id, port, code, got, want)
		}
		if code, m := dial(ep, ep.Host); code != 101 || m != "port-"+strconv.Itoa(port)+" q=1 hello" {
			t.Fatalf("%s:%d over WebSocket = %d %q", id, port, code, m)
		}
		// Without the projection's Host, ingress-nginx matches no rule.
		if code, _ := send(ep, "127.0.0.1"); code != 404 {
			t.Fatalf("%s:%d with another Host = %d, want nginx's 404", id, port, code)
		}
	}
	refused := func(id string, port int) {
		t.Helper()
		ep := endpoint(id, port)
		if code, _ := send(ep, ep.Host); code != 403 {
			t.Fatalf("%s:%d from outside the allowlist over HTTP = %d, want 403", id, port, code)
		}
		if code, _ := dial(ep, ep.Host); code != 403 {
			t.Fatalf("%s:%d from outside the allowlist over WebSocket = %d, want 403", id, port, code)
		}
	}

	// A source outside the restricted sandbox's allowlist reaches the
	// unrestricted sandbox only.
	w.mu.Lock()
	w.source = "198.51.100.9"
	w.mu.Unlock()
	for _, p := range ports {
		reaches(open, p)
		refused(closed, p)
	}
	// A source in it reaches both.
	w.mu.Lock()
	w.source = "203.0.113.77"
	w.mu.Unlock()
	for _, p := range ports {
		reaches(open, p)
		reaches(closed, p)
	}
	// Nothing was ever sent for 49983 or 44772 by the business traffic.
	for _, r := range w.entry.RequestsAfter(seq) {
		if r.Port == lifecycle.EnvdPort || r.Port == lifecycle.ExecdPort {
			t.Fatalf("the fixed entry saw %s for port %d", r.Path, r.Port)
		}
	}
}
