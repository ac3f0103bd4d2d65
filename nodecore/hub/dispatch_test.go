package hub

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
)

// TestDispatchRequestAndSuccess: a request carries a new UUID id, sequence
// 1, 2, … on the connection, the welcome's connection_id and owner_epoch,
// the deployment_generation, timeout_ms and exact reference; a success
// response gives OutcomeSuccess with the operation's result.
func TestDispatchRequestAndSuccess(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	ids := map[string]bool{}
	for seq := uint64(1); seq <= 3; seq++ {
		req := infoReq()
		req.TimeoutMS = 1234
		pending := e.dispatchAsync(nodeA, req)
		got := a.request()
		if !proto.IsUUID(got.ID) || ids[got.ID] || got.Sequence != seq || got.ConnectionID != a.welcome.ConnectionID ||
			got.OwnerEpoch != 7 || got.DeploymentGeneration != 1 || got.Operation != proto.OpInfo ||
			got.TimeoutMS != 1234 || got.Reference != ref {
			t.Fatalf("request %d on the wire = %+v", seq, got)
		}
		ids[got.ID] = true
		a.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID, Info: info()})
		d := e.await(pending)
		if d.err != nil || d.res.Outcome != proto.OutcomeSuccess || d.res.ErrorCode != "" || d.res.Reason != "" ||
			d.res.Response == nil || d.res.Response.Info == nil || d.res.Request.ID != got.ID || d.res.Request.Sequence != seq {
			t.Fatalf("result %d = %+v, %v", seq, d.res, d.err)
		}
	}
	// kill has no result.
	req := infoReq()
	req.Operation = proto.OpKill
	pending := e.dispatchAsync(nodeA, req)
	got := a.request()
	a.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID})
	if d := e.await(pending); d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("kill = %+v, %v", d.res, d.err)
	}
	// A new connection starts again at sequence 1.
	_ = a.ws.Close()
	waittest.Until(t, timeout, "A to disconnect", func() bool { return e.status(nodeA).State == StateDisconnected })
	a = e.join(nodeA)
	pending = e.dispatchAsync(nodeA, infoReq())
	if got := a.request(); got.Sequence != 1 || got.ConnectionID != a.welcome.ConnectionID {
		t.Fatalf("first request of a new connection = %+v", got)
	}
	_ = a.ws.Close()
	e.await(pending)
}

// TestDispatchSequenceOrder: concurrent dispatches reach the wire with
// sequences 1..n in order, each exactly once.
func TestDispatchSequenceOrder(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	const n = 30
	var wg sync.WaitGroup
	results := make(chan dispatched, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.hub.Dispatch(t.Context(), nodeA, infoReq())
			results <- dispatched{r, err}
		}()
	}
	for seq := uint64(1); seq <= n; seq++ {
		got := a.request()
		if got.Sequence != seq {
			t.Fatalf("request %d on the wire has sequence %d", seq, got.Sequence)
		}
		a.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID, Info: info()})
	}
	wg.Wait()
	close(results)
	for d := range results {
		if d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
			t.Fatalf("result %+v, %v", d.res, d.err)
		}
	}
}

// TestDispatchPendingLimit: with 32 requests pending the 33rd is refused
// with ErrTooManyPending and nothing is written: the connection stays,
// the next frame the node receives is its heartbeat_ack, and once one
// answer arrives a new request gets sequence 33.
func TestDispatchPendingLimit(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	var reqs []*proto.Request
	var pending []<-chan dispatched
	for range proto.MaxPendingRequests {
		pending = append(pending, e.dispatchAsync(nodeA, infoReq()))
		reqs = append(reqs, a.request())
	}
	if _, err := e.hub.Dispatch(t.Context(), nodeA, infoReq()); !errors.Is(err, ErrTooManyPending) {
		t.Fatalf("33rd Dispatch: %v, want ErrTooManyPending", err)
	}
	if s := e.status(nodeA); s.Pending != proto.MaxPendingRequests || !s.Online {
		t.Fatalf("status = %+v", s)
	}
	a.beat(health(true, "")) // nothing else was written before the ack
	a.send(&proto.Response{ID: reqs[0].ID, ConnectionID: reqs[0].ConnectionID, Info: info()})
	// The response is matched asynchronously: wait until its slot frees.
	e.await(pending[0])
	next := e.dispatchAsync(nodeA, infoReq())
	if got := a.request(); got.Sequence != proto.MaxPendingRequests+1 {
		t.Fatalf("next request has sequence %d, want 33", got.Sequence)
	}
	_ = a.ws.Close()
	e.await(next)
}

