package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

// The port tests run the built gateway with host routing (hosts sbx.test)
// in front of the fixed-entry stand-in, and a tenant's own server on port
// 18080 of each sandbox: sbxa's is the hostile one the test drives,
// sbxb's records every request it gets.
const (
	portDomain = "sbx.test"
	portNumber = 18080
)

// portRig is a running gateway with two sandboxes' servers behind it.
type portRig struct {
	env *harness.Env
	log *logBuffer
	// seenB records the requests sbxb's server got (method and URI).
	mu    sync.Mutex
	seenB []string
}

// portCaddyfile is harness.DefaultCaddyfile with host routing on, its
// site *.sbx.test on the gateway's loopback port.
func portCaddyfile(port string) string {
	c := strings.Replace(harness.DefaultCaddyfile, "e2b_dataplane {", "e2b_dataplane {\n\t\thosts "+portDomain, 1)
	return strings.Replace(c, "http://{{ADDR}} {", "http://*."+portDomain+":"+port+" {\n\tbind 127.0.0.1", 1)
}

// startPortRig starts the gateway with the stand-in fixed entry routing
// sbxa's port 18080 to hostile and sbxb's to a recorder.
func startPortRig(t *testing.T, hostile http.Handler) *portRig {
	t.Helper()
	root := repoRoot(t)
	if fi, err := os.Stat(harness.CaddyBinary(root)); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("the gateway binary bin/caddy is missing (%v): run make build", err)
	}
	rig := &portRig{log: newLogBuffer()}
	creds := "credentials:\n  - id: cred-a\n    enabled: true\n    resourceSpecId: spec-small\n    resourceGroupId: group-1\n" +
		"    projectNamespace: team-a\n    clusterId: cluster-a\n"
	var (
		env *harness.Env
		err error
	)
	for attempt := 1; attempt <= 5; attempt++ {
		var addr string
		if addr, err = freeport.Addr(); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		env, err = harness.Start(harness.Config{RepoRoot: root, Caddyfile: portCaddyfile(port), GatewayAddr: addr, Credentials: creds, Stderr: rig.log})
		if !errors.Is(err, harness.ErrBindRace) {
			break
		}
	}
	if err != nil {
		t.Fatalf("starting the environment: %v\ngateway log:\n%s", err, rig.log.String())
	}
	t.Cleanup(env.Close)
	rig.env = env
	a := serveLoopback(t, hostile)
	b := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.mu.Lock()
		rig.seenB = append(rig.seenB, r.Method+" "+r.RequestURI)
		rig.mu.Unlock()
		_, _ = io.WriteString(w, "sandbox b")
	}))
	env.Ingress.SetSandbox("sbxa", fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Ports: map[int]string{portNumber: a}})
	env.Ingress.SetSandbox("sbxb", fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Ports: map[int]string{portNumber: b}})
	return rig
}

