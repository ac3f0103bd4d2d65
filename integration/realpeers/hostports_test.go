package realpeers_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

// hostPortsCaddyfile is a plain-HTTP host-routing gateway for sbx.test on
// 127.0.0.1:{{PORT}}, both clusters' fixed entries their real Ingresses,
// corectl its authorizer (public sandboxes are located through it).
const hostPortsCaddyfile = `{
	admin {{ADMIN}}
	auto_https off
	persist_config off
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{INGRESS_A}}
		cluster cluster-b {{INGRESS_B}}
		authorizer http {{CORECTL_URL}} {
			header Authorization "Bearer {file.{{INTERNAL_FILE}}}"
			cache_ttl 100ms
		}
	}
}

http://*.sbx.test:{{PORT}} {
	bind 127.0.0.1
	e2b_dataplane {
		hosts sbx.test
	}
}
`

// TestPortIsolationAgainstTheRealIngress runs the host routing's
// isolation on the real chain (the gateway, the real OpenSandbox Ingress
// in URI mode, two sandboxes' Pod IPs, the port helper on 18080):
//   - a port's cookies for the whole domain come back host-only, on a
//     plain answer and on the WebSocket handshake the real Ingress relays
//     (it passes the first of the pod's Set-Cookie fields on;
//     docs/wire-facts.md §X2.5);
//   - requests with Host A shaped to reach B (dot segments plain and
//     encoded, encoded slashes, "//", CONNECT with a path) reach A's Pod
//     IP or no pod, never B's; one whose absolute-form target names B is
//     B's and reaches B.
func TestPortIsolationAgainstTheRealIngress(t *testing.T) {
	requireTier(t)
	w.startExecd(t, "head")
	w.startPortServer(t)
	gwLogPath := filepath.Join(t.TempDir(), "gateway.log")
	gwLog, err := os.Create(gwLogPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gwLog.Close() })
	logTail := func() string { b, _ := os.ReadFile(gwLogPath); return fmt.Sprintf("%.6000s", b) }
	// The gateway's address is in the Caddyfile: picked for each start
	// attempt, again when it was taken before the gateway listened.
	var (
		addr string
		g    *harness.Env
	)
	for attempt := 1; ; attempt++ {
		if addr, err = freeport.Addr(); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		cf := strings.NewReplacer("{{INGRESS_A}}", w.a.ingress, "{{INGRESS_B}}", w.b.ingress, "{{CORECTL_URL}}", w.api,
			"{{INTERNAL_FILE}}", w.internalFile, "{{PORT}}", port).Replace(hostPortsCaddyfile)
		g, err = harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: cf, GatewayAddr: addr, CredentialsFile: w.gateway.CredFile,
			KeyFile: w.gateway.KeyFile, KeyID: "primary", Stderr: gwLog})
		if err == nil {
			break
		}
		if !errors.Is(err, harness.ErrBindRace) || attempt == 5 {
			t.Fatalf("the host-routing gateway: %v\n%s", err, logTail())
		}
		t.Logf("gateway start attempt %d: %v; again with a new address", attempt, err)
	}
	t.Cleanup(g.Close)
	a, b := w.createSandbox(t), w.createSandbox(t)
	host := func(id string) string { return fmt.Sprintf("%d-%s.%s", businessPorts[2], id, testDomain) }
	get := func(id, path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Host = host(id)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, body
	}
	// Each sandbox's Pod IP, as the helper saw it dialled.
	podIP := func(id string) string {
		t.Helper()
		var e echoed
		resp, body := get(id, "/whoami")
		if resp.StatusCode != 200 || json.Unmarshal(body, &e) != nil {
			t.Fatalf("%s's port through the gateway: %d %s\n%s", id, resp.StatusCode, body, logTail())
		}
		ip, _, _ := net.SplitHostPort(e.Local)
		return ip
	}
	ipA, ipB := podIP(a), podIP(b)
	if ipA == ipB {
		t.Fatalf("both sandboxes answer on %s", ipA)
	}

	// Cookies.
	want := "wide=1; Path=/\nown=2; Path=/"
	resp, _ := get(a, "/cookie")
	if got := strings.Join(resp.Header.Values("Set-Cookie"), "\n"); got != want {
		t.Errorf("a plain answer's Set-Cookie through the real Ingress:\n%s\nwant\n%s", got, want)
	}
	d := websocket.Dialer{NetDial: func(string, string) (net.Conn, error) { return net.Dial("tcp", addr) }, HandshakeTimeout: 30 * time.Second}
	c, hs, err := d.Dial("ws://"+host(a)+"/ws?cookie=1", nil)
	if err != nil {
		t.Fatalf("WebSocket through the gateway: %v (%v)", err, hs)
	}
	c.Close()
	// The relay passes the first of the pod's Set-Cookie fields only.
	if got := strings.Join(hs.Header.Values("Set-Cookie"), "\n"); got != "wide=1; Path=/" {
		t.Errorf("the WebSocket handshake's Set-Cookie through the real Ingress's relay:\n%s\nwant\nwide=1; Path=/", got)
	}

	// Paths and targets that name B.
	for _, c := range []struct {
		raw string
		b   bool // the request is B's: its target names B's host
	}{
		{raw: "GET /../../" + b + "/18080/x HTTP/1.1"},
		{raw: "GET /%2e%2e/%2E%2E/" + b + "/18080/x HTTP/1.1"},
		{raw: "GET /x%2F..%2F..%2F..%2F" + b + "%2F18080%2Fx HTTP/1.1"},
		{raw: "GET //" + b + "/18080/x HTTP/1.1"},
		{raw: "CONNECT /../../" + b + "/18080/x HTTP/1.1"},
		// RFC 9112 §3.2.2: with an absolute-form target the Host header
		// is ignored; this request is for B (a public sandbox) and goes
		// there, as one with Host B would.
		{raw: "GET http://" + host(b) + "/x HTTP/1.1", b: true},
	} {
		raw := c.raw
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(conn, "%s\r\nHost: %s\r\n\r\n", raw, host(a))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			conn.Close()
			t.Fatalf("%s: %v", raw, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		conn.Close()
		var e echoed
		reached := "no pod"
		if json.Unmarshal(body, &e) == nil && e.Local != "" {
			reached, _, _ = net.SplitHostPort(e.Local)
		}
		t.Logf("%s: %d, reached %s (A %s, B %s) with path %q", raw, resp.StatusCode, reached, ipA, ipB, e.Path)
		switch {
		case c.b && reached != ipB:
			t.Errorf("%s reached %s, want B's Pod IP %s", raw, reached, ipB)
		case !c.b && reached == ipB:
			t.Errorf("%s for A's port reached B's Pod IP %s", raw, ipB)
		}
	}
	if t.Failed() {
		t.Logf("gateway log:\n%s", logTail())
	}
}