// TestResponseForNothingPending: a response whose id matches no pending
// request, or whose connection_id is not the connection's, closes the
// connection with 1002.
func TestResponseForNothingPending(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	a.send(&proto.Response{ID: "44444444-2222-4333-8444-555555555555", ConnectionID: a.welcome.ConnectionID, Info: info()})
	if reason := a.expectClose(CloseProtocolError); reason != "response for no pending request" {
		t.Fatalf("reason %q", reason)
	}

	b := e.join(nodeB)
	pending := e.dispatchAsync(nodeB, infoReq())
	got := b.request()
	b.send(&proto.Response{ID: got.ID, ConnectionID: "55555555-2222-4333-8444-555555555555", Info: info()})
	if reason := b.expectClose(CloseProtocolError); reason != "response for another connection" {
		t.Fatalf("reason %q", reason)
	}
	if d := e.await(pending); d.res.Outcome != proto.OutcomeUnknown || d.res.Reason != ReasonDisconnected {
		t.Fatalf("result = %+v", d.res)
	}
}

// TestDispatchOutcomes: failure codes, unsupported evidence and results
// are classified: a definite code is failed; unsupported evidence for an
// operation the Docker declaration supports (a Docker node answering
// create with unsupported{create,"x"}) or for another operation is
// unknown/unconfirmed, never a proven refusal; unconfirmed and
// unknown codes are unknown; a result that does not fit the operation is
// unknown; an info receipt on a failed create is returned; an info result
// or receipt of another deployment generation than the request's is
// unknown and no receipt.
func TestDispatchOutcomes(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	create := proto.Request{DeploymentGeneration: 1, Operation: proto.OpCreate, TimeoutMS: 5000, Reference: ref,
		Bootstrap: &proto.Bootstrap{Image: "busybox:latest"}}
	for _, tc := range []struct {
		name    string
		req     proto.Request
		resp    proto.Response
		outcome proto.Outcome
		code    proto.ErrorCode
		receipt bool
	}{
		{"not_found", infoReq(), proto.Response{ErrorCode: proto.ErrNotFound}, proto.OutcomeFailed, proto.ErrNotFound, false},
		{"ownership", infoReq(), proto.Response{ErrorCode: proto.ErrOwnership}, proto.OutcomeFailed, proto.ErrOwnership, false},
		// Docker's registered declaration supports info and create: the
		// node's evidence matches the request but not the declaration.
		{"unsupported, declared supported", infoReq(), proto.Response{ErrorCode: proto.ErrUnsupported,
			Unsupported: &proto.Unsupported{Operation: proto.OpInfo, Reason: "info is not offered by this provider"}},
			proto.OutcomeUnknown, proto.ErrUnconfirmed, false},
		{"unsupported create", create, proto.Response{ErrorCode: proto.ErrUnsupported,
			Unsupported: &proto.Unsupported{Operation: proto.OpCreate, Reason: "x"}},
			proto.OutcomeUnknown, proto.ErrUnconfirmed, false},
		{"unsupported, other operation", infoReq(), proto.Response{ErrorCode: proto.ErrUnsupported,
			Unsupported: &proto.Unsupported{Operation: proto.OpKill, Reason: "kill is not offered"}},
			proto.OutcomeUnknown, proto.ErrUnconfirmed, false},
		{"unconfirmed", infoReq(), proto.Response{ErrorCode: proto.ErrUnconfirmed}, proto.OutcomeUnknown, proto.ErrUnconfirmed, false},
		{"unknown code", infoReq(), proto.Response{ErrorCode: "disk_on_fire"}, proto.OutcomeUnknown, proto.ErrUnconfirmed, false},
		{"wrong result member", infoReq(), proto.Response{State: &proto.State{State: proto.StateRunning, Compute: 1}},
			proto.OutcomeUnknown, proto.ErrUnconfirmed, false},
		{"missing result", infoReq(), proto.Response{}, proto.OutcomeUnknown, proto.ErrUnconfirmed, false},
		{"create success", create, proto.Response{Info: info()}, proto.OutcomeSuccess, "", false},
		{"create exists with receipt", create, proto.Response{ErrorCode: proto.ErrExists, Info: info()},
			proto.OutcomeFailed, proto.ErrExists, true},
		// An answer about another deployment generation of the allocation
		// is not the answer about the request's: unknown, and no receipt.
		{"info of another generation", infoReq(), proto.Response{Info: otherGeneration(info())},
			proto.OutcomeUnknown, proto.ErrUnconfirmed, false},
		{"create success of another generation", create, proto.Response{Info: otherGeneration(info())},
			proto.OutcomeUnknown, proto.ErrUnconfirmed, false},
		{"create exists with a receipt of another generation", create, proto.Response{ErrorCode: proto.ErrExists, Info: otherGeneration(info())},
			proto.OutcomeFailed, proto.ErrExists, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pending := e.dispatchAsync(nodeA, tc.req)
			got := a.request()
			resp := tc.resp
			resp.ID, resp.ConnectionID = got.ID, got.ConnectionID
			a.send(&resp)
			d := e.await(pending)
			if d.err != nil || d.res.Outcome != tc.outcome || d.res.ErrorCode != tc.code || (d.res.Receipt != nil) != tc.receipt {
				t.Fatalf("result = %+v, %v; want %v %q receipt %v", d.res, d.err, tc.outcome, tc.code, tc.receipt)
			}
			if tc.outcome == proto.OutcomeUnknown && d.res.Reason != ReasonUnconfirmed {
				t.Errorf("reason %q, want unconfirmed", d.res.Reason)
			}
		})
	}
	a.beat(health(true, "")) // the connection is intact
}

