package caddymodules

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/portroute"
	"github.com/sandgate/sandgate/gateway/token"
)

// entryRequest is one request the fixed-entry stand-in got.
type entryRequest struct {
	method, uri, host string
	header            http.Header
	body              string
}

// portEntry is a fixed entry in URI mode with a user's server on port 3000
// of sandbox sbx-1: /hello echoes, /events streams two server-sent events,
// /ws is a WebSocket echo; and execd's /files of sbx-1 on 44772.
type portEntry struct {
	mu   sync.Mutex
	reqs []entryRequest
	*httptest.Server
}

func newPortEntry(t *testing.T) *portEntry {
	e := &portEntry{}
	up := websocket.Upgrader{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		e.mu.Lock()
		e.reqs = append(e.reqs, entryRequest{r.Method, r.RequestURI, r.Host, r.Header.Clone(), string(b)})
		e.mu.Unlock()
		switch r.URL.Path {
		case "/sbx-1/3000/hello":
			w.Header().Set("X-From", "sandbox")
			_, _ = io.WriteString(w, r.Method+" hello "+r.URL.RawQuery+" "+string(b))
		case "/sbx-1/3000/events":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: one\n\n")
			http.NewResponseController(w).Flush()
			// The second event only after the client saw the first.
			<-r.Context().Done()
		case "/sbx-1/3000/ws":
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
				_ = c.WriteMessage(mt, append([]byte("echo "), m...))
			}
		case "/sbx-1/44772/files/info":
			_, _ = io.WriteString(w, `{"/home/user/a.txt":{"path":"/home/user/a.txt","size":2,"mode":420,"owner":"user","group":"user","modified_at":"2026-01-01T00:00:00Z","created_at":"2026-01-01T00:00:00Z"}}`)
		case "/sbx-1/44772/files/download":
			_, _ = io.WriteString(w, "hi")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *portEntry) requests() []entryRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]entryRequest(nil), e.reqs...)
}

