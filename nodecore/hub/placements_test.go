package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/placement"
)

// failingStore refuses every Place.
type failingStore struct{ *placement.Memory }

var errDisk = errors.New("disk full")

func (failingStore) Place(placement.Placement) error { return errDisk }

func genStatus(s NodeStatus, gen int64) *GenerationStatus {
	for i := range s.Generations {
		if s.Generations[i].Generation == gen {
			return &s.Generations[i]
		}
	}
	return nil
}

// TestRetentionKeepsPlacedGenerations: a generation an allocation is
// placed on (from its first request on) is kept by every retention
// answer until a successful kill ends the allocation; an unknown or
// failed kill keeps it; the operator can release it. The node's status
// shows each generation's placements and role.
func TestRetentionKeepsPlacedGenerations(t *testing.T) {
	store := placement.NewMemory()
	e := newEnv(t, func(c *Config) { c.Placements = store })
	g := e.join(nodeG) // deployment: target 2, serving 1; hello: 1 ready, 2 preparing
	hb := g.heartbeat(health(false, ""))
	hb.Generations = []proto.GenerationObservation{{Generation: 3, SpecificationDigest: spec2Digest, State: proto.GenerationReady}}
	g.send(hb)
	g.recv()
	seq := uint64(0)
	retain := func(gen int64) bool {
		t.Helper()
		seq++
		r := &proto.Retention{ID: "77777777-2222-4333-8444-5555555555" + string(rune('a'+seq/10)) + string(rune('0'+seq%10)),
			Sequence: seq, ConnectionID: g.welcome.ConnectionID, OwnerEpoch: 7,
			Entries: []proto.RetentionEntry{{Generation: gen, SpecificationDigest: spec2Digest}}}
		g.send(r)
		ack, ok := g.recv().(*proto.RetentionAck)
		if !ok || !ack.Answers(r) {
			t.Fatalf("retention_ack %+v", ack)
		}
		return ack.Entries[0].Keep
	}
	if retain(3) {
		t.Fatal("generation 3 kept before any allocation was placed on it")
	}
	create := proto.Request{DeploymentGeneration: 3, Operation: proto.OpCreate, TimeoutMS: 5000, Reference: ref,
		Bootstrap: &proto.Bootstrap{Image: "busybox:latest"}}
	answer := func(req proto.Request, resp proto.Response) dispatched {
		t.Helper()
		pending := e.dispatchAsync(nodeG, req)
		got := g.request()
		resp.ID, resp.ConnectionID = got.ID, got.ConnectionID
		// The placement is recorded before the request is on the wire.
		if !store.InUse(nodeG, req.DeploymentGeneration) {
			t.Fatal("a request was sent before its placement was recorded")
		}
		g.send(&resp)
		return e.await(pending)
	}
	answer(create, proto.Response{Info: info()})
	if !retain(3) {
		t.Fatal("generation 3 not kept while an allocation is placed on it")
	}
	s := e.status(nodeG)
	if gs := genStatus(s, 3); gs == nil || gs.Placements != 1 || gs.State != proto.GenerationReady || gs.Target || gs.Serving {
		t.Fatalf("status of generation 3: %+v", gs)
	}
	if gs := genStatus(s, 2); gs == nil || !gs.Target || gs.Placements != 0 {
		t.Fatalf("status of generation 2: %+v", gs)
	}
	if gs := genStatus(s, 1); gs == nil || !gs.Serving {
		t.Fatalf("status of generation 1: %+v", gs)
	}
	if s.Pool != "default" || s.Deployment == nil || s.Deployment.Generation != 2 {
		t.Fatalf("status: pool %q deployment %+v", s.Pool, s.Deployment)
	}

	kill := proto.Request{DeploymentGeneration: 3, Operation: proto.OpKill, TimeoutMS: 5000, Reference: ref}
	if d := answer(kill, proto.Response{ErrorCode: proto.ErrUnconfirmed}); d.res.Outcome != proto.OutcomeUnknown {
		t.Fatalf("%+v", d.res)
	}
	if d := answer(kill, proto.Response{ErrorCode: proto.ErrNotFound}); d.res.Outcome != proto.OutcomeFailed {
		t.Fatalf("%+v", d.res)
	}
	if !retain(3) {
		t.Fatal("an unknown or failed kill released the generation")
	}
	if d := answer(kill, proto.Response{}); d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("%+v", d.res)
	}
	if retain(3) {
		t.Fatal("generation 3 still kept after the allocation's successful kill")
	}
	if gs := genStatus(e.status(nodeG), 3); gs == nil || gs.Placements != 0 {
		t.Fatalf("%+v", gs)
	}

	// Any request places its allocation; the operator releases it.
	answer(proto.Request{DeploymentGeneration: 3, Operation: proto.OpInfo, TimeoutMS: 5000, Reference: ref}, proto.Response{ErrorCode: proto.ErrNotFound})
	if !retain(3) || len(e.hub.Placements(nodeG)) != 1 {
		t.Fatal("an info request did not place its allocation")
	}
	if ok, err := e.hub.ReleasePlacement(placement.Placement{NodeID: nodeG, Generation: 3, Reference: ref}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if retain(3) {
		t.Fatal("released by the operator but still kept")
	}

	// Nodes without generation management place nothing.
	a := e.join(nodeA)
	pending := e.dispatchAsync(nodeA, infoReq())
	got := a.request()
	a.send(&proto.Response{ID: got.ID, ConnectionID: got.ConnectionID, Info: info()})
	e.await(pending)
	if len(e.hub.Placements(nodeA)) != 0 {
		t.Fatal("a node without generation management has placements")
	}
}

