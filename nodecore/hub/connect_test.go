package hub

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
)

// TestConnectRejectedCredential401: a missing, wrong, unknown-node or
// disabled-node credential is refused with 401 before the upgrade, and no
// slot is taken.
func TestConnectRejectedCredential401(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ name, id, secret string }{
		{"missing", nodeA, ""},
		{"wrong", nodeA, secretB},
		{"unknown node", "0e000000-0000-4000-8000-00000000000e", secretA},
		{"disabled node", nodeD, secretD},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, status, err := e.dial(tc.id, tc.secret)
			if err == nil || status != http.StatusUnauthorized {
				t.Fatalf("dial: status %d, err %v; want 401", status, err)
			}
		})
	}
	// The refusals reserved nothing: A still connects.
	e.join(nodeA)
}

// TestConnectBadRequest: a malformed node_id is 400 and another method is
// 405, both before the upgrade.
func TestConnectBadRequest(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"", "not-a-uuid", strings.ToUpper(nodeA)} {
		if _, status, _ := e.dial(id, secretA); status != http.StatusBadRequest {
			t.Errorf("node_id %q: status %d, want 400", id, status)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+ConnectPath+"?node_id="+nodeA, nil)
	req.Header.Set("Authorization", "Bearer "+secretA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
		t.Fatalf("POST: status %d, Allow %q; want 405, GET", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// TestSecondConnection409: while a connection of a node is connecting
// (upgraded, no hello yet), live, or closing (Core's close frame sent, the
// node's answer not yet received), a second connection of the same node
// gets 409; once the first has fully closed, the node connects again.
// Another node is unaffected.
func TestSecondConnection409(t *testing.T) {
	// A close grace longer than the test: the closing state ends when the
	// node answers the close frame, not by the clock.
	e := newEnv(t, func(c *Config) { c.Timers.CloseGrace = 2 * timeout })
	busy := func(when string) {
		t.Helper()
		if _, status, err := e.dial(nodeA, secretA); status != http.StatusConflict {
			t.Fatalf("%s: second dial: status %d, err %v; want 409", when, status, err)
		}
	}
	first := e.connect(nodeA)
	waittest.Until(t, timeout, "the first connection to be connecting", func() bool { return e.status(nodeA).State == StateConnecting })
	busy("connecting")

	first.send(first.hello())
	if _, ok := first.recv().(*proto.Welcome); !ok {
		t.Fatal("no welcome")
	}
	busy("live")
	e.join(nodeB) // other nodes are independent

	// An invalid frame makes Core close; the node does not read yet, so
	// Core waits in state closing.
	first.sendRaw([]byte(`{"version":1,"type":"heartbeat","bogus":true}`))
	waittest.Until(t, timeout, "the first connection to be closing", func() bool { return e.status(nodeA).State == StateClosing })
	busy("closing")

	first.expectClose(CloseProtocolError) // gorilla answers the close frame
	waittest.Until(t, timeout, "the first connection to end", func() bool { return e.status(nodeA).State == StateDisconnected })
	e.join(nodeA)
}

// TestHelloTimeout: no hello within the hello timeout closes with 4000.
func TestHelloTimeout(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timers.Hello = 100 * time.Millisecond })
	n := e.connect(nodeA)
	n.expectClose(CloseHelloTimeout)
	waittest.Until(t, timeout, "the slot to be released", func() bool { return e.status(nodeA).State == StateDisconnected })
	if s := e.status(nodeA); s.CloseCode != CloseHelloTimeout || s.Online {
		t.Fatalf("status after hello timeout = %+v", s)
	}
}

// TestHelloIdentityMismatch: each identity member of hello must match the
// authenticated node's enrolment; a mismatch closes with 4002 naming the
// member.
func TestHelloIdentityMismatch(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		member string
		change func(*proto.Hello)
	}{
		{"node_id", func(h *proto.Hello) { h.NodeID = nodeB }},
		{"installation_id", func(h *proto.Hello) { h.InstallationID = "22222222-2222-4333-8444-555555555555" }},
		{"provider", func(h *proto.Hello) { h.Provider = proto.ProviderMicrosandbox }},
		{"backend_fingerprint", func(h *proto.Hello) { h.BackendFingerprint = strings.Repeat("e", 64) }},
		{"deployment_generation", func(h *proto.Hello) { h.DeploymentGeneration = 2 }},
		{"specification_digest", func(h *proto.Hello) { h.SpecificationDigest = spec2Digest }},
		{"generation_management", func(h *proto.Hello) { h.GenerationManagement = true }},
	} {
		t.Run(tc.member, func(t *testing.T) {
			n := e.connect(nodeA)
			h := n.hello()
			tc.change(h)
			n.send(h)
			if reason := n.expectClose(CloseIdentityMismatch); !strings.HasSuffix(reason, ": "+tc.member) {
				t.Errorf("close reason %q does not name %s", reason, tc.member)
			}
			waittest.Until(t, timeout, "the slot to be released", func() bool { return e.status(nodeA).State == StateDisconnected })
		})
	}
}

