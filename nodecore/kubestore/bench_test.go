package kubestore_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/placement"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/pool/pooltest"
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

// BenchmarkDeploymentPropagation: the time from the start of a deployment
// change through replica A's registry (Set returns once the NodePool is
// written) until replica B's registry, fed by its watch, gives the new
// deployment
// (docs/scale-out.md "How fast a change reaches the other replicas"):
// go test -run '^$' -bench BenchmarkDeploymentPropagation -benchtime 200x ./node/kubestore/
func BenchmarkDeploymentPropagation(b *testing.B) {
	ns := namespace(&testing.T{})
	a, err := open(&testing.T{}, ns, nil, nil).Pools()
	if err != nil {
		b.Fatal(err)
	}
	r, err := open(&testing.T{}, ns, nil, nil).Pools()
	if err != nil {
		b.Fatal(err)
	}
	spec := pooltest.Spec7()
	d := spec["default"]
	d.Bindings = append(d.Bindings, pool.Binding{Generation: 8, SpecificationDigest: pooltest.D8})
	spec["default"] = d
	// Both replicas run the same config.
	for _, x := range []*pool.Registry{a, r} {
		if _, err := x.Configure(spec); err != nil {
			b.Fatal(err)
		}
	}
	var total, worst time.Duration
	for i := 0; b.Loop(); i++ {
		target := int64(7 + i%2)
		start := time.Now()
		if _, err := a.Set("default", target, nil, nil); err != nil {
			b.Fatal(err)
		}
		for {
			if dep, ok := r.Deployment("default"); ok && dep.Generation == target {
				break
			}
			if time.Since(start) > 30*time.Second {
				b.Fatal("B did not see the change within 30s")
			}
			runtime.Gosched()
		}
		took := time.Since(start)
		total += took
		worst = max(worst, took)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-to-B/op")
	b.ReportMetric(float64(worst.Microseconds()), "µs-to-B-max")
}
