package hub

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
)

// rotatedNodes is the credential file after node A's rotation: A's record
// holds only the digest of newSecret; B is untouched.
func rotatedNodes(newSecret string) string {
	return "nodes:\n" + nodeRecord(nodeA, newSecret, true, false) + nodeRecord(nodeB, secretB, true, false)
}

// rejoin connects as node id with secret (not the one in secrets), sends a
// valid hello and returns after the welcome.
func (e *env) rejoin(id, secret string) *testNode {
	e.t.Helper()
	ws, status, err := e.dial(id, secret)
	if err != nil {
		e.t.Fatalf("dial %s with its new credential: status %d, %v", id, status, err)
	}
	n := &testNode{t: e.t, id: id, ws: ws}
	e.t.Cleanup(func() { _ = ws.Close() })
	n.send(n.hello())
	w, ok := n.recv().(*proto.Welcome)
	if !ok {
		e.t.Fatalf("node %s: first frame from Core is not welcome", id)
	}
	n.welcome = w
	return n
}

// notYet fails the test if ch already holds a result.
func notYet(t *testing.T, ch <-chan dispatched, what string) {
	t.Helper()
	select {
	case d := <-ch:
		t.Fatalf("%s returned early: %+v, %v", what, d.res, d.err)
	default:
	}
}

// TestRotatedCredentialRetiresConnection follows a node credential
// rotation through the hub (docs/runbook.md "Node credentials"): once the
// node's record holds only the new digest, the node's next heartbeat
// retires its connection: the heartbeat is not acknowledged, the request
// already pending on it is answered there, no new request is written on
// it, and it is closed with 4003 as soon as nothing is pending. An
// operation sent meanwhile waits and goes out on the node's new
// connection (made with the new credential); another node's operations
// are served throughout; the old credential is refused at connect.
func TestRotatedCredentialRetiresConnection(t *testing.T) {
	e := newEnv(t)
	a, b := e.join(nodeA), e.join(nodeB)
	first := e.dispatchAsync(nodeA, infoReq())
	r1 := a.request()

	const newSecret = "node-a-rotated-credential-DO-NOT-LOG-9c1e"
	v := e.creds.Version()
	writeFile(t, e.credPath, rotatedNodes(newSecret))
	waittest.Until(t, timeout, "the credential file to be reloaded", func() bool { return e.creds.Version() > v })
	a.send(a.heartbeat(health(true, "")))
	waittest.Until(t, timeout, "A's connection to be retired", func() bool { return !e.status(nodeA).Online })

	second := e.dispatchAsync(nodeA, infoReq())
	// B is served while A is retiring.
	other := e.dispatchAsync(nodeB, infoReq())
	rb := b.request()
	b.send(&proto.Response{ID: rb.ID, ConnectionID: rb.ConnectionID, Info: info()})
	if d := e.await(other); d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("node B during A's rotation: %+v, %v", d.res, d.err)
	}

	// The pending request is answered on the retired connection; the
	// next frame A receives is the close, not the second request.
	a.send(&proto.Response{ID: r1.ID, ConnectionID: r1.ConnectionID, Info: info()})
	if d := e.await(first); d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("the request pending at the retirement: %+v, %v", d.res, d.err)
	}
	if reason := a.expectClose(CloseCredentialRejected); reason != "node credential replaced" {
		t.Errorf("close reason %q", reason)
	}
	_ = a.ws.Close()
	waittest.Until(t, timeout, "A to disconnect", func() bool { return e.status(nodeA).State == StateDisconnected })
	notYet(t, second, "the operation sent during the retirement")

	if _, status, err := e.dial(nodeA, secretA); err == nil || status != http.StatusUnauthorized {
		t.Fatalf("the old credential at connect: status %d, %v; want 401", status, err)
	}
	notYet(t, second, "the operation sent during the retirement")
	a2 := e.rejoin(nodeA, newSecret)
	r2 := a2.request()
	if r2.ConnectionID != a2.welcome.ConnectionID || r2.Sequence != 1 {
		t.Fatalf("the waiting request on the new connection: %+v", r2)
	}
	a2.send(&proto.Response{ID: r2.ID, ConnectionID: r2.ConnectionID, Info: info()})
	if d := e.await(second); d.err != nil || d.res.Outcome != proto.OutcomeSuccess || d.res.Request.ConnectionID != a2.welcome.ConnectionID {
		t.Fatalf("the operation that waited for the new connection: %+v, %v", d.res, d.err)
	}
	a2.beat(health(true, ""))
	e.assertNoSecretsLogged()
	for _, l := range e.logs.All() {
		if s := l.Message + " " + strings.Join(fieldValues(l.ContextMap()), " "); strings.Contains(s, newSecret) || strings.Contains(s, digestHex(newSecret)) {
			t.Errorf("the new credential or its digest was logged: %q", l.Message)
		}
	}
}