// TestFirstFrameMustBeHello: a valid frame of another type first closes
// with 1002.
func TestFirstFrameMustBeHello(t *testing.T) {
	e := newEnv(t)
	n := e.connect(nodeA)
	n.send(&proto.Heartbeat{ConnectionID: inst, OwnerEpoch: 7, Health: health(true, "")})
	if reason := n.expectClose(CloseProtocolError); reason != "the first frame must be hello, not heartbeat" {
		t.Fatalf("reason %q", reason)
	}
}

// TestWelcome: welcome carries a new connection_id per connection and the
// current owner epoch; deployment only for a generation-managing node.
func TestWelcome(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	if !proto.IsUUID(a.welcome.ConnectionID) || a.welcome.OwnerEpoch != 7 || a.welcome.Deployment != nil {
		t.Fatalf("welcome to A = %+v", a.welcome)
	}
	g := e.join(nodeG)
	d := g.welcome.Deployment
	if d == nil || d.Generation != 2 || d.SpecificationDigest != spec2Digest || d.ServingGeneration == nil || *d.ServingGeneration != 1 {
		t.Fatalf("welcome to G has deployment %+v", d)
	}
	if g.welcome.ConnectionID == a.welcome.ConnectionID {
		t.Fatal("two connections share a connection_id")
	}
	first := a.welcome.ConnectionID
	_ = a.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""), time.Now().Add(timeout))
	waittest.Until(t, timeout, "A to disconnect", func() bool { return e.status(nodeA).State == StateDisconnected })
	if again := e.join(nodeA); again.welcome.ConnectionID == first {
		t.Fatal("a reconnection reused the connection_id")
	}
	s := e.status(nodeA)
	if !s.Online || s.ConnectionID == first || s.OwnerEpoch != 7 || s.Hello == nil || s.Hello.MaxActive != 8 {
		t.Fatalf("status after reconnect = %+v", s)
	}
}

// TestHeartbeatAckAndHealth: every heartbeat is answered with
// heartbeat_ack (deployment for generation-managing nodes only); the last
// health is recorded, an unknown diagnostic stored as
// provider_unavailable and a known one kept.
func TestHeartbeatAckAndHealth(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	ack := a.beat(health(false, "docker_unreachable"))
	if ack.ConnectionID != a.welcome.ConnectionID || ack.OwnerEpoch != 7 || ack.Deployment != nil {
		t.Fatalf("ack = %+v", ack)
	}
	if h := e.status(nodeA).Health; h == nil || h.ProviderReady || h.Diagnostic != "docker_unreachable" {
		t.Fatalf("health = %+v", h)
	}
	a.beat(health(false, "flux_capacitor_melted"))
	if h := e.status(nodeA).Health; h.Diagnostic != proto.DiagProviderUnavailable {
		t.Fatalf("unknown diagnostic stored as %q, want provider_unavailable", h.Diagnostic)
	}
	hb := health(true, "")
	hb.ActiveOperations = 3
	a.beat(hb)
	if h := e.status(nodeA).Health; !h.ProviderReady || h.Diagnostic != "" || h.ActiveOperations != 3 {
		t.Fatalf("health = %+v", h)
	}

	g := e.join(nodeG)
	hbG := g.heartbeat(health(false, ""))
	hbG.Generations = []proto.GenerationObservation{
		{Generation: 2, SpecificationDigest: spec2Digest, State: proto.GenerationFailed, Diagnostic: "not_a_known_code"},
	}
	g.send(hbG)
	ackG := g.recv().(*proto.HeartbeatAck)
	if ackG.Deployment == nil || ackG.Deployment.Generation != 2 {
		t.Fatalf("ack to G = %+v", ackG)
	}
	gens := e.status(nodeG).Generations
	if len(gens) != 2 || gens[0].Generation != 1 || gens[0].State != proto.GenerationReady ||
		gens[1].State != proto.GenerationFailed || gens[1].Diagnostic != proto.DiagProviderUnavailable {
		t.Fatalf("generations = %+v; want 1 ready (from hello) and 2 failed with provider_unavailable", gens)
	}
}

