package nodeconnect

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/scrapetest"
	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// appAPICaddyfile is a gateway whose site on 127.0.0.1:f.port has only
// sandbox_node_connect (no sandbox_node_api), and whose sandgate app
// serves the internal node API on apiAddr (the nodes block's api) for the
// tokens given; no api setting when apiAddr is "".
func appAPICaddyfile(f files, admin, apiAddr string, tokens ...string) string {
	apiBlock := ""
	if apiAddr != "" {
		digests := make([]string, len(tokens))
		for i, tok := range tokens {
			digests[i] = hexSum(tok)
		}
		apiBlock = fmt.Sprintf("\n\t\t\tapi %s {\n\t\t\t\ttoken_sha256 %s\n\t\t\t}", apiAddr, strings.Join(digests, " "))
	}
	return binaryGlobals(f, admin, apiBlock) + fmt.Sprintf(`
http://127.0.0.1:%s {
	sandbox_node_connect
}
`, f.port)
}

// apiRequest sends method path to base with the Authorization header
// auth ("" for none) and returns the status, the WWW-Authenticate header
// and the body.
func apiRequest(t *testing.T, method, base, path, auth, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(data)
}

// rawAPIRequest writes req as is on a new connection to addr, reads
// one answer and then the connection to its end: closed is true when the
// gateway closed it (EOF or reset before timeout).
func rawAPIRequest(addr, req string) (status int, closed bool, err error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, false, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, false, err
	}
	if _, err := io.WriteString(c, req); err != nil {
		return 0, false, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, false, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_, err = io.Copy(io.Discard, br)
	var ne net.Error
	return resp.StatusCode, !(errors.As(err, &ne) && ne.Timeout()), nil
}

