package corectlcrash_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/kubetest"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// e2 narrows e1: the egress PUT that is killed.
var e2 = []string{"192.0.2.0/24"}

// policy reads the NetworkPolicy ns/name.
func (w *world) policy(name string) *networkingv1.NetworkPolicy {
	w.t.Helper()
	np := &networkingv1.NetworkPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, np); err != nil {
		w.t.Fatal(err)
	}
	return np
}

// egressKilledAtReadBack has the survivor (the leader, -egress-grace 1s)
// verify R1 and E1 for a sandbox, then sends PUT /network with E2 to
// replica "killed" and kills it after its policy write, with its read-back
// held (never sent): the policy is left Verifying with E2 and the LKG E1.
// before runs after E1 is verified and before the PUT is sent: the
// leader's recovery may take the policy left Verifying as soon as the
// Verifying mark is written (the grace is short), so whatever the
// recovery must find has to exist by then; a hook between the held
// read-back and the kill raced with it (the recovery could commit before
// the hook's object existed). It returns once the leader's egress
// recovery has taken the policy out of Verifying, with the policy log
// watched from before the PUT.
func egressKilledAtReadBack(t *testing.T, before func(w *world, id, alloc string)) (w *world, survivor *corectlProc, id, policy string, log *eventLog) {
	w = newWorld(t)
	survivor = w.start("survivor", nil, "-egress-grace", "1s")
	w.awaitLeader("")
	proxy := newAPIProxy(t, env.Config)
	killed := w.start("killed", proxy)
	id, alloc := w.managedSandbox(survivor)
	policy = egress.PolicyName(alloc)
	before(w, id, alloc)
	log = w.watchPolicies()
	path := "/apis/networking.k8s.io/v1/namespaces/" + w.ns + "/networkpolicies/" + policy
	proxy.setHold(writeThenRead(path))
	put := make(chan error, 1)
	go func() {
		_, _, err := do(t, killed.api, "PUT", "/sandboxes/"+id+"/network", egressBody(e2), nil)
		put <- err
	}()
	awaitHeld(t, proxy, put, "its read-back")
	np := w.policy(policy)
	set, err := egress.Decompile(&np.Spec)
	if err != nil || !slices.Equal(set, e2) || np.Annotations[egress.AnnotationVerificationState] != v1alpha1.StateVerifying {
		t.Fatalf("at the held read-back the policy is %s with %v %v, want Verifying with %v",
			np.Annotations[egress.AnnotationVerificationState], set, err, e2)
	}
	if lkg, _, err := egress.ParseLKG(np.Annotations[egress.AnnotationLastVerifiedSpec]); err != nil || !slices.Equal(mustDecompile(t, lkg), e1) {
		t.Fatalf("at the held read-back the policy's LKG is %v %v, want %v", lkg, err, e1)
	}
	var view egress.Status
	if code, body, err := do(t, survivor.api, "GET", "/sandboxes/"+id+"/network", "", &view); err != nil || code != 200 || view.NetworkReady {
		t.Fatalf("GET /network of the policy left Verifying = %d %s %v: ready", code, body, err)
	}
	killed.kill(t)
	if err := <-put; err == nil {
		t.Fatal("the killed replica answered the egress PUT")
	}
	kubetest.Eventually(t, 30*time.Second, "the leader to take the policy left Verifying", func() (bool, error) {
		return w.policy(policy).Annotations[egress.AnnotationVerificationState] != v1alpha1.StateVerifying, nil
	})
	return w, survivor, id, policy, log
}

