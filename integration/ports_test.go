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
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/hack/gatewayproc"
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
// With rawEntry set, cluster cluster-raw's fixed entry is that address;
// directives are added to the e2b_dataplane block.
func portCaddyfile(port, rawEntry string, directives ...string) string {
	block := "e2b_dataplane {\n\t\thosts " + portDomain
	for _, d := range directives {
		block += "\n\t\t" + d
	}
	c := strings.Replace(harness.DefaultCaddyfile, "e2b_dataplane {", block, 1)
	if rawEntry != "" {
		c = strings.Replace(c, "cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}}\n\t\tcluster cluster-raw http://"+rawEntry, 1)
	}
	return strings.Replace(c, "http://{{ADDR}} {", "http://*."+portDomain+":"+port+" {\n\tbind 127.0.0.1", 1)
}

// startPortRig starts the gateway with the stand-in fixed entry routing
// sbxa's port 18080 to hostile and sbxb's to a recorder. With rawEntry
// set, the sandboxes of credential cred-raw are in cluster cluster-raw,
// whose fixed entry is rawEntry (host:port): what answers there answers
// for the whole chain, as a sandbox's server does through the real
// ingress, which passes its answers on. directives are added to the
// e2b_dataplane block.
func startPortRig(t *testing.T, hostile http.Handler, rawEntry string, directives ...string) *portRig {
	t.Helper()
	root := repoRoot(t)
	if fi, err := os.Stat(harness.CaddyBinary(root)); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("the gateway binary bin/caddy is missing (%v): run make build", err)
	}
	rig := &portRig{log: newLogBuffer()}
	creds := "credentials:\n  - id: cred-a\n    enabled: true\n    resourceSpecId: spec-small\n    resourceGroupId: group-1\n" +
		"    projectNamespace: team-a\n    clusterId: cluster-a\n"
	if rawEntry != "" {
		creds += "  - id: cred-raw\n    enabled: true\n    resourceSpecId: spec-small\n    resourceGroupId: group-1\n" +
			"    projectNamespace: team-a\n    clusterId: cluster-raw\n"
	}
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
		env, err = harness.Start(harness.Config{RepoRoot: root, Caddyfile: portCaddyfile(port, rawEntry, directives...), GatewayAddr: addr, Credentials: creds, Stderr: rig.log})
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

// trafficToken is a traffic access token of sandbox id (credential cred-a;
// cred-raw for an ID that begins with "raw").
func (rig *portRig) trafficToken(t *testing.T, id string) string {
	t.Helper()
	cred := "cred-a"
	if strings.HasPrefix(id, "raw") {
		cred = "cred-raw"
	}
	tok, err := rig.env.Key.Mint(token.Target{CredentialID: cred, SandboxID: id, Audience: token.AudienceTraffic}, time.Hour, time.Now())
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
	}), "")
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
	resp, err := testClient.Do(req)
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

// hugeHeadEntry serves, on 127.0.0.1, a fixed entry that answers every
// request with a head of a header field of size bytes: a sandbox's server
// answering so, through an ingress that passes heads of up to 10 MiB
// (Go's default, the OpenSandbox ingress's). It returns its address and a
// count of the heads it began to write.
func hugeHeadEntry(t *testing.T, size int) (string, *atomic.Int64) {
	t.Helper()
	head := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Huge: " + strings.Repeat("h", size) + "\r\n\r\nok")
	return rawEntry(t, func(*http.Request) []byte { return head })
}

// rawEntry serves, on 127.0.0.1, a fixed entry that writes answer(request),
// byte for byte, to every request it reads, and holds the connection. It
// returns its address and a count of the answers it began to write.
func rawEntry(t *testing.T, answer func(*http.Request) []byte) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var started atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					started.Add(1)
					if _, err := c.Write(answer(req)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), &started
}

