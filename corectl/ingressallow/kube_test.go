package ingressallow

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

var env *kubetest.Env

func TestMain(m *testing.M) { kubetest.Main(m, &env) }

var ctx = context.Background()

// fixture is kubetest's Sandbox: a sandbox namespace with BatchSandbox
// "sbx", a separate ingress namespace for the carrier (as in production)
// and a host of the test's own, and the engine under test.
type fixture struct {
	ns, ingNS string
	cr        *unstructured.Unstructured
	eng       *Engine
	rec       *kubetest.Recorder
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	sb := env.Sandbox(t, map[string]string{"allocation-id": "a1"})
	return &fixture{ns: sb.Namespace, ingNS: sb.IngressNamespace, cr: sb.CR, rec: sb.Events,
		eng: &Engine{Client: env.Client, Cluster: sb.Cluster, Events: sb.Events}}
}

// lastEvent is the last Event as "<type> <reason> <note>" ("" when none).
func (f *fixture) lastEvent() string {
	ev, ok := f.rec.Last()
	if !ok {
		return ""
	}
	return ev.Type + " " + ev.Reason + " " + ev.Note
}

func rulesOf(cidrs ...string) []v1alpha1.IngressRule {
	out, err := NormalizeRules(func() []v1alpha1.IngressRule {
		var r []v1alpha1.IngressRule
		for _, c := range cidrs {
			r = append(r, v1alpha1.IngressRule{CIDR: c})
		}
		return r
	}())
	if err != nil {
		panic(err)
	}
	return out
}

func (f *fixture) set(t *testing.T, cidrs ...string) *v1alpha1.SandboxIngressAllowlist {
	t.Helper()
	al, err := f.eng.SetDesired(ctx, f.ns, "sbx", rulesOf(cidrs...))
	if err != nil {
		t.Fatalf("SetDesired: %v", err)
	}
	return al
}

func (f *fixture) reconcile(t *testing.T) *Result {
	t.Helper()
	res, err := f.eng.Reconcile(ctx, f.ns, "sbx")
	if err != nil && !errors.Is(err, ErrTransient) {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (f *fixture) carrier(t *testing.T) *networkingv1.Ingress {
	t.Helper()
	ing := &networkingv1.Ingress{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ingNS, Name: "sandbox-ingress-sbx"}, ing)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ing
}

func (f *fixture) allowlist(t *testing.T) *v1alpha1.SandboxIngressAllowlist {
	t.Helper()
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "sbx"}, al); err != nil {
		t.Fatal(err)
	}
	return al
}

// get is the GET view of sandbox sbx (Get), which GetOf must give alike
// from a read of the BatchSandbox (as lifecycle's Status hands it the
// ownership check's read).
func (f *fixture) get(t *testing.T) *Status {
	t.Helper()
	return kubetest.SameViewFromRead(t, ctx, env.Client, f.ns, "sbx", f.eng.Get, f.eng.GetOf)
}

func cidrsOf(r *[]Rule) []string {
	if r == nil {
		return nil
	}
	out := []string{}
	for _, x := range *r {
		out = append(out, x.CIDR)
	}
	return out
}

func TestApplyWritesTheManagedIngressAndVerifies(t *testing.T) {
	f := newFixture(t)
	if st := f.get(t); st.Ready || st.NotReadyReason != ReasonNotConfigured || st.VerificationState != "" {
		t.Fatalf("before any PUT: %+v", st)
	}
	al := f.set(t, "203.0.113.0/24", "198.51.100.7")
	if st := f.get(t); st.Ready || st.VerificationState != v1alpha1.StatePending || st.DesiredVersion != al.Generation {
		t.Fatalf("after SetDesired: %+v", st)
	}
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("Reconcile = %+v", res)
	}
	ing := f.carrier(t)
	if ing == nil {
		t.Fatal("no managed Ingress")
	}
	if *ing.Spec.IngressClassName != "nginx" || len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != f.eng.Cluster.Ingress.Host {
		t.Fatalf("class/host = %+v", ing.Spec)
	}
	p := ing.Spec.Rules[0].HTTP.Paths
	if len(p) != 1 || p[0].Path != "/sbx/" || *p[0].PathType != networkingv1.PathTypePrefix ||
		p[0].Backend.Service.Name != "opensandbox-ingress" || p[0].Backend.Service.Port.Number != 80 {
		t.Fatalf("paths = %+v", p)
	}
	if ing.Annotations[AnnotationWhitelist] != "198.51.100.7/32,203.0.113.0/24" {
		t.Fatalf("whitelist = %q", ing.Annotations[AnnotationWhitelist])
	}
	if ing.Annotations[v1alpha1.AnnotationOwner] != f.ns+"/sbx/"+string(f.cr.GetUID()) || len(ing.OwnerReferences) != 0 {
		t.Fatalf("owner = %q, refs %+v (cross-namespace: annotation only)", ing.Annotations[v1alpha1.AnnotationOwner], ing.OwnerReferences)
	}
	if ing.Labels[v1alpha1.LabelManagedBy] != "corectl" || ing.Labels[v1alpha1.LabelClusterID] != "c1" ||
		ing.Labels[v1alpha1.LabelSandboxID] != "sbx" || ing.Labels[v1alpha1.LabelSandboxNamespace] != f.ns {
		t.Fatalf("labels = %v", ing.Labels)
	}
	al = f.allowlist(t)
	st := al.Status
	if st.VerificationState != "Verified" || st.ObservedGeneration != al.Generation || st.AppliedVersion != ing.ResourceVersion ||
		!slices.Equal(st.Applied, []string{"198.51.100.7/32", "203.0.113.0/24"}) || !slices.Equal(st.LastVerified, st.Applied) ||
		st.LastErrorCode != "" || st.CarrierRef == nil || st.CarrierRef.Path != "/sbx/" {
		t.Fatalf("status = %+v", st)
	}
	if !meta.IsStatusConditionTrue(st.Conditions, ConditionVerified) || !meta.IsStatusConditionTrue(st.Conditions, ConditionReady) {
		t.Fatalf("conditions = %+v", st.Conditions)
	}
	if len(al.OwnerReferences) != 1 || al.OwnerReferences[0].UID != f.cr.GetUID() {
		t.Fatalf("allowlist owner = %+v", al.OwnerReferences)
	}
	got := f.get(t)
	if !got.Ready || got.VerificationState != "Verified" || got.AppliedVersion != ing.ResourceVersion ||
		!slices.Equal(cidrsOf(got.Configured), []string{"198.51.100.7/32", "203.0.113.0/24"}) ||
		!slices.Equal(cidrsOf(got.LastVerified), cidrsOf(got.Applied)) || got.CarrierRef.IngressClass != "nginx" {
		t.Fatalf("Get = %+v", got)
	}
	if ev := f.lastEvent(); !strings.HasPrefix(ev, "Normal IngressVerified") {
		t.Fatalf("event = %q", ev)
	}
	if res := f.reconcile(t); res.Outcome != OutcomeNoChange {
		t.Fatalf("second Reconcile = %+v, want NoChange", res)
	}

	// A full replacement.
	f.set(t, "192.0.2.1")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("Reconcile = %+v", res)
	}
	if v := f.carrier(t).Annotations[AnnotationWhitelist]; v != "192.0.2.1/32" {
		t.Fatalf("whitelist after replacement = %q", v)
	}
}

