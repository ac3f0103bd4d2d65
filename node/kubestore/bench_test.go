package kubestore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/placement"
	"github.com/sandgate/sandgate/node/proto"
)

// The cost of recording a placement in the apiserver before a request is
// sent (docs/scale-out.md "Node state"): go test -run '^$' -bench
// BenchmarkKubePlace -benchtime 2s ./node/kubestore/

// BenchmarkKubePlace: new placements on one node one after another (one
// update of the node's NodePlacements each).
func BenchmarkKubePlace(b *testing.B) {
	s := open(&testing.T{}, namespace(&testing.T{}), nil, nil).Placements()
	node := uuid.NewString()
	for i := 0; b.Loop(); i++ {
		if err := s.Place(placement.Placement{NodeID: node, Generation: 1, Reference: ref(i)}); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 { // stay under v1alpha1.MaxPlacements
			node = uuid.NewString()
		}
	}
}

// BenchmarkKubePlaceParallelOneNode: new placements on one node from 64
// goroutines, which share writes (group commit).
func BenchmarkKubePlaceParallelOneNode(b *testing.B) {
	s := open(&testing.T{}, namespace(&testing.T{}), nil, nil).Placements()
	var n atomic.Int64
	var node atomic.Value
	node.Store(uuid.NewString())
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if i%1000 == 0 {
				node.Store(uuid.NewString())
			}
			if err := s.Place(placement.Placement{NodeID: node.Load().(string), Generation: 1, Reference: ref(int(i))}); err != nil {
				b.Error(err)
			}
		}
	})
}

// BenchmarkKubePlaceParallelNodes: new placements from 64 goroutines, each
// on a node of its own (no write is shared).
func BenchmarkKubePlaceParallelNodes(b *testing.B) {
	s := open(&testing.T{}, namespace(&testing.T{}), nil, nil).Placements()
	var n atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		node := uuid.NewString()
		for i := 0; pb.Next(); i++ {
			if i%1000 == 999 {
				node = uuid.NewString()
			}
			if err := s.Place(placement.Placement{NodeID: node, Generation: 1, Reference: ref(int(n.Add(1)))}); err != nil {
				b.Error(err)
			}
		}
	})
}

func ref(i int) proto.Reference {
	return proto.Reference{TenantID: "tenant", EnvironmentID: "env", AllocationID: fmt.Sprintf("alloc-%d", i)}
}
