// Package placementtest is the contract of a placement.Store, as tests:
// placing is idempotent, releasing reports what it released, a placement
// counts as in use until released, every acknowledged change survives a
// restart, concurrent callers lose nothing, and a malformed placement is
// refused. The journal's tests and the Kubernetes store's tests (package
// nodecore/kubestore) both run it.
package placementtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/placement"
)

// Store is one empty store under test.
type Store struct {
	// Open returns a new store on the storage (each call a restart of the
	// gateway, or another replica; a store that cannot share its storage
	// closes the previous one).
	Open func(t *testing.T) placement.Store
	// Shared is true for a store several replicas write at once (it
	// implements placement.Syncer): the replica tests run too.
	Shared bool
}

// Node IDs of the tests.
const (
	NodeA = "0a000000-0000-4000-8000-00000000000a"
	NodeB = "0b000000-0000-4000-8000-00000000000b"
)

// P is a placement on NodeA.
func P(gen int64, alloc string) placement.Placement {
	return placement.Placement{NodeID: NodeA, Generation: gen, Reference: proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: alloc}}
}

// Run runs every contract test; newStore returns an empty store.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("Exercise", func(t *testing.T) { Exercise(t, newStore(t).Open(t)) })
	t.Run("Durable", func(t *testing.T) { Durable(t, newStore(t)) })
	t.Run("Concurrent", func(t *testing.T) { Concurrent(t, newStore(t)) })
	t.Run("Malformed", func(t *testing.T) { Malformed(t, newStore(t).Open(t)) })
	if s := newStore(t); s.Shared {
		t.Run("Replicas", func(t *testing.T) { Replicas(t, s) })
	}
}

// Exercise: place (twice the same: one placement), InUse, List's order,
// release (twice: reported once), a generation stays in use while any
// allocation is placed on it.
func Exercise(t *testing.T, s placement.Store) {
	t.Helper()
	for _, p := range []placement.Placement{P(1, "a"), P(1, "b"), P(2, "c"), P(1, "a")} {
		if err := s.Place(p); err != nil {
			t.Fatal(err)
		}
	}
	if !s.InUse(NodeA, 1) || !s.InUse(NodeA, 2) || s.InUse(NodeA, 3) || s.InUse(NodeB, 1) {
		t.Fatal("InUse")
	}
	if got := s.List(NodeA); len(got) != 3 || got[0] != P(1, "a") || got[1] != P(1, "b") || got[2] != P(2, "c") {
		t.Fatalf("%+v", got)
	}
	if ok, err := s.Release(P(1, "a")); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := s.Release(P(1, "a")); ok || err != nil {
		t.Fatal("released twice", err)
	}
	if !s.InUse(NodeA, 1) {
		t.Fatal("b still uses generation 1")
	}
	if ok, _ := s.Release(P(1, "b")); !ok || s.InUse(NodeA, 1) {
		t.Fatal("generation 1 still in use")
	}
	if got := s.List(NodeB); len(got) != 0 {
		t.Fatalf("node B: %+v", got)
	}
}

// Durable: what was acknowledged is there after a restart.
func Durable(t *testing.T, st Store) {
	s := st.Open(t)
	Exercise(t, s)
	if err := s.Place(placement.Placement{NodeID: NodeB, Generation: 5, Reference: P(5, "x").Reference}); err != nil {
		t.Fatal(err)
	}
	s2 := st.Open(t)
	if got := s2.List(NodeA); len(got) != 1 || got[0] != P(2, "c") {
		t.Fatalf("after a restart: %+v", got)
	}
	if !s2.InUse(NodeB, 5) || s2.InUse(NodeA, 1) {
		t.Fatal("InUse after a restart")
	}
}

// Concurrent: 64 callers place and then release at once, on two nodes;
// every acknowledged change is there, in this store and after a restart.
func Concurrent(t *testing.T, st Store) {
	s := st.Open(t)
	const n = 64
	node := func(i int) string {
		if i%4 == 0 {
			return NodeB
		}
		return NodeA
	}
	pl := func(i int) placement.Placement {
		return placement.Placement{NodeID: node(i), Generation: int64(1 + i%3), Reference: proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: fmt.Sprintf("a%d", i)}}
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Place(pl(i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if a, b := len(s.List(NodeA)), len(s.List(NodeB)); a+b != n || b != n/4 {
		t.Fatalf("%d + %d placements, want %d", a, b, n)
	}
	var released sync.Map
	for i := range n {
		if i%2 == 1 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.Release(pl(i))
			if err != nil || !ok {
				t.Error(ok, err)
			}
			released.Store(i, true)
		}()
	}
	wg.Wait()
	s2 := st.Open(t)
	for _, x := range []placement.Store{s, s2} {
		got := map[string]bool{}
		for _, p := range append(x.List(NodeA), x.List(NodeB)...) {
			got[p.Reference.AllocationID] = true
		}
		for i := range n {
			_, rel := released.Load(i)
			if got[fmt.Sprintf("a%d", i)] == rel {
				t.Fatalf("placement %d: recorded %v, released %v", i, got[fmt.Sprintf("a%d", i)], rel)
			}
		}
	}
}

// Malformed: a placement with a malformed node ID, generation or
// reference is refused (placement.ErrJournal) and not recorded.
func Malformed(t *testing.T, s placement.Store) {
	for name, p := range map[string]placement.Placement{
		"node":       {NodeID: "x", Generation: 1, Reference: P(1, "a").Reference},
		"generation": {NodeID: NodeA, Generation: 0, Reference: P(1, "a").Reference},
		"reference":  {NodeID: NodeA, Generation: 1, Reference: proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: "-a"}},
	} {
		if err := s.Place(p); !errors.Is(err, placement.ErrJournal) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(s.List(NodeA)) != 0 || s.InUse(NodeA, 1) {
		t.Fatal("a malformed placement was recorded")
	}
}

// Replicas: two stores on one shared storage. A placement made through A
// is in use on B once B synced the node (what a replica does when a node
// connects to it); A and B placing on one node at once lose nothing; a
// release through B is seen by A after a sync.
func Replicas(t *testing.T, st Store) {
	a, b := st.Open(t), st.Open(t)
	sa, sb := a.(placement.Syncer), b.(placement.Syncer)
	ctx := context.Background()
	if err := a.Place(P(7, "x")); err != nil {
		t.Fatal(err)
	}
	if err := sb.Sync(ctx, NodeA); err != nil {
		t.Fatal(err)
	}
	if !b.InUse(NodeA, 7) {
		t.Fatal("a placement made on A is not in use on B after a sync")
	}
	var wg sync.WaitGroup
	for i := range 32 {
		for _, s := range []placement.Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Place(P(8, fmt.Sprintf("r%d-%p", i, s))); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	if ok, err := b.Release(P(7, "x")); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for _, s := range []placement.Syncer{sa, sb} {
		if err := s.Sync(ctx, NodeA); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []placement.Store{a, b, st.Open(t)} {
		if got := s.List(NodeA); len(got) != 64 || s.InUse(NodeA, 7) {
			t.Fatalf("%d placements, generation 7 in use %v", len(got), s.InUse(NodeA, 7))
		}
	}
}
