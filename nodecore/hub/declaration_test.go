package hub

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/operation"
	"github.com/sandgate/sandgate/node/proto"
)

// nodeM is a microsandbox node (no registered operation declaration).
const (
	nodeM   = "0e000000-0000-4000-8000-00000000000e"
	secretM = "secret-of-node-M-4c9d2a7b1e0f3c5d"
)

// joinMicrosandbox adds node M (microsandbox, enrolled generation 1, no
// generation management) to the credential file, connects it and returns
// after the welcome.
func (e *env) joinMicrosandbox() *testNode {
	e.t.Helper()
	rec := strings.Replace(nodeRecord(nodeM, secretM, true, false), "provider: docker", "provider: microsandbox", 1)
	writeFile(e.t, e.credPath, defaultNodes()+rec)
	waittest.Until(e.t, timeout, "node M to be enrolled", func() bool { _, ok := e.hub.Node(nodeM); return ok })
	secrets[nodeM] = secretM
	e.t.Cleanup(func() { delete(secrets, nodeM) })
	n := e.connect(nodeM)
	h := n.hello()
	h.Provider = proto.ProviderMicrosandbox
	n.send(h)
	w, ok := n.recv().(*proto.Welcome)
	if !ok {
		e.t.Fatal("node M: first frame from Core is not welcome")
	}
	n.welcome = w
	return n
}

// TestDispatchDeclaredUnsupported: an operation the node's provider
// declares unsupported (Docker: suspend, resume, delete_snapshot) is
// answered OutcomeUnsupported with the registered declaration's evidence
// and NotSent, before any other check (readiness, request validation):
// nothing is written and no sequence number is used. A provider without
// a registered declaration gets the operation sent, and its node's
// unsupported answer is unconfirmed.
func TestDispatchDeclaredUnsupported(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	decl, _ := operation.For(proto.ProviderDocker)
	for _, req := range []proto.Request{
		{DeploymentGeneration: 1, Operation: proto.OpSuspend, TimeoutMS: 5000, Reference: ref,
			Suspend: &proto.Suspend{Snapshot: proto.Snapshot{ID: "snap-1"}}},
		// Not ready (generation 9) and observe-only: the declaration
		// still comes first.
		{DeploymentGeneration: 9, Operation: proto.OpResume, TimeoutMS: 5000, Reference: ref,
			Resume: &proto.Resume{Snapshot: proto.Snapshot{ID: "snap-1"}}},
		{DeploymentGeneration: 1, Operation: proto.OpResume, TimeoutMS: 5000, Reference: ref,
			Resume: &proto.Resume{Snapshot: proto.Snapshot{ID: "snap-1"}, ObserveOnly: true}},
		// Malformed parameters are not even looked at.
		{DeploymentGeneration: 1, Operation: proto.OpDeleteSnapshot, TimeoutMS: 0, Reference: ref},
	} {
		res, err := e.hub.Dispatch(t.Context(), nodeA, req)
		want, _ := decl.Unsupported(req.Operation)
		if err != nil || res.Outcome != proto.OutcomeUnsupported || res.ErrorCode != proto.ErrUnsupported || !res.NotSent ||
			res.Unsupported == nil || *res.Unsupported != want || res.Request.ID != "" || res.Request.Sequence != 0 ||
			res.Response != nil {
			t.Fatalf("%s: %+v, %v", req.Operation, res, err)
		}
	}
	// Nothing was written: the next request on the wire has sequence 1.
	pending := e.dispatchAsync(nodeA, infoReq())
	got := a.request()
	if got.Sequence != 1 {
		t.Fatalf("next request has sequence %d, want 1", got.Sequence)
	}
	a.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID, Info: info()})
	if d := e.await(pending); d.res.NotSent || d.res.Unsupported != nil {
		t.Fatalf("a sent request: %+v", d.res)
	}

	// A microsandbox node has no registered declaration: suspend is sent,
	// and the node's evidence has no declaration to match, so it proves
	// nothing.
	m := e.joinMicrosandbox()
	req := proto.Request{DeploymentGeneration: 1, Operation: proto.OpSuspend, TimeoutMS: 5000, Reference: ref,
		Suspend: &proto.Suspend{Snapshot: proto.Snapshot{ID: "snap-1"}}}
	pending = e.dispatchAsync(nodeM, req)
	got = m.request()
	evidence := &proto.Unsupported{Operation: proto.OpSuspend, Reason: "not on this host"}
	m.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID, ErrorCode: proto.ErrUnsupported, Unsupported: evidence})
	d := e.await(pending)
	if d.err != nil || d.res.Outcome != proto.OutcomeUnknown || d.res.ErrorCode != proto.ErrUnconfirmed ||
		d.res.Reason != ReasonUnconfirmed || d.res.NotSent || d.res.Unsupported != nil ||
		d.res.Response == nil || *d.res.Response.Unsupported != *evidence {
		t.Fatalf("microsandbox suspend: %+v, %v", d.res, d.err)
	}
}