// TestPortAnswerHeadBounded: a sandbox's server that answers with a huge
// head (one header field of 9 MiB) costs the gateway its reading, for
// every request its tenant's clients send at once. The gateway reads a
// head of at most 64 KiB (the transport's max_response_header, whose
// default e2b_dataplane sets so, as its unary client's) and answers 502:
// 24 concurrent requests whose clients read only the status line leave
// the gateway's peak memory (VmHWM) less than 64 MiB above where it was.
// Before, each head was read whole (Go's 10 MiB default) and relayed: 200,
// and the peak grew by hundreds of MiB. A head of 48 KiB still passes.
func TestPortAnswerHeadBounded(t *testing.T) {
	const n, huge = 24, 9 << 20
	entry, started := hugeHeadEntry(t, huge)
	rig := startPortRig(t, http.NotFoundHandler(), entry)

	// Under the bound: served as sent.
	small := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Large", strings.Repeat("l", 48<<10))
		_, _ = io.WriteString(w, "fits")
	}))
	rig.env.Ingress.SetSandbox("sbxa", fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Ports: map[int]string{portNumber: small}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := testClient.Do(rig.request(t, ctx, "GET", "sbxa", "/"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "fits" || len(resp.Header.Get("X-Large")) != 48<<10 {
		t.Fatalf("a 48 KiB head: %d %q, X-Large of %d bytes", resp.StatusCode, body, len(resp.Header.Get("X-Large")))
	}

	_, before, err := gatewayproc.Memory(rig.env.PID())
	if err != nil {
		t.Fatal(err)
	}
	gw := strings.TrimPrefix(rig.env.Gateway, "http://")
	tok := rig.trafficToken(t, "rawhuge")
	got := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", gw)
			if err != nil {
				got <- err.Error()
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(90 * time.Second))
			fmt.Fprintf(c, "GET /h HTTP/1.1\r\nHost: %s\r\nE2b-Traffic-Access-Token: %s\r\n\r\n", portHost("rawhuge"), tok)
			line, err := bufio.NewReaderSize(c, 64).ReadString('\n')
			if err != nil {
				got <- err.Error()
			} else {
				got <- strings.TrimSpace(line)
			}
			// Hold the connection, the rest unread, until the peak has
			// been read.
			<-ctx.Done()
		}()
	}
	var statuses []string
	for len(statuses) < n {
		select {
		case s := <-got:
			statuses = append(statuses, s)
		case <-ctx.Done():
			t.Fatalf("%d of %d clients got a status line in time: %q", len(statuses), n, statuses)
		}
	}
	_, peak, err := gatewayproc.Memory(rig.env.PID())
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range statuses {
		if s != "HTTP/1.1 502 Bad Gateway" {
			t.Errorf("client %d got %q, want 502", i, s)
		}
	}
	if got := started.Load(); got < n {
		t.Errorf("the fixed entry was asked %d times, want %d", got, n)
	}
	grew := (peak - before) >> 10
	t.Logf("gateway VmHWM %d MiB before, %d MiB with %d heads of %d MiB in flight (+%d MiB)", before>>10, peak>>10, n, huge>>20, grew)
	if grew >= 64 {
		t.Errorf("the gateway's peak memory grew by %d MiB, want under 64", grew)
	}
}

