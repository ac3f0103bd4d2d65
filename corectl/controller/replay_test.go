package controller

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// runReconciler runs r in a manager of its own until t ends.
func runReconciler(t *testing.T, r *IngressReconciler) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// leader is a sandbox "sbx" in a namespace of its own, its carrier's
// ingress namespace, a cluster ID of its own (the namespace's sequence
// number in it, for -count > 1: the manager's watches select by it, so it
// reconciles no other test's allowlists into its ingress namespace), and
// the ingress reconciler running for it.
type leader struct {
	t         *testing.T
	ns, ingNS string
	c         *cluster.Cluster
	eng       *ingressallow.Engine
}

// startLeader starts a leader for cluster ID prefix-<namespace number>
// whose reconciler rechecks a cycle's own write after recheck (0: the
// default).
func startLeader(t *testing.T, prefix string, recheck time.Duration) *leader {
	ns, ingNS := env.Namespace(t), env.Namespace(t)
	env.BatchSandbox(t, ns, "sbx", map[string]string{"allocation-id": "a1"})
	c := kubetest.Cluster(prefix+"-"+strings.SplitN(ns, "-", 2)[0], ingNS)
	c.Ingress.Host = ns + ".example.test"
	l := &leader{t: t, ns: ns, ingNS: ingNS, c: c, eng: &ingressallow.Engine{Client: env.Client, Cluster: c}}
	runReconciler(t, &IngressReconciler{Engine: l.eng, Workers: 1, CycleWriteRecheck: recheck})
	return l
}

// carrier reads the sandbox's managed Ingress.
func (l *leader) carrier() *networkingv1.Ingress {
	l.t.Helper()
	ing := &networkingv1.Ingress{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: l.ingNS, Name: ingressallow.IngressName("sbx")}, ing); err != nil {
		l.t.Fatal(err)
	}
	return ing
}

// verify sets the desired rules to cidr and waits until the reconciler
// verified that version.
func (l *leader) verify(cidr string) *v1alpha1.SandboxIngressAllowlist {
	l.t.Helper()
	al, err := l.eng.SetDesired(ctx, l.ns, "sbx", []v1alpha1.IngressRule{{CIDR: cidr}})
	if err != nil {
		l.t.Fatal(err)
	}
	kubetest.Eventually(l.t, 30*time.Second, cidr+" verified", func() (bool, error) {
		cur := &v1alpha1.SandboxIngressAllowlist{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(al), cur); err != nil {
			return false, err
		}
		return cur.Status.VerificationState == v1alpha1.StateVerified && cur.Status.LastVerifiedGeneration == al.Generation, nil
	})
	return al
}

// sandbox reads the BatchSandbox as corectl sees it.
func (l *leader) sandbox() *sandbox.Sandbox {
	l.t.Helper()
	sb, err := sandbox.Get(ctx, env.Client, l.ns, "sbx", l.c.AllocationLabelKey())
	if err != nil {
		l.t.Fatal(err)
	}
	return sb
}

// TestReplayedCarrierIsRepaired: an edit that puts a saved copy of a
// managed carrier back (as `kubectl apply` of an earlier `kubectl get -o
// yaml` would) carries an earlier cycle's network.sandgate.io/cycle mark
// and the rules verified then. It is drift, not a cycle's own write, so it
// must wake a cycle that writes the verified rules again: the reconciler
// ignores only updates whose mark is later than the one before
// (ingressallow.IsCycleWrite). With marks that only had to differ, the
// replayed copy passed for a cycle's write and stayed on the carrier.
func TestReplayedCarrierIsRepaired(t *testing.T) {
	l := startLeader(t, "replay", 0)
	l.verify("198.51.100.0/24")
	saved := l.carrier()
	if saved.Annotations[ingressallow.AnnotationCycle] == "" {
		t.Fatalf("the cycle's write carries no %s mark: %v", ingressallow.AnnotationCycle, saved.Annotations)
	}
	al := l.verify("192.0.2.0/24")
	sb := l.sandbox()

	before := &v1alpha1.SandboxIngressAllowlist{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(al), before); err != nil {
		t.Fatal(err)
	}
	// Put the saved copy back over the current carrier.
	replay := l.carrier()
	replay.Annotations = saved.Annotations
	replay.Spec = saved.Spec
	if err := env.Client.Update(ctx, replay); err != nil {
		t.Fatal(err)
	}
	if code, _ := ingressallow.CheckCarrier(l.c, sb, l.carrier(), []string{"198.51.100.0/24"}); code != "" {
		t.Fatalf("the replayed copy is not on the carrier: %s", code)
	}
	cur := &v1alpha1.SandboxIngressAllowlist{}
	kubetest.Eventually(t, 30*time.Second, "the carrier repaired and the repair recorded", func() (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(al), cur); err != nil {
			return false, err
		}
		code, _ := ingressallow.CheckCarrier(l.c, sb, l.carrier(), []string{"192.0.2.0/24"})
		return code == "" && cur.Status.Cycle > before.Status.Cycle && cur.Status.VerificationState != v1alpha1.StateVerifying, nil
	})
	if cur.Status.VerificationState != v1alpha1.StateVerified || !slices.Equal(cur.Status.LastVerified, []string{"192.0.2.0/24"}) {
		t.Fatalf("status after the repair = %+v", cur.Status)
	}
}

// TestEditBehindACycleMarkIsRecheckedLater: one update that carries a
// later cycle mark and a widened whitelist is what the reconciler's
// informer sees when, after a broken watch, it re-lists and folds a
// cycle's write and a later edit into one update (or when an edit forges
// the mark). ingressallow.IsCycleWrite takes it for a cycle's own write,
// which wakes no cycle at once; the recheck CycleWriteRecheck later must
// find the drift and write the verified rules back. Without the recheck
// the widened whitelist stayed until the allowlist's next cycle.
func TestEditBehindACycleMarkIsRecheckedLater(t *testing.T) {
	l := startLeader(t, "recheck", 200*time.Millisecond)
	l.verify("198.51.100.0/24")
	sb := l.sandbox()
	before := l.carrier()
	n, err := strconv.Atoi(before.Annotations[ingressallow.AnnotationCycle])
	if err != nil {
		t.Fatalf("cycle mark %q: %v", before.Annotations[ingressallow.AnnotationCycle], err)
	}
	edited := before.DeepCopy()
	edited.Annotations[ingressallow.AnnotationCycle] = strconv.Itoa(n + 1)
	edited.Annotations["nginx.ingress.kubernetes.io/whitelist-source-range"] = "0.0.0.0/0"
	if !ingressallow.IsCycleWrite(before, edited) {
		t.Fatal("the edit does not look like a cycle's write; the test shows nothing")
	}
	if err := env.Client.Update(ctx, edited); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "the verified rules written back", func() (bool, error) {
		code, _ := ingressallow.CheckCarrier(l.c, sb, l.carrier(), []string{"198.51.100.0/24"})
		return code == "", nil
	})
}
