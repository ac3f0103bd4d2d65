package ingressallow

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// The tests in this file run two cycles for one sandbox in two Engines,
// each with its own apiserver client and its own in-process lock, as two
// corectl replicas would (the create's cycle on the replica that answers
// the create, the leader's reconciler on another; or an old leader that
// has not yet noticed it lost its Lease). A gate holds one cycle at a
// chosen apiserver call while the other runs, so each dangerous ordering
// is forced rather than hoped for. What must hold afterwards (spec §5.2):
// whenever the allowlist records Verified, the live carrier is the
// verified set (the recorded result describes the carrier, not another
// cycle's write), and the newest desired version ends applied (no older
// version's write lands after it for good).

// gate holds a cycle at the first apiserver call that matches.
type gate struct {
	match   func(verb string, obj client.Object) bool
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func newGate(match func(verb string, obj client.Object) bool) *gate {
	return &gate{match: match, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) at(verb string, obj client.Object) {
	if g == nil || !g.match(verb, obj) {
		return
	}
	hit := false
	g.once.Do(func() { hit = true })
	if hit {
		close(g.reached)
		<-g.release
	}
}

// replica is an Engine for the fixture's cluster with a client of its
// own, as another corectl replica has; its calls pass through g when set.
type replica struct {
	t   *testing.T
	eng *Engine
	g   *gate
}

func (f *fixture) replica(t *testing.T) *replica {
	t.Helper()
	r := &replica{t: t}
	hook := func(verb string, obj client.Object) { r.g.at(verb, obj) }
	c := interceptor.NewClient(withWatch(t), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			hook("get", obj)
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			hook("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			hook("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			hook("delete", obj)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			hook("status", obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	r.eng = &Engine{Client: c, Cluster: f.eng.Cluster, Events: f.rec}
	return r
}

// holdAt starts a cycle of r for the fixture's sandbox in namespace ns
// and returns once it is held at the first call match matches; the
// returned function lets it go on and waits for its error.
func (r *replica) holdAt(ns string, match func(verb string, obj client.Object) bool) (release func() error) {
	r.t.Helper()
	return r.holdIn(match, func() error {
		_, err := r.eng.Reconcile(ctx, ns, "sbx")
		return err
	})
}

// holdIn runs op (which calls r.eng) in a goroutine and returns once op is
// held at the first call match matches (failing the test if op ends
// first); the returned function lets it go on and waits for its error.
func (r *replica) holdIn(match func(verb string, obj client.Object) bool, op func() error) (release func() error) {
	r.t.Helper()
	r.g = newGate(match)
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case <-r.g.reached:
	case err := <-done:
		r.t.Fatalf("the cycle ended (%v) before the call it was to be held at", err)
	}
	g := r.g
	return func() error {
		close(g.release)
		return <-done
	}
}

// isIngress matches an Ingress call.
func isIngress(obj client.Object) bool { _, ok := obj.(*networkingv1.Ingress); return ok }

// whitelisted matches an Ingress write of the whitelist set.
func whitelisted(set string) func(string, client.Object) bool {
	return func(verb string, obj client.Object) bool {
		ing, ok := obj.(*networkingv1.Ingress)
		return ok && (verb == "update" || verb == "create") && ing.Annotations[AnnotationWhitelist] == set
	}
}

// afterWrite matches the first Ingress read after an Ingress write of set:
// the cycle's read-back.
func afterWrite(set string) func(string, client.Object) bool {
	wrote := false
	w := whitelisted(set)
	return func(verb string, obj client.Object) bool {
		if w(verb, obj) {
			wrote = true
		}
		return wrote && verb == "get" && isIngress(obj)
	}
}

// settle runs cycles in eng until one ends without a transient error (at
// most a few: each retry reads the state again).
func settle(t *testing.T, eng *Engine, ns string) *Result {
	t.Helper()
	for range 5 {
		res, err := eng.Reconcile(ctx, ns, "sbx")
		if err == nil {
			return res
		}
		if !errors.Is(err, ErrTransient) {
			t.Fatalf("Reconcile: %v", err)
		}
	}
	t.Fatal("no cycle settled in 5 attempts")
	return nil
}

// consistent fails unless the allowlist's record describes the live
// carrier: a Verified state names the carrier's set and version, and no
// Verified state hides a carrier that does not hold its LKG.
func (f *fixture) consistent(t *testing.T, what string) {
	t.Helper()
	al := f.allowlist(t)
	st := al.Status
	ing := f.carrier(t)
	if st.VerificationState != v1alpha1.StateVerified {
		return
	}
	sb, err := sandbox.Get(ctx, env.Client, f.ns, "sbx", f.eng.Cluster.AllocationLabelKey())
	if err != nil && !errors.Is(err, sandbox.ErrNoAllocation) {
		t.Fatal(err)
	}
	if ing == nil {
		t.Fatalf("%s: status Verified %v (generation %d) but no carrier", what, st.LastVerified, st.ObservedGeneration)
	}
	if code, reason := CheckCarrier(f.eng.Cluster, sb, ing, st.LastVerified); code != "" {
		t.Fatalf("%s: status Verified %v at carrier version %s, but the carrier (version %s) fails: %s %s",
			what, st.LastVerified, st.AppliedVersion, ing.ResourceVersion, code, reason)
	}
}

// verifiedAt fails unless the allowlist ends Verified for its current
// desired version with set on the carrier.
func (f *fixture) verifiedAt(t *testing.T, set string) {
	t.Helper()
	f.verifiedProbed(t, set)
	if ing := f.carrier(t); ing == nil || ing.Annotations[AnnotationWhitelist] != set {
		t.Fatalf("carrier = %+v; want %s", ing, set)
	}
}

// verifiedFirst sets set as desired and runs a cycle that verifies it:
// the LKG the tests start from.
func (f *fixture) verifiedFirst(t *testing.T, set string) {
	t.Helper()
	f.set(t, set)
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("first cycle = %+v", res)
	}
}

const (
	lkgSet = "198.51.100.0/24"
	oldSet = "203.0.113.0/24"
	newSet = "192.0.2.0/24"
)

// TestInterleavedCyclesStaleReadBack: replica A's cycle for an older
// desired version wrote the carrier and is held before its read-back;
// meanwhile a newer version is written and replica B's cycle applies it
// (B to the end, or B held before its own read-back). A then reads back
// B's write. A must not take B's write for a failure of its own and roll
// the carrier back to the old LKG: that would leave the allowlist
// recording B's Verified over a carrier holding the old LKG, or make B's
// read-back fail so the newest version is recorded as a settled
// AllowlistMismatch and never applied (a lost update).
func TestInterleavedCyclesStaleReadBack(t *testing.T) {
	for _, holdB := range []bool{false, true} {
		name := "B finishes first"
		if holdB {
			name = "B held before its read-back"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.verifiedFirst(t, lkgSet)
			a, b := f.replica(t), f.replica(t)
			f.set(t, oldSet)
			releaseA := a.holdAt(f.ns, afterWrite(oldSet)) // A wrote oldSet, about to read it back
			f.set(t, newSet)
			if !holdB {
				if _, err := b.eng.Reconcile(ctx, f.ns, "sbx"); err != nil {
					t.Fatalf("B: %v", err)
				}
				f.consistent(t, "after B")
				_ = releaseA() // A is stale: a transient failure is right
				f.consistent(t, "after A")
			} else {
				releaseB := b.holdAt(f.ns, afterWrite(newSet)) // B wrote newSet, about to read it back
				_ = releaseA()
				f.consistent(t, "after A")
				_ = releaseB()
				f.consistent(t, "after B")
			}
			settle(t, b.eng, f.ns)
			f.verifiedAt(t, newSet)
		})
	}
}

// TestInterleavedCyclesStaleWriteAfterNewer: replica A's cycle for an
// older desired version marked Verifying and is held before its carrier
// write. A newer desired version with the rules the carrier already holds
// is written, and replica B's cycle finds the carrier holding it. If B
// recorded Verified without writing, A's write (conditional only on the
// carrier version both read) would land after it: the allowlist would say
// Verified for rules that are not on the carrier, and the older version's
// write would have won.
func TestInterleavedCyclesStaleWriteAfterNewer(t *testing.T) {
	f := newFixture(t)
	f.verifiedFirst(t, newSet)
	a, b := f.replica(t), f.replica(t)
	f.set(t, oldSet)
	releaseA := a.holdAt(f.ns, whitelisted(oldSet)) // A is Verifying, about to write oldSet
	f.set(t, newSet)                                // back to the rules the carrier holds
	if res, err := b.eng.Reconcile(ctx, f.ns, "sbx"); err != nil {
		t.Fatalf("B = %+v, %v", res, err)
	}
	_ = releaseA()
	f.consistent(t, "after A's write")
	settle(t, b.eng, f.ns)
	f.verifiedAt(t, newSet)
}

// TestInterleavedCyclesRollbackOverVerified: replica A's cycle wrote the
// desired set, found the path claimed, and is held before rolling the
// carrier back to the LKG. The claim goes away and replica B's cycle for
// the same desired version finds the carrier (A's write) holding desired.
// If B recorded Verified without writing, A's rollback would then put the
// LKG over the carrier B recorded as verified.
func TestInterleavedCyclesRollbackOverVerified(t *testing.T) {
	f := newFixture(t)
	f.verifiedFirst(t, lkgSet)
	intruder := claimant(env.Namespace(t), f.eng.Cluster.Ingress.Host, "/sbx/")
	if err := env.Client.Create(ctx, intruder); err != nil {
		t.Fatal(err)
	}
	a, b := f.replica(t), f.replica(t)
	f.set(t, newSet)
	releaseA := a.holdAt(f.ns, whitelisted(lkgSet)) // A failed on the claim, about to restore lkgSet
	if err := env.Client.Delete(ctx, intruder); err != nil {
		t.Fatal(err)
	}
	if res, err := b.eng.Reconcile(ctx, f.ns, "sbx"); err != nil || res.Outcome != OutcomeVerified {
		t.Fatalf("B = %+v, %v", res, err)
	}
	_ = releaseA()
	f.consistent(t, "after A's rollback")
	settle(t, b.eng, f.ns)
	f.verifiedAt(t, newSet)
}

// TestInterleavedProbeRewriteUnderANewerRecord: the create's readiness
// path in replica A rewrites the carrier with new probe sources and the
// allowlist's last verified set (RewriteProbeSources) and is held after
// reading the allowlist, before reading the carrier. A newer desired
// version is written and replica B's cycle applies and verifies it. A
// must not then write its older verified set over the carrier B recorded
// as Verified: the allowlist would say Verified for rules that are not on
// the carrier.
func TestInterleavedProbeRewriteUnderANewerRecord(t *testing.T) {
	f := newFixture(t)
	f.verifiedFirst(t, lkgSet)
	a, b := f.replica(t), f.replica(t)
	releaseA := a.holdIn(func(verb string, obj client.Object) bool { return verb == "get" && isIngress(obj) }, func() error {
		return a.eng.RewriteProbeSources(ctx, f.ns, "sbx", []string{"10.7.7.7/32"})
	})
	f.set(t, newSet)
	if res, err := b.eng.Reconcile(ctx, f.ns, "sbx"); err != nil || res.Outcome != OutcomeVerified {
		t.Fatalf("B = %+v, %v", res, err)
	}
	_ = releaseA() // an error is right: the allowlist changed under it
	f.consistent(t, "after the rewrite")
	f.verifiedAt(t, newSet)
}

// createCycleSetup is the state a create leaves for its first cycle: the
// create step's carrier of set (no cycle mark) with the probe source
// 10.8.8.8/32, and the allowlist of set at its first version, as
// CreateDesired returned it. The create's replica b still has that probe
// source cached; the leader replica a has rediscovered it as 10.9.9.9/32
// (each replica caches its discovery for 10 minutes), so a's cycle writes
// while the create's cycle finds the carrier holding its set and would
// write nothing.
func (f *fixture) createCycleSetup(t *testing.T, set string) (a, b *replica, al *v1alpha1.SandboxIngressAllowlist) {
	t.Helper()
	sb, err := sandbox.Get(ctx, env.Client, f.ns, "sbx", f.eng.Cluster.AllocationLabelKey())
	if err != nil && !errors.Is(err, sandbox.ErrNoAllocation) {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, CarrierWithProbe(f.eng.Cluster, sb, []string{set}, []string{"10.8.8.8/32"})); err != nil {
		t.Fatal(err)
	}
	al, err = f.eng.CreateDesired(ctx, sb, rulesOf(set))
	if err != nil {
		t.Fatal(err)
	}
	a, b = f.replica(t), f.replica(t)
	a.eng.Probe = func(context.Context) ([]string, error) { return []string{"10.9.9.9/32"}, nil }
	b.eng.Probe = func(context.Context) ([]string, error) { return []string{"10.8.8.8/32"}, nil }
	return a, b, al
}

// TestInterleavedCreateCycleUnderLeaderWrite: the create's first cycle
// (ReconcileFrom the allowlist CreateDesired returned) writes nothing when
// the create's carrier holds its set. The leader's cycle, woken by the
// allowlist's creation in another replica, marked Verifying and is held
// (before its carrier write, or after it and before its read-back). The
// create's cycle must not record Verified over the leader's write in
// flight (it fails on the allowlist's version and is retried, as the
// create does), its retry must verify, and the leader's cycle, released,
// must end Superseded without touching the record, so the create's
// desired version ends Verified on the carrier and no cycle is left that
// nobody retries (the leader's error is transient).
func TestInterleavedCreateCycleUnderLeaderWrite(t *testing.T) {
	for name, afterWrite := range map[string]bool{"leader held before its write": false, "leader held before its read-back": true} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			a, b, al := f.createCycleSetup(t, newSet)
			wrote := false
			releaseA := a.holdAt(f.ns, func(verb string, obj client.Object) bool {
				if verb == "update" && isIngress(obj) {
					wrote = true
					return !afterWrite
				}
				return afterWrite && wrote && verb == "get" && isIngress(obj)
			})
			if st := f.allowlist(t).Status; st.VerificationState != v1alpha1.StateVerifying || st.Cycle != 1 {
				t.Fatalf("leader held with status %s cycle %d; want Verifying cycle 1", st.VerificationState, st.Cycle)
			}
			res, err := b.eng.ReconcileFrom(ctx, al)
			if !errors.Is(err, ErrTransient) {
				t.Fatalf("create's first cycle over the leader's Verifying = %+v, %v; want a transient failure", res, err)
			}
			f.consistent(t, "after the create's first cycle")
			res, err = b.eng.Reconcile(ctx, f.ns, "sbx") // the create's retry
			if err != nil || res.Outcome != OutcomeVerified {
				t.Fatalf("create's retry = %+v, %v; want Verified", res, err)
			}
			if errA := releaseA(); !errors.Is(errA, ErrTransient) {
				t.Fatalf("leader's superseded cycle = %v; want a transient error (retried)", errA)
			}
			f.consistent(t, "after the leader's cycle")
			f.verifiedProbed(t, newSet)
			if res := settle(t, a.eng, f.ns); res.Outcome != OutcomeNoChange {
				t.Fatalf("leader's retry = %+v; want NoChange over the create's verified carrier", res)
			}
			f.verifiedProbed(t, newSet)
		})
	}
}

