package corectlcrash_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// e1 is the egress rule set the delete and egress tests verify first.
var e1 = []string{"192.0.2.0/24", "198.18.0.0/15"}

func egressBody(set []string) string {
	parts := make([]string, len(set))
	for i, c := range set {
		parts[i] = `{"cidr":"` + c + `"}`
	}
	return `{"defaultAction":"deny","egress":[` + strings.Join(parts, ",") + `]}`
}

// watchPolicies starts recording corectl's NetworkPolicies (label
// managed-by) in w.ns.
func (w *world) watchPolicies() *eventLog {
	return w.watchObjects(&networkingv1.NetworkPolicyList{}, w.ns, func(o runtime.Object) bool {
		np, ok := o.(*networkingv1.NetworkPolicy)
		return ok && np.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue
	})
}

// egressNeverWider checks every policy version the watch saw: each is the
// default-deny policy corectl compiles (Decompile accepts it: the DNS rule
// and ipBlocks only), and allows no CIDR beyond allowed. It returns the
// versions that were not deletions.
func egressNeverWider(t *testing.T, events []watch.Event, allowed []string) []*networkingv1.NetworkPolicy {
	t.Helper()
	var versions []*networkingv1.NetworkPolicy
	for _, ev := range events {
		np := ev.Object.(*networkingv1.NetworkPolicy)
		if ev.Type == watch.Deleted {
			continue
		}
		set, err := egress.Decompile(&np.Spec)
		if err != nil {
			t.Fatalf("policy %s version %s (%s) is not a policy corectl compiles: %v", np.Name, np.ResourceVersion, ev.Type, err)
		}
		for _, c := range set {
			if !slices.Contains(allowed, c) {
				t.Fatalf("policy %s version %s (%s) allows %s, beyond %v: widened", np.Name, np.ResourceVersion, ev.Type, c, allowed)
			}
		}
		versions = append(versions, np)
	}
	return versions
}

// managedSandbox creates BatchSandbox id owned by cred-a as corectl's
// create labels it (managed-by, this cluster: the orphan scan's
// selection), with allocation alloc, and has the survivor verify the
// ingress rules r1 and the egress rules e1 for it.
func (w *world) managedSandbox(survivor *corectlProc) (id, alloc string) {
	t := w.t
	t.Helper()
	id, alloc = newID("sb"), newID("al")
	u := kubetest.NewBatchSandbox(w.ns, id, map[string]string{"allocation-id": alloc})
	u.SetLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: w.clusterID})
	(&sandbox.Sandbox{Owner: "cred-a"}).MarkOwner(u)
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	var st ingressallow.Status
	if code, body, err := do(t, survivor.api, "PUT", "/sandboxes/"+id+"/network/ingress", rulesBody(r1), &st); err != nil || code != 200 ||
		st.VerificationState != v1alpha1.StateVerified {
		t.Fatalf("PUT ingress R1 = %d %s %v", code, body, err)
	}
	var es egress.Status
	if code, body, err := do(t, survivor.api, "PUT", "/sandboxes/"+id+"/network", egressBody(e1), &es); err != nil || code != 200 || !es.NetworkReady {
		t.Fatalf("PUT egress E1 = %d %s %v", code, body, err)
	}
	return id, alloc
}