func TestSameNamespaceCarrierHasOwnerReference(t *testing.T) {
	f := newFixture(t)
	f.eng.Cluster.Ingress.Namespace = f.ns
	f.ingNS = f.ns
	f.set(t, "10.0.0.0/8")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("Reconcile = %+v", res)
	}
	refs := f.carrier(t).OwnerReferences
	if len(refs) != 1 || refs[0].UID != f.cr.GetUID() || refs[0].Kind != "BatchSandbox" || !*refs[0].Controller {
		t.Fatalf("ownerReferences = %+v", refs)
	}
}

// claimant is a foreign Ingress "shortcut" in namespace ns of class nginx
// whose one rule claims path on host.
func claimant(ns, host, path string) *networkingv1.Ingress {
	nginx := "nginx"
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "shortcut", Namespace: ns},
		Spec: networkingv1.IngressSpec{IngressClassName: &nginx, Rules: []networkingv1.IngressRule{{Host: host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: path, PathType: ptr(networkingv1.PathTypePrefix),
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "x", Port: networkingv1.ServiceBackendPort{Number: 1}}},
			}}}}}}},
	}
}

func TestAnotherIngressClaimingThePathFails(t *testing.T) {
	f := newFixture(t)
	other := env.Namespace(t)
	intruder := claimant(other, f.eng.Cluster.Ingress.Host, "/sbx/44772")
	if err := env.Client.Create(ctx, intruder); err != nil {
		t.Fatal(err)
	}
	f.set(t, "10.0.0.0/8")
	res := f.reconcile(t)
	if res.Outcome != OutcomeCarrierDeleted || res.Code != CodePathClaimed {
		t.Fatalf("Reconcile = %+v", res)
	}
	if f.carrier(t) != nil {
		t.Fatal("carrier kept although the path is claimed and there is no LKG")
	}
	st := f.get(t)
	if st.Ready || st.VerificationState != v1alpha1.StateUnverifiedSpec || st.LastErrorCode != CodePathClaimed || st.Applied != nil {
		t.Fatalf("Get = %+v", st)
	}

	// With an LKG, the LKG stays on the carrier.
	if err := env.Client.Delete(ctx, intruder); err != nil {
		t.Fatal(err)
	}
	f.set(t, "10.0.0.0/8")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("Reconcile = %+v", res)
	}
	intruder.ResourceVersion = ""
	if err := env.Client.Create(ctx, intruder); err != nil {
		t.Fatal(err)
	}
	f.set(t, "0.0.0.0/0")
	res = f.reconcile(t)
	if res.Outcome != OutcomeLKGRestored || res.Code != CodePathClaimed {
		t.Fatalf("Reconcile = %+v", res)
	}
	if v := f.carrier(t).Annotations[AnnotationWhitelist]; v != "10.0.0.0/8" {
		t.Fatalf("whitelist = %q, want the LKG", v)
	}
	st = f.get(t)
	if st.Ready || st.NotReadyReason != ReasonNotVerified || !slices.Equal(st.Claimants, []string{other + "/shortcut"}) ||
		!slices.Equal(cidrsOf(st.Applied), []string{"10.0.0.0/8"}) || !slices.Equal(cidrsOf(st.LastVerified), []string{"10.0.0.0/8"}) ||
		(*st.Desired)[0].CIDR != "0.0.0.0/0" {
		t.Fatalf("Get = %+v", st)
	}
	if ev := f.lastEvent(); !strings.HasPrefix(ev, "Warning IngressUpdateFailed update failed, LKG restored") {
		t.Fatalf("event = %q", ev)
	}
}

func ptr[T any](v T) *T { return &v }

func TestDriftIsReportedAndRepaired(t *testing.T) {
	f := newFixture(t)
	f.set(t, "10.0.0.0/8")
	f.reconcile(t)
	ing := f.carrier(t)
	ing.Annotations[AnnotationWhitelist] = "0.0.0.0/0"
	if err := env.Client.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	st := f.get(t)
	if st.Ready || st.NotReadyReason != ReasonCarrierDrift || !slices.Equal(cidrsOf(st.Configured), []string{"0.0.0.0/0"}) {
		t.Fatalf("Get after drift = %+v", st)
	}
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("Reconcile after drift = %+v", res)
	}
	if v := f.carrier(t).Annotations[AnnotationWhitelist]; v != "10.0.0.0/8" {
		t.Fatalf("whitelist = %q", v)
	}
	// A missing carrier is re-created.
	if err := env.Client.Delete(ctx, f.carrier(t)); err != nil {
		t.Fatal(err)
	}
	if st := f.get(t); st.Ready || st.NotReadyReason != ReasonCarrierMissing {
		t.Fatalf("Get without carrier = %+v", st)
	}
	if res := f.reconcile(t); res.Outcome != OutcomeVerified || f.carrier(t) == nil {
		t.Fatalf("Reconcile without carrier = %+v", res)
	}
}

