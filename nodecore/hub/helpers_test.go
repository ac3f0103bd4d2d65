package hub

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/credential"
)

// Enrolled test nodes: A and B without generation management, G with it,
// D disabled.
const (
	nodeA = "0a000000-0000-4000-8000-00000000000a"
	nodeB = "0b000000-0000-4000-8000-00000000000b"
	nodeG = "06000000-0000-4000-8000-000000000006"
	nodeD = "0d000000-0000-4000-8000-00000000000d"
	inst  = "11111111-2222-4333-8444-555555555555"

	secretA = "secret-of-node-a-DO-NOT-LOG-5e1f"
	secretB = "secret-of-node-b-DO-NOT-LOG-77aa"
	secretG = "secret-of-node-g-DO-NOT-LOG-c0de"
	secretD = "secret-of-node-d-DO-NOT-LOG-d15a"
)

var (
	fingerprint = strings.Repeat("f", 64)
	specDigest  = strings.Repeat("5a", 32)
	spec2Digest = strings.Repeat("6b", 32)
	secrets     = map[string]string{nodeA: secretA, nodeB: secretB, nodeG: secretG, nodeD: secretD}
)

// timeout bounds every wait of the tests; it is a safety net against a
// hang, never an assertion about speed.
const timeout = 10 * time.Second

func digestHex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// nodeRecord is one YAML record of the credential file.
func nodeRecord(id, secret string, enabled, gm bool) string {
	return fmt.Sprintf(`  - node_id: %s
    enabled: %v
    credential_sha256: %s
    installation_id: %s
    provider: docker
    backend_fingerprint: %s
    deployment_generation: 1
    specification_digest: %s
    generation_management: %v
`, id, enabled, digestHex(secret), inst, fingerprint, specDigest, gm)
}

func defaultNodes() string {
	return "nodes:\n" + nodeRecord(nodeA, secretA, true, false) + nodeRecord(nodeB, secretB, true, false) +
		nodeRecord(nodeG, secretG, true, true) + nodeRecord(nodeD, secretD, false, false)
}

// env is a hub behind a real HTTP server on 127.0.0.1, with a node
// credential file and an observed logger.
type env struct {
	t        testing.TB
	hub      *Hub
	srv      *httptest.Server
	credPath string
	creds    *credential.File
	logs     *observer.ObservedLogs
	cfg      Config
	// skew is added to real time on the hub's presence clock; tests
	// advance it to pass the online window without waiting.
	skew atomic.Int64
	// frozen, when not 0, is the Unix nanosecond time the presence clock
	// stands at instead of real time (skew still added): see freeze.
	frozen atomic.Int64
}

// advance moves the hub's presence clock forward by d.
func (e *env) advance(d time.Duration) { e.skew.Add(int64(d)) }

// freeze stops the hub's presence clock at the current time, so that
// only advance moves it: a test that steps to within a millisecond of a
// window's end does not depend on how much real time its own steps take.
func (e *env) freeze() { e.frozen.Store(time.Now().UnixNano()) }

// testTimers are short timers; each test may change them. The heartbeat
// interval of 1 ms lets tests send heartbeats back to back; the flood
// tests set the protocol's.
func testTimers() Timers {
	return Timers{Hello: 2 * time.Second, Idle: 5 * time.Second, Online: 5 * time.Second,
		Write: 2 * time.Second, ResponseGrace: 200 * time.Millisecond, CloseGrace: 2 * time.Second,
		Heartbeat: time.Millisecond}
}