// TestHostRouting runs e2b_dataplane with hosts: port requests reach the
// sandbox's server through the fixed entry with method, path, query, body,
// streaming and WebSocket preserved and neither token forwarded; a private
// sandbox needs its traffic token; a Host that is not served and the execd
// port are refused before anything is dialled; envd's host serves the data
// plane without routing headers.
func TestHostRouting(t *testing.T) {
	f := newFixtures(t)
	t.Setenv("SANDGATE_TEST_EXECD_TOKEN", "execd-token")
	entry := newPortEntry(t)
	private := true
	var amu sync.Mutex
	corectl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		amu.Lock()
		priv := private
		amu.Unlock()
		q := r.URL.Query()
		switch {
		case q.Get("sandbox") != "sbx-1":
			_, _ = io.WriteString(w, `{"allowed":false,"reason":"not_found"}`)
		case q.Has("credential") && q.Get("credential") == "cred-a":
			_, _ = io.WriteString(w, `{"allowed":true}`)
		case q.Has("credential"):
			_, _ = io.WriteString(w, `{"allowed":false,"reason":"not_found"}`)
		case priv:
			_, _ = io.WriteString(w, `{"allowed":true,"cluster":"cluster-a","trafficTokenRequired":true}`)
		default:
			_, _ = io.WriteString(w, `{"allowed":true,"cluster":"cluster-a"}`)
		}
	}))
	t.Cleanup(corectl.Close)

	cfg := baseConfig(f, entry.URL)
	sub(cfg, "apps", "sandgate")["authorizer"] = obj{"source": "http", "url": corectl.URL, "cache_ttl": "1ns"}
	handlerOf(cfg)["hosts"] = []any{"sbx.test"}
	loadConfig(t, mustJSON(t, cfg))
	lns := activeApp[*caddyhttp.App](t, "http").Servers["dp"].Listeners()
	addr := lns[0].Addr().String()

	sk, err := token.LoadSigningKey("hmac", "HS256", f.hmacKey)
	if err != nil {
		t.Fatal(err)
	}
	traffic, err := sk.Mint(token.Target{CredentialID: "cred-a", SandboxID: "sbx-1", Audience: token.AudienceTraffic}, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	envdTok := mint(t, "hmac", "HS256", f.hmacKey, "cred-a", "sbx-1")
	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, host, uri, body string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+uri, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	code := func(r *http.Response) string { return r.Header.Get(dataplane.ErrorHeader) }

	// Refused before anything is dialled.
	for _, c := range []struct{ host, code string }{
		{"sbx.test", "HOST_NOT_SERVED"}, {"3000-sbx-1.other.test", "HOST_NOT_SERVED"}, {"3000-SBX_1.sbx.test", "HOST_NOT_SERVED"},
		{addr, "HOST_NOT_SERVED"}, {"44772-sbx-1.sbx.test", "PORT_RESERVED"},
		{"3000-sbx-1.sbx.test", "TRAFFIC_TOKEN_REQUIRED"}, {"3000-nosuch.sbx.test", "SANDBOX_NOT_FOUND"},
	} {
		resp, _ := do("GET", c.host, "/hello", "", nil)
		if code(resp) != c.code {
			t.Errorf("Host %s: %d %s, want %s", c.host, resp.StatusCode, code(resp), c.code)
		}
	}
	for _, tok := range []string{envdTok, "garbage"} {
		resp, _ := do("GET", "3000-sbx-1.sbx.test", "/hello", "", map[string]string{portroute.HeaderTrafficToken: tok})
		if resp.StatusCode != 403 || code(resp) != "TRAFFIC_TOKEN_INVALID" {
			t.Errorf("a token that is not the traffic token: %d %s", resp.StatusCode, code(resp))
		}
	}
	if n := len(entry.requests()); n != 0 {
		t.Fatalf("the fixed entry got %d requests from refused ones", n)
	}

	// With the traffic token: forwarded, neither token passed on.
	resp, body := do("POST", "3000-sbx-1.sbx.test:8080", "/hello?a=1&b=%2F", "payload",
		map[string]string{portroute.HeaderTrafficToken: traffic, dataplane.HeaderAccessToken: envdTok, "X-User": "u"})
	if resp.StatusCode != 200 || body != "POST hello a=1&b=%2F payload" || resp.Header.Get("X-From") != "sandbox" {
		t.Fatalf("with the traffic token: %d %q %s", resp.StatusCode, body, code(resp))
	}
	got := entry.requests()[0]
	u, _ := http.NewRequest("GET", entry.URL, nil)
	if got.uri != "/sbx-1/3000/hello?a=1&b=%2F" || got.host != u.Host || got.header.Get("X-User") != "u" ||
		got.header.Get(portroute.HeaderTrafficToken) != "" || got.header.Get(dataplane.HeaderAccessToken) != "" {
		t.Fatalf("the fixed entry got %+v", got)
	}

	// A public sandbox: open, streaming and WebSocket preserved.
	amu.Lock()
	private = false
	amu.Unlock()
	resp, body = do("GET", "3000-sbx-1.sbx.test", "/hello", "", nil)
	if resp.StatusCode != 200 || body != "GET hello  " {
		t.Fatalf("public: %d %q %s", resp.StatusCode, body, code(resp))
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+"/events", nil)
	req.Host = "3000-sbx-1.sbx.test"
	sse, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(sse.Body).ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("the first event before the stream ends: %q %v", line, err)
	}
	sse.Body.Close()

	d := websocket.Dialer{}
	ws, wresp, err := d.Dial("ws://"+addr+"/ws", http.Header{"Host": {"3000-sbx-1.sbx.test"}})
	if err != nil {
		st := 0
		if wresp != nil {
			st = wresp.StatusCode
		}
		t.Fatalf("WebSocket through the gateway: %v (%d)", err, st)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, m, err := ws.ReadMessage(); err != nil || string(m) != "echo ping" {
		t.Fatalf("WebSocket round trip: %q %v", m, err)
	}

	// envd's host: the data plane, sandbox from the Host.
	resp, body = do("GET", "49983-sbx-1.sbx.test", "/files?path=a.txt", "", map[string]string{dataplane.HeaderAccessToken: envdTok})
	if resp.StatusCode != 200 || body != "hi" {
		t.Fatalf("envd without routing headers: %d %q %s", resp.StatusCode, body, code(resp))
	}
	resp, _ = do("GET", "49983-sbx-1.sbx.test", "/files?path=a.txt", "", map[string]string{dataplane.HeaderAccessToken: envdTok, dataplane.HeaderSandboxID: "sbx-2"})
	if resp.StatusCode != 400 || code(resp) != "HOST_HEADER_MISMATCH" {
		t.Fatalf("a routing header against the Host: %d %s", resp.StatusCode, code(resp))
	}
	resp, _ = do("GET", "49983-sbx-1.sbx.test", "/files?path=a.txt", "", map[string]string{dataplane.HeaderAccessToken: traffic})
	if resp.StatusCode == 200 {
		t.Fatal("a traffic token served as an X-Access-Token")
	}
}
