package nodeconnect

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// binaryGlobals is the global options block of the binary tests'
// gateways: admin on admin, the sandgate app with the test's files and a
// nodes block ending with nodesExtra (further nodes subdirectives, each
// line starting with a newline, or "").
func binaryGlobals(f files, admin, nodesExtra string) string {
	return fmt.Sprintf(`{
	admin %s
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key k1 HS256 %s
		credentials file %s
		nodes {
			credentials file %s
			owner_epoch 3
			hello_timeout 5s
			idle_timeout 10s
			heartbeat_interval 100ms%s
		}
	}
}
`, admin, f.key, f.creds, f.nodes, nodesExtra)
}

// binaryCaddyfile is the gateway configuration of the binary test; body is
// the answer of the unrelated route /extra.
func binaryCaddyfile(f files, admin, body string) string {
	return binaryGlobals(f, admin, "") + fmt.Sprintf(`
http://127.0.0.1:%s {
	respond /extra %q 200
	sandbox_node_connect
	sandbox_node_api {
		token_sha256 %s
	}
}
`, f.port, body, hexSum(apiToken))
}

// TestBinaryReloadKeepsConnection runs the built gateway (bin/caddy, `make
// build`), connects a node, reloads the config through the admin API
// (POST /load) with a changed unrelated route, and checks that the
// connection survives: the new route is served, heartbeats keep being
// acknowledged on the same connection, and an operation goes through it
// with the next sequence number. The gateway's log must not contain the
// node credential or the API token.
func TestBinaryReloadKeepsConnection(t *testing.T) {
	f := newFiles(t)
	admin := "127.0.0.1:" + freePort(t)
	base := startGateway(t, f, admin)

	n := dialNode(t, base, -1)
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if status, res := apiOperation(t, base); status != http.StatusOK || res.Outcome != "success" || res.Sequence != 1 {
		t.Fatalf("operation before the reload: %d %+v", status, res)
	}
	if status, body := get(t, base+"/extra"); body != "v1" {
		t.Fatalf("/extra = %d %q", status, body)
	}

	reloadGateway(t, admin, binaryCaddyfile(f, admin, "v2"))
	waitOneListener(t, base)
	if status, body := get(t, base+"/extra"); body != "v2" {
		t.Fatalf("after the reload /extra = %d %q, want v2", status, body)
	}

	for range 3 {
		if err := n.Heartbeat(t.Context()); err != nil {
			t.Fatalf("heartbeat after the reload: %v", err)
		}
	}
	if n.Err() != nil || n.LastAck().ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("connection after the reload: err %v, ack %+v", n.Err(), n.LastAck())
	}
	var st hub.NodeStatus
	if status := apiGet(t, base, api.Prefix+"/"+nodeID, &st); status != http.StatusOK || !st.Online ||
		st.ConnectionID != n.Welcome().ConnectionID || st.OwnerEpoch != 3 {
		t.Fatalf("API status after the reload: %d %+v", status, st)
	}
	if status, res := apiOperation(t, base); status != http.StatusOK || res.Outcome != "success" || res.Sequence != 2 ||
		res.ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("operation after the reload: %d %+v", status, res)
	}
}

// reloadGateway is `caddy reload`: it POSTs caddyfile to the admin API
// at admin and fails the test unless the gateway took it (the answer comes
// once the new configuration started and the old one stopped).
func reloadGateway(t *testing.T, admin, caddyfile string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+admin+"/load", strings.NewReader(caddyfile))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /load: %d %s", resp.StatusCode, body)
	}
}

// startGateway runs the built gateway (bin/caddy) on binaryCaddyfile with
// its admin API on admin, stops it when the test ends (checking that its
// log holds no secret), and returns its base URL once it listens.
func startGateway(t *testing.T, f files, admin string) string {
	t.Helper()
	return startGatewayWith(t, f, binaryCaddyfile(f, admin, "v1")).base
}

// gatewayProc is a running gateway process of startGatewayWith.
type gatewayProc struct {
	base   string        // "http://127.0.0.1:<f.port>"
	logs   *lockedBuffer // its standard output and error
	cmd    *exec.Cmd
	exited chan struct{} // closed once it exited, err then set
	err    error         // cmd.Wait's
}