// waitAppAPI waits until the app's listener at addr accepts connections:
// the gateway's site listens once Caddy's http app started, the app's
// listener once the sandgate app did, in no fixed order.
func waitAppAPI(t *testing.T, addr string) {
	t.Helper()
	waittest.Until(t, timeout, "the app's internal node API to listen", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// waitRefused waits until a connection to addr is refused (ECONNREFUSED):
// the app's listener closed.
func waitRefused(t *testing.T, what, addr string) {
	t.Helper()
	waittest.Until(t, timeout, what, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return false
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	})
}

// TestBinaryAppNodeAPI runs the built gateway (bin/caddy, `make
// bin/caddy`) with the nodes block's api, the internal node API served by
// the sandgate app on a listener of its own (no sandbox_node_api on any
// site), connects the simulated node, and checks through that listener:
// the node list and one operation's outcome; 401 for a wrong or missing
// token with nothing dispatched (the next operation has the next sequence
// number), answered at once and the connection closed even when the
// request's body never ends; 404 for a path outside the API; that after `caddy reload`
// with the same api address (and a second token) the API answers, the new
// configuration's tokens in force and the node connection kept; and that
// after a reload without api a connection to the address is refused; the
// reloads log no error about the servers they stop; and the listener's
// answers counted by status in sandgate_node_api_requests_total.
func TestBinaryAppNodeAPI(t *testing.T) {
	f := newFiles(t)
	admin := "127.0.0.1:" + freePort(t)
	apiAddr := "127.0.0.1:" + freePort(t)
	apiBase := "http://" + apiAddr
	const apiToken2 = "node-api-token-2-DO-NOT-LOG-5e9a"
	g := startGatewayWith(t, f, appAPICaddyfile(f, admin, apiAddr, apiToken))
	base, logs := g.base, g.logs
	waitAppAPI(t, apiAddr)
	if !strings.Contains(logs.String(), `"address":"`+apiAddr+`"`) ||
		!strings.Contains(logs.String(), "serving the internal node API outside Caddy's HTTP server") {
		t.Errorf("the gateway's log does not say which address serves the API")
	}

	n := dialNode(t, base, -1)
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}

	// (a) The node list and one operation, through the app's listener.
	var list api.Nodes
	if status := apiGet(t, apiBase, api.Prefix, &list); status != http.StatusOK || len(list.Nodes) != 1 ||
		list.Nodes[0].NodeID != nodeID || !list.Nodes[0].Online || list.Nodes[0].ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("GET %s: %d %+v", api.Prefix, status, list)
	}
	if status, res := apiOperation(t, apiBase); status != http.StatusOK || res.Outcome != "success" || res.Sequence != 1 ||
		res.ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("operation: %d %+v", status, res)
	}

	// (b) A wrong or missing token: 401, nothing dispatched.
	op := `{"operation":"info","deployment_generation":1,"timeout_ms":5000,
		"reference":{"tenant_id":"t1","environment_id":"e1","allocation_id":"a1"}}`
	opPath := api.Prefix + "/" + nodeID + "/operations"
	for _, auth := range []string{"", "Bearer " + apiToken2, "Bearer " + apiToken + "x", apiToken} {
		status, challenge, body := apiRequest(t, http.MethodPost, apiBase, opPath, auth, op)
		if status != http.StatusUnauthorized || challenge == "" || !strings.Contains(body, `"unauthorized"`) {
			t.Errorf("operation with Authorization %q: %d, WWW-Authenticate %q, %s; want 401", strings.ReplaceAll(auth, apiToken, "<token>"), status, challenge, body)
		}
	}
	if status, _, _ := apiRequest(t, http.MethodGet, apiBase, api.Prefix, "Bearer "+apiToken2, ""); status != http.StatusUnauthorized {
		t.Errorf("node list with a wrong token: %d, want 401", status)
	}
	if status, res := apiOperation(t, apiBase); status != http.StatusOK || res.Outcome != "success" || res.Sequence != 2 {
		t.Fatalf("operation after the refused ones: %d %+v; want success with sequence 2 (the refused ones dispatched nothing)", status, res)
	}

	// A request without a valid token whose body never ends (chunked, or
	// shorter than its Content-Length) is answered 401 at once, with
	// "Connection: close", and its connection is closed without its body
	// being waited for (api.NewServer).
	for name, req := range map[string]string{
		"no token, a chunked body without end": "POST " + opPath + " HTTP/1.1\r\nHost: api\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		"a wrong token, Content-Length lies":   "POST " + opPath + " HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer " + apiToken2 + "\r\nContent-Length: 100000\r\n\r\n{\"op",
	} {
		status, closed, err := rawAPIRequest(apiAddr, req)
		if err != nil || status != http.StatusUnauthorized || !closed {
			t.Errorf("%s: %d, closed %v, %v; want 401 and the connection closed", name, status, closed, err)
		}
	}

	// (e) A path outside the API: 404, with or without a token.
	for _, path := range []string{"/", "/extra", "/internal/v1/sandbox-nodes-other", "/api/v1/sandbox-node/connect"} {
		for _, auth := range []string{"", "Bearer " + apiToken} {
			if status, _, body := apiRequest(t, http.MethodGet, apiBase, path, auth, ""); status != http.StatusNotFound ||
				!strings.Contains(body, `"not_found"`) {
				t.Errorf("GET %s (token %v): %d %s; want 404 not_found", path, auth != "", status, body)
			}
		}
	}

	// Headers past api.DefaultServerLimits' MaxHeaderBytes (64 KiB): 431 from net/http before
	// any handler, nothing dispatched (the next operation below has
	// sequence 3).
	big, err := http.NewRequestWithContext(t.Context(), http.MethodPost, apiBase+opPath, strings.NewReader(op))
	if err != nil {
		t.Fatal(err)
	}
	big.Header.Set("Authorization", "Bearer "+apiToken)
	big.Header.Set("X-Padding", strings.Repeat("p", 80<<10))
	if resp, err := testClient.Do(big); err != nil {
		t.Fatalf("a request with 80 KiB of headers: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a request with 80 KiB of headers: %d, want 431", resp.StatusCode)
		}
	}

	// The listener's answers so far, by status, on the admin endpoint's
	// /metrics: the node list and two operations (200), the seven requests
	// without a valid token (401), the eight outside the API (404); the
	// 431, net/http's own, is not counted.
	m, err := scrapetest.Get(testClient, "http://"+admin+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for code, want := range map[string]float64{"200": 3, "401": 7, "404": 8, "431": 0} {
		if got := m.Value("sandgate_node_api_requests_total", "code", code); got != want {
			t.Errorf("sandgate_node_api_requests_total{code=%q} = %g, want %g", code, got, want)
		}
	}

	// (c) A reload with the same api address, and a second token: the API
	// answers, with the new configuration's tokens, on the same node
	// connection.
	reloadGateway(t, admin, appAPICaddyfile(f, admin, apiAddr, apiToken, apiToken2))
	if status, _, body := apiRequest(t, http.MethodGet, apiBase, api.Prefix+"/"+nodeID, "Bearer "+apiToken2, ""); status != http.StatusOK ||
		!strings.Contains(body, n.Welcome().ConnectionID) {
		t.Fatalf("after the reload, GET the node with the second token: %d %s", status, body)
	}
	var st hub.NodeStatus
	if status := apiGet(t, apiBase, api.Prefix+"/"+nodeID, &st); status != http.StatusOK || !st.Online ||
		st.ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("after the reload, GET the node: %d %+v", status, st)
	}
	if status, res := apiOperation(t, apiBase); status != http.StatusOK || res.Outcome != "success" || res.Sequence != 3 ||
		res.ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("operation after the reload: %d %+v", status, res)
	}

	// (d) A reload without api: the address refuses connections, and the
	// node connection is still there.
	reloadGateway(t, admin, appAPICaddyfile(f, admin, ""))
	c, err := net.DialTimeout("tcp", apiAddr, timeout)
	if err == nil {
		c.Close()
		t.Fatalf("after the reload without api, %s accepts connections", apiAddr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after the reload without api, dialling %s: %v; want connection refused", apiAddr, err)
	}
	if err := n.Heartbeat(t.Context()); err != nil || n.LastAck().ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("heartbeat after the reloads: %v, ack %+v", err, n.LastAck())
	}
	if strings.Contains(logs.String(), apiToken2) {
		t.Errorf("the gateway's log contains the second API token")
	}
	// A reload that stops a config's API server is no error.
	if strings.Contains(logs.String(), "the internal node API server stopped") {
		t.Errorf("the reloads logged the API server's stop as an error")
	}
}