// TestHeartbeatReauthenticates: revoking the node's credential in the file
// (disabling it, or replacing its digest) closes the connection at the
// next heartbeat with 4003; other nodes keep their connections.
func TestHeartbeatReauthenticates(t *testing.T) {
	for _, tc := range []struct{ name, nodes string }{
		{"disabled", "nodes:\n" + nodeRecord(nodeA, secretA, false, false) + nodeRecord(nodeB, secretB, true, false)},
		{"rotated", "nodes:\n" + nodeRecord(nodeA, "a-new-credential", true, false) + nodeRecord(nodeB, secretB, true, false)},
		{"removed", "nodes:\n" + nodeRecord(nodeB, secretB, true, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			a, b := e.join(nodeA), e.join(nodeB)
			a.beat(health(true, ""))
			v := e.creds.Version()
			writeFile(t, e.credPath, tc.nodes)
			waittest.Until(t, timeout, "the credential file to be reloaded", func() bool { return e.creds.Version() > v })
			a.send(a.heartbeat(health(true, "")))
			a.expectClose(CloseCredentialRejected)
			b.beat(health(true, ""))
		})
	}
}

// TestEnrolmentChangeCloses: a changed enrolment (here the installation)
// closes the connection at the next heartbeat with 4002.
func TestEnrolmentChangeCloses(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	v := e.creds.Version()
	writeFile(t, e.credPath, "nodes:\n"+strings.Replace(nodeRecord(nodeA, secretA, true, false), inst, "33333333-2222-4333-8444-555555555555", 1))
	waittest.Until(t, timeout, "the credential file to be reloaded", func() bool { return e.creds.Version() > v })
	a.send(a.heartbeat(health(true, "")))
	a.expectClose(CloseIdentityMismatch)
}

// TestHeartbeatEnvelope: a heartbeat for another connection_id closes with
// 1002, one with another owner epoch with 4004.
func TestHeartbeatEnvelope(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	hb := a.heartbeat(health(true, ""))
	hb.ConnectionID = "99999999-2222-4333-8444-555555555555"
	a.send(hb)
	a.expectClose(CloseProtocolError)

	b := e.join(nodeB)
	hb = b.heartbeat(health(true, ""))
	hb.OwnerEpoch = 8
	b.send(hb)
	b.expectClose(CloseEpochMismatch)
}

// TestOwnerEpochSuperseded: after Configure raises the owner epoch, a
// connection welcomed under the old one is no longer online and is closed
// at its next heartbeat with 4005; reconnecting gets the new epoch. The
// epoch may not decrease.
func TestOwnerEpochSuperseded(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	if !e.status(nodeA).Online {
		t.Fatal("not online after welcome")
	}
	cfg := e.cfg
	cfg.OwnerEpoch = 8
	if err := e.hub.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if e.status(nodeA).Online {
		t.Fatal("online under a superseded epoch")
	}
	a.send(a.heartbeat(health(true, "")))
	a.expectClose(CloseEpochSuperseded)
	waittest.Until(t, timeout, "A to disconnect", func() bool { return e.status(nodeA).State == StateDisconnected })
	if again := e.join(nodeA); again.welcome.OwnerEpoch != 8 {
		t.Fatalf("welcome epoch %d, want 8", again.welcome.OwnerEpoch)
	}
	cfg.OwnerEpoch = 7
	if err := e.hub.Configure(cfg); err == nil || !strings.Contains(err.Error(), "may not decrease") {
		t.Fatalf("Configure with a lower epoch: %v", err)
	}
}

