package lifecycle_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/browser"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/corectl/scanmeta"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// seedSandboxes writes n live sandboxes' objects as a create leaves them
// (a BatchSandbox with its allocation label, its carrier Ingress and its
// verified egress NetworkPolicy with the LKG annotations) straight into
// the apiserver, 8 writers at a time, and returns the cluster they belong
// to.
func seedSandboxes(tb testing.TB, n int) *cluster.Cluster {
	tb.Helper()
	ns, ingNS := env.Namespace(tb), env.Namespace(tb)
	c := kubetest.Cluster(fmt.Sprintf("lc%d", clusters.Add(1)), ingNS)
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := seedSandbox(ctx, c, ns, fmt.Sprintf("bench%05d", i)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		tb.Fatalf("seed: %d errors, first: %v", len(errs), errs[0])
	}
	return c
}

func seedSandbox(ctx context.Context, c *cluster.Cluster, ns, id string) error {
	alloc := "al" + id
	sb := &sandbox.Sandbox{ID: id, Namespace: ns}
	u := kubetest.NewBatchSandbox(ns, id, map[string]string{c.AllocationLabelKey(): alloc})
	u.SetLabels(sb.IdentityLabels(c.ID))
	u.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: lifecycle.StateReady})
	if err := env.Client.Create(ctx, u); err != nil {
		return err
	}
	if err := env.Client.Create(ctx, ingressallow.Carrier(c, sb, []string{"203.0.113.0/24", "198.51.100.7/32"})); err != nil {
		return err
	}
	spec := egress.Compile(c, c.AllocationLabelKey(), alloc, []string{"192.0.2.0/24", "198.51.100.0/24"})
	lkg := egress.Canonical(&spec)
	return env.Client.Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: egress.PolicyName(alloc), Namespace: ns, Labels: sb.IdentityLabels(c.ID),
			Annotations: map[string]string{
				egress.AnnotationLastVerifiedSpec:      lkg,
				egress.AnnotationVerificationState:     v1alpha1.StateVerified,
				egress.AnnotationVerificationErrorCode: "",
			}},
		Spec: spec,
	})
}

// BenchmarkOrphanScan measures one orphan scan (Orchestrator.Scan) over
// the given number of live sandboxes, all past the grace, against the real
// apiserver: the BatchSandboxes, Ingresses and NetworkPolicies listed 100
// a page, nothing deleted. -benchmem gives the allocation per scan, the
// figure that drives corectl's collections while the scan runs each
// minute (docs/benchmarks.md "Issue 33: the orphan scan's allocation");
// B/sandbox is that divided by the sandboxes.
func BenchmarkOrphanScan(b *testing.B) {
	meta, err := scanmeta.New(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1000} {
		c := seedSandboxes(b, n)
		for _, lister := range []struct {
			name string
			meta *scanmeta.Lister
		}{{"metadata-client", nil}, {"scanmeta", meta}} {
			b.Run(fmt.Sprintf("sandboxes=%d/list=%s", n, lister.name), func(b *testing.B) {
				o := &lifecycle.Orchestrator{Client: env.Client, Metadata: lister.meta, Cluster: c,
					Now: func() time.Time { return time.Now().Add(time.Hour) }}
				ctx := context.Background()
				scan := func() {
					rep, err := o.Scan(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if len(rep.Deleted)+len(rep.Failed)+len(rep.Kept) > 0 {
						b.Fatalf("the scan touched live sandboxes: %+v", rep)
					}
				}
				scan() // warms the clients' connections and discovery
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					scan()
				}
				b.StopTimer()
			})
		}
	}
}