// verifiedCarrierWith verifies a carrier of 10.0.0.0/8, adds the
// annotations add to it as someone else would, and returns the fixture
// and what CheckCarrier then says of the carrier.
func verifiedCarrierWith(t *testing.T, add map[string]string) (f *fixture, code, reason string) {
	t.Helper()
	f = newFixture(t)
	f.set(t, "10.0.0.0/8")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("first Reconcile = %+v", res)
	}
	ing := f.carrier(t)
	maps.Copy(ing.Annotations, add)
	if err := env.Client.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.Get(ctx, env.Client, f.ns, "sbx", f.eng.Cluster.AllocationLabelKey())
	if err != nil {
		t.Fatal(err)
	}
	code, reason = CheckCarrier(f.eng.Cluster, sb, f.carrier(t), []string{"10.0.0.0/8"})
	return f, code, reason
}

// TestSnippetOnACarrierIsDriftAndRemoved: an ingress-nginx snippet
// annotation added to a verified carrier (raw nginx configuration that
// could get around the whitelist) makes the read-back fail and Get report
// drift; the next cycle writes the carrier without any snippet, keeps the
// other annotations someone added and the whitelist, and verifies it.
func TestSnippetOnACarrierIsDriftAndRemoved(t *testing.T) {
	f, code, reason := verifiedCarrierWith(t, map[string]string{
		"nginx.ingress.kubernetes.io/configuration-snippet": "allow all;",
		"nginx.ingress.kubernetes.io/server-snippet":        "location / { return 200; }",
		"example.com/team": "platform",
		"nginx.ingress.kubernetes.io/proxy-body-size": "64m",
	})
	if code != CodeCarrierMismatch || !strings.Contains(reason, "nginx.ingress.kubernetes.io/configuration-snippet") ||
		strings.Contains(reason, "allow all") {
		t.Fatalf("CheckCarrier with snippets = %q %q; want %s naming the first snippet, not its value", code, reason, CodeCarrierMismatch)
	}
	if st := f.get(t); st.Ready || st.NotReadyReason != ReasonCarrierDrift {
		t.Fatalf("Get with snippets = %+v", st)
	}
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("Reconcile with snippets = %+v", res)
	}
	got := f.carrier(t).Annotations
	for k := range got {
		if snippetAnnotation(k) {
			t.Errorf("the carrier kept %s", k)
		}
	}
	if got["example.com/team"] != "platform" || got["nginx.ingress.kubernetes.io/proxy-body-size"] != "64m" || got[AnnotationWhitelist] != "10.0.0.0/8" {
		t.Errorf("annotations after the cycle = %v; want the other additions and the whitelist kept", got)
	}
	if st := f.get(t); !st.Ready {
		t.Fatalf("Get after the cycle = %+v", st)
	}
}

// TestBreakWhitelistOverrideOnACarrier: ingress-nginx reads
// allowlist-source-range first and falls back to whitelist-source-range
// (its alias) only when allowlist-source-range is empty (parser
// checkAnnotation, ipallowlist), and `satisfy: any` lets a request that
// passes an auth check (auth-url) in from outside the allow list. Either
// added to a verified carrier opens it while whitelist-source-range still
// reads as desired: the read-back must refuse it (naming the key, not the
// value), GET must report drift, and the next cycle must drop it.
func TestBreakWhitelistOverrideOnACarrier(t *testing.T) {
	for _, add := range []map[string]string{
		{"nginx.ingress.kubernetes.io/allowlist-source-range": "0.0.0.0/0"},
		{"nginx.ingress.kubernetes.io/satisfy": "any", "nginx.ingress.kubernetes.io/auth-url": "http://open.example/ok"},
	} {
		f, code, reason := verifiedCarrierWith(t, add)
		if code != CodeCarrierMismatch || strings.Contains(reason, "0.0.0.0/0") || strings.Contains(reason, "any") {
			t.Errorf("CheckCarrier with %v = %q %q; want %s naming the key, not the value", add, code, reason, CodeCarrierMismatch)
		}
		if st := f.get(t); st.Ready || st.NotReadyReason != ReasonCarrierDrift {
			t.Errorf("Get with %v = %+v", add, st)
		}
		if res := f.reconcile(t); res.Outcome != OutcomeVerified {
			t.Fatalf("Reconcile with %v = %+v", add, res)
		}
		got := f.carrier(t).Annotations
		for _, k := range []string{"nginx.ingress.kubernetes.io/allowlist-source-range", "nginx.ingress.kubernetes.io/satisfy"} {
			if _, ok := got[k]; ok {
				t.Errorf("the carrier kept %s after a cycle: %v", k, got)
			}
		}
	}
}