// otherGeneration returns i with the next deployment generation.
func otherGeneration(i *proto.Info) *proto.Info {
	i.DeploymentGeneration++
	return i
}

// TestDispatchTimeout: no response within timeout_ms plus the grace gives
// OutcomeUnknown (timeout); the request stays pending until its late
// response arrives, which is dropped without closing the connection; it is
// never sent again.
func TestDispatchTimeout(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timers.ResponseGrace = 10 * time.Millisecond })
	a := e.join(nodeA)
	req := infoReq()
	req.TimeoutMS = 20
	pending := e.dispatchAsync(nodeA, req)
	got := a.request()
	d := e.await(pending)
	if d.err != nil || d.res.Outcome != proto.OutcomeUnknown || d.res.Reason != ReasonTimeout || d.res.Response != nil {
		t.Fatalf("result = %+v, %v", d.res, d.err)
	}
	if p := e.status(nodeA).Pending; p != 1 {
		t.Fatalf("pending = %d after the timeout, want 1 (the node still holds it)", p)
	}
	a.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID, Info: info()})
	a.beat(health(true, "")) // the late response did not close the connection, and no request was replayed
	if p := e.status(nodeA).Pending; p != 0 {
		t.Fatalf("pending = %d after the late response", p)
	}
}

// TestDispatchReusesCallsSafely: a dispatch's waiting state (its channel
// and timer) is reused once its response was received (package var
// calls): a reused timer still times out, and a late response to a
// timed-out request, whose state is never reused, does not reach the
// next dispatch.
func TestDispatchReusesCallsSafely(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timers.ResponseGrace = 10 * time.Millisecond })
	a := e.join(nodeA)
	answer := func(timeoutMS int) (*proto.Request, dispatched) {
		req := infoReq()
		req.TimeoutMS = timeoutMS
		pending := e.dispatchAsync(nodeA, req)
		got := a.request()
		a.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID, Info: info()})
		return got, e.await(pending)
	}
	if _, d := answer(10000); d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("first = %+v, %v", d.res, d.err)
	}
	req := infoReq()
	req.TimeoutMS = 20
	pending := e.dispatchAsync(nodeA, req)
	late := a.request()
	if d := e.await(pending); d.err != nil || d.res.Reason != ReasonTimeout {
		t.Fatalf("second = %+v, %v", d.res, d.err)
	}
	req = infoReq()
	req.TimeoutMS = 10000
	pending = e.dispatchAsync(nodeA, req)
	got := a.request()
	a.send(&proto.Response{ID: late.ID, ConnectionID: late.ConnectionID, Info: info()})
	a.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID, Info: info()})
	if d := e.await(pending); d.err != nil || d.res.Outcome != proto.OutcomeSuccess || d.res.Request.ID != got.ID {
		t.Fatalf("third = %+v, %v", d.res, d.err)
	}
	for range 20 {
		if got, d := answer(10000); d.err != nil || d.res.Outcome != proto.OutcomeSuccess || d.res.Request.ID != got.ID {
			t.Fatalf("later = %+v, %v", d.res, d.err)
		}
	}
}