// TestIdleTimeout: no frame within the idle timeout closes with 4001.
// WebSocket pings are not protocol frames and do not count.
func TestIdleTimeout(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timers.Idle = 150 * time.Millisecond })
	a := e.join(nodeA)
	_ = a.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(timeout))
	a.expectClose(CloseIdleTimeout)
	waittest.Until(t, timeout, "A to disconnect", func() bool { return e.status(nodeA).State == StateDisconnected })
	if s := e.status(nodeA); s.Online || s.CloseCode != CloseIdleTimeout || s.DisconnectedAt == nil || s.Health == nil {
		t.Fatalf("status after idle timeout = %+v (the last health must be kept)", s)
	}
}

// TestOnlineWindow: a node is online while connected under the current
// epoch and its last heartbeat is younger than the online window; it goes
// offline when the window passes while the connection is still live, and
// back online with the next heartbeat. (The hub's presence clock is
// advanced; nothing waits.)
func TestOnlineWindow(t *testing.T) {
	e := newEnv(t)
	e.freeze()
	a := e.join(nodeA)
	if !e.status(nodeA).Online {
		t.Fatal("not online after hello")
	}
	e.advance(e.cfg.Timers.Online - time.Millisecond)
	if !e.status(nodeA).Online {
		t.Fatal("offline before the window passed")
	}
	e.advance(time.Millisecond)
	s := e.status(nodeA)
	if s.Online || s.State != StateLive {
		t.Fatalf("status = %+v; want live but not online once the window passed", s)
	}
	if _, err := e.hub.Dispatch(t.Context(), nodeA, infoReq()); !errors.Is(err, ErrOffline) {
		t.Fatalf("Dispatch to an offline node: %v, want ErrOffline", err)
	}
	a.beat(health(true, ""))
	if s := e.status(nodeA); !s.Online {
		t.Fatalf("status = %+v; want online after a heartbeat", s)
	}
}

// TestInvalidFrameCloses: each invalid frame closes the connection with
// 1002 (1003 for binary) and a reason naming the node/proto rule; the close
// is logged with the same reason and no frame contents.
func TestInvalidFrameCloses(t *testing.T) {
	big := `{"version":1,"type":"heartbeat","x":"` + strings.Repeat("a", proto.MaxControlFrame) + `"}`
	for _, tc := range []struct {
		name   string
		frame  []byte
		binary bool
		code   int
		reason string
	}{
		{"not JSON", []byte("hello?"), false, CloseProtocolError, "invalid frame: invalid JSON syntax"},
		{"wrong version", []byte(`{"version":2,"type":"heartbeat"}`), false, CloseProtocolError, "invalid frame: unsupported protocol version at /version: version is not 1"},
		{"unknown member", nil, false, CloseProtocolError, "invalid frame: unknown member at /secret_value: the object defines no such member"},
		{"case variant", []byte(`{"version":1,"type":"heartbeat","Connection_ID":"SECRET-IN-FRAME"}`), false, CloseProtocolError, "invalid frame: unknown member at /Connection_ID: member names are case-sensitive"},
		{"duplicate member", []byte(`{"version":1,"type":"heartbeat","type":"heartbeat"}`), false, CloseProtocolError, "invalid frame: duplicate member"},
		{"control frame over 32 KiB", []byte(big), false, CloseMessageTooBig, "message over the 32 KiB control frame limit"},
		{"unexpected request", nil, false, CloseProtocolError, "unexpected request frame from a node"},
		{"second hello", nil, false, CloseProtocolError, "unexpected hello frame from a node"},
		{"binary", []byte{1, 2, 3}, true, CloseUnsupportedData, "binary message: frames are JSON text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			a := e.join(nodeA)
			switch {
			case tc.name == "unexpected request":
				r := infoReq()
				r.ID, r.Sequence, r.ConnectionID, r.OwnerEpoch = inst, 1, a.welcome.ConnectionID, 7
				a.send(&r)
			case tc.name == "second hello":
				a.send(a.hello())
			case tc.name == "unknown member":
				b, err := proto.Encode(a.heartbeat(health(true, "")))
				if err != nil {
					t.Fatal(err)
				}
				a.sendRaw(append(b[:len(b)-1], `,"secret_value":"SECRET-IN-FRAME"}`...))
			case tc.binary:
				_ = a.ws.WriteMessage(websocket.BinaryMessage, tc.frame)
			default:
				a.sendRaw(tc.frame)
			}
			reason := a.expectClose(tc.code)
			if !strings.HasPrefix(reason, tc.reason) {
				t.Fatalf("close reason %q, want prefix %q", reason, tc.reason)
			}
			waittest.Until(t, timeout, "the close to be logged", func() bool {
				return e.logs.FilterMessage("node connection closed").Len() > 0
			})
			entry := e.logs.FilterMessage("node connection closed").All()[0]
			fields := entry.ContextMap()
			if fields["close_code"] != int64(tc.code) || !strings.HasPrefix(fields["reason"].(string), tc.reason) {
				t.Errorf("log fields %v", fields)
			}
			for _, l := range e.logs.All() {
				if s := l.Message + " " + strings.Join(mapValues(l.ContextMap()), " "); strings.Contains(s, "SECRET-IN-FRAME") || strings.Contains(s, "aaaaaaaa") {
					t.Errorf("log line carries frame contents: %s", s)
				}
			}
		})
	}
}