// TestPortRequestsStayOnTheirSandbox sends requests for sandbox sbxa's
// port, with sbxa's traffic token, shaped to reach sandbox sbxb instead:
// dot segments (plain, percent-encoded, behind an encoded slash) that a
// fixed entry cleaning the path would resolve to /sbxb/..., an
// absolute-form target naming sbxb, X-Forwarded-Host, the routing and
// ingress headers naming sbxb, a Host in capitals with a port, one with a
// trailing dot, punycode and a Cyrillic look-alike of sbxb, a CONNECT with a path (Go's ServeMux does not clean it), a
// request whose Content-Length and chunked framing disagree with a second
// request for /sbxb/18080 behind it, and a Host naming sbxb under sbxa.
// None of them reaches sbxb's server: the sandbox is the Host's (the
// absolute form's host is the Host, and sbxa's token does not open it),
// and whatever the path, the fixed entry gets /sbxa/18080 before it.
func TestPortRequestsStayOnTheirSandbox(t *testing.T) {
	var mu sync.Mutex
	var seenA []string
	rig := startPortRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenA = append(seenA, r.Method+" "+r.RequestURI)
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "sandbox a")
	}), "")
	gw := strings.TrimPrefix(rig.env.Gateway, "http://")
	tokA := rig.trafficToken(t, "sbxa")
	hostA, hostB := portHost("sbxa"), portHost("sbxb")
	hdr := func(host string) string {
		return "Host: " + host + "\r\nE2b-Traffic-Access-Token: " + tokA + "\r\n"
	}
	cases := []struct {
		name, raw string
		answers   int // on the connection: 1 when 0
	}{
		{name: "dot segments", raw: "GET /../../sbxb/18080/x HTTP/1.1\r\n" + hdr(hostA) + "\r\n"},
		{name: "encoded dot segments", raw: "GET /%2e%2e/%2E%2E/sbxb/18080/x HTTP/1.1\r\n" + hdr(hostA) + "\r\n"},
		{name: "encoded slashes", raw: "GET /x%2F..%2F..%2F..%2Fsbxb%2F18080%2Fx HTTP/1.1\r\n" + hdr(hostA) + "\r\n"},
		{name: "double slash", raw: "GET //sbxb/18080/x HTTP/1.1\r\n" + hdr(hostA) + "\r\n"},
		{name: "absolute form", raw: "GET http://" + hostB + "/x HTTP/1.1\r\n" + hdr(hostA) + "\r\n"},
		{name: "X-Forwarded-Host", raw: "GET /x HTTP/1.1\r\n" + hdr(hostA) + "X-Forwarded-Host: " + hostB + "\r\n\r\n"},
		{name: "routing and ingress headers", raw: "GET /x HTTP/1.1\r\n" + hdr(hostA) + "E2b-Sandbox-Id: sbxb\r\nE2b-Sandbox-Port: 18080\r\n" +
			"OpenSandbox-Ingress-To: sbxb-18080\r\n\r\n"},
		{name: "capitals and a port", raw: "GET /x HTTP/1.1\r\n" + hdr("18080-SBXA.SBX.TEST:443") + "\r\n"},
		{name: "a trailing dot", raw: "GET /x HTTP/1.1\r\n" + hdr("18080-sbxa.sbx.test.") + "\r\n"},
		{name: "punycode", raw: "GET /x HTTP/1.1\r\n" + hdr("18080-xn--sbxb-9ta.sbx.test") + "\r\n"},
		{name: "a Cyrillic letter", raw: "GET /x HTTP/1.1\r\n" + hdr("18080-\u0455bxb.sbx.test") + "\r\n"},
		{name: "CONNECT with a path", raw: "CONNECT /../../sbxb/18080/x HTTP/1.1\r\n" + hdr(hostA) + "\r\n"},
		{name: "Content-Length and chunked", answers: 2, raw: "POST /x HTTP/1.1\r\n" + hdr(hostA) + "Content-Length: 80\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"0\r\n\r\nGET /sbxb/18080/smuggled HTTP/1.1\r\nHost: " + hostA + "\r\n\r\n"},
		{name: "sbxb under sbxa", raw: "GET /x HTTP/1.1\r\n" + hdr("18080-sbxb.18080-sbxa."+portDomain) + "\r\n"},
	}
	for _, c := range cases {
		conn, err := net.Dial("tcp", gw)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(conn, c.raw); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		var statuses []string
		for range max(c.answers, 1) {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: answer %d: %v", c.name, len(statuses)+1, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses = append(statuses, resp.Status+" "+resp.Header.Get("Sandgate-Error-Code"))
		}
		conn.Close()
		t.Logf("%s: %q", c.name, statuses)
	}
	// A request sbxb's server must see, so that "nothing" below means
	// nothing arrived rather than nothing was delivered at all.
	req := rig.request(t, context.Background(), "GET", "sbxb", "/own")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rig.mu.Lock()
	defer rig.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("sbxa's server saw %q", seenA)
	if len(rig.seenB) != 1 || rig.seenB[0] != "GET /own" {
		t.Errorf("sbxb's server saw %q, want only its own GET /own", rig.seenB)
	}
}

