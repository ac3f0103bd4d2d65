package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/browser"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/nsrights"
	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// runningPod creates the pod name of BatchSandbox owner with the
// allocation label alloc and marks it Running with IP ip, as a kubelet
// would.
func runningPod(t *testing.T, owner *unstructured.Unstructured, name, alloc, ip string) *corev1.Pod {
	t.Helper()
	p := env.Pod(t, owner, name, map[string]string{cluster.DefaultAllocationLabel: alloc})
	p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// allocationOf returns the allocation ID of sandbox ns/id.
func allocationOf(t *testing.T, ns, id string) (*unstructured.Unstructured, string) {
	t.Helper()
	u := bs(ns, id)
	sb, err := sandbox.From(u, cluster.DefaultAllocationLabel)
	if err != nil {
		t.Fatal(err)
	}
	return u, sb.AllocationID
}

// carrier reads the three sb-* objects of id (nil where absent).
func carrier(t *testing.T, ns, id string) (*networkingv1.Ingress, *corev1.Service, *discoveryv1.EndpointSlice) {
	t.Helper()
	ing, svc, eps := &networkingv1.Ingress{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}
	objs := []client.Object{ing, svc, eps}
	for i, o := range objs {
		if err := get(o, ns, browser.Name(id)); apierrors.IsNotFound(err) {
			objs[i] = nil
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if objs[0] == nil {
		ing = nil
	}
	if objs[1] == nil {
		svc = nil
	}
	if objs[2] == nil {
		eps = nil
	}
	return ing, svc, eps
}

// TestNativeBrowser is spec §4.4's Native Browser route on corectl,
// running as its service account (deploy/compute/rbac.yaml): the
// ownership check (the creating or a project-wide credential; anyone else
// the not-found answer), port 6080 only, the sb-<id> Ingress, Service and
// EndpointSlice bound to the browser pod, re-bound when the pod's IP
// changes, emptied when the pod is gone, refused for a restricted sandbox,
// removed by the sandbox's delete and by the orphan scan.
func TestNativeBrowser(t *testing.T) {
	ctx := context.Background()
	w := startAs(t, serviceAccount(t))
	w.waitStartupScan(t)
	id := w.create(`{"templateID":"base"}`).SandboxID
	u, alloc := allocationOf(t, w.nsA, id)
	native := func(key, query string) (int, string, browser.Binding) {
		t.Helper()
		var b browser.Binding
		var e struct{ Error string }
		code, raw := w.do("GET", "/api/v1/sandbox/instances/"+id+"/endpoint"+query, key, "", nil)
		if code == 200 {
			_ = json.Unmarshal(raw, &b)
		} else {
			_ = json.Unmarshal(raw, &e)
		}
		return code, e.Error, b
	}

	// No pod yet.
	if code, e, _ := native("key-a", "?port=6080"); code != 503 || e != browser.CodePodUnavailable {
		t.Fatalf("without a pod = %d %s", code, e)
	}
	p1 := runningPod(t, u, id+"-a", alloc, "10.244.0.5")
	code, _, b := native("key-a", "?port=6080")
	if code != 200 || b != (browser.Binding{SandboxID: id, Port: 6080, URL: w.entryURL + "/sandbox/" + id + "/vnc.html", Host: w.cluster.Ingress.Host}) {
		t.Fatalf("native = %d %+v", code, b)
	}
	ing, svc, eps := carrier(t, w.ingNS, id)
	if ing == nil || svc == nil || eps == nil {
		t.Fatalf("carrier %v %v %v", ing, svc, eps)
	}
	rule := ing.Spec.Rules[0]
	path := rule.HTTP.Paths[0]
	if *ing.Spec.IngressClassName != w.cluster.Ingress.ClassName || rule.Host != w.cluster.Ingress.Host ||
		path.Path != "/sandbox/"+id+"/" || *path.PathType != networkingv1.PathTypePrefix || path.Backend.Service.Name != "sb-"+id || path.Backend.Service.Port.Number != 6080 ||
		ing.Annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"] != "3600" ||
		ing.Annotations["nginx.ingress.kubernetes.io/proxy-buffering"] != "off" ||
		ing.Annotations["nginx.ingress.kubernetes.io/use-regex"] != "" || ing.Annotations["nginx.ingress.kubernetes.io/rewrite-target"] != "" {
		t.Fatalf("Ingress %+v %v", ing.Spec, ing.Annotations)
	}
	if _, restricted := ing.Annotations["nginx.ingress.kubernetes.io/whitelist-source-range"]; restricted {
		t.Fatal("an unrestricted sandbox's carrier has an allowlist")
	}
	if svc.Spec.Selector != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 6080 {
		t.Fatalf("Service %+v", svc.Spec)
	}
	binding := func(eps *discoveryv1.EndpointSlice) string {
		if len(eps.Endpoints) == 0 {
			return ""
		}
		return eps.Endpoints[0].Addresses[0] + " " + string(eps.Endpoints[0].TargetRef.UID)
	}
	if eps.Labels[discoveryv1.LabelServiceName] != "sb-"+id || eps.Labels[discoveryv1.LabelManagedBy] != browser.ManagedByEndpointSlice ||
		binding(eps) != "10.244.0.5 "+string(p1.UID) || *eps.Ports[0].Port != 6080 ||
		eps.Annotations[browser.AnnotationBinding] != fmt.Sprintf("%s/%d/%s/10.244.0.5", u.GetUID(), u.GetGeneration(), p1.UID) {
		t.Fatalf("EndpointSlice %+v", eps)
	}

	// Who may ask, and for what.
	for _, c := range []struct {
		key, query, code string
		status           int
	}{
		{"key-a2", "?port=6080", "sandbox_not_found", 404},
		{"key-b", "?port=6080", "sandbox_not_found", 404},
		{"key-a2", "?port=9222", "sandbox_not_found", 404},
		{"key-a", "?port=9222", "port_unsupported", 400},
		{"key-a", "?port=49983", "port_unsupported", 400},
		{"key-a", "", "bad_request", 400},
		{"nokey", "?port=6080", "unauthenticated", 401},
		{"key-wide", "?port=6080", "", 200},
	} {
		if code, e, _ := native(c.key, c.query); code != c.status || e != c.code {
			t.Errorf("%s %s = %d %s, want %d %s", c.key, c.query, code, e, c.status, c.code)
		}
	}
	if code, raw := w.do("GET", "/api/v1/sandbox/instances/nosuch/endpoint?port=6080", "key-a", "", nil); code != 404 {
		t.Errorf("no such sandbox = %d %s", code, raw)
	}

	// The pod is replaced with a new IP: the next request re-binds.
	if err := env.Client.Delete(ctx, p1); err != nil {
		t.Fatal(err)
	}
	p2 := runningPod(t, u, id+"-b", alloc, "10.244.0.6")
	if code, e, _ := native("key-a", "?port=6080"); code != 200 {
		t.Fatalf("after the pod's replacement = %d %s", code, e)
	}
	if _, _, eps := carrier(t, w.ingNS, id); binding(eps) != "10.244.0.6 "+string(p2.UID) {
		t.Fatalf("not re-bound: %+v", eps.Endpoints)
	}
	// The pod is gone: the binding is emptied.
	if err := env.Client.Delete(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if code, e, _ := native("key-a", "?port=6080"); code != 503 || e != browser.CodePodUnavailable {
		t.Fatalf("without the pod = %d %s", code, e)
	}
	if _, _, eps := carrier(t, w.ingNS, id); binding(eps) != "" {
		t.Fatalf("not unbound: %+v", eps.Endpoints)
	}

	// A restricted sandbox is refused and gets no carrier.
	rid := w.create(restricted).SandboxID
	ru, ralloc := allocationOf(t, w.nsA, rid)
	runningPod(t, ru, rid+"-a", ralloc, "10.244.0.7")
	var e struct{ Error string }
	if code, raw := w.do("GET", "/api/v1/sandbox/instances/"+rid+"/endpoint?port=6080", "key-a", "", &e); code != 409 || e.Error != browser.CodeRestricted {
		t.Fatalf("restricted = %d %s", code, raw)
	}
	if ing, svc, eps := carrier(t, w.ingNS, rid); ing != nil || svc != nil || eps != nil {
		t.Fatal("a restricted sandbox got a carrier")
	}

	// The delete removes the carrier.
	if st, raw := w.do("DELETE", "/sandboxes/"+id, "key-a", "", nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	if ing, svc, eps := carrier(t, w.ingNS, id); ing != nil || svc != nil || eps != nil {
		t.Fatalf("carrier left after the delete: %v %v %v", ing != nil, svc != nil, eps != nil)
	}

	// A carrier whose BatchSandbox is gone (its delete never ran) is found
	// by the orphan scan once older than the grace.
	oid := w.create(`{"templateID":"base"}`).SandboxID
	ou, oalloc := allocationOf(t, w.nsA, oid)
	runningPod(t, ou, oid+"-a", oalloc, "10.244.0.8")
	if code, raw := w.do("GET", "/api/v1/sandbox/instances/"+oid+"/endpoint?port=6080", "key-a", "", nil); code != 200 {
		t.Fatalf("native = %d %s", code, raw)
	}
	if err := env.Client.Delete(ctx, ou); err != nil {
		t.Fatal(err)
	}
	w.skew.Store(int64(10 * time.Minute)) // past the orphan scan's default grace of 5 min
	rep, err := w.orch.Scan(ctx)
	if err != nil || len(rep.Failed) != 0 {
		t.Fatalf("scan: %+v %v", rep, err)
	}
	if ing, svc, eps := carrier(t, w.ingNS, oid); ing != nil || svc != nil || eps != nil {
		t.Fatalf("orphan scan left the carrier: %+v", rep)
	}
}

var nativeSeq atomic.Int64

// TestNativeBinderRefusals is the binder's refusal table against the real
// apiserver, as corectl's service account: between the binder's first
// reads and its writes, or between its writes and its answer, the sandbox
// is deleted, deleted and created again under the same ID, its
// generation or resourceVersion moves, or its pod is replaced; each is
// refused with its code, and a binding written for the old sandbox or pod
// is never answered.
func TestNativeBinderRefusals(t *testing.T) {
	ctx := context.Background()
	sa, err := client.New(serviceAccount(t), client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns, ingNS := env.Namespace(t), env.Namespace(t)
	c := kubetest.Cluster("native", ingNS)
	grantNamespaces(t, nsrights.Grant{Namespace: ingNS, Role: nsrights.IngressRole})
	recreate := func(u *unstructured.Unstructured) {
		if err := env.Client.Delete(ctx, u); err != nil {
			t.Error(err)
		}
		env.OwnedBatchSandbox(t, u.GetNamespace(), u.GetName(), "a", map[string]string{cluster.DefaultAllocationLabel: "alloc-" + u.GetName()})
	}
	bump := func(u *unstructured.Unstructured, patch string) {
		if err := env.Client.Patch(ctx, u.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
			t.Error(err)
		}
	}
	type world struct {
		u   *unstructured.Unstructured
		pod *corev1.Pod
	}
	for _, tc := range []struct {
		name   string
		answer bool // the change happens before the answer, not before the write
		change func(w *world)
		code   string
	}{
		{"deleted", false, func(w *world) { _ = env.Client.Delete(ctx, w.u) }, browser.CodeNotFound},
		{"re-created under the same ID", false, func(w *world) { recreate(w.u) }, browser.CodeSandboxReplaced},
		{"re-created before the answer", true, func(w *world) { recreate(w.u) }, browser.CodeSandboxReplaced},
		{"generation", false, func(w *world) { bump(w.u, `{"spec":{"replicas":2}}`) }, browser.CodeGenerationChanged},
		{"resourceVersion", false, func(w *world) { bump(w.u, `{"metadata":{"annotations":{"touched":"yes"}}}`) }, browser.CodeSandboxChanged},
		{"pod replaced", false, func(w *world) {
			_ = env.Client.Delete(ctx, w.pod)
			runningPod(t, w.u, w.pod.Name+"-new", "alloc-"+w.u.GetName(), "10.244.1.9")
		}, browser.CodePodReplaced},
		{"pod replaced before the answer", true, func(w *world) {
			_ = env.Client.Delete(ctx, w.pod)
			runningPod(t, w.u, w.pod.Name+"-new", "alloc-"+w.u.GetName(), "10.244.1.9")
		}, browser.CodePodReplaced},
		{"pod gone", false, func(w *world) { _ = env.Client.Delete(ctx, w.pod) }, browser.CodePodReplaced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("nat%d", nativeSeq.Add(1))
			u := env.OwnedBatchSandbox(t, ns, id, "a", map[string]string{cluster.DefaultAllocationLabel: "alloc-" + id})
			w := &world{u: u, pod: runningPod(t, u, id+"-pod", "alloc-"+id, "10.244.1.8")}
			hook := func(context.Context, string, string) { tc.change(w) }
			b := &browser.Binder{Client: sa, Cluster: c}
			if tc.answer {
				b.BeforeAnswer = hook
			} else {
				b.BeforeWrite = hook
			}
			got, err := b.Bind(ctx, ns, id)
			if browser.CodeOf(err) != tc.code || got != nil {
				t.Fatalf("Bind = %+v, %v; want %s", got, err, tc.code)
			}
			ing, svc, eps := carrier(t, ingNS, id)
			if !tc.answer && (ing != nil || svc != nil || eps != nil) {
				t.Fatal("refused before the write, yet a carrier was written")
			}
			// Asking again binds what is there now, or refuses.
			b.BeforeWrite, b.BeforeAnswer = nil, nil
			again, err := b.Bind(ctx, ns, id)
			switch tc.code {
			case browser.CodeNotFound:
				if browser.CodeOf(err) != browser.CodeNotFound {
					t.Fatalf("again = %v", err)
				}
			case browser.CodeSandboxReplaced:
				// The new sandbox has no pod: the old binding is emptied.
				if browser.CodeOf(err) != browser.CodePodUnavailable {
					t.Fatalf("again = %+v %v", again, err)
				}
				if _, _, eps := carrier(t, ingNS, id); eps != nil && len(eps.Endpoints) != 0 {
					t.Fatalf("the re-created sandbox kept the old binding: %+v", eps.Endpoints)
				}
			case browser.CodePodReplaced:
				if tc.name == "pod gone" {
					if browser.CodeOf(err) != browser.CodePodUnavailable {
						t.Fatalf("again = %v", err)
					}
					return
				}
				if err != nil || again == nil {
					t.Fatalf("again = %v", err)
				}
				if _, _, eps := carrier(t, ingNS, id); eps.Endpoints[0].Addresses[0] != "10.244.1.9" {
					t.Fatalf("not bound to the new pod: %+v", eps.Endpoints)
				}
			default:
				if err != nil || again == nil {
					t.Fatalf("again = %v", err)
				}
			}
		})
	}

	// A carrier that is not corectl's is not written over.
	id := fmt.Sprintf("nat%d", nativeSeq.Add(1))
	u := env.OwnedBatchSandbox(t, ns, id, "a", map[string]string{cluster.DefaultAllocationLabel: "alloc-" + id})
	runningPod(t, u, id+"-pod", "alloc-"+id, "10.244.1.10")
	foreign := &corev1.Service{}
	foreign.Name, foreign.Namespace = browser.Name(id), ingNS
	foreign.Spec.Ports = []corev1.ServicePort{{Port: 80}}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if _, err := (&browser.Binder{Client: sa, Cluster: c}).Bind(ctx, ns, id); browser.CodeOf(err) != browser.CodeConflict {
		t.Fatalf("over a foreign Service: %v", err)
	}
}

// TestNativeBrowserResync: between requests the binder's resync
// (browser.Keeper's pass, run here directly) re-binds a carrier to its
// sandbox's new pod, empties it when the pod is gone, and removes it when
// the sandbox becomes restricted or its BatchSandbox disappears.
func TestNativeBrowserResync(t *testing.T) {
	ctx := context.Background()
	w := start(t)
	keeper := &browser.Binder{Client: env.Client, Cluster: w.cluster}
	bound := func(id string) string {
		t.Helper()
		_, _, eps := carrier(t, w.ingNS, id)
		if eps == nil {
			return "no carrier"
		}
		if len(eps.Endpoints) == 0 {
			return ""
		}
		return eps.Endpoints[0].Addresses[0]
	}
	sync := func() {
		t.Helper()
		if n, err := keeper.SyncAll(ctx); err != nil || n == 0 {
			t.Fatalf("SyncAll = %d, %v", n, err)
		}
	}
	id := w.create(`{"templateID":"base"}`).SandboxID
	u, alloc := allocationOf(t, w.nsA, id)
	p1 := runningPod(t, u, id+"-a", alloc, "10.244.2.1")
	if code, raw := w.do("GET", "/api/v1/sandbox/instances/"+id+"/endpoint?port=6080", "key-a", "", nil); code != 200 {
		t.Fatalf("native = %d %s", code, raw)
	}
	sync()
	if got := bound(id); got != "10.244.2.1" {
		t.Fatalf("bound to %q", got)
	}
	// A new pod with a new IP, no request: re-bound.
	if err := env.Client.Delete(ctx, p1); err != nil {
		t.Fatal(err)
	}
	p2 := runningPod(t, u, id+"-b", alloc, "10.244.2.2")
	sync()
	if got := bound(id); got != "10.244.2.2" {
		t.Fatalf("after the pod's replacement bound to %q", got)
	}
	// The pod gone: emptied.
	if err := env.Client.Delete(ctx, p2); err != nil {
		t.Fatal(err)
	}
	sync()
	if got := bound(id); got != "" {
		t.Fatalf("without a pod bound to %q", got)
	}
	// The sandbox is restricted after its carrier was made: removed.
	runningPod(t, u, id+"-c", alloc, "10.244.2.3")
	sync()
	if got := bound(id); got != "10.244.2.3" {
		t.Fatalf("with the pod back bound to %q", got)
	}
	var st map[string]any
	if code, raw := w.do("PUT", "/sandboxes/"+id+"/network/ingress", "key-a", `{"ingress":[{"cidr":"203.0.113.0/24"}]}`, &st); code != 200 {
		t.Fatalf("PUT ingress = %d %s", code, raw)
	}
	sync()
	if ing, svc, eps := carrier(t, w.ingNS, id); ing != nil || svc != nil || eps != nil {
		t.Fatal("a sandbox restricted after its carrier was made kept it")
	}

	// A BatchSandbox that disappears without corectl's delete: removed.
	oid := w.create(`{"templateID":"base"}`).SandboxID
	ou, oalloc := allocationOf(t, w.nsA, oid)
	runningPod(t, ou, oid+"-a", oalloc, "10.244.2.4")
	if code, raw := w.do("GET", "/api/v1/sandbox/instances/"+oid+"/endpoint?port=6080", "key-a", "", nil); code != 200 {
		t.Fatalf("native = %d %s", code, raw)
	}
	if err := env.Client.Delete(ctx, ou); err != nil {
		t.Fatal(err)
	}
	sync()
	if ing, svc, eps := carrier(t, w.ingNS, oid); ing != nil || svc != nil || eps != nil {
		t.Fatal("a carrier outlived its BatchSandbox")
	}
}
