package agent_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/agent"
	"github.com/sandgate/sandgate/nodeagent/internal/fakecore"
	"github.com/sandgate/sandgate/nodeagent/provider"
	"github.com/sandgate/sandgate/nodeagent/state"
)

const (
	credential  = "node-credential-0123456789"
	generation  = 3
	digest      = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	fingerprint = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

var ref = proto.Reference{TenantID: "t1", EnvironmentID: "e1", AllocationID: "a1"}

// node is an agent under test, running until the test ends.
type node struct {
	a     *agent.Agent
	cfg   agent.Config
	state *state.Dir
	errc  chan error
	// cancel ends Run's context, as SIGTERM does in the binary.
	cancel context.CancelFunc
}

// quickTimers reconnect at once and send no heartbeat unless a test asks.
func quickTimers() agent.Timers {
	return agent.Timers{Heartbeat: time.Hour, Idle: time.Hour, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond}
}

func startNode(t *testing.T, core *fakecore.Core, p provider.Provider, edit func(*agent.Config)) *node {
	t.Helper()
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{
		Origin:               core.Origin,
		NodeID:               uuid.NewString(),
		Credential:           func() (string, error) { return credential, nil },
		InstallationID:       uuid.NewString(),
		DeploymentGeneration: generation,
		SpecificationDigest:  digest,
		MaxActive:            2,
		Fingerprint:          func(context.Context) (string, error) { return fingerprint, nil },
		Provider:             p,
		DiskPath:             t.TempDir(),
		State:                st,
		Timers:               quickTimers(),
	}
	if edit != nil {
		edit(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{a: a, cfg: cfg, state: st, errc: make(chan error, 1), cancel: cancel}
	go func() { n.errc <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-n.errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Run ended with %v, want context.Canceled", err)
		}
	})
	return n
}

func TestHelloCarriesTheFullIdentityAndFirstHealth(t *testing.T) {
	core := fakecore.New(t, credential, false)
	n := startNode(t, core, newFake(nil), func(c *agent.Config) { c.MaxActive = 5 })
	conn := core.Accept()

	if got := conn.Request.URL.Path; got != agent.ConnectPath {
		t.Errorf("path = %q", got)
	}
	if got := conn.Request.URL.Query().Get("node_id"); got != n.cfg.NodeID {
		t.Errorf("node_id query = %q, want %q", got, n.cfg.NodeID)
	}
	h := conn.Hello()
	want := proto.Hello{
		Version: proto.ProtocolVersion, Type: proto.TypeHello,
		NodeID: n.cfg.NodeID, InstallationID: n.cfg.InstallationID, Provider: proto.ProviderDocker,
		BackendFingerprint: fingerprint, DeploymentGeneration: generation, SpecificationDigest: digest,
		MaxActive: 5, MaxRetained: 1,
	}
	got := *h
	got.Health = proto.Health{}
	if got.Generations != nil || got.GenerationManagement || got.NodeID != want.NodeID || got.InstallationID != want.InstallationID ||
		got.Provider != want.Provider || got.BackendFingerprint != want.BackendFingerprint ||
		got.DeploymentGeneration != want.DeploymentGeneration || got.SpecificationDigest != want.SpecificationDigest ||
		got.MaxActive != want.MaxActive || got.MaxRetained != want.MaxRetained {
		t.Errorf("hello = %+v, want %+v", got, want)
	}
	if !h.Health.ProviderReady || h.Health.Diagnostic != "" || h.Health.ActiveOperations != 0 || h.Health.ObservedAt.IsZero() ||
		h.Health.Host.CPUCount < 1 || h.Health.Host.MemoryTotalBytes == 0 || h.Health.Host.DiskTotalBytes == 0 {
		t.Errorf("first health = %+v", h.Health)
	}
}

func TestWSSForHTTPSOrigin(t *testing.T) {
	core := fakecore.New(t, credential, true)
	startNode(t, core, newFake(nil), func(c *agent.Config) { c.TLS = core.TLS() })
	conn := core.Accept()
	if conn.Request.TLS == nil {
		t.Fatal("the node connected without TLS to an https origin")
	}
	conn.Open(1)
}

func TestUnauthorizedIsPermanent(t *testing.T) {
	core := fakecore.New(t, "another-credential", false)
	st, _ := state.Open(t.TempDir())
	a, err := agent.New(agent.Config{
		Origin: core.Origin, NodeID: uuid.NewString(), InstallationID: uuid.NewString(),
		Credential:           func() (string, error) { return credential, nil },
		DeploymentGeneration: 1, SpecificationDigest: digest, MaxActive: 1,
		Fingerprint: func(context.Context) (string, error) { return fingerprint, nil },
		Provider:    newFake(nil), DiskPath: t.TempDir(), State: st, Timers: quickTimers(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); !errors.Is(err, agent.ErrRejected) {
		t.Fatalf("Run = %v, want ErrRejected", err)
	}
	if n := core.Attempts(); n != 1 {
		t.Fatalf("%d connect attempts, want exactly 1 (no retry after 401)", n)
	}
}

func TestOtherFailuresAreRetried(t *testing.T) {
	core := fakecore.New(t, credential, false)
	// A proxy's 403, a duplicate connection's 409, a 502 and a 503.
	core.Refuse(http.StatusForbidden, http.StatusConflict, http.StatusBadGateway, http.StatusServiceUnavailable)
	startNode(t, core, newFake(nil), nil)
	core.Accept().Open(1)
	if n := core.Attempts(); n != 5 {
		t.Fatalf("%d attempts, want 5 (4 refused, then accepted)", n)
	}
}

// TestRetryAfterReplacesTheBackoff: a 409 with Retry-After (another
// replica's claim on the node lapses then) is retried when it says, not
// after the backoff, here an hour: the node connects within fakecore.Wait.
func TestRetryAfterReplacesTheBackoff(t *testing.T) {
	core := fakecore.New(t, credential, false)
	core.RefuseRetryAfter(http.StatusConflict, "1")
	startNode(t, core, newFake(nil), func(c *agent.Config) {
		c.Timers.BackoffMin, c.Timers.BackoffMax = time.Hour, time.Hour
	})
	core.Accept().Open(1)
	if n := core.Attempts(); n != 2 {
		t.Fatalf("%d attempts, want 2 (refused, then accepted)", n)
	}
}

func TestReconnectsAfterCoreCloses(t *testing.T) {
	core := fakecore.New(t, credential, false)
	startNode(t, core, newFake(nil), nil)
	first := core.Accept()
	first.Open(1)
	first.Close()
	core.Accept().Open(1)
}

// TestGoingAwayReconnectsAtOnce: Core's 1001 (a gateway replica shutting
// down, its node claims released) is followed by a reconnect at once, not
// after the backoff, here an hour: the node connects within fakecore.Wait.
func TestGoingAwayReconnectsAtOnce(t *testing.T) {
	core := fakecore.New(t, credential, false)
	startNode(t, core, newFake(nil), func(c *agent.Config) {
		c.Timers.BackoffMin, c.Timers.BackoffMax = time.Hour, time.Hour
	})
	first := core.Accept()
	first.Open(1)
	first.CloseWith(websocket.CloseGoingAway, "gateway shutting down")
	core.Accept().Open(1)
}

func TestOwnerEpochIsKeptAndLowerRefused(t *testing.T) {
	core := fakecore.New(t, credential, false)
	n := startNode(t, core, newFake(nil), nil)

	c1 := core.Accept()
	c1.Open(5)
	// A request round trip proves the welcome was processed.
	c1.Send(c1.NewRequest(proto.OpInfo, generation, 10000, ref))
	c1.Response()
	c1.Close()

	c2 := core.Accept()
	c2.Open(4)
	if code := c2.Closed(); code != websocket.ClosePolicyViolation {
		t.Fatalf("welcome with a lower epoch: close code %d, want %d", code, websocket.ClosePolicyViolation)
	}
	if e, _ := n.state.OwnerEpoch(); e != 5 {
		t.Fatalf("stored epoch %d, want 5", e)
	}

	c3 := core.Accept()
	c3.Open(6)
	// The node accepts work under epoch 6.
	r := c3.NewRequest(proto.OpInfo, generation, 10000, ref)
	c3.Send(r)
	if resp := c3.Response(); resp.ErrorCode != "" || resp.ID != r.ID {
		t.Fatalf("response under epoch 6 = %+v", resp)
	}
	if e, _ := n.state.OwnerEpoch(); e != 6 {
		t.Fatalf("stored epoch %d, want 6", e)
	}

	// A heartbeat_ack with a lower epoch closes; one with a higher epoch is
	// kept, and closes the connection whose requests carry the old one.
	c3.Send(&proto.HeartbeatAck{ConnectionID: c3.ConnectionID, OwnerEpoch: 5})
	if code := c3.Closed(); code != websocket.ClosePolicyViolation {
		t.Fatalf("lower epoch in heartbeat_ack: close code %d", code)
	}
	c4 := core.Accept()
	c4.Open(6)
	c4.Send(&proto.HeartbeatAck{ConnectionID: c4.ConnectionID, OwnerEpoch: 9})
	if code := c4.Closed(); code != websocket.ClosePolicyViolation {
		t.Fatalf("higher epoch in heartbeat_ack: close code %d", code)
	}
	c5 := core.Accept()
	c5.Open(8)
	if code := c5.Closed(); code != websocket.ClosePolicyViolation {
		t.Fatalf("welcome 8 after ack 9: close code %d", code)
	}
	if e, _ := n.state.OwnerEpoch(); e != 9 {
		t.Fatalf("stored epoch %d, want 9", e)
	}
}

func TestHeartbeats(t *testing.T) {
	core := fakecore.New(t, credential, false)
	f := newFake(nil)
	startNode(t, core, f, func(c *agent.Config) { c.Timers.Heartbeat = 20 * time.Millisecond })
	conn := core.Accept()
	conn.Open(2)
	hb := conn.Heartbeat()
	if hb.ConnectionID != conn.ConnectionID || hb.OwnerEpoch != 2 || !hb.Health.ProviderReady || hb.Health.ObservedAt.IsZero() {
		t.Fatalf("heartbeat = %+v", hb)
	}
	conn.Send(&proto.HeartbeatAck{ConnectionID: conn.ConnectionID, OwnerEpoch: 2})

	// Every report probes the provider: a failing probe shows in the next
	// heartbeat with its fixed code, an unknown code as provider_unavailable.
	f.setProbe(errDockerDown)
	for hb = conn.Heartbeat(); hb.Health.ProviderReady; hb = conn.Heartbeat() {
	}
	if hb.Health.Diagnostic != proto.DiagDockerUnreachable {
		t.Fatalf("diagnostic = %q", hb.Health.Diagnostic)
	}
	f.setProbe(errors.New("something else"))
	for hb = conn.Heartbeat(); hb.Health.Diagnostic == proto.DiagDockerUnreachable; hb = conn.Heartbeat() {
	}
	if hb.Health.ProviderReady || hb.Health.Diagnostic != proto.DiagProviderUnavailable {
		t.Fatalf("health = %+v, want not ready with provider_unavailable", hb.Health)
	}
	f.setProbe(nil)
	for hb = conn.Heartbeat(); !hb.Health.ProviderReady; hb = conn.Heartbeat() {
	}
	if hb.Health.Diagnostic != "" {
		t.Fatalf("ready health with diagnostic %q", hb.Health.Diagnostic)
	}
}

func TestSilenceClosesAndReconnects(t *testing.T) {
	core := fakecore.New(t, credential, false)
	startNode(t, core, newFake(nil), func(c *agent.Config) {
		c.Timers.Idle = 200 * time.Millisecond
	})
	conn := core.Accept()
	conn.Open(1)
	// Core sends nothing more: the node gives up on the connection...
	conn.Closed()
	// ...and dials again.
	core.Accept().Open(1)
}

func TestNoWelcomeClosesAndReconnects(t *testing.T) {
	core := fakecore.New(t, credential, false)
	startNode(t, core, newFake(nil), func(c *agent.Config) { c.Timers.Idle = 200 * time.Millisecond })
	conn := core.Accept()
	conn.Hello()
	conn.Closed()
	core.Accept().Open(1)
}

func TestRequestEnvelopeMismatchCloses(t *testing.T) {
	cases := map[string]func(c *fakecore.Conn, r *proto.Request){
		"connection_id":     func(c *fakecore.Conn, r *proto.Request) { r.ConnectionID = uuid.NewString() },
		"owner_epoch lower": func(c *fakecore.Conn, r *proto.Request) { r.OwnerEpoch-- },
		"owner_epoch higher": func(c *fakecore.Conn, r *proto.Request) {
			r.OwnerEpoch++
		},
		"sequence gap":    func(c *fakecore.Conn, r *proto.Request) { r.Sequence++ },
		"sequence repeat": func(c *fakecore.Conn, r *proto.Request) { r.Sequence-- },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			core := fakecore.New(t, credential, false)
			f := newFake(nil)
			startNode(t, core, f, nil)
			conn := core.Accept()
			conn.Open(3)
			first := conn.NewRequest(proto.OpInfo, generation, 10000, ref)
			conn.Send(first)
			if resp := conn.Response(); resp.ErrorCode != "" {
				t.Fatalf("first request: %+v", resp)
			}
			r := conn.NewRequest(proto.OpKill, generation, 10000, ref)
			edit(conn, r)
			conn.Send(r)
			if code := conn.Closed(); code != websocket.ClosePolicyViolation {
				t.Fatalf("close code %d, want %d", code, websocket.ClosePolicyViolation)
			}
			if calls := f.Calls(); len(calls) != 1 || calls[0] != "info" {
				t.Fatalf("provider calls %v: the mismatched request reached the provider", calls)
			}
		})
	}
}

func TestInvalidFrameCloses(t *testing.T) {
	core := fakecore.New(t, credential, false)
	startNode(t, core, newFake(nil), nil)
	conn := core.Accept()
	conn.Open(1)
	conn.SendRaw([]byte(`{"version":1,"type":"heartbeat_ack","connection_id":"` + conn.ConnectionID + `","owner_epoch":1,"Owner_Epoch":1}`))
	if code := conn.Closed(); code != websocket.ClosePolicyViolation {
		t.Fatalf("close code %d", code)
	}
}

func TestMalformedRequestIsInvalid(t *testing.T) {
	core := fakecore.New(t, credential, false)
	f := newFake(nil)
	startNode(t, core, f, nil)
	conn := core.Accept()
	conn.Open(1)

	// A command whose own timeout is out of range, and a create without
	// its bootstrap: valid envelopes, broken parameters.
	r := conn.NewRequest(proto.OpCommand, generation, 10000, ref)
	r.Command = &proto.Command{Argv: []string{"true"}, TimeoutMS: 0, MaxOutputBytes: 1}
	raw := strings.Replace(mustEncode(t, withCommandTimeout(r, 1)), `"timeout_ms":1,`, `"timeout_ms":0,`, 1)
	conn.SendRaw([]byte(raw))
	if resp := conn.Response(); resp.ID != r.ID || resp.ErrorCode != proto.ErrInvalid {
		t.Fatalf("malformed command: %+v", resp)
	}
	r2 := conn.NewRequest(proto.OpCreate, generation, 10000, ref)
	raw = mustEncode(t, withBootstrap(r2))
	raw = strings.Replace(raw, `,"bootstrap":{"image":"img"}`, ``, 1)
	conn.SendRaw([]byte(raw))
	if resp := conn.Response(); resp.ID != r2.ID || resp.ErrorCode != proto.ErrInvalid {
		t.Fatalf("create without bootstrap: %+v", resp)
	}
	// The connection goes on.
	r3 := conn.NewRequest(proto.OpInfo, generation, 10000, ref)
	conn.Send(r3)
	if resp := conn.Response(); resp.ID != r3.ID || resp.ErrorCode != "" || resp.Info == nil {
		t.Fatalf("info after malformed requests: %+v", resp)
	}
	if calls := f.Calls(); len(calls) != 1 {
		t.Fatalf("provider calls %v, want only the info", calls)
	}
}

func withCommandTimeout(r *proto.Request, ms int) *proto.Request {
	r.Command.TimeoutMS = ms
	return r
}

func withBootstrap(r *proto.Request) *proto.Request {
	r.Bootstrap = &proto.Bootstrap{Image: "img"}
	return r
}

func mustEncode(t *testing.T, f proto.Frame) string {
	t.Helper()
	b, err := proto.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOtherDeploymentGenerationIsInvalid(t *testing.T) {
	core := fakecore.New(t, credential, false)
	f := newFake(nil)
	startNode(t, core, f, nil)
	conn := core.Accept()
	conn.Open(1)
	r := conn.NewRequest(proto.OpInfo, generation+1, 10000, ref)
	conn.Send(r)
	if resp := conn.Response(); resp.ID != r.ID || resp.ErrorCode != proto.ErrInvalid || resp.Info != nil {
		t.Fatalf("response = %+v", resp)
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("provider calls %v", calls)
	}
}

func TestUndeclaredOperationIsUnsupportedBeforeTheProvider(t *testing.T) {
	core := fakecore.New(t, credential, false)
	const reason = "this fake cannot suspend"
	f := newFake(map[proto.Operation]string{proto.OpSuspend: reason})
	startNode(t, core, f, nil)
	conn := core.Accept()
	conn.Open(1)
	r := conn.NewRequest(proto.OpSuspend, generation, 10000, ref)
	r.Suspend = &proto.Suspend{Snapshot: proto.Snapshot{ID: "s1"}}
	conn.Send(r)
	resp := conn.Response()
	if resp.ErrorCode != proto.ErrUnsupported || resp.Unsupported == nil ||
		*resp.Unsupported != (proto.Unsupported{Operation: proto.OpSuspend, Reason: reason}) {
		t.Fatalf("response = %+v", resp)
	}
	declared := proto.Unsupported{Operation: proto.OpSuspend, Reason: reason}
	if out, code := proto.Classify(r, resp, &declared); out != proto.OutcomeUnsupported || code != proto.ErrUnsupported {
		t.Fatalf("Core would classify it as %v %q", out, code)
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("provider calls %v", calls)
	}
}

func TestBudgetRunsOutInTheQueue(t *testing.T) {
	core := fakecore.New(t, credential, false)
	f := newFake(nil)
	f.gate = make(chan struct{})
	startNode(t, core, f, func(c *agent.Config) { c.MaxActive = 1 })
	conn := core.Accept()
	conn.Open(1)

	blocker := conn.NewRequest(proto.OpKill, generation, 60000, ref)
	conn.Send(blocker)
	<-f.started // the only worker is busy
	queued := conn.NewRequest(proto.OpInfo, generation, 50, ref)
	conn.Send(queued)
	resp := conn.Response()
	if resp.ID != queued.ID || resp.ErrorCode != proto.ErrUnconfirmed {
		t.Fatalf("queued request past its budget: %+v", resp)
	}
	f.gate <- struct{}{}
	if resp := conn.Response(); resp.ID != blocker.ID || resp.ErrorCode != "" {
		t.Fatalf("blocker: %+v", resp)
	}
	if calls := f.Calls(); len(calls) != 1 || calls[0] != "kill" {
		t.Fatalf("provider calls %v: the expired request ran", calls)
	}
}

func TestFullQueueClosesAndActiveIsTheTrueCount(t *testing.T) {
	core := fakecore.New(t, credential, false)
	f := newFake(nil)
	f.gate = make(chan struct{})
	n := startNode(t, core, f, func(c *agent.Config) {
		c.MaxActive = 2
		c.Timers.Heartbeat = 10 * time.Millisecond
	})
	conn := core.Accept()
	conn.Open(1)

	for range agent.QueueCapacity {
		conn.Send(conn.NewRequest(proto.OpKill, generation, 60000, ref))
	}
	<-f.started
	<-f.started // both workers busy, 30 queued
	for hb := conn.Heartbeat(); hb.Health.ActiveOperations != agent.QueueCapacity; hb = conn.Heartbeat() {
	}
	if got := n.a.Active(); got != agent.QueueCapacity {
		t.Fatalf("Active() = %d", got)
	}
	conn.Send(conn.NewRequest(proto.OpKill, generation, 60000, ref))
	if code := conn.Closed(); code != websocket.ClosePolicyViolation {
		t.Fatalf("close code %d", code)
	}

	// The two running operations still count until they return; the 30
	// queued ones were dropped with their connection.
	next := core.Accept()
	next.Open(1)
	for hb := next.Heartbeat(); hb.Health.ActiveOperations != 2; hb = next.Heartbeat() {
	}
	f.gate <- struct{}{}
	f.gate <- struct{}{}
	for hb := next.Heartbeat(); hb.Health.ActiveOperations != 0; hb = next.Heartbeat() {
	}
	if calls := f.Calls(); len(calls) != 2 {
		t.Fatalf("%d operations ran, want the 2 that had started", len(calls))
	}
}

// TestReconnectGetsAQueueOfItsOwn: the queue bound is per connection, as
// Core counts it. 32 long operations of a connection still run after it
// closed; the next connection may still have 32 requests pending (Core's
// bound) without being closed "request queue full", and they run once
// workers free up; the 33rd pending request is still refused.
func TestReconnectGetsAQueueOfItsOwn(t *testing.T) {
	core := fakecore.New(t, credential, false)
	f := newFake(map[proto.Operation]string{proto.OpSuspend: "this fake cannot suspend"})
	f.gate = make(chan struct{})
	startNode(t, core, f, func(c *agent.Config) {
		c.MaxActive = proto.MaxActiveOperations
		c.Timers.Heartbeat = 10 * time.Millisecond
	})
	old := core.Accept()
	old.Open(1)
	for range agent.QueueCapacity {
		old.Send(old.NewRequest(proto.OpKill, generation, 60000, ref))
	}
	for range agent.QueueCapacity {
		<-f.started // every worker runs an operation of the old connection
	}
	old.Close()

	next := core.Accept()
	next.Open(1)
	ids := map[string]bool{}
	for range agent.QueueCapacity {
		r := next.NewRequest(proto.OpRenew, generation, 60000, ref)
		ids[r.ID] = true
		next.Send(r)
	}
	// A declared-unsupported request is answered by the node's reader at
	// once, without a queue slot: its answer proves the reader took the
	// 32 before it, while every worker still runs an old operation,
	// without closing the connection.
	probe := next.NewRequest(proto.OpSuspend, generation, 60000, ref)
	probe.Suspend = &proto.Suspend{Snapshot: proto.Snapshot{ID: "s1"}}
	next.Send(probe)
	if resp := next.Response(); resp.ID != probe.ID || resp.ErrorCode != proto.ErrUnsupported {
		t.Fatalf("response %+v, want the unsupported answer to the probe", resp)
	}
	// The old operations finish (their responses are dropped with their
	// connection), then the new ones run and are answered on the same
	// connection: it was not closed.
	for range agent.QueueCapacity {
		f.gate <- struct{}{}
	}
	for range agent.QueueCapacity {
		if op := <-f.started; op != proto.OpRenew {
			t.Fatalf("%s started, want the new connection's renews", op)
		}
		f.gate <- struct{}{}
	}
	for range agent.QueueCapacity {
		resp := next.Response()
		if !ids[resp.ID] || resp.ErrorCode != "" {
			t.Fatalf("response %+v, want a success for one of the new requests", resp)
		}
		delete(ids, resp.ID)
	}
	if calls := f.Calls(); len(calls) != 2*agent.QueueCapacity {
		t.Fatalf("%d operations ran, want %d", len(calls), 2*agent.QueueCapacity)
	}

	// The bound itself holds on the new connection: once its slots are
	// free, 32 pending are accepted and the 33rd closes it.
	for hb := next.Heartbeat(); hb.Health.ActiveOperations != 0; hb = next.Heartbeat() {
	}
	for range agent.QueueCapacity {
		next.Send(next.NewRequest(proto.OpKill, generation, 60000, ref))
	}
	for range agent.QueueCapacity {
		<-f.started
	}
	next.Send(next.NewRequest(proto.OpKill, generation, 60000, ref))
	if code := next.Closed(); code != websocket.ClosePolicyViolation {
		t.Fatalf("close code %d", code)
	}
	for range agent.QueueCapacity {
		f.gate <- struct{}{}
	}
}

func TestRequestsRunConcurrentlyUpToMaxActive(t *testing.T) {
	core := fakecore.New(t, credential, false)
	f := newFake(nil)
	f.gate = make(chan struct{})
	startNode(t, core, f, func(c *agent.Config) { c.MaxActive = 3 })
	conn := core.Accept()
	conn.Open(1)
	ids := map[string]bool{}
	for range 4 {
		r := conn.NewRequest(proto.OpRenew, generation, 60000, ref)
		ids[r.ID] = true
		conn.Send(r)
	}
	for range 3 {
		<-f.started
	}
	select {
	case op := <-f.started:
		t.Fatalf("a fourth operation (%s) started with max_active 3", op)
	default:
	}
	for range 4 {
		f.gate <- struct{}{}
		resp := conn.Response()
		if !ids[resp.ID] || resp.ErrorCode != "" || resp.Info == nil || resp.Info.Reference != ref {
			t.Fatalf("response %+v", resp)
		}
		delete(ids, resp.ID)
	}
}
