package hub

import (
	"testing"

	"github.com/sandgate/sandgate/node/proto"
)

// TestObservingOperation: each operation is observed by the read-only
// operation of its exact attempt, on the same generation, reference and
// budget, and never by itself when it mutates; those without one are
// unobservable.
func TestObservingOperation(t *testing.T) {
	cref := &proto.ComputeRef{Generation: 2}
	snap := proto.Snapshot{ID: "s1"}
	base := proto.Request{DeploymentGeneration: 3, TimeoutMS: 7000, Reference: ref}
	with := func(op proto.Operation, f func(*proto.Request)) proto.Request {
		r := base
		r.Operation = op
		if f != nil {
			f(&r)
		}
		return r
	}
	for _, c := range []struct {
		original proto.Request
		want     proto.Operation // "" = unobservable
	}{
		{with(proto.OpCreate, func(r *proto.Request) { r.Bootstrap = &proto.Bootstrap{Image: "img"} }), proto.OpInfo},
		{with(proto.OpInfo, nil), proto.OpInfo},
		{with(proto.OpRenew, nil), proto.OpInfo},
		{with(proto.OpKill, nil), proto.OpInfo},
		{with(proto.OpSuspend, func(r *proto.Request) { r.Suspend = &proto.Suspend{Snapshot: snap} }), proto.OpInfo},
		{with(proto.OpCompute, func(r *proto.Request) { r.Compute = cref }), proto.OpCompute},
		{with(proto.OpKillCompute, func(r *proto.Request) { r.Compute = cref }), proto.OpCompute},
		{with(proto.OpResumeCompute, func(r *proto.Request) { r.Compute = cref }), proto.OpCompute},
		{with(proto.OpResume, func(r *proto.Request) { r.Resume = &proto.Resume{Snapshot: snap} }), proto.OpResume},
		{with(proto.OpCommand, func(r *proto.Request) { r.Command = &proto.Command{Argv: []string{"true"}} }), ""},
		{with(proto.OpCommandCompute, func(r *proto.Request) { r.Compute = cref }), ""},
		{with(proto.OpObserve, nil), ""},
		{with(proto.OpInitial, nil), ""},
		{with(proto.OpNewCompute, nil), ""},
		{with(proto.OpDeleteSnapshot, func(r *proto.Request) { r.Snapshot = &snap }), ""},
	} {
		got, ok := observing(c.original)
		if c.want == "" {
			if ok {
				t.Errorf("%s: observed by %s, want unobservable", c.original.Operation, got.Operation)
			}
			continue
		}
		if !ok || got.Operation != c.want || got.DeploymentGeneration != 3 || got.TimeoutMS != 7000 || got.Reference != ref ||
			got.Bootstrap != nil || got.Suspend != nil {
			t.Fatalf("%s: observed by %+v, %v; want %s of the same reference", c.original.Operation, got, ok, c.want)
		}
		switch c.want {
		case proto.OpCompute:
			if got.Compute == nil || *got.Compute != *cref {
				t.Errorf("%s: compute %+v", c.original.Operation, got.Compute)
			}
		case proto.OpResume:
			if got.Resume == nil || !got.Resume.ObserveOnly || got.Resume.Snapshot != snap {
				t.Errorf("resume: observed by %+v, want an observe-only resume of the same snapshot", got.Resume)
			}
		}
	}
}
