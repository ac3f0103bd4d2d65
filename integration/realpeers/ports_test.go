package realpeers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/sandgate/sandgate/corectl/lifecycle"
)

// TestBusinessPortsThroughTheRealIngress reaches a sandbox's own ports
// (6080, 9222 and a custom one; docs/ports.md) through corectl's
// projection and the real OpenSandbox Ingress in URI mode: the port
// helper serves HTTP and a WebSocket echo on each in the network
// namespace (so on the Pod IP kwok gave the sandbox). corectl answers
// the projection in GET /sandboxes/{id} and GET
// /sandboxes/{id}/endpoints?port=N; following it with the projection's
// Host, method, path, query, headers and body arrive at the Pod IP and
// the WebSocket upgrade goes through; 44772 and 49983 are refused as not
// business ports. There is no ingress-nginx in this chain (the Ingress is
// the fixed entry), so no managed Ingress rule or allowlist is in the
// path here; integration/fixedentry's emulation covers those
// (corectl/lifecycle's TestBusinessPortsThroughProjection).
func TestBusinessPortsThroughTheRealIngress(t *testing.T) {
	requireTier(t)
	w.startExecd(t, "head")
	w.startPortServer(t)
	id := w.createSandbox(t)

	var info lifecycle.Info
	if r := apiCall(t, apiKey, "GET", w.api+"/sandboxes/"+id, ""); r.status != 200 || json.Unmarshal(r.body, &info) != nil ||
		info.Endpoints.BaseURL != w.a.ingress || info.Endpoints.Host == "" || info.Endpoints.URITemplate != lifecycle.URITemplate ||
		info.Endpoints.NoVNC != w.a.ingress+"/"+id+"/6080/" || info.Endpoints.CDP != w.a.ingress+"/"+id+"/9222/" {
		t.Fatalf("GET /sandboxes/%s = %d %s", id, r.status, r.body)
	}
	for _, port := range []string{"44772", "49983"} {
		var e struct{ Error string }
		if r := apiCall(t, apiKey, "GET", w.api+"/sandboxes/"+id+"/endpoints?port="+port, ""); r.status != 400 ||
			json.Unmarshal(r.body, &e) != nil || e.Error != "port_reserved" {
			t.Errorf("port %s: %d %s, want 400 port_reserved", port, r.status, r.body)
		}
	}

	hc := http.Client{Timeout: 30 * time.Second}
	for _, port := range businessPorts {
		t.Run(strconv.Itoa(port), func(t *testing.T) {
			var ep lifecycle.Endpoint
			if r := apiCall(t, apiKey, "GET", w.api+"/sandboxes/"+id+"/endpoints?port="+strconv.Itoa(port), ""); r.status != 200 ||
				json.Unmarshal(r.body, &ep) != nil || ep.SandboxID != id || ep.Port != port || ep.Host != info.Endpoints.Host ||
				ep.URL != w.a.ingress+"/"+id+"/"+strconv.Itoa(port)+"/" {
				t.Fatalf("endpoints?port=%d = %d %s", port, r.status, r.body)
			}

			// HTTP: a PUT with a path, a query, a header and a body.
			req, err := http.NewRequest("PUT", ep.URL+"api/v1/items?x=1&y=a%2Fb", strings.NewReader("payload-"+strconv.Itoa(port)))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = ep.Host
			req.Header.Set("X-Test", "t-"+strconv.Itoa(port))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			var got echoed
			if resp.StatusCode != 200 || json.Unmarshal(b, &got) != nil {
				t.Fatalf("PUT %s = %d %s", req.URL, resp.StatusCode, b)
			}
			t.Logf("the port helper saw %s", b)
			if got.Port != port || !strings.HasPrefix(got.Local, w.a.podPrefix) || got.Method != "PUT" || got.Path != "/api/v1/items" ||
				got.Query != "x=1&y=a%2Fb" || got.Body != "payload-"+strconv.Itoa(port) ||
				strings.Join(got.Headers["X-Test"], ",") != "t-"+strconv.Itoa(port) {
				t.Errorf("PUT through the projection arrived as %+v", got)
			}

			// WebSocket: the same URL with the ws scheme and the
			// projection's Host, a query, a subprotocol, a cookie and a
			// header of the client's own; messages echoed both ways.
			h := http.Header{"Host": {ep.Host}, "X-Test": {"ws-" + strconv.Itoa(port)}, "Cookie": {"c=" + strconv.Itoa(port)}}
			d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, Subprotocols: []string{"other", wsSubprotocol}}
			c, hs, err := d.Dial("ws"+strings.TrimPrefix(ep.URL, "http")+"ws?q=1", h)
			if err != nil {
				t.Fatalf("WebSocket through the projection: %v (%v)", err, hs)
			}
			defer c.Close()
			// The real Ingress answers the handshake itself (a relay,
			// docs/wire-facts.md §X2.5): of the sandbox's handshake
			// answer only Sec-WebSocket-Protocol (and Set-Cookie) come
			// back, so X-Sandbox-Port does not.
			if hs.StatusCode != 101 || c.Subprotocol() != wsSubprotocol || hs.Header.Get("X-Sandbox-Port") != "" {
				t.Errorf("WebSocket handshake answer %d %v", hs.StatusCode, hs.Header)
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			for _, m := range []string{"hi " + strconv.Itoa(port), strings.Repeat("x", 70000)} {
				if err := c.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
					t.Fatal(err)
				}
				if _, got, err := c.ReadMessage(); err != nil || string(got) != "echo "+m {
					t.Fatalf("WebSocket echo of %d bytes: %d bytes, %v", len(m), len(got), err)
				}
			}
			if err := c.WriteMessage(websocket.TextMessage, []byte("seen?")); err != nil {
				t.Fatal(err)
			}
			_, b, err = c.ReadMessage()
			var up echoed
			if err != nil || json.Unmarshal(b, &up) != nil {
				t.Fatalf("the upgrade request as seen: %s %v", b, err)
			}
			t.Logf("the port helper saw the upgrade %s", b)
			// Path, query, Cookie and the subprotocols arrive at the Pod
			// IP; the relay drops every other header of the client's.
			if up.Port != port || !strings.HasPrefix(up.Local, w.a.podPrefix) || up.Method != "GET" || up.Path != "/ws" || up.Query != "q=1" ||
				strings.Join(up.Headers["Cookie"], ",") != "c="+strconv.Itoa(port) ||
				strings.Join(up.Headers["Sec-Websocket-Protocol"], ",") != "other, "+wsSubprotocol || up.Headers["X-Test"] != nil {
				t.Errorf("the upgrade arrived as %+v", up)
			}
		})
	}
}