// serveLoopback serves h on 127.0.0.1 until the test ends; its host:port.
func serveLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// trafficToken is a traffic access token of sandbox id (credential cred-a).
func (rig *portRig) trafficToken(t *testing.T, id string) string {
	t.Helper()
	tok, err := rig.env.Key.Mint(token.Target{CredentialID: "cred-a", SandboxID: id, Audience: token.AudienceTraffic}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// host is the getHost name of sandbox id's port 18080.
func portHost(id string) string { return fmt.Sprintf("%d-%s.%s", portNumber, id, portDomain) }

// request builds a request for sandbox id's port with its traffic token.
func (rig *portRig) request(t *testing.T, ctx context.Context, method, id, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, rig.env.Gateway+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = portHost(id)
	req.Header.Set("E2b-Traffic-Access-Token", rig.trafficToken(t, id))
	return req
}

// hostileCookies are the Set-Cookie fields sbxa's server answers with: two
// for the parent domain (which every sandbox host is under), one with the
// __Host- prefix and a Domain, one host-only.
var hostileCookies = []string{
	"wide=1; Domain=" + portDomain + "; Path=/",
	"dotted=2; path=/; domain=.SBX.TEST ; HttpOnly",
	"__Host-pref=3; Secure; Path=/; Domain=" + portDomain,
	"own=4; Path=/",
}

// hostOnlyCookies are hostileCookies as the client must get them: without
// a Domain attribute, everything else as sent.
var hostOnlyCookies = []string{
	"wide=1; Path=/",
	"dotted=2; path=/; HttpOnly",
	"__Host-pref=3; Secure; Path=/",
	"own=4; Path=/",
}

// TestPortCookiesStayOnTheirSandboxHost: a tenant's server on a sandbox
// port sets cookies with Domain=<the served domain>. A browser would
// store them for the parent domain and send them to every other sandbox's
// ports, and a cookie a hostile page tosses that way shadows another
// tenant's own. The gateway removes the Domain attribute from every
// Set-Cookie of a port's answer (a final answer, a WebSocket's 101 and a
// 103 Early Hints alike), so each cookie is host-only: a cookie jar
// without the Public Suffix List (the worst case, as a browser with a
// domain not on the list) then holds nothing for sandbox sbxb.
func TestPortCookiesStayOnTheirSandboxHost(t *testing.T) {
	rig := startPortRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		set := func(h http.Header) {
			for _, c := range hostileCookies {
				h.Add("Set-Cookie", c)
			}
		}
		if r.Header.Get("Upgrade") == "websocket" {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			h := http.Header{}
			set(h)
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
			_ = h.Write(brw)
			_, _ = brw.WriteString("\r\n")
			_ = brw.Flush()
			_, _ = io.Copy(io.Discard, conn) // until the client closes
			return
		}
		hints := w.Header()
		set(hints)
		w.WriteHeader(http.StatusEarlyHints)
		hints.Del("Set-Cookie")
		set(w.Header())
		_, _ = io.WriteString(w, "sandbox a")
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A plain answer, and the 103 before it.
	var early []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		if code == http.StatusEarlyHints {
			early = append(early, h.Values("Set-Cookie")...)
		}
		return nil
	}}
	req := rig.request(t, httptrace.WithClientTrace(ctx, trace), "GET", "sbxa", "/page")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "sandbox a" {
		t.Fatalf("GET through the gateway: %d %q %v\n%v", resp.StatusCode, body, resp.Header, rig.env.Ingress.Requests())
	}
	checkCookies(t, "the answer", resp.Header.Values("Set-Cookie"))
	if len(early) == 0 {
		t.Errorf("no 103 Early Hints reached the client")
	}
	checkCookies(t, "the 103 Early Hints", early)

	// A WebSocket upgrade's 101 (the stand-in tunnels it as sent).
	conn, err := net.Dial("tcp", strings.TrimPrefix(rig.env.Gateway, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nE2b-Traffic-Access-Token: %s\r\n\r\n", portHost("sbxa"), rig.trafficToken(t, "sbxa"))
	ws, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ws.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade through the gateway: %d\n%s", ws.StatusCode, rig.log.String())
	}
	checkCookies(t, "the 101", ws.Header.Values("Set-Cookie"))

	// What a browser that does not know the domain as a public suffix keeps.
	jar, _ := cookiejar.New(nil)
	a, b := &url.URL{Scheme: "https", Host: portHost("sbxa"), Path: "/"}, &url.URL{Scheme: "https", Host: portHost("sbxb"), Path: "/"}
	jar.SetCookies(a, (&http.Response{Header: resp.Header}).Cookies())
	if got := jar.Cookies(b); len(got) != 0 {
		t.Errorf("sandbox sbxb's page would be sent sbxa's cookies %v", got)
	}
	if got := jar.Cookies(a); len(got) != len(hostileCookies) {
		t.Errorf("sandbox sbxa's own page would be sent %v, want its %d cookies", got, len(hostileCookies))
	}
}

// checkCookies compares the Set-Cookie fields a client got with
// hostOnlyCookies.
func checkCookies(t *testing.T, what string, got []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(hostOnlyCookies, "\n") {
		t.Errorf("%s carried Set-Cookie\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(hostOnlyCookies, "\n  "))
	}
}