func mustDecompile(t *testing.T, spec *networkingv1.NetworkPolicySpec) []string {
	t.Helper()
	set, err := egress.Decompile(spec)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// egressSettled checks the policy's end state after the takeover: its
// spec is want, its LKG is that spec (canonical), its state and error code
// are state and code, no Verifying mark is left; every version the watch
// saw (from before the PUT) allowed nothing beyond E1 ∪ E2, and the policy
// was never deleted (never unrestricted egress).
func egressSettled(t *testing.T, w *world, policy string, want []string, state, code string, log *eventLog) *networkingv1.NetworkPolicy {
	t.Helper()
	np := w.policy(policy)
	if got := mustDecompile(t, &np.Spec); !slices.Equal(got, want) {
		t.Fatalf("the policy after the takeover allows %v, want %v", got, want)
	}
	if np.Annotations[egress.AnnotationLastVerifiedSpec] != egress.Canonical(&np.Spec) ||
		np.Annotations[egress.AnnotationVerificationState] != state || np.Annotations[egress.AnnotationVerificationErrorCode] != code {
		t.Fatalf("the policy's annotations after the takeover: %v, want state %s, code %q, the LKG its spec", np.Annotations, state, code)
	}
	if _, ok := np.Annotations[v1alpha1.AnnotationVerifyingSince]; ok {
		t.Fatalf("the settled policy keeps %s", v1alpha1.AnnotationVerifyingSince)
	}
	kubetest.Eventually(t, 10*time.Second, "the watch to see the policy's last version", func() (bool, error) {
		ev := log.seen()
		return len(ev) > 0 && ev[len(ev)-1].Object.(*networkingv1.NetworkPolicy).ResourceVersion == np.ResourceVersion, nil
	})
	for _, ev := range log.seen() {
		if ev.Type == watch.Deleted {
			t.Fatalf("the policy was deleted during the takeover (unrestricted egress): %s", ev.Object.(*networkingv1.NetworkPolicy).ResourceVersion)
		}
	}
	egressNeverWider(t, log.seen(), e1)
	return np
}

// TestEgressPutKilledBeforeItsReadBack kills the replica serving a
// PUT /sandboxes/{id}/network (not the leader) after its policy write of
// E2 (narrowing E1) and before its read-back: the policy is left Verifying
// with E2 and the LKG E1, and GET /network says not ready. The leader's
// egress recovery (-egress-grace after the Verifying mark) runs the PUT's
// remaining steps on the policy as it stands: the checks pass, so it
// commits E2 as the LKG, Verified, and GET /network on the survivor is
// ready with E2; the policy was never deleted nor wider than E1.
func TestEgressPutKilledBeforeItsReadBack(t *testing.T) {
	w, survivor, id, policy, log := egressKilledAtReadBack(t, func(*world, string, string) {})
	egressSettled(t, w, policy, e2, v1alpha1.StateVerified, "", log)
	var view egress.Status
	if code, body, err := do(t, survivor.api, "GET", "/sandboxes/"+id+"/network", "", &view); err != nil || code != 200 || !view.NetworkReady ||
		view.LastVerifiedEgress == nil || len(*view.LastVerifiedEgress) != 1 || (*view.LastVerifiedEgress)[0].CIDR != e2[0] {
		t.Fatalf("GET /network after the takeover = %d %s %v", code, body, err)
	}
}

// TestEgressPutKilledBeforeItsChecks is TestEgressPutKilledBeforeItsReadBack
// with a check that fails: a user's NetworkPolicy selects the sandbox and
// allows egress to a CIDR of E1 that E2 drops, so E2 would be widened
// (PolicyConflict, as the PUT itself would have found; under E1 it is
// covered, no conflict). It is created before the killed PUT is sent: the
// recovery can start as soon as the Verifying mark is written, and when
// the policy appeared only while the PUT was held, the recovery sometimes
// committed E2 first (once in three runs). The leader's recovery must not commit E2:
// it restores the LKG E1 (state and code PolicyConflict, as the PUT's own
// rollback records, and it stays so until a PUT verifies again), and
// GET /network is not ready (NotVerified, lastErrorCode PolicyConflict);
// the policy was never deleted nor wider than E1.
func TestEgressPutKilledBeforeItsChecks(t *testing.T) {
	w, survivor, id, policy, log := egressKilledAtReadBack(t, func(w *world, id, alloc string) {
		user := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "user-wide", Namespace: w.ns},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"allocation-id": alloc}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: e1[1]}}}}},
			},
		}
		if err := env.Client.Create(context.Background(), user); err != nil {
			t.Fatal(err)
		}
	})
	egressSettled(t, w, policy, e1, v1alpha1.StatePolicyConflict, egress.CodePolicyConflict, log)
	var view egress.Status
	if code, body, err := do(t, survivor.api, "GET", "/sandboxes/"+id+"/network", "", &view); err != nil || code != 200 || view.NetworkReady ||
		view.VerificationState != v1alpha1.StatePolicyConflict || view.LastErrorCode != egress.CodePolicyConflict || view.NotReadyReason != egress.ReasonNotVerified {
		t.Fatalf("GET /network after the takeover = %d %s %v", code, body, err)
	}
}