// TestPortRequestsPerSandboxBounded: a tenant's server that never answers
// makes every request its clients send a request the gateway holds (its
// goroutines, buffers and two connections), so one sandbox could hold the
// gateway's memory without bound. The gateway admits at most
// max_port_requests_per_sandbox (default 1024) port requests of one
// sandbox at once; one more is refused at once with 429
// TOO_MANY_PORT_REQUESTS, another sandbox is still served, and a place
// given back is taken again. The gateway's memory for the held requests
// is logged.
func TestPortRequestsPerSandboxBounded(t *testing.T) {
	const bound, extra = 1024, 16
	held := make(chan struct{}, bound+extra)
	release := make(chan struct{})
	rig := startPortRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "released")
	}), "")
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	gw := strings.TrimPrefix(rig.env.Gateway, "http://")
	tok := rig.trafficToken(t, "sbxa")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, before, err := gatewayproc.Memory(rig.env.PID())
	if err != nil {
		t.Fatal(err)
	}
	// Each request on its own connection, as browsers' and clients'
	// concurrent requests are; the status line of each refused one.
	refused := make(chan string, bound+extra)
	conns := make([]net.Conn, 0, bound+extra)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range bound + extra {
		c, err := net.Dial("tcp", gw)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(3 * time.Minute))
		fmt.Fprintf(c, "GET /hold HTTP/1.1\r\nHost: %s\r\nE2b-Traffic-Access-Token: %s\r\n\r\n", portHost("sbxa"), tok)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // held until the end, then closed
			}
			resp.Body.Close()
			refused <- fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Sandgate-Error-Code"))
		}()
	}
	// Every request is either held by sbxa's server or refused.
	var nHeld int
	var answers []string
	for nHeld+len(answers) < bound+extra {
		select {
		case <-held:
			nHeld++
		case a := <-refused:
			answers = append(answers, a)
		case <-ctx.Done():
			t.Fatalf("%d requests held, %d answered (%q) of %d", nHeld, len(answers), answers, bound+extra)
		}
	}
	rss, peak, err := gatewayproc.Memory(rig.env.PID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests held by the gateway: VmRSS %d MiB, VmHWM %d MiB (%d MiB before)", nHeld, rss>>10, peak>>10, before>>10)
	if nHeld != bound {
		t.Errorf("sbxa's server holds %d requests, want %d", nHeld, bound)
	}
	for _, a := range answers {
		if a != "429 TOO_MANY_PORT_REQUESTS" {
			t.Errorf("a request past the bound got %q, want 429 TOO_MANY_PORT_REQUESTS", a)
		}
	}
	// Another sandbox is served meanwhile.
	resp, err := testClient.Do(rig.request(t, ctx, "GET", "sbxb", "/other"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("sbxb while sbxa is at its bound: %d, want 200", resp.StatusCode)
	}
	// A place given back is taken again: close one held request, then a
	// new one is held (the gateway lets its place go when the client's
	// connection ends; a refused request is retried until it is held).
	conns[0].Close()
	conns = conns[1:]
	for {
		req := rig.request(t, ctx, "GET", "sbxa", "/again")
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan int, 1)
		go func() {
			resp, err := testClient.Do(req.WithContext(rctx))
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		select {
		case <-held:
			rcancel()
			<-done
			return
		case code := <-done:
			rcancel()
			if code != http.StatusTooManyRequests {
				t.Fatalf("a request after a place was given back: %d", code)
			}
		case <-ctx.Done():
			rcancel()
			t.Fatal("no request was held again after one ended")
		}
	}
}

// TestPortInformationalFloodAndLongTrailers: a sandbox's server that
// answers with 20,000 103 Early Hints before its answer, or with a chunked
// body followed by a trailer section of 1 MiB. Go's client lets a caller
// that watches 1xx answers (Caddy's reverse_proxy relays them) read any
// number of them, each up to the head bound, and reads a trailer section
// only as far as its read buffer (4 KiB). Neither costs the gateway more
// than the one answer in hand: every 103 is relayed and the answer
// arrives; the long trailer breaks the body off; the gateway's peak
// memory grows by less than 64 MiB over 8 of each at once (about 35 MiB
// with 20,000 103s and 40 with 80,000: the collector's headroom under
// GOGC 400, nothing kept per 103).
func TestPortInformationalFloodAndLongTrailers(t *testing.T) {
	const n, hints = 8, 20000
	var flood strings.Builder
	for range hints {
		flood.WriteString("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n")
	}
	flood.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	floodAnswer := []byte(flood.String())
	trailerAnswer := []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Long\r\n\r\n2\r\nok\r\n0\r\nX-Long: " +
		strings.Repeat("t", 1<<20) + "\r\n\r\n")
	entry, _ := rawEntry(t, func(r *http.Request) []byte {
		if strings.HasSuffix(r.URL.Path, "/trailer") {
			return trailerAnswer
		}
		return floodAnswer
	})
	rig := startPortRig(t, http.NotFoundHandler(), entry)
	_, before, err := gatewayproc.Memory(rig.env.PID())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		status, body string
		hints        int
		err          error
	}
	run := func(path string) []result {
		results := make([]result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var hints int
				trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
					hints++
					return nil
				}}
				resp, err := testClient.Do(rig.request(t, httptrace.WithClientTrace(ctx, trace), "GET", "rawx", path))
				if err != nil {
					results[i] = result{err: err, hints: hints}
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				results[i] = result{status: resp.Status, body: string(body), hints: hints, err: err}
			}()
		}
		wg.Wait()
		return results
	}
	for i, r := range run("/flood") {
		if r.err != nil || r.status != "200 OK" || r.body != "ok" || r.hints != hints {
			t.Errorf("flood %d: %s %q after %d 103s (%v), want 200 \"ok\" after %d", i, r.status, r.body, r.hints, r.err, hints)
		}
	}
	for i, r := range run("/trailer") {
		if r.err == nil {
			t.Errorf("long trailer %d: %s %q read whole, want the body broken off", i, r.status, r.body)
		}
	}
	_, peak, err := gatewayproc.Memory(rig.env.PID())
	if err != nil {
		t.Fatal(err)
	}
	grew := (peak - before) >> 10
	t.Logf("gateway VmHWM %d MiB before, %d MiB after (+%d MiB)", before>>10, peak>>10, grew)
	if grew >= 64 {
		t.Errorf("the gateway's peak memory grew by %d MiB, want under 64", grew)
	}
}