func newEnv(t testing.TB, mutate ...func(*Config)) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, credPath: filepath.Join(dir, "nodes.yaml")}
	writeFile(t, e.credPath, defaultNodes())
	core, logs := observer.New(zapcore.DebugLevel)
	e.logs = logs
	logger := zap.New(core)
	creds, err := credential.OpenFile(e.credPath, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = creds.Close() })
	e.creds = creds
	serving := int64(1)
	e.cfg = Config{
		Credentials: creds,
		OwnerEpoch:  7,
		Deployment:  &proto.Deployment{Generation: 2, SpecificationDigest: spec2Digest, ServingGeneration: &serving},
		Timers:      testTimers(),
		Logger:      logger,
	}
	for _, m := range mutate {
		m(&e.cfg)
	}
	e.hub = New()
	e.hub.clock = func() time.Time {
		now := time.Now()
		if f := e.frozen.Load(); f != 0 {
			now = time.Unix(0, f)
		}
		return now.Add(time.Duration(e.skew.Load()))
	}
	if err := e.hub.Configure(e.cfg); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(ConnectPath, e.hub)
	e.srv = httptest.NewServer(mux) // listens on 127.0.0.1
	t.Cleanup(func() {
		_ = e.hub.Close()
		e.srv.Close()
		e.assertNoSecretsLogged()
	})
	return e
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// assertNoSecretsLogged fails if any log line carries a node credential or
// its digest.
func (e *env) assertNoSecretsLogged() {
	for _, entry := range e.logs.All() {
		line := fmt.Sprint(entry.Message, entry.ContextMap())
		for _, s := range secrets {
			if strings.Contains(line, s) || strings.Contains(line, digestHex(s)) {
				e.t.Errorf("log line contains a credential or its digest: %s", line)
			}
		}
	}
}

// url returns the connect URL for node id.
func (e *env) url(id string) string {
	return "ws" + strings.TrimPrefix(e.srv.URL, "http") + ConnectPath + "?node_id=" + id
}

// dial opens a WebSocket for id with secret; it returns the HTTP status
// of a refused handshake.
func (e *env) dial(id, secret string) (*websocket.Conn, int, error) {
	h := http.Header{}
	if secret != "" {
		h.Set("Authorization", "Bearer "+secret)
	}
	d := websocket.Dialer{HandshakeTimeout: timeout}
	ws, resp, err := d.Dial(e.url(id), h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
		return nil, status, err
	}
	return ws, http.StatusSwitchingProtocols, nil
}

// testNode is a sandbox node's end of one connection, driven by a test.
type testNode struct {
	t       testing.TB
	id      string
	ws      *websocket.Conn
	welcome *proto.Welcome
	wmu     sync.Mutex
}

// connect dials as node id (with its secret), expecting the upgrade.
func (e *env) connect(id string) *testNode {
	e.t.Helper()
	ws, status, err := e.dial(id, secrets[id])
	if err != nil {
		e.t.Fatalf("dial %s: status %d, %v", id, status, err)
	}
	n := &testNode{t: e.t, id: id, ws: ws}
	e.t.Cleanup(func() { _ = ws.Close() })
	return n
}

// join connects as node id, sends a valid hello and returns after the
// welcome.
func (e *env) join(id string) *testNode {
	e.t.Helper()
	n := e.connect(id)
	n.send(n.hello())
	w, ok := n.recv().(*proto.Welcome)
	if !ok {
		e.t.Fatalf("node %s: first frame from Core is not welcome", id)
	}
	n.welcome = w
	return n
}

func health(ready bool, diagnostic string) proto.Health {
	return proto.Health{ProviderReady: ready, Diagnostic: diagnostic, ObservedAt: time.Now().UTC(),
		ActiveOperations: 0, Host: proto.HostMeasurements{CPUCount: 2, CPUPercent: 12.5,
			MemoryTotalBytes: 8 << 30, MemoryUsedBytes: 1 << 30, DiskTotalBytes: 100 << 30, DiskUsedBytes: 10 << 30}}
}

// hello is a valid hello matching the node's enrolment.
func (n *testNode) hello() *proto.Hello {
	h := &proto.Hello{NodeID: n.id, InstallationID: inst, Provider: proto.ProviderDocker,
		BackendFingerprint: fingerprint, DeploymentGeneration: 1, SpecificationDigest: specDigest,
		MaxActive: 8, MaxRetained: 0, Health: health(true, "")}
	if n.id == nodeG || n.id == nodeP {
		h.GenerationManagement = true
		h.MaxRetained = 4
		h.Health = health(false, "")
		h.Generations = []proto.GenerationObservation{
			{Generation: 2, SpecificationDigest: spec2Digest, State: proto.GenerationPreparing},
			{Generation: 1, SpecificationDigest: specDigest, State: proto.GenerationReady},
		}
	}
	return h
}

// heartbeat is a valid heartbeat on the welcomed connection.
func (n *testNode) heartbeat(h proto.Health) *proto.Heartbeat {
	return &proto.Heartbeat{ConnectionID: n.welcome.ConnectionID, OwnerEpoch: n.welcome.OwnerEpoch, Health: h}
}