// TestCarrierAnnotations: a write over a live carrier keeps what others
// added except snippet annotations, and corectl's own values win.
func TestCarrierAnnotations(t *testing.T) {
	cur := map[string]string{
		"nginx.ingress.kubernetes.io/configuration-snippet": "allow all;",
		"nginx.ingress.kubernetes.io/auth-snippet":          "x",
		"nginx.ingress.kubernetes.io/proxy-body-size":       "64m",
		"example.com/x-snippet":                             "kept: not ingress-nginx's",
		AnnotationWhitelist:                                 "0.0.0.0/0",
	}
	want := map[string]string{AnnotationWhitelist: "10.0.0.0/8", v1alpha1.AnnotationOwner: "o"}
	got := carrierAnnotations(cur, want)
	exp := map[string]string{
		"nginx.ingress.kubernetes.io/proxy-body-size": "64m",
		"example.com/x-snippet":                       "kept: not ingress-nginx's",
		AnnotationWhitelist:                           "10.0.0.0/8",
		v1alpha1.AnnotationOwner:                      "o",
	}
	if !maps.Equal(got, exp) {
		t.Fatalf("carrierAnnotations = %v, want %v", got, exp)
	}
	if len(cur) != 5 {
		t.Errorf("carrierAnnotations changed its input: %v", cur)
	}
	for k, want := range map[string]bool{
		"nginx.ingress.kubernetes.io/configuration-snippet":  true,
		"nginx.ingress.kubernetes.io/server-snippet":         true,
		"nginx.ingress.kubernetes.io/stream-snippet":         true,
		"nginx.ingress.kubernetes.io/whitelist-source-range": false,
		"nginx.ingress.kubernetes.io/snippet-x":              false,
		"ingress.kubernetes.io/configuration-snippet":        false,
	} {
		if snippetAnnotation(k) != want {
			t.Errorf("snippetAnnotation(%q) = %v, want %v", k, !want, want)
		}
	}
	for k, want := range map[string]bool{
		"nginx.ingress.kubernetes.io/configuration-snippet":  true,
		"nginx.ingress.kubernetes.io/allowlist-source-range": true,
		"nginx.ingress.kubernetes.io/satisfy":                true,
		"nginx.ingress.kubernetes.io/whitelist-source-range": false,
		"nginx.ingress.kubernetes.io/denylist-source-range":  false,
		"nginx.ingress.kubernetes.io/proxy-body-size":        false,
		"example.com/allowlist-source-range":                 false,
	} {
		if refusedAnnotation(k) != want {
			t.Errorf("refusedAnnotation(%q) = %v, want %v", k, !want, want)
		}
	}
	got = carrierAnnotations(map[string]string{
		"nginx.ingress.kubernetes.io/allowlist-source-range": "0.0.0.0/0",
		"nginx.ingress.kubernetes.io/satisfy":                "any",
		"nginx.ingress.kubernetes.io/denylist-source-range":  "192.0.2.1",
	}, want)
	exp = map[string]string{
		"nginx.ingress.kubernetes.io/denylist-source-range": "192.0.2.1",
		AnnotationWhitelist:      "10.0.0.0/8",
		v1alpha1.AnnotationOwner: "o",
	}
	if !maps.Equal(got, exp) {
		t.Fatalf("carrierAnnotations over an override = %v, want %v", got, exp)
	}
}

// withWatch is a client of the envtest apiserver for interceptor.
func withWatch(t *testing.T) client.WithWatch {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return wc
}

// writes counts a cycle's writes: Ingress creates and updates, and
// status updates of the allowlist with the verification state each wrote.
type writes struct {
	mu       sync.Mutex
	ingress  int
	statuses []string
}