// TestAllowlistFromBeforeCycleNumbers: an allowlist verified before
// status.cycle and the carrier's cycle mark existed (no status.cycle, an
// unmarked carrier at status.appliedVersion) stays settled, and its next
// desired version is applied by cycle 1, marked "1".
func TestAllowlistFromBeforeCycleNumbers(t *testing.T) {
	f := newFixture(t)
	sb, err := sandbox.Get(ctx, env.Client, f.ns, "sbx", f.eng.Cluster.AllocationLabelKey())
	if err != nil && !errors.Is(err, sandbox.ErrNoAllocation) {
		t.Fatal(err)
	}
	ing := Carrier(f.eng.Cluster, sb, []string{lkgSet})
	if err := env.Client.Create(ctx, ing); err != nil {
		t.Fatal(err)
	}
	al := f.set(t, lkgSet)
	al.Status = v1alpha1.SandboxIngressAllowlistStatus{
		ObservedGeneration: al.Generation, VerificationState: v1alpha1.StateVerified,
		Applied: []string{lkgSet}, AppliedVersion: ing.ResourceVersion,
		LastVerified: []string{lkgSet}, LastVerifiedGeneration: al.Generation,
	}
	if err := env.Client.Status().Update(ctx, al); err != nil {
		t.Fatal(err)
	}
	if res := f.reconcile(t); res.Outcome != OutcomeNoChange {
		t.Fatalf("cycle over the old record = %+v; want NoChange", res)
	}
	f.set(t, newSet)
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("cycle for the next version = %+v; want Verified", res)
	}
	f.verifiedAt(t, newSet)
	if got, mark := f.allowlist(t).Status.Cycle, f.carrier(t).Annotations[AnnotationCycle]; got != 1 || mark != "1" {
		t.Fatalf("status.cycle %d, carrier mark %q; want 1 and \"1\"", got, mark)
	}
	if !IsCycleWrite(ing, f.carrier(t)) {
		t.Fatal("IsCycleWrite(unmarked, \"1\") = false; the first cycle write over an old carrier would wake another cycle")
	}
}

// verifiedProbed is verifiedAt for a carrier that also holds probe
// sources: the allowlist ends Verified for its current desired version
// with set as its LKG, and the live carrier passes CheckCarrier for it.
func (f *fixture) verifiedProbed(t *testing.T, set string) {
	t.Helper()
	al := f.allowlist(t)
	st := al.Status
	if st.VerificationState != v1alpha1.StateVerified || st.ObservedGeneration != al.Generation || !slices.Equal(st.LastVerified, []string{set}) {
		t.Fatalf("status = %s %s (observed %d of %d, LKG %v); want Verified %s for the newest desired version",
			st.VerificationState, st.LastErrorCode, st.ObservedGeneration, al.Generation, st.LastVerified, set)
	}
	f.consistent(t, "end")
}