func mapValues(m map[string]any) []string {
	var out []string
	for k, v := range m {
		if s, ok := v.(string); ok {
			out = append(out, k+"="+s)
		}
	}
	return out
}

// TestReadLimit: with a request pending (the only time a message may be
// over 32 KiB), a message over proto.MaxRequestFrame closes with 1009 and
// the pending request ends unknown/disconnected.
func TestReadLimit(t *testing.T) {
	// The node writes 72 MiB; under -race on a loaded machine that took
	// longer than the test timers' 5 s idle deadline, which then closed
	// the connection with a read timeout instead of the limit's code.
	e := newEnv(t, func(c *Config) { c.Timers.Idle = time.Minute })
	a := e.join(nodeA)
	req := infoReq()
	req.TimeoutMS = 120000 // the close, not the request's timeout, ends the wait
	pending := e.dispatchAsync(nodeA, req)
	a.request()
	a.sendLarge(proto.MaxRequestFrame, proto.TypeResponse)
	if reason := a.expectCloseWithin(CloseMessageTooBig, 2*time.Minute); !strings.Contains(reason, "72 MiB") {
		t.Fatalf("reason %q", reason)
	}
	if d := e.await(pending); d.err != nil || d.res.Reason != ReasonDisconnected {
		t.Fatalf("pending: %+v, %v", d.res, d.err)
	}
}

// TestHubClose: Close sends 1001 to every node and ends pending
// operations with outcome unknown; later connects get 503.
func TestHubClose(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	pending := e.dispatchAsync(nodeA, infoReq())
	a.request()
	closed := make(chan struct{})
	go func() { _ = e.hub.Close(); close(closed) }()
	a.expectClose(CloseGoingAway)
	<-closed
	d := e.await(pending)
	if d.err != nil || d.res.Outcome != proto.OutcomeUnknown || d.res.Reason != ReasonDisconnected {
		t.Fatalf("pending after Close = %+v, %v", d.res, d.err)
	}
	if _, status, _ := e.dial(nodeA, secretA); status != http.StatusServiceUnavailable {
		t.Fatalf("dial after Close: %d, want 503", status)
	}
}

