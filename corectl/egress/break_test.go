package egress

import (
	"context"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestConcurrentPutConflictDoesNotUndoTheOtherWriter: two PUTs read the
// same prior policy (LKG 0.0.0.0/0); A narrows to 10.0.0.1/32 and is
// answered Verified; B's write then fails on the resourceVersion
// precondition. B wrote nothing, so it must not "restore" the old LKG over
// A's verified policy: that would silently widen egress back to
// 0.0.0.0/0 after A was told 200.
func TestConcurrentPutConflictDoesNotUndoTheOtherWriter(t *testing.T) {
	f := newFixture(t)
	if res := f.put(t, "0.0.0.0/0"); res.Outcome != OutcomeVerified {
		t.Fatalf("first Put = %+v", res)
	}
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var resA *Result
	fired := false
	b := &Engine{Client: interceptor.NewClient(wc, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*networkingv1.NetworkPolicy); ok && !fired {
				fired = true
				// A runs its whole PUT between B's read and B's write.
				resA = f.put(t, "10.0.0.1/32")
			}
			return c.Update(ctx, obj, opts...)
		},
	}), Cluster: f.eng.Cluster}
	resB, err := b.Put(ctx, f.ns, "sbx", prefixes(t, "192.0.2.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	if resA == nil || resA.Outcome != OutcomeVerified {
		t.Fatalf("A = %+v", resA)
	}
	if resB.Outcome == OutcomeVerified || resB.Code != CodeConcurrentUpdate {
		t.Fatalf("B = %+v", resB)
	}
	st := f.get(t)
	if got := rulesOf(st.ConfiguredEgress); len(got) != 1 || got[0] != "10.0.0.1/32" || !st.NetworkReady {
		t.Fatalf("after A verified and B conflicted: configured %v ready %v (%s); want A's 10.0.0.1/32",
			got, st.NetworkReady, st.NotReadyReason)
	}
	if got := rulesOf(st.LastVerifiedEgress); len(got) != 1 || got[0] != "10.0.0.1/32" {
		t.Fatalf("LKG = %v, want A's 10.0.0.1/32", got)
	}
}

// TestConcurrentPutCommitConflictDoesNotUndoTheOtherWriter: A writes and
// verifies; before A commits, B runs a whole PUT and is answered Verified.
// A's commit then fails on the resourceVersion; A's rollback must not
// write the old LKG (0.0.0.0/0) over B's verified policy.
func TestConcurrentPutCommitConflictDoesNotUndoTheOtherWriter(t *testing.T) {
	f := newFixture(t)
	if res := f.put(t, "0.0.0.0/0"); res.Outcome != OutcomeVerified {
		t.Fatalf("first Put = %+v", res)
	}
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var resB *Result
	updates := 0
	a := &Engine{Client: interceptor.NewClient(wc, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*networkingv1.NetworkPolicy); ok {
				updates++
				if updates == 2 { // A's commit
					resB = f.put(t, "10.0.0.1/32")
				}
			}
			return c.Update(ctx, obj, opts...)
		},
	}), Cluster: f.eng.Cluster}
	resA, err := a.Put(ctx, f.ns, "sbx", prefixes(t, "192.0.2.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	if resB == nil || resB.Outcome != OutcomeVerified {
		t.Fatalf("B = %+v", resB)
	}
	if resA.Outcome == OutcomeVerified {
		t.Fatalf("A = %+v", resA)
	}
	st := f.get(t)
	if got := rulesOf(st.ConfiguredEgress); len(got) != 1 || got[0] != "10.0.0.1/32" || !st.NetworkReady {
		t.Fatalf("after B verified and A's commit conflicted: configured %v ready %v (%s); want B's 10.0.0.1/32 (A = %+v)",
			got, st.NetworkReady, st.NotReadyReason, resA)
	}
}