// TestOrphanScanMetadataAgreesWithTheTypedList: the orphan scan lists
// Ingresses and NetworkPolicies as metadata only (PartialObjectMetadataList)
// and decides on their metadata alone; this checks, against the real
// apiserver, that a metadata page holds the same objects in the same order
// with the same metadata as the whole typed page the scan read before, so
// every decision is the one the typed page gave. The objects include
// another writer's odd ones under corectl's labels: no sandbox ID, an
// invalid ID, no sandbox-namespace label, echo Ingresses with an
// unparsable or negative lifetime, owner references of another group
// or without controller, a finalizer held while deleted
// (deletionTimestamp set), and a 60 KB annotation.
func TestOrphanScanMetadataAgreesWithTheTypedList(t *testing.T) {
	ctx := context.Background()
	ns, ingNS := env.Namespace(t), env.Namespace(t)
	c := kubetest.Cluster(fmt.Sprintf("lc%d", clusters.Add(1)), ingNS)
	ident := func(id string) map[string]string {
		return (&sandbox.Sandbox{ID: id, Namespace: ns}).IdentityLabels(c.ID)
	}
	yes, no := true, false
	var objs []client.Object
	addIng := func(name string, labels, ann map[string]string, owners []metav1.OwnerReference, finalizers []string) {
		ing := ingressallow.Carrier(c, &sandbox.Sandbox{ID: "x", Namespace: ns}, []string{"203.0.113.0/24"})
		ing.Name, ing.Labels, ing.Annotations, ing.OwnerReferences, ing.Finalizers = name, labels, ann, owners, finalizers
		objs = append(objs, ing)
	}
	addPol := func(name string, labels, ann map[string]string, owners []metav1.OwnerReference, finalizers []string) {
		objs = append(objs, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: ann, OwnerReferences: owners, Finalizers: finalizers},
			Spec:       egress.Compile(c, c.AllocationLabelKey(), "alx", []string{"192.0.2.0/24"}),
		})
	}
	big := strings.Repeat("y", 60_000)
	without := func(l map[string]string, k string) map[string]string { delete(l, k); return l }
	with := func(l map[string]string, k, v string) map[string]string { l[k] = v; return l }
	for _, add := range []func(string, map[string]string, map[string]string, []metav1.OwnerReference, []string){addIng, addPol} {
		add("plain", ident("sbx1"), nil, nil, nil)
		add("no-id", without(ident("sbx2"), v1alpha1.LabelSandboxID), nil, nil, nil)
		add("bad-id", ident("NOT_an.ID_x"), map[string]string{"a": big}, nil, nil)
		add("no-ns", without(ident("sbx3"), v1alpha1.LabelSandboxNamespace), nil, nil, nil)
		add("echo-bad-lifetime", with(ident("sbx4"), v1alpha1.LabelProbeEcho, "true"), map[string]string{probesource.AnnotationEchoLifetime: "abc"}, nil, nil)
		add("echo-negative", with(ident("sbx5"), v1alpha1.LabelProbeEcho, ""), map[string]string{probesource.AnnotationEchoLifetime: "-5s"}, nil, nil)
		add("owners", ident("sbx6"), nil, []metav1.OwnerReference{
			{APIVersion: "other.example/v1", Kind: sandbox.GVK.Kind, Name: "sbx6", UID: "u1", Controller: &yes},
			{APIVersion: sandbox.GVK.GroupVersion().String(), Kind: sandbox.GVK.Kind, Name: "sbx6", UID: "u2", Controller: &no},
			{APIVersion: sandbox.GVK.GroupVersion().String(), Kind: sandbox.GVK.Kind, Name: "sbx6", UID: "u3"},
		}, nil)
		add("deleting", ident("sbx7"), nil, nil, []string{"example.test/hold"})
		add("native", with(ident("sbx8"), browser.LabelNative, "true"), nil, nil, nil)
		add("other-cluster", with(ident("sbx9"), v1alpha1.LabelClusterID, "elsewhere"), nil, nil, nil)
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		if len(o.GetFinalizers()) > 0 {
			if err := env.Client.Delete(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, o := range objs {
			if len(o.GetFinalizers()) > 0 {
				_ = env.Client.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
			}
		}
	})
	managed := client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: c.ID}
	lister, err := scanmeta.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		kind  string
		typed client.ObjectList
		ns    string
		metas func(client.ObjectList) []metav1.ObjectMeta
	}{
		{"Ingress", &networkingv1.IngressList{}, ingNS, func(l client.ObjectList) (out []metav1.ObjectMeta) {
			for _, i := range l.(*networkingv1.IngressList).Items {
				out = append(out, i.ObjectMeta)
			}
			return out
		}},
		{"NetworkPolicy", &networkingv1.NetworkPolicyList{}, ns, func(l client.ObjectList) (out []metav1.ObjectMeta) {
			for _, i := range l.(*networkingv1.NetworkPolicyList).Items {
				out = append(out, i.ObjectMeta)
			}
			return out
		}},
	} {
		if err := env.Client.List(ctx, k.typed, client.InNamespace(k.ns), managed, client.Limit(100)); err != nil {
			t.Fatal(err)
		}
		meta := &metav1.PartialObjectMetadataList{}
		meta.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind(k.kind + "List"))
		if err := env.Client.List(ctx, meta, client.InNamespace(k.ns), managed, client.Limit(100)); err != nil {
			t.Fatal(err)
		}
		want := k.metas(k.typed)
		if len(want) != 9 { // every object but the other cluster's
			t.Fatalf("%s: typed list has %d objects, want 9", k.kind, len(want))
		}
		// scanmeta's pages hold scanmeta.Project of the same objects.
		var wantProjected []metav1.PartialObjectMetadata
		for i := range want {
			wantProjected = append(wantProjected, scanmeta.Project(&want[i]))
		}
		items, cont, err := lister.Page(ctx, map[string]string{"Ingress": "ingresses", "NetworkPolicy": "networkpolicies"}[k.kind], k.ns, &metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(labels.Set(managed)).String(), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if cont != "" || !reflect.DeepEqual(items, wantProjected) {
			t.Errorf("%s: scanmeta's page differs from the typed list's projection:\n got %q %+v\nwant %+v", k.kind, cont, items, wantProjected)
		}
		var got []metav1.ObjectMeta
		for _, m := range meta.Items {
			got = append(got, m.ObjectMeta)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: metadata list differs from the typed list:\n got %+v\nwant %+v", k.kind, got, want)
		}
		for _, m := range got {
			if m.Name == "deleting" && m.DeletionTimestamp == nil {
				t.Errorf("%s: the deleted object has no deletionTimestamp", k.kind)
			}
		}
	}
}
