package lifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// timeline records the watch events of the policies and pods of one
// namespace. The test apiserver has one etcd, so resourceVersions are
// one sequence across kinds: sorted by it, the events of the two watches
// are in the order they happened.
type timeline struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	rv     int64
	kind   string // "policy", "pod"
	typ    watch.EventType
	name   string
	labels map[string]string
}

// follow watches list's kind in ns and records every event as kind until
// ctx ends; the watch is established when it returns.
func (tl *timeline) follow(t *testing.T, ctx context.Context, list client.ObjectList, ns, kind string) {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	wi, err := wc.Watch(ctx, list, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			obj, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
			if err != nil {
				continue
			}
			tl.mu.Lock()
			tl.events = append(tl.events, event{rv: rv, kind: kind, typ: ev.Type, name: obj.GetName(), labels: obj.GetLabels()})
			tl.mu.Unlock()
		}
	}()
}

// check replays the events in resourceVersion order and returns the
// moments the policy named policy was deleted while a pod carrying
// allocation label alloc existed.
func (tl *timeline) check(policy, alloc string) (violations []string, sawPolicyDeleted, sawPodDeleted bool) {
	tl.mu.Lock()
	evs := slices.Clone(tl.events)
	tl.mu.Unlock()
	slices.SortStableFunc(evs, func(a, b event) int { return int(a.rv - b.rv) })
	pods := map[string]bool{}
	for _, e := range evs {
		switch {
		case e.kind == "pod" && e.labels["allocation-id"] == alloc:
			if e.typ == watch.Deleted {
				delete(pods, e.name)
				sawPodDeleted = true
			} else {
				pods[e.name] = true
			}
		case e.kind == "policy" && e.name == policy && e.typ == watch.Deleted:
			sawPolicyDeleted = true
			if len(pods) > 0 {
				violations = append(violations, fmt.Sprintf("policy deleted at resourceVersion %d while pods %v existed", e.rv, pods))
			}
		}
	}
	return violations, sawPolicyDeleted, sawPodDeleted
}

// TestDeleteRemovesThePolicyAfterThePod deletes a sandbox whose pod runs
// and watches the policy and the pods (issue 29 item 7, spec §5.3): the
// egress policy must never be gone while a pod of the sandbox exists.
// envtest has no garbage collector and no kubelet, so the test plays
// them: when the BatchSandbox is gone it deletes the pod, as the garbage
// collector would (the pod's controller owner is gone) and the kubelet
// then would once the container stopped. At that moment the policy must
// still be there, and must not name the BatchSandbox as its owner (the
// garbage collector would otherwise delete it in parallel with the pod).
// Before the fix the delete removed the policy before the BatchSandbox.
func TestDeleteRemovesThePolicyAfterThePod(t *testing.T) {
	w := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sb := w.create(restricted)
	id := sb.SandboxID
	u := bs(w.nsA, id)
	policy := policyOf(t, w.nsA, u)
	labels, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "labels")
	alloc := labels["allocation-id"]
	pod := env.Pod(t, u, id+"-0", map[string]string{"allocation-id": alloc})

	tl := &timeline{}
	tl.follow(t, ctx, &networkingv1.NetworkPolicyList{}, w.nsA, "policy")
	tl.follow(t, ctx, &corev1.PodList{}, w.nsA, "pod")

	// The garbage collector's and the kubelet's stand-in.
	gc := make(chan error, 1)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	bsl := &unstructured.UnstructuredList{}
	bsl.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
	wi, err := wc.Watch(ctx, bsl, client.InNamespace(w.nsA))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			o, ok := ev.Object.(client.Object)
			if !ok || ev.Type != watch.Deleted || o.GetName() != id {
				continue
			}
			np := &networkingv1.NetworkPolicy{}
			switch err := get(np, w.nsA, policy); {
			case apierrors.IsNotFound(err):
				gc <- fmt.Errorf("the BatchSandbox is gone and its pod runs, but the policy %s is already gone", policy)
			case err != nil:
				gc <- err
			case slices.ContainsFunc(np.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == u.GetUID() }):
				gc <- fmt.Errorf("the policy still names the deleted BatchSandbox as owner: the garbage collector would delete it with the pod")
			default:
				gc <- env.Client.Delete(context.Background(), pod)
			}
			return
		}
	}()

	if st, raw := w.do("DELETE", "/sandboxes/"+id, "key-a", "", nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	if err := <-gc; err != nil {
		t.Fatal(err)
	}
	w.assertGone(id, policy)
	// The policy's deletion event follows the pod's in the watches.
	kubetest.Eventually(t, 10*time.Second, "both deletions seen by the watches", func() (bool, error) {
		_, p, q := tl.check(policy, alloc)
		return p && q, nil
	})
	if v, _, _ := tl.check(policy, alloc); len(v) > 0 {
		t.Fatalf("egress opened while a pod ran: %v", v)
	}
}