// TestPortAnswerStreamsAsWritten: an answer a port's server writes in
// parts reaches the client part by part: the server writes its second
// part only after the client has read the first, so an answer held back
// anywhere (the gateway's writer that makes cookies host-only included)
// would never complete. Two kinds of streamed answer: server-sent events,
// and a plain answer without a Content-Length (chunked, as a long poll or
// a log tail sends it), both written through at once by reverse_proxy's
// default.
func TestPortAnswerStreamsAsWritten(t *testing.T) {
	for _, ctype := range []string{"text/event-stream", "text/plain; charset=utf-8"} {
		t.Run(strings.Split(ctype, ";")[0], func(t *testing.T) {
			got := make(chan struct{})
			rig := startPortRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ctype)
				w.Header().Add("Set-Cookie", "s=1; Domain="+portDomain)
				_, _ = io.WriteString(w, "data: one\n\n")
				_ = http.NewResponseController(w).Flush()
				select {
				case <-got:
					_, _ = io.WriteString(w, "data: two\n\n")
				case <-r.Context().Done():
				}
			}), "")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := testClient.Do(rig.request(t, ctx, "GET", "sbxa", "/events"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if c := resp.Header.Get("Set-Cookie"); c != "s=1" {
				t.Errorf("Set-Cookie %q, want s=1", c)
			}
			if resp.ContentLength != -1 || resp.Header.Get("Content-Type") != ctype {
				t.Errorf("Content-Length %d, Content-Type %q: want a streamed %s answer", resp.ContentLength, resp.Header.Get("Content-Type"), ctype)
			}
			br := bufio.NewReader(resp.Body)
			first, err := br.ReadString('\n')
			if err != nil || first != "data: one\n" {
				t.Fatalf("the first part: %q %v", first, err)
			}
			close(got)
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != "\ndata: two\n\n" {
				t.Fatalf("the rest: %q %v", rest, err)
			}
		})
	}
}