// stop sends the gateway SIGTERM and returns cmd.Wait's error once it
// exited; after timeout (a safety net) it kills it. Calling it again
// returns the same.
func (g *gatewayProc) stop() error {
	_ = g.cmd.Process.Signal(syscall.SIGTERM) // an error once it exited
	select {
	case <-g.exited:
	case <-time.After(timeout):
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
	return g.err
}

// startGatewayWith is startGateway on the given Caddyfile, whose site
// listens on 127.0.0.1:f.port.
func startGatewayWith(t *testing.T, f files, caddyfile string) *gatewayProc {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "caddy")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the gateway binary %s is missing; run `make build` first", bin)
	}
	cfPath := filepath.Join(f.dir, "Caddyfile")
	write(t, cfPath, caddyfile)

	g := &gatewayProc{base: "http://127.0.0.1:" + f.port, logs: new(lockedBuffer), exited: make(chan struct{})}
	g.cmd = exec.Command(bin, "run", "--config", cfPath, "--adapter", "caddyfile")
	g.cmd.Dir = f.dir
	g.cmd.Env = append(os.Environ(), "HOME="+f.dir, "XDG_DATA_HOME="+f.dir, "XDG_CONFIG_HOME="+f.dir)
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		g.err = g.cmd.Wait()
		close(g.exited)
	}()
	t.Cleanup(func() {
		_ = g.stop()
		out := g.logs.String()
		for _, s := range []string{nodeSecret, apiToken} {
			if strings.Contains(out, s) {
				t.Errorf("the gateway log contains a secret")
			}
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", out)
		}
	})
	waittest.Until(t, timeout, "the gateway to listen", func() bool {
		select {
		case <-g.exited:
			t.Fatalf("the gateway exited: %v", g.err)
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+f.port, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		// The gateway alone must listen there: the port was picked before
		// the gateway bound it, and another Caddy on it (SO_REUSEPORT)
		// would get some of the test's connections.
		alone, err := freeport.ListeningAlone(g.cmd.Process.Pid, "127.0.0.1:"+f.port)
		if err != nil { // freeport.ErrShared: the port was taken after it was picked
			t.Fatal(err)
		}
		return alone
	})
	return g
}

// TestBinaryReconnectStorm runs the built gateway and lets the enrolled
// node connect and drop its socket in a loop: hub.ConnectBurst connects
// are upgraded, the next ones are refused 429 with a Retry-After of 1 to
// hub.ConnectEvery seconds through Caddy's error path, and a connect after
// that Retry-After is upgraded again.
func TestBinaryReconnectStorm(t *testing.T) {
	f := newFiles(t)
	base := startGateway(t, f, "127.0.0.1:"+freePort(t))
	url := "ws" + strings.TrimPrefix(base, "http") + hub.ConnectPath + "?node_id=" + nodeID
	auth := http.Header{"Authorization": {"Bearer " + nodeSecret}}
	// attempt connects and drops the socket at once; it returns the
	// status and Retry-After once the gateway has released the node.
	attempt := func() (int, string) {
		t.Helper()
		d := websocket.Dialer{HandshakeTimeout: timeout}
		ws, resp, err := d.Dial(url, auth)
		if err != nil {
			if resp == nil {
				t.Fatalf("connect: %v", err)
			}
			resp.Body.Close()
			return resp.StatusCode, resp.Header.Get("Retry-After")
		}
		_ = ws.Close()
		waittest.Until(t, timeout, "the gateway to release the node", func() bool {
			var st hub.NodeStatus
			return apiGet(t, base, api.Prefix+"/"+nodeID, &st) == http.StatusOK && st.State == hub.StateDisconnected
		})
		return http.StatusSwitchingProtocols, ""
	}
	upgraded := 0
	status, retry := 0, ""
	for range 10 * hub.ConnectBurst {
		if status, retry = attempt(); status != http.StatusSwitchingProtocols {
			break
		}
		upgraded++
	}
	// Real time runs on the gateway's presence clock: a slow machine may
	// have earned a connect or two more while the loop ran.
	maxRetry := int(hub.ConnectEvery / time.Second)
	secs, err := strconv.Atoi(retry)
	if upgraded < hub.ConnectBurst || status != http.StatusTooManyRequests || err != nil || secs < 1 || secs > maxRetry {
		t.Fatalf("%d connects upgraded, then %d with Retry-After %q; want at least %d, then 429 with 1..%d",
			upgraded, status, retry, hub.ConnectBurst, maxRetry)
	}
	// Retry-After is honest: the budget refills and the next connect is
	// upgraded (polled ten times a second; timeout is a safety net).
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		st, _ := attempt()
		if st == http.StatusSwitchingProtocols {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no upgrade within %v of the 429 (Retry-After %s), last status %d", timeout, retry, st)
		}
		<-tick.C
	}
}