// TestBinaryAppNodeAPIShutdown runs the built gateway with the nodes
// block's api, holds an operation in flight through the app's listener
// (the node does not answer yet) and sends the gateway SIGTERM: the
// listener closes (connections refused) while the operation waits, the
// node's answer, sent then, reaches the caller as the operation's
// outcome, and the gateway exits 0.
func TestBinaryAppNodeAPIShutdown(t *testing.T) {
	f := newFiles(t)
	apiAddr := "127.0.0.1:" + freePort(t)
	g := startGatewayWith(t, f, appAPICaddyfile(f, "127.0.0.1:"+freePort(t), apiAddr, apiToken))
	waitAppAPI(t, apiAddr)

	received, release := make(chan struct{}, 1), make(chan struct{})
	n, err := sim.Dial(t.Context(), sim.Config{URL: g.base, Credential: nodeSecret, Hello: hello(), HeartbeatInterval: -1,
		Answer: func(r *proto.Request) *proto.Response {
			received <- struct{}{}
			<-release
			return sim.Success(r)
		}})
	if err != nil {
		t.Fatalf("node dial: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	defer func() {
		select {
		case <-release:
		default:
			close(release) // the test failed before releasing the answer
		}
	}()
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}

	type answer struct {
		status int
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		body := `{"operation":"info","deployment_generation":1,"timeout_ms":10000,
			"reference":{"tenant_id":"t1","environment_id":"e1","allocation_id":"a1"}}`
		req, err := http.NewRequest(http.MethodPost, "http://"+apiAddr+api.Prefix+"/"+nodeID+"/operations", strings.NewReader(body))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := testClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, string(data), err}
	}()
	select {
	case <-received:
	case <-time.After(timeout):
		t.Fatal("the node got no request")
	}

	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, "the app's listener to refuse connections", apiAddr)
	select {
	case a := <-answered:
		t.Fatalf("the operation was answered before the node answered: %d %s %v", a.status, a.body, a.err)
	default:
	}
	close(release)
	select {
	case a := <-answered:
		if a.err != nil || a.status != http.StatusOK || !strings.Contains(a.body, `"outcome":"success"`) {
			t.Fatalf("the operation in flight at the shutdown: %d %s %v; want 200 success", a.status, a.body, a.err)
		}
	case <-time.After(timeout):
		t.Fatal("the operation in flight at the shutdown got no answer")
	}
	if err := g.stop(); err != nil {
		t.Fatalf("the gateway's exit: %v", err)
	}
}

// TestBinaryAppNodeAPIShutdownDelay: with Caddy's shutdown_delay, a gateway
// told to exit keeps the app's API listener serving during the delay, as
// Caddy keeps its sites' (a caller that a Service still sends here is
// served, not refused), then refuses connections and exits 0. The test
// runs the order Caddy chose; both orders serve the API during the delay.
func TestBinaryAppNodeAPIShutdownDelay(t *testing.T) {
	f := newFiles(t)
	apiAddr := "127.0.0.1:" + freePort(t)
	cfg := appAPICaddyfile(f, "127.0.0.1:"+freePort(t), apiAddr, apiToken)
	withDelay := strings.Replace(cfg, "persist_config off", "persist_config off\n\tshutdown_delay 10s", 1)
	if withDelay == cfg {
		t.Fatal("the test's Caddyfile has no persist_config line to put shutdown_delay after")
	}
	g := startGatewayWith(t, f, withDelay)
	waitAppAPI(t, apiAddr)
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Caddy stops its apps one after the other in no fixed order: the
	// http app first (its delay, then the sandgate app's Stop, which
	// closes the API at once) or the sandgate app first (the API's delay,
	// spent alongside the http app's). Either way the delay has begun once
	// one of them logs it.
	waittest.Until(t, timeout, "the shutdown delay to begin", func() bool {
		logs := g.logs.String()
		return strings.Contains(logs, "closing the internal node API listener after the shutdown delay") ||
			strings.Contains(logs, `"shutdown scheduled"`)
	})
	// A new connection after the exit began, within the delay.
	c, err := net.DialTimeout("tcp", apiAddr, time.Second)
	if err != nil {
		t.Fatalf("a connection within the shutdown delay: %v", err)
	}
	c.Close()
	if status, _, body := apiRequest(t, http.MethodGet, "http://"+apiAddr, api.Prefix, "Bearer "+apiToken, ""); status != http.StatusOK {
		t.Fatalf("the node list within the shutdown delay: %d %s", status, body)
	}
	waitRefused(t, "the app's listener to refuse connections after the delay", apiAddr)
	if err := g.stop(); err != nil {
		t.Fatalf("the gateway's exit: %v", err)
	}
}