// TestPortAnswerCannotForgeGatewayHeaders: a tenant's server on a sandbox
// port answers with the header the gateway sets on its own refusals
// (Sandgate-Error-Code, docs/errors.md), in a 103, in the final head and
// as a trailer, and sets a cookie for the whole domain in a trailer. A
// client tells the gateway's refusals from a sandbox's answers by that
// header, so none of it may reach the client as the sandbox sent it: the
// gateway's own header names are removed from every head and trailer of a
// port's answer, and a trailer's cookie is made host-only as a head's is.
func TestPortAnswerCannotForgeGatewayHeaders(t *testing.T) {
	rig := startPortRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Sandgate-Error-Code", "SANDBOX_NOT_FOUND")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Trailer", "Sandgate-Error-Code, Set-Cookie")
		w.Header().Set("Sandgate-error-code", "SANDBOX_NOT_FOUND")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "sandbox a")
		w.Header().Set("Sandgate-Error-Code", "SANDBOX_GONE")
		w.Header().Set("Set-Cookie", "late=1; Domain="+portDomain+"; Path=/")
		// A trailer not announced in the head (net/http's TrailerPrefix).
		w.Header().Set(http.TrailerPrefix+"Sandgate-Error-Code", "GATEWAY_BUSY")
	}), "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var early []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		early = append(early, h.Values("Sandgate-Error-Code")...)
		return nil
	}}
	resp, err := testClient.Do(rig.request(t, httptrace.WithClientTrace(ctx, trace), "GET", "sbxa", "/x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || string(body) != "sandbox a" {
		t.Fatalf("GET through the gateway: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if len(early) != 0 {
		t.Errorf("the 103 carried Sandgate-Error-Code %q", early)
	}
	if v := resp.Header.Values("Sandgate-Error-Code"); len(v) != 0 {
		t.Errorf("the answer's head carried Sandgate-Error-Code %q", v)
	}
	if v := resp.Trailer.Values("Sandgate-Error-Code"); len(v) != 0 {
		t.Errorf("the answer's trailer carried Sandgate-Error-Code %q", v)
	}
	if v := resp.Trailer.Values("Set-Cookie"); len(v) != 1 || v[0] != "late=1; Path=/" {
		t.Errorf("the answer's trailer carried Set-Cookie %q, want [\"late=1; Path=/\"]", v)
	}
}

// TestPortWebSocketEndsWithItsConfiguration: a WebSocket through host
// routing holds one of its sandbox's port request places
// (max_port_requests_per_sandbox) for its whole life. A `caddy reload`
// closes the WebSockets of the configuration it replaces, as Caddy's
// reverse_proxy closes its own (stream_close_delay 0, the default). When
// the places were counted per configuration, those WebSockets otherwise
// ran on uncounted, and each reload let a sandbox hold another full bound
// of them. Before, the host routing's proxy was never cleaned up, and the
// WebSocket outlived the reload.
func TestPortWebSocketEndsWithItsConfiguration(t *testing.T) {
	serverClosed := make(chan struct{}, 1)
	rig := startPortRig(t, echoWebSocket(serverClosed), "")
	conn, br := rig.upgradePort(t, "sbxa")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rig.reloadWith(ctx, t, "max_port_requests_per_sandbox 1000")
	// Caddy sends a WebSocket Close frame (1001 going away), then closes.
	expectWebSocketClosed(ctx, t, conn, br, serverClosed, "after the reload")
}

// expectWebSocketClosed fails t unless the gateway closes the client's
// side of a port WebSocket (conn, read through br) and then the sandbox's
// side (serverClosed) before ctx ends; when names the moment for the
// failure's message.
func expectWebSocketClosed(ctx context.Context, t *testing.T, conn net.Conn, br *bufio.Reader, serverClosed <-chan struct{}, when string) {
	t.Helper()
	// A bound on a wait that never ends, not a speed.
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("the WebSocket %s: %v, want closed by the gateway", when, err)
	}
	select {
	case <-serverClosed:
	case <-ctx.Done():
		t.Fatalf("the sandbox's side of the WebSocket was not closed %s", when)
	}
}

// TestPortRequestsCountedAcrossReload: the port requests in progress are
// counted by the process, not by one configuration: with
// max_port_requests_per_sandbox 4 and four requests held by sbxa's
// server, a `caddy reload` (another max_port_requests) does not give the
// sandbox four more places: the next request is refused 429 after it as
// before it, and once one held request ends its place is taken again.
// Before, the new configuration counted afresh and let the sandbox hold
// twice its bound. The same holds for a reload that serves one more
// domain (counted afresh before, as the counts were kept per set of
// served domains), and for a reload refused as it provisions, then one
// that runs (the refused configuration let go of the counts it took).
func TestPortRequestsCountedAcrossReload(t *testing.T) {
	t.Run("same domains", func(t *testing.T) {
		testPortRequestsCountedAcrossReload(t, func(ctx context.Context, t *testing.T, rig *portRig) {
			rig.reloadWith(ctx, t, "max_port_requests_per_sandbox 4", "max_port_requests 100")
		})
	})
	t.Run("a domain added", func(t *testing.T) {
		testPortRequestsCountedAcrossReload(t, func(ctx context.Context, t *testing.T, rig *portRig) {
			cf, hosts := rig.caddyfileHosts(t)
			next := strings.Replace(cf, hosts, "\n\t\thosts "+portDomain+" other."+portDomain+"\n", 1)
			if err := rig.env.Reload(ctx, next); err != nil {
				t.Fatalf("reload: %v\n%s", err, rig.log.String())
			}
		})
	})
	t.Run("a rejected reload, then one", func(t *testing.T) {
		testPortRequestsCountedAcrossReload(t, func(ctx context.Context, t *testing.T, rig *portRig) {
			cf, hosts := rig.caddyfileHosts(t)
			// Refused as its handler provisions, after it took the counts.
			bad := strings.Replace(cf, hosts, hosts+"\t\tmax_port_requests 2\n", 1)
			if err := rig.env.Reload(ctx, bad); err == nil || !strings.Contains(err.Error(), "max_port_requests") {
				t.Fatalf("reload with max_port_requests under the per-sandbox bound: %v, want refused", err)
			}
			rig.reloadWith(ctx, t, "max_port_requests_per_sandbox 4", "max_port_requests 100")
		})
	})
}