// TestDispatchCancelled: the caller's context ending gives OutcomeUnknown
// (cancelled).
func TestDispatchCancelled(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	ctx, cancel := context.WithCancel(t.Context())
	ch := make(chan dispatched, 1)
	go func() {
		r, err := e.hub.Dispatch(ctx, nodeA, infoReq())
		ch <- dispatched{r, err}
	}()
	a.request()
	cancel()
	if d := e.await(ch); d.err != nil || d.res.Outcome != proto.OutcomeUnknown || d.res.Reason != ReasonCancelled {
		t.Fatalf("result = %+v, %v", d.res, d.err)
	}
}

// TestDispatchDisconnect: a disconnect before the response gives
// OutcomeUnknown (disconnected), and after reconnecting the request is not
// replayed.
func TestDispatchDisconnect(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	req := infoReq()
	req.Operation = proto.OpKill
	pending := e.dispatchAsync(nodeA, req)
	a.request()
	_ = a.ws.Close()
	if d := e.await(pending); d.err != nil || d.res.Outcome != proto.OutcomeUnknown || d.res.Reason != ReasonDisconnected {
		t.Fatalf("result = %+v, %v", d.res, d.err)
	}
	waittest.Until(t, timeout, "A to disconnect", func() bool { return e.status(nodeA).State == StateDisconnected })
	if _, err := e.hub.Dispatch(t.Context(), nodeA, req); !errors.Is(err, ErrOffline) {
		t.Fatalf("Dispatch while disconnected: %v, want ErrOffline", err)
	}
	a = e.join(nodeA)
	a.beat(health(true, "")) // the first frame after welcome is the ack: nothing replayed
}

// TestDispatchReadinessGate: create and a non-observe-only resume go only
// to a generation the node reports ready: for a node without generation
// management its enrolled generation while provider_ready; for a
// generation-managing node a generation whose latest observation is
// ready. Other operations and observe-only resume are not gated.
func TestDispatchReadinessGate(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	create := func(gen int64) proto.Request {
		return proto.Request{DeploymentGeneration: gen, Operation: proto.OpCreate, TimeoutMS: 5000, Reference: ref,
			Bootstrap: &proto.Bootstrap{Image: "busybox:latest"}}
	}
	resume := func(gen int64, observeOnly bool) proto.Request {
		return proto.Request{DeploymentGeneration: gen, Operation: proto.OpResume, TimeoutMS: 5000, Reference: ref,
			Resume: &proto.Resume{Snapshot: proto.Snapshot{ID: "snap-1"}, ObserveOnly: observeOnly}}
	}
	refused := func(node string, req proto.Request) {
		t.Helper()
		if _, err := e.hub.Dispatch(t.Context(), node, req); !errors.Is(err, ErrNotReady) {
			t.Fatalf("%s %s gen %d: %v, want ErrNotReady", node, req.Operation, req.DeploymentGeneration, err)
		}
	}
	sent := func(n *testNode, req proto.Request) {
		t.Helper()
		pending := e.dispatchAsync(n.id, req)
		got := n.request()
		n.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID, ErrorCode: proto.ErrNotFound})
		if d := e.await(pending); d.err != nil {
			t.Fatalf("%s %s gen %d: %v", n.id, req.Operation, req.DeploymentGeneration, d.err)
		}
	}

	sent(a, create(1))        // enrolled generation, provider ready
	refused(nodeA, create(2)) // not its generation
	a.beat(health(false, "docker_unreachable"))
	refused(nodeA, create(1))
	sent(a, infoReq()) // not gated

	// Docker declares resume unsupported (TestDispatchDeclaredUnsupported),
	// so the resume gate is shown on a microsandbox node, which has no
	// registered declaration.
	m := e.joinMicrosandbox()
	sent(m, resume(1, false))
	m.beat(health(false, "provider_unavailable"))
	refused(nodeM, resume(1, false))
	sent(m, resume(1, true)) // observe-only

	g := e.join(nodeG) // hello: generation 1 ready, 2 preparing
	sent(g, create(1))
	refused(nodeG, create(2))
	refused(nodeG, create(3)) // never observed
	hb := g.heartbeat(health(false, ""))
	hb.Generations = []proto.GenerationObservation{{Generation: 2, SpecificationDigest: spec2Digest, State: proto.GenerationReady}}
	g.send(hb)
	g.recv()
	sent(g, create(2))
	sent(g, create(1)) // not in the last heartbeat: its last observation still counts
}