// fieldValues renders a log entry's fields.
func fieldValues(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// TestRetiredNodeReconnectWait: an operation for a node whose connection
// was retired waits at most Timers.Reconnect for the new connection, then
// is refused ErrOffline; once the reconnect window after the retired
// connection ended has passed, an operation is refused at once. A node
// that is disabled (not rotated) is closed at once and not waited for.
func TestRetiredNodeReconnectWait(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timers.Reconnect = 300 * time.Millisecond })
	a := e.join(nodeA)
	v := e.creds.Version()
	writeFile(t, e.credPath, rotatedNodes("another-credential-for-a"))
	waittest.Until(t, timeout, "the credential file to be reloaded", func() bool { return e.creds.Version() > v })
	a.send(a.heartbeat(health(true, "")))
	a.expectClose(CloseCredentialRejected) // nothing pending: closed at once
	_ = a.ws.Close()
	waittest.Until(t, timeout, "A to disconnect", func() bool { return e.status(nodeA).State == StateDisconnected })

	_, err := e.hub.Dispatch(t.Context(), nodeA, infoReq())
	if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "reconnect wait") {
		t.Fatalf("an operation in the reconnect window with no reconnect: %v, want ErrOffline after the wait", err)
	}
	e.advance(time.Second) // past the window on the presence clock
	if _, err := e.hub.Dispatch(t.Context(), nodeA, infoReq()); !errors.Is(err, ErrOffline) || strings.Contains(err.Error(), "reconnect wait") {
		t.Fatalf("after the reconnect window: %v, want ErrOffline at once", err)
	}

	b := e.join(nodeB)
	v = e.creds.Version()
	writeFile(t, e.credPath, "nodes:\n"+nodeRecord(nodeB, secretB, false, false))
	waittest.Until(t, timeout, "the credential file to be reloaded", func() bool { return e.creds.Version() > v })
	b.send(b.heartbeat(health(true, "")))
	b.expectClose(CloseCredentialRejected)
	_ = b.ws.Close()
	waittest.Until(t, timeout, "B to disconnect", func() bool { return e.status(nodeB).State == StateDisconnected })
	if _, err := e.hub.Dispatch(t.Context(), nodeB, infoReq()); !errors.Is(err, ErrOffline) || strings.Contains(err.Error(), "reconnect wait") {
		t.Fatalf("a disabled node: %v, want ErrOffline at once", err)
	}
}

// TestRetiredConnectionAuthorisesNoRetention: a generation-managing node
// whose connection was retired (its credential replaced) while a request
// is pending on it cannot use that connection for a retention request:
// no retention_ack (no drop authorised with a credential that is no
// longer valid), the connection is closed with 4003 instead, and the
// retention frames cannot keep the retired connection open past its
// heartbeat.
func TestRetiredConnectionAuthorisesNoRetention(t *testing.T) {
	e := newEnv(t)
	g := e.join(nodeG)
	pending := e.dispatchAsync(nodeG, infoReq())
	g.request()
	v := e.creds.Version()
	writeFile(t, e.credPath, "nodes:\n"+nodeRecord(nodeG, "node-g-rotated-credential-DO-NOT-LOG-71aa", true, true))
	waittest.Until(t, timeout, "the credential file to be reloaded", func() bool { return e.creds.Version() > v })
	g.send(g.heartbeat(health(true, "")))
	waittest.Until(t, timeout, "G's connection to be retired", func() bool { return !e.status(nodeG).Online })

	g.send(&proto.Retention{ID: "99999999-2222-4333-8444-55555555555a", Sequence: 1, ConnectionID: g.welcome.ConnectionID,
		OwnerEpoch: 7, Entries: []proto.RetentionEntry{{Generation: 1, SpecificationDigest: specDigest}}})
	if reason := g.expectClose(CloseCredentialRejected); reason != "node credential replaced" {
		t.Fatalf("close reason %q", reason)
	}
	_ = g.ws.Close()
	if d := e.await(pending); d.err == nil && d.res.Outcome == proto.OutcomeSuccess {
		t.Fatalf("the request pending on the closed connection succeeded: %+v", d.res)
	}
}