// testPortRequestsCountedAcrossReload is TestPortRequestsCountedAcrossReload
// with the reload done by reload.
func testPortRequestsCountedAcrossReload(t *testing.T, reload func(context.Context, *testing.T, *portRig)) {
	const bound = 4
	held := make(chan struct{}, 2*bound)
	release := make(chan struct{}, 2*bound)
	rig := startPortRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "released")
	}), "", "max_port_requests_per_sandbox 4")
	gw := strings.TrimPrefix(rig.env.Gateway, "http://")
	tok := rig.trafficToken(t, "sbxa")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// send sends one request to sbxa's port on its own connection and
	// returns the channel of its answer's status and code.
	send := func(answer chan string) <-chan string {
		c, err := net.Dial("tcp", gw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
		fmt.Fprintf(c, "GET /hold HTTP/1.1\r\nHost: %s\r\nE2b-Traffic-Access-Token: %s\r\n\r\n", portHost("sbxa"), tok)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answer <- err.Error()
				return
			}
			resp.Body.Close()
			answer <- fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Sandgate-Error-Code"))
		}()
		return answer
	}
	// wantHeld waits until the server holds the request whose answer is
	// answer; wantRefused until answer is 429.
	wantHeld := func(what string, answer <-chan string) {
		t.Helper()
		select {
		case <-held:
		case a := <-answer:
			t.Fatalf("%s: answered %q, want held by the sandbox's server", what, a)
		case <-ctx.Done():
			t.Fatalf("%s: neither held nor answered", what)
		}
	}
	one := func() chan string { return make(chan string, 1) }
	// wantRefused sends a request until it is not dropped (three tries)
	// and waits until its answer is 429.
	wantRefused := func(what string) {
		t.Helper()
		for try := 1; ; try++ {
			select {
			case <-held:
				t.Fatalf("%s: held by the sandbox's server, want 429 TOO_MANY_PORT_REQUESTS", what)
			case a := <-send(one()):
				if droppedAtReload(a) && try < 3 {
					t.Logf("%s: %q (the connection dropped at the reload), sent again", what, a)
					continue
				}
				if a != "429 TOO_MANY_PORT_REQUESTS" {
					t.Fatalf("%s: answered %q, want 429 TOO_MANY_PORT_REQUESTS", what, a)
				}
			case <-ctx.Done():
				t.Fatalf("%s: neither held nor answered", what)
			}
			return
		}
	}
	first := make(chan string, bound) // the answers of the first held requests
	for i := range bound {
		wantHeld(fmt.Sprintf("request %d", i+1), send(first))
	}
	wantRefused("a request past the bound before the reload")
	reload(ctx, t, rig)
	wantRefused("a request past the bound after the reload")
	// One held request ends (the old configuration's): its place is the
	// new configuration's to give.
	release <- struct{}{}
	select {
	case a := <-first:
		if a != "200 " {
			t.Fatalf("the released request: %q, want 200", a)
		}
	case <-ctx.Done():
		t.Fatal("the released request was not answered")
	}
	// The gateway gives the place back once its handler returns, which
	// may be just after the client has the answer: a request refused
	// meanwhile is sent again, until one is held.
	for {
		answer := send(one())
		select {
		case <-held:
		case a := <-answer:
			if a == "429 TOO_MANY_PORT_REQUESTS" || droppedAtReload(a) {
				continue
			}
			t.Fatalf("a request after one ended: answered %q, want held by the sandbox's server", a)
		case <-ctx.Done():
			t.Fatal("a request after one ended: neither held nor answered")
		}
		break
	}
	wantRefused("a request past the bound again")
}