func (w *writes) client(t *testing.T) client.Client {
	ingress := func(obj client.Object) {
		if _, ok := obj.(*networkingv1.Ingress); ok {
			w.mu.Lock()
			w.ingress++
			w.mu.Unlock()
		}
	}
	return interceptor.NewClient(withWatch(t), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			ingress(obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			ingress(obj)
			return c.Update(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if al, ok := obj.(*v1alpha1.SandboxIngressAllowlist); ok {
				w.mu.Lock()
				w.statuses = append(w.statuses, al.Status.VerificationState)
				w.mu.Unlock()
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
}

// TestCycleOverACarrierThatHoldsDesiredWritesNothing: a new desired
// version whose carrier already holds it (the same rules again, or a
// carrier the create orchestration wrote) is verified from the carrier as
// read in the cycle: no Ingress write, no Verifying state, one status
// write (Verified), and the applied version is the carrier's unchanged
// resourceVersion. A carrier that differs is written as before.
func TestCycleOverACarrierThatHoldsDesiredWritesNothing(t *testing.T) {
	f := newFixture(t)
	var w writes
	f.eng.Client = w.client(t)
	f.set(t, "203.0.113.0/24")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("first cycle = %+v", res)
	}
	if w.ingress != 1 || !slices.Equal(w.statuses, []string{"Verifying", "Verified"}) {
		t.Fatalf("first cycle wrote the Ingress %d times, statuses %v; want 1 and [Verifying Verified]", w.ingress, w.statuses)
	}
	rv := f.carrier(t).ResourceVersion

	w = writes{}
	al := f.set(t, "203.0.113.0/24")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("cycle over a carrier that holds desired = %+v", res)
	}
	if w.ingress != 0 || !slices.Equal(w.statuses, []string{"Verified"}) {
		t.Fatalf("cycle over a carrier that holds desired wrote the Ingress %d times, statuses %v; want 0 and [Verified]", w.ingress, w.statuses)
	}
	if got := f.carrier(t).ResourceVersion; got != rv {
		t.Fatalf("carrier resourceVersion %s, was %s: written", got, rv)
	}
	st := f.allowlist(t).Status
	if st.VerificationState != "Verified" || st.ObservedGeneration != al.Generation || st.AppliedVersion != rv ||
		!slices.Equal(st.Applied, []string{"203.0.113.0/24"}) || !slices.Equal(st.LastVerified, st.Applied) {
		t.Fatalf("status = %+v", st)
	}
	if g := f.get(t); !g.Ready {
		t.Fatalf("Get = %+v", g)
	}

	// A carrier whose allowlist was edited does not hold desired: it is
	// written again.
	w = writes{}
	ing := f.carrier(t)
	ing.Annotations[AnnotationWhitelist] = "203.0.113.7/32"
	if err := env.Client.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	f.set(t, "203.0.113.0/24")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("cycle over a changed carrier = %+v", res)
	}
	if w.ingress != 1 || !slices.Equal(w.statuses, []string{"Verifying", "Verified"}) {
		t.Fatalf("cycle over a changed carrier wrote the Ingress %d times, statuses %v", w.ingress, w.statuses)
	}
}

// TestCreateDesiredCreatesAndNeverOverwrites: CreateDesired writes a
// missing allowlist without reading it first. When it exists (a PUT made
// it after the BatchSandbox appeared), it writes nothing and returns the
// existing allowlist as read: the PUT's rules and version stand. An
// allowlist owned by another BatchSandbox of that name is refused
// (ErrNotOwned), and one being deleted is sandbox.ErrDeleting.
func TestCreateDesiredCreatesAndNeverOverwrites(t *testing.T) {
	f := newFixture(t)
	var gets, writes int
	f.eng.Client = interceptor.NewClient(withWatch(t), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.SandboxIngressAllowlist); ok {
				gets++
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes++
			return c.Update(ctx, obj, opts...)
		},
	})
	sb, err := sandbox.Get(ctx, env.Client, f.ns, "sbx", f.eng.Cluster.AllocationLabelKey())
	if err != nil {
		t.Fatal(err)
	}
	al, err := f.eng.CreateDesired(ctx, sb, rulesOf("203.0.113.0/24"))
	if err != nil || gets != 0 || al.Spec.Revision != 1 || al.ResourceVersion == "" {
		t.Fatalf("CreateDesired on a new sandbox = %+v, %v after %d reads; want revision 1 and no read", al, err, gets)
	}
	// What a PUT does meanwhile.
	put := f.set(t, "198.51.100.0/24")
	gets, writes = 0, 0
	al, err = f.eng.CreateDesired(ctx, sb, rulesOf("192.0.2.0/24"))
	if err != nil || gets != 1 || writes != 0 || al.Generation != put.Generation || al.ResourceVersion != put.ResourceVersion ||
		!slices.Equal(CIDRs(al.Spec.Desired), []string{"198.51.100.0/24"}) {
		t.Fatalf("CreateDesired over the PUT's allowlist = %+v, %v after %d reads and %d updates; want the PUT's object after one read, no write", al, err, gets, writes)
	}
	if got := f.allowlist(t); got.Spec.Revision != 2 || !slices.Equal(CIDRs(got.Spec.Desired), []string{"198.51.100.0/24"}) ||
		len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != f.cr.GetUID() {
		t.Fatalf("stored allowlist = %+v", got)
	}

	// Another BatchSandbox of the same name (another UID) never adopts it.
	other := *sb
	other.UID = "00000000-0000-0000-0000-000000000001"
	if _, err := f.eng.CreateDesired(ctx, &other, rulesOf("192.0.2.0/24")); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("CreateDesired for another BatchSandbox UID = %v, want ErrNotOwned", err)
	}
	// Being deleted (a finalizer holds it).
	got := f.allowlist(t)
	got.Finalizers = []string{"example.com/hold"}
	if err := env.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		got := f.allowlist(t)
		got.Finalizers = nil
		_ = env.Client.Update(ctx, got)
	})
	if _, err := f.eng.CreateDesired(ctx, sb, rulesOf("192.0.2.0/24")); !errors.Is(err, sandbox.ErrDeleting) {
		t.Fatalf("CreateDesired over an allowlist being deleted = %v, want sandbox.ErrDeleting", err)
	}
	if got := f.allowlist(t); !slices.Equal(CIDRs(got.Spec.Desired), []string{"198.51.100.0/24"}) {
		t.Fatalf("stored allowlist after the refusals = %+v", got.Spec)
	}
}

func TestForeignIngressIsNeverOverwritten(t *testing.T) {
	f := newFixture(t)
	nginx := "nginx"
	foreign := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-ingress-sbx", Namespace: f.ingNS},
		Spec: networkingv1.IngressSpec{IngressClassName: &nginx, DefaultBackend: &networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: "x", Port: networkingv1.ServiceBackendPort{Number: 1}}}}}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	rv := f.carrier(t).ResourceVersion
	f.set(t, "10.0.0.0/8")
	if res := f.reconcile(t); res.Outcome != OutcomeKept || res.Code != CodeCarrierForeign {
		t.Fatalf("Reconcile = %+v", res)
	}
	if f.carrier(t).ResourceVersion != rv {
		t.Fatal("foreign Ingress written")
	}
}

func TestMissingSandbox(t *testing.T) {
	f := newFixture(t)
	if _, err := f.eng.SetDesired(ctx, f.ns, "nope", rulesOf("10.0.0.0/8")); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("SetDesired for a missing sandbox: %v", err)
	}
	if _, err := f.eng.Get(ctx, f.ns, "nope"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Get for a missing sandbox: %v", err)
	}
	f.set(t, "10.0.0.0/8")
	if err := env.Client.Delete(ctx, f.cr); err != nil {
		t.Fatal(err)
	}
	if res := f.reconcile(t); res.Outcome != OutcomeKept || res.Code != CodeSandboxNotFound || f.carrier(t) != nil {
		t.Fatalf("Reconcile for a deleted sandbox = %+v", res)
	}
}

// fault names one apiserver call of a cycle to fail: on Ingresses ("ing")
// or the allowlist ("al", its status updates as verb "status"); with
// Mutate a get reads back a widened whitelist.
type fault = kubetest.Fault

// faulty wraps the envtest client and fails (or alters) the calls given.
func faulty(faults ...fault) client.Client {
	kindOf := func(obj any) string {
		switch obj.(type) {
		case *networkingv1.Ingress, *networkingv1.IngressList:
			return "ing"
		case *v1alpha1.SandboxIngressAllowlist:
			return "al"
		}
		return ""
	}
	widen := func(obj client.Object) {
		ing := obj.(*networkingv1.Ingress)
		ing.Annotations[AnnotationWhitelist] += ",0.0.0.0/0"
	}
	return env.FaultyClient(kindOf, widen, faults...)
}

