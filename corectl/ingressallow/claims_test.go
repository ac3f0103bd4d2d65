package ingressallow

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sandgate/sandgate/corectl/sandbox"
)

// countingEngine is an engine of the fixture's cluster whose client counts
// the Ingress lists made through it.
func (f *fixture) countingEngine(t *testing.T) (*Engine, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	c := interceptor.NewClient(withWatch(t), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*networkingv1.IngressList); ok {
				n.Add(1)
			}
			return c.List(ctx, list, opts...)
		},
	})
	return &Engine{Client: c, Cluster: f.eng.Cluster, Events: f.rec}, &n
}

// createdCarrier writes the carrier of set for the fixture's sandbox as a
// create leaves it after the owner back-fill, and returns the sandbox and
// the carrier's resourceVersion.
func (f *fixture) createdCarrier(t *testing.T, set string) (*sandbox.Sandbox, string) {
	t.Helper()
	sb, err := sandbox.Get(ctx, env.Client, f.ns, "sbx", f.eng.Cluster.AllocationLabelKey())
	if err != nil && !errors.Is(err, sandbox.ErrNoAllocation) {
		t.Fatal(err)
	}
	ing := Carrier(f.eng.Cluster, sb, []string{set})
	if err := env.Client.Create(ctx, ing); err != nil {
		t.Fatal(err)
	}
	return sb, ing.ResourceVersion
}

// TestCreateClaimsServeTheFirstCycle: the path-claim lists a create asks
// for when it creates the carrier (StartClaims) are the ones its first
// cycle (Settle) judges the path by, with no list of its own, while the
// carrier is at the version the create wrote: a claimant written before
// the carrier fails the create's cycle as PathClaimed through them, and
// without one the cycle ends Verified having made no Ingress list.
func TestCreateClaimsServeTheFirstCycle(t *testing.T) {
	for _, claimed := range []bool{false, true} {
		t.Run(map[bool]string{false: "no claimant", true: "a claimant before the carrier"}[claimed], func(t *testing.T) {
			f := newFixture(t)
			if claimed {
				if err := env.Client.Create(ctx, claimant(env.Namespace(t), f.eng.Cluster.Ingress.Host, "/sbx/")); err != nil {
					t.Fatal(err)
				}
			}
			sb, rv := f.createdCarrier(t, newSet)
			pre := f.eng.StartClaims(ctx, "sbx")
			pre.Carrier = rv
			eng, lists := f.countingEngine(t)
			err := eng.Settle(ctx, sb, rulesOf(newSet), pre)
			if claimed {
				if err == nil || !strings.Contains(err.Error(), CodePathClaimed) {
					t.Fatalf("Settle = %v; want not verified, %s", err, CodePathClaimed)
				}
			} else if err != nil {
				t.Fatalf("Settle = %v", err)
			}
			if n := lists.Load(); n != 0 {
				t.Fatalf("the first cycle listed Ingresses %d times; want 0 (the create's lists)", n)
			}
		})
	}
}

// TestCreateClaimsNotForAnotherVersion: once anyone but the create has
// written the carrier after the create's lists were answered, the first
// cycle does not judge by them: it lists on its own (both lists) and
// finds the claimant written after the create's lists, which they lack.
func TestCreateClaimsNotForAnotherVersion(t *testing.T) {
	f := newFixture(t)
	sb, rv := f.createdCarrier(t, newSet)
	pre := f.eng.StartClaims(ctx, "sbx")
	pre.Carrier = rv
	list, err := pre.wait()
	if err != nil {
		t.Fatal(err)
	}
	pre.wait = func() ([]networkingv1.Ingress, error) { return list, nil }
	if err := env.Client.Create(ctx, claimant(env.Namespace(t), f.eng.Cluster.Ingress.Host, "/sbx/")); err != nil {
		t.Fatal(err)
	}
	ing := f.carrier(t)
	ing.Annotations["example.com/edited"] = "by someone else"
	if err := env.Client.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	eng, lists := f.countingEngine(t)
	if err := eng.Settle(ctx, sb, rulesOf(newSet), pre); err == nil || !strings.Contains(err.Error(), CodePathClaimed) {
		t.Fatalf("Settle = %v; want not verified, %s (the claimant written after the create's lists)", err, CodePathClaimed)
	}
	if n := lists.Load(); n != 2 {
		t.Fatalf("the first cycle listed Ingresses %d times; want its own 2", n)
	}
}