// deleteKilledAt runs a DELETE /sandboxes/{id} on replica "killed" (not
// the leader) and kills it at the apiserver request held (method, path),
// one of the fail-closed delete's steps. at checks what is left at that
// point. Then it asserts the convergence an operator expects: while the
// sandbox is left half-deleted, a PUT /network/ingress of wider rules on
// the survivor is refused (409 sandbox_deleting); the leader's orphan
// scan finishes the delete (BatchSandbox, carrier, allowlist, policy
// gone; GET 404); the carrier never held more than R1 ∪ P and never came
// back after its deletion; the policy never allowed more than E1.
func deleteKilledAt(t *testing.T, method string, path func(w *world, id string) string, at func(w *world, id, policy string)) {
	w := newWorld(t)
	survivor := w.start("survivor", nil, "-orphan-interval", "500ms", "-orphan-grace", "5s")
	w.awaitLeader("")
	proxy := newAPIProxy(t, env.Config)
	killed := w.start("killed", proxy)
	carriers := w.watchCarriers()
	policies := w.watchPolicies()
	id, alloc := w.managedSandbox(survivor)
	policy := egress.PolicyName(alloc)

	held := path(w, id)
	proxy.setHold(func(r *http.Request) bool { return r.Method == method && r.URL.Path == held })
	deleted := make(chan error, 1)
	go func() {
		_, _, err := do(t, killed.api, "DELETE", "/sandboxes/"+id, "", nil)
		deleted <- err
	}()
	awaitHeld(t, proxy, deleted, "its "+method+" "+held)
	bs := w.batchSandbox(t, id, lifecycle.StateDeleting, "the held step")
	at(w, id, policy)
	killed.kill(t)
	if err := <-deleted; err == nil {
		t.Fatal("the killed replica answered the DELETE")
	}

	// Half-deleted: no route reopens or widens it.
	wide := append(slices.Clone(r1), "0.0.0.0/1")
	if code, body, err := do(t, survivor.api, "PUT", "/sandboxes/"+id+"/network/ingress", rulesBody(wide), nil); err != nil || code != 409 ||
		!strings.Contains(body, "sandbox_deleting") {
		t.Fatalf("PUT wider ingress rules on the half-deleted sandbox = %d %s %v", code, body, err)
	}

	w.removed(t, survivor, bs, id, policy, "the leader to finish the killed delete")
	deletedLast(t, carriers, policies)
	neverWider(t, carriers.seen(), append(slices.Clone(r1), probeSource))
	egressNeverWider(t, policies.seen(), e1)
}

// TestDeleteKilledBeforeItsCarrierDelete kills the replica serving a
// DELETE /sandboxes/{id} (not the leader) after it marked the sandbox
// Deleting and before its carrier deletion (the DELETE of the Ingress
// held, never sent): left behind are the BatchSandbox Deleting, the
// carrier of R1 ∪ P, the allowlist and the egress policy of E1. The
// leader's orphan scan finishes the delete in the fail-closed order
// (deleteKilledAt's checks). Before the scan took sandboxes left Deleting,
// nothing did: the sandbox stayed Deleting with its carrier open to R1
// and its pod running, past its end time (the expiry reconciler skips
// Deleting sandboxes).
func TestDeleteKilledBeforeItsCarrierDelete(t *testing.T) {
	deleteKilledAt(t, http.MethodDelete, func(w *world, id string) string { return w.carrierPath(id) }, func(w *world, id, policy string) {
		if ing := w.carrier(id); ing.Annotations[v1alpha1.AnnotationOwner] == "" {
			t.Fatalf("the carrier at the held delete has no owner annotation: %v", ing.Annotations)
		}
		w.allowlist(id)
	})
}

// TestDeleteKilledAfterItsCarrierDelete kills the replica serving a
// DELETE /sandboxes/{id} (not the leader) after its carrier deletion was
// confirmed and before the allowlist's deletion (held, never sent): left
// behind are the BatchSandbox Deleting, the allowlist Verified for R1 with
// no carrier, and the egress policy. The leader's ingress reconciler,
// woken by the carrier's deletion, sees a verified carrier vanish, but
// the sandbox is Deleting: it records SandboxNotFound (asserted before the
// kill) and must not write the carrier again (the revoked rule is never
// reopened); the orphan scan then finishes the
// delete (deleteKilledAt's checks, with the carrier never back after its
// deletion).
func TestDeleteKilledAfterItsCarrierDelete(t *testing.T) {
	deleteKilledAt(t, http.MethodDelete, func(w *world, id string) string {
		return "/apis/network.sandgate.io/v1alpha1/namespaces/" + w.ns + "/sandboxingressallowlists/" + id
	}, func(w *world, id, policy string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ingNS, Name: ingressallow.IngressName(id)}, &networkingv1.Ingress{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("the carrier at the held allowlist delete: %v, want it gone", err)
		}
		// The leader's cycle, woken by the carrier's deletion, found the
		// sandbox Deleting and kept it so (no carrier written).
		kubetest.Eventually(t, 10*time.Second, "the leader's cycle for the vanished carrier", func() (bool, error) {
			return w.allowlist(id).Status.LastErrorCode == ingressallow.CodeSandboxNotFound, nil
		})
	})
}