// TestInjectedFailuresKeepTheLKGAndNeverWiden fails each apiserver call
// of a cycle in turn. With an LKG, the carrier ends holding exactly the
// LKG (or the outcome is StateUncertain, state Indeterminate, and a retry
// with a healthy apiserver converges); without one, the carrier is gone.
// The LKG in status never advances on failure.
func TestInjectedFailuresKeepTheLKGAndNeverWiden(t *testing.T) {
	// Cycle calls over an LKG: get ing#1, status#1 (Verifying), update
	// ing#1, get ing#2 (read back), list ing#1, status#2 (finish);
	// rollback over the version read back: update ing#2, get ing#3. A
	// failed write is followed by get ing#2, which finds the version the
	// cycle read (the write did not apply), the rollback's base.
	for _, tc := range []struct {
		name    string
		faults  []fault
		outcome Outcome
		code    string
	}{
		{"write", []fault{{Verb: "update", Kind: "ing", N: 1}}, OutcomeLKGRestored, CodeWriteFailed},
		{"read back", []fault{{Verb: "get", Kind: "ing", N: 2}}, OutcomeLKGRestored, CodeReadFailed},
		{"read back differs", []fault{{Verb: "get", Kind: "ing", N: 2, Mutate: true}}, OutcomeLKGRestored, CodeAllowlistMismatch},
		{"list", []fault{{Verb: "list", Kind: "ing", N: 1}}, OutcomeLKGRestored, CodeReadFailed},
		{"write and restore", []fault{{Verb: "update", Kind: "ing", N: 1}, {Verb: "update", Kind: "ing", N: 2}}, OutcomeStateUncertain, CodeWriteFailed},
		{"read back and restore read back", []fault{{Verb: "get", Kind: "ing", N: 2}, {Verb: "get", Kind: "ing", N: 3, Mutate: true}}, OutcomeStateUncertain, CodeReadFailed},
	} {
		t.Run("with LKG/"+tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.set(t, "10.0.0.0/8")
			f.reconcile(t)
			f.set(t, "0.0.0.0/0")
			f.eng.Client = faulty(tc.faults...)
			res := f.reconcile(t)
			if res.Outcome != tc.outcome || res.Code != tc.code {
				t.Fatalf("Reconcile = %+v, want %s/%s", res, tc.outcome, tc.code)
			}
			al := f.allowlist(t)
			if !slices.Equal(al.Status.LastVerified, []string{"10.0.0.0/8"}) {
				t.Fatalf("LKG moved: %v", al.Status.LastVerified)
			}
			v := f.carrier(t).Annotations[AnnotationWhitelist]
			if tc.outcome == OutcomeLKGRestored {
				if v != "10.0.0.0/8" || al.Status.VerificationState != v1alpha1.StateUnverifiedSpec || !slices.Equal(al.Status.Applied, []string{"10.0.0.0/8"}) {
					t.Fatalf("after restore: whitelist %q, status %+v", v, al.Status)
				}
				return
			}
			if al.Status.VerificationState != v1alpha1.StateIndeterminate {
				t.Fatalf("uncertain: status %+v", al.Status)
			}
			// A retry with a healthy apiserver converges: the desired
			// version is applied (the fault was in the apiserver, not in
			// the rules).
			f.eng.Client = env.Client
			if res := f.reconcile(t); res.Outcome != OutcomeVerified {
				t.Fatalf("retry = %+v", res)
			}
		})
	}
	// First cycle (no LKG): get ing#1 (not found), status#1, create ing#1,
	// get ing#2, list, status#2; rollback over the version read back:
	// delete, get ing#3.
	for _, tc := range []struct {
		name    string
		faults  []fault
		outcome Outcome
		code    string
	}{
		{"create", []fault{{Verb: "create", Kind: "ing", N: 1}}, OutcomeCarrierDeleted, CodeWriteFailed},
		{"read back differs", []fault{{Verb: "get", Kind: "ing", N: 2, Mutate: true}}, OutcomeCarrierDeleted, CodeAllowlistMismatch},
		{"list", []fault{{Verb: "list", Kind: "ing", N: 1}}, OutcomeCarrierDeleted, CodeReadFailed},
		{"list and delete", []fault{{Verb: "list", Kind: "ing", N: 1}, {Verb: "delete", Kind: "ing", N: 1}}, OutcomeStateUncertain, CodeReadFailed},
	} {
		t.Run("first/"+tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.set(t, "0.0.0.0/0")
			f.eng.Client = faulty(tc.faults...)
			res := f.reconcile(t)
			if res.Outcome != tc.outcome || res.Code != tc.code {
				t.Fatalf("Reconcile = %+v, want %s/%s", res, tc.outcome, tc.code)
			}
			al := f.allowlist(t)
			if al.Status.LastVerified != nil {
				t.Fatalf("LKG set by a failed cycle: %v", al.Status.LastVerified)
			}
			if tc.outcome == OutcomeCarrierDeleted && f.carrier(t) != nil {
				t.Fatal("carrier kept")
			}
		})
	}
	t.Run("status write fails before anything is written", func(t *testing.T) {
		f := newFixture(t)
		f.set(t, "10.0.0.0/8")
		f.eng.Client = faulty(fault{Verb: "status", Kind: "al", N: 1})
		if _, err := f.eng.Reconcile(ctx, f.ns, "sbx"); !errors.Is(err, ErrTransient) {
			t.Fatalf("Reconcile = %v, want ErrTransient", err)
		}
		if f.carrier(t) != nil {
			t.Fatal("carrier written although Verifying could not be recorded")
		}
	})
}