// TestConfigureKeepsConnections: replacing the configuration (a new
// deployment, other timers) keeps live connections, and the next ack
// carries the new deployment.
func TestConfigureKeepsConnections(t *testing.T) {
	e := newEnv(t)
	g := e.join(nodeG)
	cfg := e.cfg
	cfg.Deployment = &proto.Deployment{Generation: 3, SpecificationDigest: specDigest}
	cfg.Timers.Idle = 4 * time.Second
	if err := e.hub.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	ack := g.beat(health(false, ""))
	if ack.ConnectionID != g.welcome.ConnectionID || ack.Deployment == nil || ack.Deployment.Generation != 3 || ack.Deployment.ServingGeneration != nil {
		t.Fatalf("ack after Configure = %+v", ack)
	}
}

// TestGenerationManagingNodeNeedsDeployment: without a deployment a
// generation-managing node is closed with 4006 after its hello.
func TestGenerationManagingNodeNeedsDeployment(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Deployment = nil })
	g := e.connect(nodeG)
	g.send(g.hello())
	g.expectClose(CloseNoDeployment)
	e.join(nodeA)
}

// TestNodesList: Nodes lists enrolled nodes (connected or not) with their
// presence, sorted by ID.
func TestNodesList(t *testing.T) {
	e := newEnv(t)
	e.join(nodeB)
	nodes := e.hub.Nodes()
	if len(nodes) != 4 {
		t.Fatalf("%d nodes, want the 4 enrolled", len(nodes))
	}
	want := []string{nodeG, nodeA, nodeB, nodeD}
	for i, n := range nodes {
		if n.NodeID != want[i] || !n.Enrolled {
			t.Fatalf("nodes[%d] = %+v, want %s enrolled", i, n, want[i])
		}
		if online := n.NodeID == nodeB; n.Online != online {
			t.Errorf("%s online = %v", n.NodeID, n.Online)
		}
	}
	if _, ok := e.hub.Node("0e000000-0000-4000-8000-00000000000e"); ok {
		t.Error("an unknown node has a status")
	}
}

// TestApplyUndo: undo puts back the replaced settings only while nothing
// else was applied since, never lowers the owner epoch, and never leaves
// the hub unconfigured.
func TestApplyUndo(t *testing.T) {
	e := newEnv(t)
	first := e.hub.config()
	b := e.cfg
	b.OwnerEpoch = 9
	b.Deployment = nil
	undoB, err := e.hub.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	undoB()
	got := e.hub.config()
	if got.OwnerEpoch != 9 || got.Deployment == nil || got.Deployment.Generation != first.Deployment.Generation {
		t.Fatalf("after undo: epoch %d, deployment %+v; want the first settings with epoch 9", got.OwnerEpoch, got.Deployment)
	}
	c := e.cfg
	c.OwnerEpoch = 10
	undoC, err := e.hub.Apply(c)
	if err != nil {
		t.Fatal(err)
	}
	d := e.cfg
	d.OwnerEpoch = 11
	if _, err := e.hub.Apply(d); err != nil {
		t.Fatal(err)
	}
	undoC() // D was applied since: nothing happens
	if got := e.hub.config(); got.OwnerEpoch != 11 {
		t.Fatalf("undo of a replaced apply changed the settings: epoch %d", got.OwnerEpoch)
	}
	fresh := New()
	undo, err := fresh.Apply(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	undo()
	if !fresh.Configured() {
		t.Fatal("undo of the first apply left the hub unconfigured")
	}
	if _, err := fresh.Apply(Config{OwnerEpoch: 1}); err == nil {
		t.Fatal("Apply without a credential store succeeded")
	}
}

// TestRetentionUnderSupersededEpoch: after the owner epoch moved on, a
// retention is not answered (nothing may be dropped) and the connection
// is closed with 4005.
func TestRetentionUnderSupersededEpoch(t *testing.T) {
	e := newEnv(t)
	g := e.join(nodeG)
	cfg := e.cfg
	cfg.OwnerEpoch = 8
	if err := e.hub.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	g.send(&proto.Retention{ID: "99999999-2222-4333-8444-555555555555", Sequence: 1, ConnectionID: g.welcome.ConnectionID,
		OwnerEpoch: 7, Entries: []proto.RetentionEntry{{Generation: 5, SpecificationDigest: specDigest}}})
	g.expectClose(CloseEpochSuperseded)
}