// TestPortWebSocketStreamCloseDelay: with stream_close_delay, as with
// reverse_proxy's, a reload leaves the replaced configuration's port
// WebSockets open for the delay: with 1h the WebSocket still carries
// data after the reload (the old configuration is cleaned up by then);
// with 1s it is closed by the gateway afterwards, with the sandbox's side.
func TestPortWebSocketStreamCloseDelay(t *testing.T) {
	t.Run("outlives the reload", func(t *testing.T) {
		rig := startPortRig(t, echoWebSocket(nil), "", "stream_close_delay 1h")
		conn, br := rig.upgradePort(t, "sbxa")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rig.reloadWith(ctx, t, "stream_close_delay 1h", "max_port_requests_per_sandbox 1000")
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(conn, "after the reload\n"); err != nil {
			t.Fatalf("write on the WebSocket after the reload: %v", err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != "after the reload\n" {
			t.Fatalf("echo on the WebSocket after the reload: %q, %v\n%s", line, err, rig.log.String())
		}
	})
	t.Run("closed after the delay", func(t *testing.T) {
		serverClosed := make(chan struct{}, 1)
		rig := startPortRig(t, echoWebSocket(serverClosed), "", "stream_close_delay 1s")
		conn, br := rig.upgradePort(t, "sbxa")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rig.reloadWith(ctx, t, "stream_close_delay 1s", "max_port_requests_per_sandbox 1000")
		expectWebSocketClosed(ctx, t, conn, br, serverClosed, "after the reload and the delay")
	})
}

// echoWebSocket is a sandbox's WebSocket server: it accepts the upgrade,
// echoes the bytes it gets, and signals closed (when not nil) once the
// gateway closed its side.
func echoWebSocket(closed chan<- struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(conn, brw) // until the gateway closes its side
		if closed != nil {
			closed <- struct{}{}
		}
	})
}

// upgradePort opens a WebSocket to sandbox id's port through the gateway
// (with its traffic token) to an echoing server (echoWebSocket) and
// returns the connection and its reader once a line came back through
// it; the test closes it.
func (rig *portRig) upgradePort(t *testing.T, id string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(rig.env.Gateway, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nE2b-Traffic-Access-Token: %s\r\n\r\n", portHost(id), rig.trafficToken(t, id))
	br := bufio.NewReader(conn)
	ws, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ws.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade through the gateway: %d\n%s", ws.StatusCode, rig.log.String())
	}
	// Caddy's reverse_proxy writes the 101 before it registers the two
	// connections it closes when its configuration is cleaned up, and
	// copies between them only after that: an echo through the tunnel
	// shows they are registered, so a reload from here on finds them (a
	// reload between the 101 and the registration leaves the WebSocket
	// open for good, in Caddy's own reverse_proxy too).
	_ = conn.SetDeadline(time.Now().Add(time.Minute)) // a bound on a wait that never ends, not a speed
	if _, err := io.WriteString(conn, "registered?\n"); err != nil {
		t.Fatalf("write on the new WebSocket: %v", err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "registered?\n" {
		t.Fatalf("echo on the new WebSocket: %q, %v\n%s", line, err, rig.log.String())
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, br
}

// caddyfileHosts returns the gateway's Caddyfile and its e2b_dataplane
// block's hosts line ("\n\t\thosts <portDomain>\n"), which a test
// rewrites for a reload.
func (rig *portRig) caddyfileHosts(t *testing.T) (caddyfile, hosts string) {
	t.Helper()
	cf, err := os.ReadFile(filepath.Join(rig.env.Dir, "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	hosts = "\n\t\thosts " + portDomain + "\n"
	if !strings.Contains(string(cf), hosts) {
		t.Fatalf("the gateway's Caddyfile has no hosts line:\n%s", cf)
	}
	return string(cf), hosts
}

// reloadWith reloads the gateway with its Caddyfile's e2b_dataplane block
// given directives (after hosts), replacing the directives it was started
// with; it returns once the new configuration runs and the old one was
// cleaned up.
func (rig *portRig) reloadWith(ctx context.Context, t *testing.T, directives ...string) {
	t.Helper()
	cf, err := os.ReadFile(filepath.Join(rig.env.Dir, "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	block := "e2b_dataplane {\n\t\thosts " + portDomain
	i := strings.Index(string(cf), block)
	j := strings.Index(string(cf)[i:], "\n\t\thome_dir") // the first line after the added directives
	if i < 0 || j < 0 {
		t.Fatalf("the gateway's Caddyfile has no e2b_dataplane block with hosts:\n%s", cf)
	}
	next := string(cf)[:i] + block
	for _, d := range directives {
		next += "\n\t\t" + d
	}
	next += string(cf)[i+j:]
	if err := rig.env.Reload(ctx, next); err != nil {
		t.Fatalf("reload: %v\n%s", err, rig.log.String())
	}
}