// TestSameSandboxIDInAnotherNamespaceClaimsThePath: two project
// namespaces with a sandbox of the same ID on one fixed entry; the second
// carrier would share /sbx/ with the first, so it is refused.
func TestSameSandboxIDInAnotherNamespaceClaimsThePath(t *testing.T) {
	f := newFixture(t)
	f.set(t, "10.0.0.0/8")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("first = %+v", res)
	}
	g := newFixture(t)
	g.eng.Cluster.Ingress = f.eng.Cluster.Ingress
	g.ingNS = f.ingNS
	// The carrier name is per sandbox ID, so in a shared ingress namespace
	// the second sandbox finds the first one's carrier: not its own.
	g.set(t, "0.0.0.0/0")
	if res := g.reconcile(t); res.Outcome != OutcomeKept || res.Code != CodeCarrierForeign {
		t.Fatalf("second, shared ingress namespace = %+v", res)
	}
	// With separate ingress namespaces, the path claim is what refuses it.
	h := newFixture(t)
	h.eng.Cluster.Ingress.Host = f.eng.Cluster.Ingress.Host
	h.set(t, "0.0.0.0/0")
	res := h.reconcile(t)
	if res.Outcome != OutcomeCarrierDeleted || res.Code != CodePathClaimed || !strings.Contains(res.Message, f.ingNS+"/sandbox-ingress-sbx") {
		t.Fatalf("second, other ingress namespace = %+v", res)
	}
	if v := f.carrier(t).Annotations[AnnotationWhitelist]; v != "10.0.0.0/8" {
		t.Fatalf("the first sandbox's carrier changed: %q", v)
	}
}

// TestCarrierCreatedMeanwhileBySomeoneElse: between the read and the
// create, another writer creates an Ingress of the carrier's name. It is
// not ours: the cycle reports CarrierForeign and leaves it alone (no
// rollback deletes it, no uncertain state).
func TestCarrierCreatedMeanwhileBySomeoneElse(t *testing.T) {
	f := newFixture(t)
	f.set(t, "10.0.0.0/8")
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	nginx := "nginx"
	f.eng.Client = interceptor.NewClient(wc, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if ing, ok := obj.(*networkingv1.Ingress); ok {
				other := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: ing.Name, Namespace: ing.Namespace},
					Spec: networkingv1.IngressSpec{IngressClassName: &nginx, DefaultBackend: &networkingv1.IngressBackend{
						Service: &networkingv1.IngressServiceBackend{Name: "x", Port: networkingv1.ServiceBackendPort{Number: 1}}}}}
				if err := env.Client.Create(ctx, other); err != nil {
					return err
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	res := f.reconcile(t)
	if res.Outcome != OutcomeKept || res.Code != CodeCarrierForeign {
		t.Fatalf("Reconcile = %+v", res)
	}
	ing := f.carrier(t)
	if ing == nil || ing.Labels[v1alpha1.LabelManagedBy] != "" {
		t.Fatalf("the other writer's Ingress was changed or deleted: %+v", ing)
	}
	if al := f.allowlist(t); al.Status.VerificationState != v1alpha1.StateUnverifiedSpec {
		t.Fatalf("state = %q", al.Status.VerificationState)
	}
}

// TestBreakStaleCycleNeverRollsTheCarrierBack: a cycle that starts from an
// allowlist as answered earlier (ReconcileFrom: the create's first cycle,
// while the leader in another replica runs its own) and finds the carrier
// already holding its desired set writes no Verifying state; when its
// checks then fail (here another Ingress claims the path), its rollback
// must not write the carrier from its stale view. Meanwhile the leader
// verified a narrower set: restoring the stale LKG would widen the
// carrier past what the allowlist records as verified (spec §5.2: never
// widen). The stale cycle's first write must be conditional on the
// allowlist's resourceVersion, so it fails (transient) and touches
// nothing.
func TestBreakStaleCycleNeverRollsTheCarrierBack(t *testing.T) {
	f := newFixture(t)
	f.set(t, "198.51.100.0/24")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("first cycle = %+v", res)
	}
	stale := f.set(t, "198.51.100.7/32").DeepCopy() // as SetDesired answered
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("leader's cycle = %+v", res)
	}
	other := env.Namespace(t)
	intruder := claimant(other, f.eng.Cluster.Ingress.Host, "/sbx/")
	if err := env.Client.Create(ctx, intruder); err != nil {
		t.Fatal(err)
	}
	res, err := f.eng.ReconcileFrom(ctx, stale)
	if !errors.Is(err, ErrTransient) {
		t.Fatalf("stale cycle = %+v, %v; want a transient failure", res, err)
	}
	ing := f.carrier(t)
	if ing == nil || ing.Annotations[AnnotationWhitelist] != "198.51.100.7/32" {
		t.Fatalf("carrier after the stale cycle = %+v; want the verified 198.51.100.7/32 untouched", ing)
	}
	if st := f.allowlist(t).Status; st.VerificationState != v1alpha1.StateVerified || !slices.Equal(st.LastVerified, []string{"198.51.100.7/32"}) {
		t.Fatalf("status after the stale cycle = %+v", st)
	}
}