// TestOrphanScanKeepsThePolicyWhileItsPodRuns: a delete cut off after its
// Deleting mark, re-run by the orphan scan, removes the BatchSandbox but
// keeps the policy while the pod it selects exists (the scan does not
// wait: the policy is listed as Kept); the next scan after the pod is
// gone removes it.
func TestOrphanScanKeepsThePolicyWhileItsPodRuns(t *testing.T) {
	w := start(t)
	w.waitStartupScan(t)
	ctx := context.Background()
	half := kubetest.NewBatchSandbox(w.nsA, "halfdeleted2", map[string]string{"allocation-id": "alhalfdeleted2"})
	half.SetLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: w.cluster.ID})
	half.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: lifecycle.StateDeleting})
	if err := env.Client.Create(ctx, half); err != nil {
		t.Fatal(err)
	}
	sb := &sandbox.Sandbox{ID: "halfdeleted2", Namespace: w.nsA, UID: half.GetUID()}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: egress.PolicyName("alhalfdeleted2"), Namespace: w.nsA,
			Labels: sb.IdentityLabels(w.cluster.ID), OwnerReferences: []metav1.OwnerReference{sb.OwnerReference()}},
		Spec: egress.Compile(w.cluster, "allocation-id", "alhalfdeleted2", nil),
	}
	if err := env.Client.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	pod := env.Pod(t, half, "halfdeleted2-0", map[string]string{"allocation-id": "alhalfdeleted2"})

	w.skew.Store(int64(10 * time.Minute))
	rep, err := w.orch.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rep.Deleted, "BatchSandbox "+w.nsA+"/halfdeleted2") || len(rep.Kept) != 1 || len(rep.Failed) != 0 {
		t.Fatalf("scan with the pod running = %+v", rep)
	}
	got := &networkingv1.NetworkPolicy{}
	if err := get(got, w.nsA, np.Name); err != nil {
		t.Fatalf("the policy went while its pod runs: %v", err)
	}
	if len(got.OwnerReferences) != 0 {
		t.Fatalf("the kept policy still has owners %v (the garbage collector would take it)", got.OwnerReferences)
	}
	if err := env.Client.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if rep, err = w.orch.Scan(ctx); err != nil || !slices.Contains(rep.Deleted, "NetworkPolicy "+w.nsA+"/"+np.Name) || len(rep.Kept) != 0 {
		t.Fatalf("scan after the pod is gone = %+v, %v", rep, err)
	}
	if err := get(&networkingv1.NetworkPolicy{}, w.nsA, np.Name); !apierrors.IsNotFound(err) {
		t.Fatalf("policy after the second scan: %v", err)
	}
}

// TestOrphanScanRemovesAnExpiredProbeEcho: an echo Ingress left by a
// discovery that died is removed by the first scan after the lifetime it
// records (45 s with the default budget), the start-up scan included,
// without waiting the 5-minute grace (issue 30 item 13); one still within
// its lifetime (a discovery in flight on some replica), and one without
// the annotation, wait the grace as before.
func TestOrphanScanRemovesAnExpiredProbeEcho(t *testing.T) {
	w := start(t)
	w.waitStartupScan(t)
	ctx := context.Background()
	echo := func(path, lifetime string) *networkingv1.Ingress {
		ing := probesource.EchoIngress(w.cluster, probesource.EchoPathPrefix+path)
		if lifetime != "" {
			ing.Annotations[probesource.AnnotationEchoLifetime] = lifetime
		}
		if err := env.Client.Create(ctx, ing); err != nil {
			t.Fatal(err)
		}
		return ing
	}
	dead := echo("dead", "45s")
	inFlight := echo("inflight", "10m")
	unannotated := echo("old", "")

	w.skew.Store(int64(time.Minute))
	rep, err := w.orch.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Ingress " + w.ingNS + "/" + dead.Name}; !slices.Equal(rep.Deleted, want) || len(rep.Failed) != 0 {
		t.Fatalf("scan a minute on = %+v, want %v deleted", rep, want)
	}
	for _, ing := range []*networkingv1.Ingress{inFlight, unannotated} {
		if err := get(&networkingv1.Ingress{}, w.ingNS, ing.Name); err != nil {
			t.Fatalf("%s removed within its lifetime or grace: %v", ing.Name, err)
		}
	}
}