// TestDispatchInvalidRequest: a request that does not validate is refused
// with ErrInvalidRequest (wrapping the node/proto error), nothing is
// written and no sequence number is used.
func TestDispatchInvalidRequest(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	for _, req := range []proto.Request{
		{DeploymentGeneration: 1, Operation: proto.OpInfo, TimeoutMS: 0, Reference: ref},
		{DeploymentGeneration: 1, Operation: proto.OpInfo, TimeoutMS: 120001, Reference: ref},
		{DeploymentGeneration: 1, Operation: "explode", TimeoutMS: 5, Reference: ref},
		{DeploymentGeneration: 1, Operation: proto.OpKill, TimeoutMS: 5, Reference: proto.Reference{TenantID: "t"}},
		{DeploymentGeneration: 1, Operation: proto.OpCommand, TimeoutMS: 5, Reference: ref},
	} {
		_, err := e.hub.Dispatch(t.Context(), nodeA, req)
		var pe *proto.Error
		if !errors.Is(err, ErrInvalidRequest) || !errors.As(err, &pe) {
			t.Fatalf("Dispatch(%+v): %v, want ErrInvalidRequest with a *proto.Error", req, err)
		}
	}
	pending := e.dispatchAsync(nodeA, infoReq())
	if got := a.request(); got.Sequence != 1 {
		t.Fatalf("first valid request has sequence %d, want 1", got.Sequence)
	}
	_ = a.ws.Close()
	e.await(pending)
	if _, err := e.hub.Dispatch(t.Context(), "0e000000-0000-4000-8000-00000000000e", infoReq()); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("unknown node: %v", err)
	}
}

// TestRetention: a generation-managing node's retention is answered with
// keep true for the target generation (same digest) and the serving
// generation and false otherwise; a retention out of sequence, or from a
// node without generation management, closes with 1002.
func TestRetention(t *testing.T) {
	e := newEnv(t)
	g := e.join(nodeG)
	ret := func(seq uint64, entries ...proto.RetentionEntry) *proto.Retention {
		return &proto.Retention{ID: "77777777-2222-4333-8444-55555555555" + string(rune('0'+seq)), Sequence: seq,
			ConnectionID: g.welcome.ConnectionID, OwnerEpoch: 7, Entries: entries}
	}
	r := ret(1,
		proto.RetentionEntry{Generation: 5, SpecificationDigest: specDigest},
		proto.RetentionEntry{Generation: 2, SpecificationDigest: spec2Digest},
		proto.RetentionEntry{Generation: 1, SpecificationDigest: specDigest},
		proto.RetentionEntry{Generation: 3, SpecificationDigest: spec2Digest},
	)
	g.send(r)
	ack, ok := g.recv().(*proto.RetentionAck)
	if !ok || !ack.Answers(r) {
		t.Fatalf("retention_ack %+v does not answer %+v", ack, r)
	}
	want := []bool{false, true, true, false}
	for i, d := range ack.Entries {
		if d.Keep != want[i] {
			t.Errorf("entry %d (generation %d): keep %v, want %v", i, d.Generation, d.Keep, want[i])
		}
	}
	// Target generation with another digest: not kept.
	r2 := ret(2, proto.RetentionEntry{Generation: 2, SpecificationDigest: specDigest})
	g.send(r2)
	if ack := g.recv().(*proto.RetentionAck); !ack.Answers(r2) || ack.Entries[0].Keep {
		t.Fatalf("ack %+v", ack)
	}
	g.send(ret(4, proto.RetentionEntry{Generation: 2, SpecificationDigest: spec2Digest}))
	if reason := g.expectClose(CloseProtocolError); reason != "retention sequence is not one more than the last" {
		t.Fatalf("reason %q", reason)
	}

	a := e.join(nodeA)
	a.send(&proto.Retention{ID: "88888888-2222-4333-8444-555555555555", Sequence: 1, ConnectionID: a.welcome.ConnectionID,
		OwnerEpoch: 7, Entries: []proto.RetentionEntry{{Generation: 1, SpecificationDigest: specDigest}}})
	if reason := a.expectClose(CloseProtocolError); reason != "retention from a node without generation management" {
		t.Fatalf("reason %q", reason)
	}
}