// TestRewriteProbeSources: the readiness 403 path's rewrite of a verified
// carrier with rediscovered probe sources goes through the same write as
// a cycle: the refused annotations someone added (a snippet,
// allowlist-source-range, satisfy) are dropped, the others kept, the
// whitelist becomes the last verified user set merged with the new
// sources, which the carrier records, and the read-back verifies. The set
// is the allowlist's last verified one (a PUT's), whatever the caller
// created the sandbox with. Without a verified set, or over a carrier that
// is not corectl's, nothing is written.
func TestRewriteProbeSources(t *testing.T) {
	f := newFixture(t)
	f.eng.Probe = func(context.Context) ([]string, error) { return []string{"10.9.9.9/32"}, nil }

	// No verified set yet: refused, nothing written.
	f.set(t, "203.0.113.0/24")
	if err := f.eng.RewriteProbeSources(ctx, f.ns, "sbx", []string{"10.7.7.7/32"}); err == nil || f.carrier(t) != nil {
		t.Fatalf("RewriteProbeSources before any verified set = %v, carrier %v; want an error and no carrier", err, f.carrier(t))
	}
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("first cycle = %+v", res)
	}
	// A PUT replaces the create's rules and is verified.
	f.set(t, "198.51.100.0/24")
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("cycle of the PUT = %+v", res)
	}
	ing := f.carrier(t)
	maps.Copy(ing.Annotations, map[string]string{
		"nginx.ingress.kubernetes.io/configuration-snippet":  "allow all;",
		"nginx.ingress.kubernetes.io/allowlist-source-range": "0.0.0.0/0",
		"nginx.ingress.kubernetes.io/satisfy":                "any",
		"nginx.ingress.kubernetes.io/proxy-body-size":        "64m",
	})
	if err := env.Client.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	if err := f.eng.RewriteProbeSources(ctx, f.ns, "sbx", []string{"10.7.7.7/32"}); err != nil {
		t.Fatalf("RewriteProbeSources = %v", err)
	}
	got := f.carrier(t).Annotations
	for _, k := range []string{"nginx.ingress.kubernetes.io/configuration-snippet", "nginx.ingress.kubernetes.io/allowlist-source-range", "nginx.ingress.kubernetes.io/satisfy"} {
		if _, ok := got[k]; ok {
			t.Errorf("the rewritten carrier kept %s: %v", k, got)
		}
	}
	if got["nginx.ingress.kubernetes.io/proxy-body-size"] != "64m" || got[AnnotationWhitelist] != "10.7.7.7/32,198.51.100.0/24" ||
		got[AnnotationProbeSources] != `["10.7.7.7/32"]` {
		t.Errorf("the rewritten carrier's annotations = %v; want proxy-body-size kept, the PUT's set with the new sources", got)
	}
	if st := f.get(t); !slices.Equal(cidrsOf(st.Configured), []string{"198.51.100.0/24"}) {
		t.Errorf("Get after the rewrite = %+v", st)
	}

	// A carrier that is not corectl's (owner annotation changed) is not
	// written.
	ing = f.carrier(t)
	ing.Annotations[v1alpha1.AnnotationOwner] = "someone/else/uid"
	if err := env.Client.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	rv := f.carrier(t).ResourceVersion
	if err := f.eng.RewriteProbeSources(ctx, f.ns, "sbx", []string{"10.8.8.8/32"}); err == nil || !strings.Contains(err.Error(), CodeCarrierForeign) ||
		f.carrier(t).ResourceVersion != rv {
		t.Fatalf("RewriteProbeSources over a foreign carrier = %v; want %s and no write", err, CodeCarrierForeign)
	}
}

// TestProbeDiscoveryTurnedOff: carriers written while probe-source
// discovery was on record the probe sources (AnnotationProbeSources) and
// have them in the whitelist. Once discovery is off (-probe-source-
// discovery dropped, or, during the rolling update that drops it, a cycle
// in a replica already without it), a cycle writes the user set alone.
// The probe annotation is corectl's record of what it merged, so that
// write must drop it too: kept, it makes the cycle's own read-back fail
// CheckCarrier (AllowlistMismatch, a settled failure: the LKG is
// restored, and no PUT is ever applied again).
func TestProbeDiscoveryTurnedOff(t *testing.T) {
	f := newFixture(t)
	f.eng.Probe = func(context.Context) ([]string, error) { return []string{"10.9.9.9/32"}, nil }
	f.set(t, lkgSet)
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("cycle with discovery on = %+v", res)
	}
	if got := f.carrier(t).Annotations[AnnotationProbeSources]; got != `["10.9.9.9/32"]` {
		t.Fatalf("probe sources recorded = %q", got)
	}
	f.eng.Probe = nil
	f.set(t, newSet)
	if res := f.reconcile(t); res.Outcome != OutcomeVerified {
		t.Fatalf("cycle with discovery off = %+v; want Verified", res)
	}
	f.verifiedAt(t, newSet)
	if got, ok := f.carrier(t).Annotations[AnnotationProbeSources]; ok {
		t.Fatalf("the carrier written without probe sources still records %s", got)
	}
}

// TestCycleAwaitingOwnerBackfill: a carrier the create wrote before its
// BatchSandbox existed (identity labels, owner annotation without a UID,
// no owner reference) is the create's, not foreign: a cycle for a PUT
// made in that window writes nothing, records nothing in the status, and
// is retried (ErrTransient); a Normal Event says why, for `kubectl
// describe` of an allowlist that meanwhile stays Pending.
func TestCycleAwaitingOwnerBackfill(t *testing.T) {
	f := newFixture(t)
	pre := &sandbox.Sandbox{Namespace: f.ns, ID: "sbx"}
	early := Carrier(f.eng.Cluster, pre, []string{"203.0.113.0/24"})
	if err := env.Client.Create(ctx, early); err != nil {
		t.Fatal(err)
	}
	al := f.set(t, "192.0.2.0/24")
	res, err := f.eng.Reconcile(ctx, f.ns, "sbx")
	if !errors.Is(err, ErrTransient) || res != nil {
		t.Fatalf("Reconcile = %+v, %v; want ErrTransient", res, err)
	}
	if ev := f.lastEvent(); !strings.HasPrefix(ev, "Normal AwaitingOwnerBackfill managed Ingress "+f.ingNS+"/"+IngressName("sbx")+" was written by the sandbox's create") {
		t.Fatalf("event = %q", ev)
	}
	cur := &v1alpha1.SandboxIngressAllowlist{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(al), cur); err != nil {
		t.Fatal(err)
	}
	if cur.Status.VerificationState != "" || cur.Status.Cycle != 0 {
		t.Fatalf("status = %+v; want nothing recorded", cur.Status)
	}
	ing := &networkingv1.Ingress{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(early), ing); err != nil {
		t.Fatal(err)
	}
	if ing.ResourceVersion != early.ResourceVersion {
		t.Fatalf("the carrier was written (resourceVersion %s → %s)", early.ResourceVersion, ing.ResourceVersion)
	}
}