func (n *testNode) send(f proto.Frame) {
	n.t.Helper()
	b, err := proto.Encode(f)
	if err != nil {
		n.t.Fatalf("encode %s: %v", f.FrameType(), err)
	}
	n.sendRaw(b)
}

func (n *testNode) sendRaw(b []byte) {
	n.t.Helper()
	n.wmu.Lock()
	defer n.wmu.Unlock()
	_ = n.ws.SetWriteDeadline(time.Now().Add(timeout))
	if err := n.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		n.t.Fatalf("write: %v", err)
	}
}

// recv returns the next frame from Core; it fails the test on a read
// error or an invalid frame.
func (n *testNode) recv() proto.Frame {
	n.t.Helper()
	f, err := n.next()
	if err != nil {
		n.t.Fatalf("node %s: reading a frame: %v", n.id, err)
	}
	return f
}

func (n *testNode) next() (proto.Frame, error) { return n.nextWithin(timeout) }

// nextWithin is next with a safety net of wait instead of timeout.
func (n *testNode) nextWithin(wait time.Duration) (proto.Frame, error) {
	_ = n.ws.SetReadDeadline(time.Now().Add(wait))
	typ, data, err := n.ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	if typ != websocket.TextMessage {
		return nil, errors.New("binary message from Core")
	}
	return proto.Decode(data)
}

// expectClose reads until Core's close frame and checks its code; it
// returns the reason. Frames before the close fail the test.
func (n *testNode) expectClose(code int) string {
	n.t.Helper()
	return n.expectCloseWithin(code, timeout)
}

// expectCloseWithin is expectClose with a safety net of wait: for a close
// that comes only after Core has read a message of tens of MiB, which
// under -race on a loaded machine takes longer than timeout.
func (n *testNode) expectCloseWithin(code int, wait time.Duration) string {
	n.t.Helper()
	f, err := n.nextWithin(wait)
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		n.t.Fatalf("node %s: want close %d, got frame %v, error %v", n.id, code, f, err)
	}
	if ce.Code != code {
		n.t.Fatalf("node %s: close code %d (%q), want %d", n.id, ce.Code, ce.Text, code)
	}
	return ce.Text
}

// beat sends a heartbeat and returns the ack.
func (n *testNode) beat(h proto.Health) *proto.HeartbeatAck {
	n.t.Helper()
	n.send(n.heartbeat(h))
	ack, ok := n.recv().(*proto.HeartbeatAck)
	if !ok {
		n.t.Fatalf("node %s: no heartbeat_ack", n.id)
	}
	return ack
}

// status returns the hub's view of node id.
func (e *env) status(id string) NodeStatus {
	s, ok := e.hub.Node(id)
	if !ok {
		e.t.Fatalf("node %s unknown to the hub", id)
	}
	return s
}

// ref is a valid reference.
var ref = proto.Reference{TenantID: "tenant-1", EnvironmentID: "env-1", AllocationID: "alloc-1"}

// infoReq is a valid info request on generation 1.
func infoReq() proto.Request {
	return proto.Request{DeploymentGeneration: 1, Operation: proto.OpInfo, TimeoutMS: 5000, Reference: ref}
}

func info() *proto.Info {
	now := time.Now().UTC().Truncate(time.Second)
	return &proto.Info{Reference: ref, DeploymentGeneration: 1, State: proto.StateRunning,
		Image: "busybox:latest", CreatedAt: now, RenewedAt: now}
}

// dispatchAsync runs Dispatch on a goroutine and returns its result.
func (e *env) dispatchAsync(id string, req proto.Request) <-chan dispatched {
	ch := make(chan dispatched, 1)
	go func() {
		r, err := e.hub.Dispatch(e.t.Context(), id, req)
		ch <- dispatched{r, err}
	}()
	return ch
}

type dispatched struct {
	res *Result
	err error
}

func (e *env) await(ch <-chan dispatched) dispatched {
	e.t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(timeout):
		e.t.Fatal("Dispatch did not return")
		return dispatched{}
	}
}

// request reads the next frame and requires a request.
func (n *testNode) request() *proto.Request {
	n.t.Helper()
	r, ok := n.recv().(*proto.Request)
	if !ok {
		n.t.Fatalf("node %s: expected a request frame", n.id)
	}
	return r
}
