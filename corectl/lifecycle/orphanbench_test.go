package lifecycle_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
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

// TestOrphanScanSandboxPagesAgreeWithTheTypedList: the orphan scan reads
// its BatchSandbox pages through scanmeta's SandboxPage (the JSON's
// name, namespace, UID, times, lifecycle annotation and template labels
// only); this checks, against the real apiserver and page by page, that
// it gives what the typed sandbox.CachedList page gave for every value
// the scan and sandbox.From read, so every decision is the one the typed
// page gave. The objects include every lifecycle state, none, no or an
// invalid allocation label, no template labels, a 60 KB annotation, a
// finalizer held while deleted, and another cluster's (not listed).
//
// It also records why the pages are JSON: the apiserver serves a custom
// resource's metadata list in protobuf (scanmeta.Decode reads it), but
// the scan reads spec.template.metadata.labels, and the whole object has
// no protobuf encoding (406 Not Acceptable when asked for only that).
func TestOrphanScanSandboxPagesAgreeWithTheTypedList(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	c := kubetest.Cluster(fmt.Sprintf("lc%d", clusters.Add(1)), env.Namespace(t))
	alloc := c.AllocationLabelKey()
	var objs []client.Object
	add := func(id string, tmpl map[string]string, ann map[string]string, finalizers []string) {
		u := kubetest.NewBatchSandbox(ns, id, tmpl)
		if tmpl == nil {
			unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "labels")
		}
		u.SetLabels((&sandbox.Sandbox{ID: id, Namespace: ns}).IdentityLabels(c.ID))
		u.SetAnnotations(ann)
		u.SetFinalizers(finalizers)
		objs = append(objs, u)
	}
	life := func(st string) map[string]string { return map[string]string{v1alpha1.AnnotationLifecycle: st} }
	add("ready", map[string]string{alloc: "al1", "other": "x"}, life(lifecycle.StateReady), nil)
	add("creating", map[string]string{alloc: "al2"}, life(lifecycle.StateCreating), nil)
	add("deleting", map[string]string{alloc: "al3"}, life(lifecycle.StateDeleting), nil)
	add("cleanup-failed", map[string]string{alloc: "al4"}, life(lifecycle.StateCleanupFailed), nil)
	add("no-lifecycle", map[string]string{alloc: "al5"}, nil, nil)
	add("no-alloc", map[string]string{"other": "x"}, life(lifecycle.StateReady), nil)
	add("bad-alloc", map[string]string{alloc: "NOT_an.ID"}, life(lifecycle.StateReady), nil)
	add("no-template-labels", nil, life(lifecycle.StateReady), nil)
	add("big", map[string]string{alloc: "al6"}, map[string]string{v1alpha1.AnnotationLifecycle: lifecycle.StateReady, "big": strings.Repeat("y", 60_000)}, nil)
	add("held", map[string]string{alloc: "al7"}, life(lifecycle.StateReady), []string{"example.test/hold"})
	other := kubetest.NewBatchSandbox(ns, "other-cluster", map[string]string{alloc: "al8"})
	other.SetLabels((&sandbox.Sandbox{ID: "other-cluster", Namespace: ns}).IdentityLabels("elsewhere"))
	for _, o := range append(objs, other) {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	held := objs[len(objs)-1]
	if err := env.Client.Delete(ctx, held); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(ctx, held, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})

	lister, err := scanmeta.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	managed := client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: c.ID}
	type view struct {
		Name, Namespace, UID, Created, Deleted, Lifecycle string
		HasLifecycle                                      bool
		TemplateLabels                                    map[string]string
		TemplateErr                                       string
		From                                              *sandbox.Sandbox
		FromErr                                           string
	}
	see := func(u *sandbox.Cached) view {
		v := view{Name: u.Name, Namespace: u.Namespace, UID: string(u.UID), Created: u.CreationTimestamp.UTC().String()}
		if u.DeletionTimestamp != nil {
			v.Deleted = u.DeletionTimestamp.UTC().String()
		}
		v.Lifecycle, v.HasLifecycle = sandbox.Annotation(u, v1alpha1.AnnotationLifecycle)
		tl, err := sandbox.TemplateLabels(u)
		v.TemplateLabels = tl
		if err != nil {
			v.TemplateErr = err.Error()
		}
		v.From, err = sandbox.From(u, alloc)
		if v.From != nil {
			v.From.Owner = "" // the credential annotation: the scan reads no owner
		}
		if err != nil {
			v.FromErr = err.Error()
		}
		// The scan's live sandboxes are read with AllocationID: From's
		// answer without its Sandbox.
		id, err := sandbox.AllocationID(u, alloc)
		wantID, errText := "", ""
		if v.From != nil {
			wantID = v.From.AllocationID
		}
		if err != nil {
			errText = err.Error()
		}
		if id != wantID || errText != v.FromErr {
			t.Errorf("%s: AllocationID = %q, %q; From gives %q, %q", u.Name, id, errText, wantID, v.FromErr)
		}
		return v
	}
	var (
		page      scanmeta.SandboxPage
		typedCont string
		pages     int
		seen      []string
	)
	opts := &metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set(managed)).String(), Limit: 3}
	for {
		var typed sandbox.CachedList
		if err := env.Client.List(ctx, &typed, client.InNamespace(ns), managed, client.Limit(3), client.Continue(typedCont)); err != nil {
			t.Fatal(err)
		}
		if err := lister.SandboxPage(ctx, ns, opts, &page); err != nil {
			t.Fatal(err)
		}
		var want, got []view
		for _, u := range typed.Items {
			want = append(want, see(u))
			seen = append(seen, u.Name)
		}
		for i := range page.Items {
			got = append(got, see(&page.Items[i]))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("page %d differs from the typed list's:\n got %+v\nwant %+v", pages, got, want)
		}
		pages++
		if (page.Continue == "") != (typed.Continue == "") {
			t.Fatalf("page %d: continue %q, typed %q", pages, page.Continue, typed.Continue)
		}
		if page.Continue == "" {
			break
		}
		typedCont, opts.Continue = typed.Continue, page.Continue
	}
	slices.Sort(seen)
	wantSeen := []string{"bad-alloc", "big", "cleanup-failed", "creating", "deleting", "held", "no-alloc", "no-lifecycle", "no-template-labels", "ready"}
	if pages != 4 || !slices.Equal(seen, wantSeen) {
		t.Fatalf("%d pages of %v, want 4 of %v", pages, seen, wantSeen)
	}

	// The encodings the apiserver offers for a custom resource's list.
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	get := func(accept string) (*http.Response, []byte) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(env.Config.Host, "/")+"/apis/"+sandbox.GVK.GroupVersion().String()+"/namespaces/"+ns+"/batchsandboxes", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	resp, b := get("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "application/vnd.kubernetes.protobuf") {
		t.Fatalf("the metadata list of BatchSandboxes (%s): %s, Content-Type %q", resp.Request.URL, resp.Status, ct)
	}
	if items, _, err := scanmeta.Decode(b); err != nil || len(items) != len(wantSeen)+1 {
		t.Fatalf("the metadata list of BatchSandboxes decodes to %d items, %v; want %d", len(items), err, len(wantSeen)+1)
	}
	if resp, _ := get("application/vnd.kubernetes.protobuf"); resp.StatusCode != http.StatusNotAcceptable {
		t.Fatalf("the whole BatchSandboxes in protobuf: %s, want 406 Not Acceptable", resp.Status)
	}
}