// TestPlacementUnrecordedIsNotSent: when the placement cannot be
// recorded the request is refused with ErrPlacementUnrecorded and nothing
// is written (the next request on the wire has sequence 1).
func TestPlacementUnrecordedIsNotSent(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Placements = failingStore{placement.NewMemory()} })
	g := e.join(nodeG)
	req := proto.Request{DeploymentGeneration: 1, Operation: proto.OpInfo, TimeoutMS: 5000, Reference: ref}
	if _, err := e.hub.Dispatch(t.Context(), nodeG, req); !errors.Is(err, ErrPlacementUnrecorded) || !errors.Is(err, errDisk) {
		t.Fatalf("%v", err)
	}
	if ack := g.beat(health(false, "")); ack == nil {
		t.Fatal("no heartbeat_ack: something else was written first")
	}
}

// syncingStore is a store shared with another replica: the placements
// that replica made (elsewhere) enter this view at Sync; the first fails
// Syncs fail.
type syncingStore struct {
	*placement.Memory
	mu        sync.Mutex
	elsewhere []placement.Placement
	fail      int
	syncs     int
}

func (s *syncingStore) Sync(_ context.Context, node string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs++
	if s.fail > 0 {
		s.fail--
		return errors.New("apiserver unreachable")
	}
	for _, p := range s.elsewhere {
		if p.NodeID == node {
			_ = s.Memory.Place(p)
		}
	}
	return nil
}

func (s *syncingStore) count() int { s.mu.Lock(); defer s.mu.Unlock(); return s.syncs }

// TestRetentionSyncsASharedStore: with a store shared by several replicas
// the node's placements are read once per connection before a retention
// answer may drop anything: while the read fails every generation is
// kept; once it succeeds, a placement another replica made is kept and an
// unplaced generation dropped, and later answers read nothing more.
func TestRetentionSyncsASharedStore(t *testing.T) {
	store := &syncingStore{Memory: placement.NewMemory(), fail: 1,
		elsewhere: []placement.Placement{{NodeID: nodeG, Generation: 3, Reference: ref}}}
	e := newEnv(t, func(c *Config) { c.Placements = store })
	g := e.join(nodeG)
	seq := uint64(0)
	retain := func(gens ...int64) []bool {
		t.Helper()
		seq++
		r := &proto.Retention{ID: fmt.Sprintf("77777777-2222-4333-8444-5555555555%02d", seq), Sequence: seq,
			ConnectionID: g.welcome.ConnectionID, OwnerEpoch: 7}
		for _, gen := range gens {
			r.Entries = append(r.Entries, proto.RetentionEntry{Generation: gen, SpecificationDigest: spec2Digest})
		}
		g.send(r)
		ack, ok := g.recv().(*proto.RetentionAck)
		if !ok || !ack.Answers(r) {
			t.Fatalf("retention_ack %+v", ack)
		}
		out := make([]bool, len(ack.Entries))
		for i, d := range ack.Entries {
			out[i] = d.Keep
		}
		return out
	}
	if k := retain(3, 4); !k[0] || !k[1] {
		t.Fatalf("a drop was authorised while the shared store could not be read: %v", k)
	}
	if k := retain(3, 4); !k[0] || k[1] {
		t.Fatalf("after the read: keep %v, want generation 3 (placed elsewhere) kept and 4 dropped", k)
	}
	retain(4)
	if n := store.count(); n != 2 {
		t.Fatalf("%d reads of the shared store, want 2 (one failed, one for the connection)", n)
	}
}