// TestReconnectWaitersAreBounded: at most maxWaiters operations wait for
// retired connections' successors at once (MaxReconnectWaiters, lowered
// to 1 here); the next is refused at once with ErrOffline naming the
// bound, and the one that waited is served on the node's new connection,
// after which a slot is free again.
func TestReconnectWaitersAreBounded(t *testing.T) {
	e := newEnv(t)
	e.hub.maxWaiters = 1
	a := e.join(nodeA)
	first := e.dispatchAsync(nodeA, infoReq())
	r1 := a.request()
	const newSecret = "node-a-rotated-credential-DO-NOT-LOG-5d2b"
	v := e.creds.Version()
	writeFile(t, e.credPath, rotatedNodes(newSecret))
	waittest.Until(t, timeout, "the credential file to be reloaded", func() bool { return e.creds.Version() > v })
	a.send(a.heartbeat(health(true, "")))
	waittest.Until(t, timeout, "A's connection to be retired", func() bool { return !e.status(nodeA).Online })

	waiting := e.dispatchAsync(nodeA, infoReq())
	waittest.Until(t, timeout, "an operation to wait", func() bool { return e.hub.waiters.Load() == 1 })
	_, err := e.hub.Dispatch(t.Context(), nodeA, infoReq())
	if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "already wait") {
		t.Fatalf("an operation over the bound: %v, want ErrOffline at once", err)
	}

	a.send(&proto.Response{ID: r1.ID, ConnectionID: r1.ConnectionID, Info: info()})
	e.await(first)
	a.expectClose(CloseCredentialRejected)
	_ = a.ws.Close()
	waittest.Until(t, timeout, "A to disconnect", func() bool { return e.status(nodeA).State == StateDisconnected })
	a2 := e.rejoin(nodeA, newSecret)
	r2 := a2.request()
	a2.send(&proto.Response{ID: r2.ID, ConnectionID: r2.ConnectionID, Info: info()})
	if d := e.await(waiting); d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("the operation that waited: %+v, %v", d.res, d.err)
	}
	if n := e.hub.waiters.Load(); n != 0 {
		t.Fatalf("%d waiters after the wait ended, want 0", n)
	}
}

// TestDisabledAndRotatedIsNotRetired: a node whose record is disabled and
// holds a new digest in the same change (a credential compromise
// answered by both) is closed at its heartbeat at once, with a request
// still pending (which ends not successful), not retired; an operation
// for it is refused at once rather than waiting for a connection that
// cannot come (docs/node-connect.md "Rotation": only an enrolled, enabled
// node is retired).
func TestDisabledAndRotatedIsNotRetired(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	pending := e.dispatchAsync(nodeA, infoReq())
	a.request()
	v := e.creds.Version()
	writeFile(t, e.credPath, "nodes:\n"+nodeRecord(nodeA, "node-a-replacement-DO-NOT-LOG-0b7e", false, false))
	waittest.Until(t, timeout, "the credential file to be reloaded", func() bool { return e.creds.Version() > v })
	a.send(a.heartbeat(health(true, "")))
	if reason := a.expectClose(CloseCredentialRejected); reason != "node credential rejected" {
		t.Fatalf("close reason %q, want the rejection (not the retirement)", reason)
	}
	_ = a.ws.Close()
	if d := e.await(pending); d.err == nil && d.res.Outcome == proto.OutcomeSuccess {
		t.Fatalf("the request pending on the closed connection succeeded: %+v", d.res)
	}
	waittest.Until(t, timeout, "A to disconnect", func() bool { return e.status(nodeA).State == StateDisconnected })
	if _, err := e.hub.Dispatch(t.Context(), nodeA, infoReq()); !errors.Is(err, ErrOffline) || strings.Contains(err.Error(), "reconnect wait") {
		t.Fatalf("a disabled node: %v, want ErrOffline at once", err)
	}
}
