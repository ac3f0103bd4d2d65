package egress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	// A fuzzing worker runs FuzzConflictsInProtobuf only, which needs no
	// apiserver (and a worker is restarted often while it minimises).
	if slices.ContainsFunc(os.Args, func(a string) bool { return strings.HasPrefix(a, "-test.fuzzworker") }) {
		os.Exit(m.Run())
	}
	kubetest.Main(m, &env)
}

var ctx = context.Background()

// fixture is kubetest's Sandbox: one namespace with one BatchSandbox
// "sbx" whose pod template has allocation-id=a1 and app=sbx, and the
// engine under test, wired as corectl wires it (its conflict lists
// through a PolicyLister).
type fixture struct {
	ns  string
	cr  *unstructured.Unstructured
	eng *Engine
	rec *kubetest.Recorder
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	sb := env.Sandbox(t, map[string]string{"allocation-id": "a1", "app": "sbx"})
	policies, err := NewPolicyLister(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ns: sb.Namespace, cr: sb.CR, rec: sb.Events,
		eng: &Engine{Client: env.Client, Cluster: sb.Cluster, Events: sb.Events, Policies: policies}}
}

// lastEvent is the last Event as "<type> <kind>/<name> <reason> <note>"
// ("" when none).
func (f *fixture) lastEvent() string {
	ev, ok := f.rec.Last()
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s %s/%s %s %s", ev.Type, ev.Kind, ev.Name, ev.Reason, ev.Note)
}

func (f *fixture) policy(t *testing.T) *networkingv1.NetworkPolicy {
	t.Helper()
	np := &networkingv1.NetworkPolicy{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "sandbox-egress-a1"}, np)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return np
}

// prefixes is set normalised as Put takes it (cidr.NormalizePrefixes).
func prefixes(t testing.TB, set ...string) []netip.Prefix {
	t.Helper()
	ps, err := cidr.NormalizePrefixes(set)
	if err != nil {
		t.Fatalf("prefixes(%v): %v", set, err)
	}
	return ps
}

func (f *fixture) put(t *testing.T, set ...string) *Result {
	t.Helper()
	res, err := f.eng.Put(ctx, f.ns, "sbx", prefixes(t, set...))
	if err != nil {
		t.Fatalf("Put(%v): %v", set, err)
	}
	return res
}

// get is the GET view of sandbox sbx (Get), which GetOf must give alike
// from a read of the BatchSandbox (as lifecycle's Status hands it the
// ownership check's read).
func (f *fixture) get(t *testing.T) *Status {
	t.Helper()
	return kubetest.SameViewFromRead(t, ctx, env.Client, f.ns, "sbx", f.eng.Get, f.eng.GetOf)
}

func rulesOf(r *[]Rule) []string {
	if r == nil {
		return nil
	}
	out := []string{}
	for _, x := range *r {
		out = append(out, x.CIDR)
	}
	return out
}

func TestPutWritesTheSpecPolicyAndGetReportsReady(t *testing.T) {
	f := newFixture(t)
	res := f.put(t, "203.0.113.10/32")
	if res.Outcome != OutcomeVerified || res.Code != "" || res.PolicyName != "sandbox-egress-a1" {
		t.Fatalf("Put = %+v", res)
	}
	np := f.policy(t)
	if np == nil {
		t.Fatal("no policy")
	}
	want := Compile(f.eng.Cluster, "allocation-id", "a1", []string{"203.0.113.10/32"})
	if Canonical(&np.Spec) != Canonical(&want) {
		t.Fatalf("spec = %s\nwant %s", Canonical(&np.Spec), Canonical(&want))
	}
	if got := np.Spec.PodSelector.MatchLabels; len(got) != 1 || got["allocation-id"] != "a1" {
		t.Fatalf("podSelector = %v", got)
	}
	dns := np.Spec.Egress[0]
	if dns.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "kube-system" || dns.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Fatalf("DNS rule = %+v", dns)
	}
	if np.Annotations[AnnotationLastVerifiedSpec] != Canonical(&want) || np.Annotations[AnnotationVerificationState] != "Verified" ||
		np.Annotations[AnnotationVerificationErrorCode] != "" || np.Annotations[v1alpha1.AnnotationVerifyingSince] != "" {
		t.Fatalf("annotations = %v", np.Annotations)
	}
	if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].Kind != "BatchSandbox" || np.OwnerReferences[0].Name != "sbx" ||
		np.OwnerReferences[0].UID != f.cr.GetUID() || !*np.OwnerReferences[0].Controller || !*np.OwnerReferences[0].BlockOwnerDeletion {
		t.Fatalf("ownerReferences = %+v", np.OwnerReferences)
	}
	if np.Labels[v1alpha1.LabelManagedBy] != "corectl" || np.Labels[v1alpha1.LabelClusterID] != "c1" || np.Labels[v1alpha1.LabelSandboxID] != "sbx" {
		t.Fatalf("labels = %v", np.Labels)
	}
	st := f.get(t)
	if !st.NetworkReady || st.VerificationState != "Verified" || st.LastErrorCode != "" || st.NotReadyReason != "" ||
		!slices.Equal(rulesOf(st.ConfiguredEgress), []string{"203.0.113.10/32"}) || !slices.Equal(rulesOf(st.LastVerifiedEgress), []string{"203.0.113.10/32"}) {
		t.Fatalf("Get = %+v", st)
	}
	if ev := f.lastEvent(); !strings.Contains(ev, "Normal BatchSandbox/sbx EgressVerified") {
		t.Fatalf("event = %q", ev)
	}
}

func TestPutIsAFullReplacement(t *testing.T) {
	f := newFixture(t)
	f.put(t, "198.51.100.0/24", "203.0.113.10/32")
	f.put(t, "192.0.2.1/32")
	st := f.get(t)
	if !st.NetworkReady || !slices.Equal(rulesOf(st.ConfiguredEgress), []string{"192.0.2.1/32"}) {
		t.Fatalf("Get = %+v", st)
	}
	f.put(t)
	st = f.get(t)
	if !st.NetworkReady || st.ConfiguredEgress == nil || len(*st.ConfiguredEgress) != 0 {
		t.Fatalf("after an empty PUT (DNS only): %+v", st)
	}
	if np := f.policy(t); len(np.Spec.Egress) != 1 || !isDNSRule(np.Spec.Egress[0]) {
		t.Fatalf("empty allowlist must keep exactly the DNS rule: %+v", np.Spec.Egress)
	}
}

func TestPutChecksTheCurrentPod(t *testing.T) {
	f := newFixture(t)
	u := f.cr
	env.Pod(t, u, "sbx-0", map[string]string{"allocation-id": "a1", "app": "sbx"})
	if res := f.put(t, "10.0.0.0/8"); res.Outcome != OutcomeVerified {
		t.Fatalf("Put with a matching pod = %+v", res)
	}
	env.Pod(t, u, "sbx-1", map[string]string{"allocation-id": "other"})
	res := f.put(t, "10.0.0.0/8", "192.0.2.0/24")
	if res.Outcome != OutcomeLKGRestored || res.Code != CodeSelectorMismatch {
		t.Fatalf("Put with a pod the selector misses = %+v", res)
	}
	if got, _ := Decompile(&f.policy(t).Spec); !slices.Equal(got, []string{"10.0.0.0/8"}) {
		t.Fatalf("after rollback the policy holds %v, want the LKG", got)
	}
	st := f.get(t)
	if st.NetworkReady || st.NotReadyReason != ReasonSelectorMismatch || st.LastErrorCode != CodeSelectorMismatch {
		t.Fatalf("Get = %+v", st)
	}
}

// allowAll is a hand-written policy "team-allow-all" in namespace ns
// that opens the egress of the fixture's sandbox pods (app=sbx) to
// everywhere: a conflict for every sandbox policy narrower than that.
func allowAll(ns string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "team-allow-all", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "sbx"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}},
		},
	}
}

func TestConflictFromAHandWrittenPolicy(t *testing.T) {
	f := newFixture(t)
	open := allowAll(f.ns)
	if err := env.Client.Create(ctx, open); err != nil {
		t.Fatal(err)
	}
	// No LKG yet: the new policy is deleted.
	res := f.put(t, "10.0.0.0/8")
	if res.Outcome != OutcomeNewPolicyDeleted || res.Code != CodePolicyConflict || !slices.Equal(res.Conflicts, []string{"team-allow-all"}) {
		t.Fatalf("Put = %+v", res)
	}
	if f.policy(t) != nil {
		t.Fatal("the policy that failed validation was kept")
	}
	st := f.get(t)
	if st.NetworkReady || st.NotReadyReason != ReasonPolicyMissing || st.ConfiguredEgress != nil {
		t.Fatalf("Get = %+v", st)
	}

	// With an LKG: restored, state PolicyConflict, GET names the conflict.
	if err := env.Client.Delete(ctx, open); err != nil {
		t.Fatal(err)
	}
	f.put(t, "10.0.0.0/8")
	open.ResourceVersion = ""
	if err := env.Client.Create(ctx, open); err != nil {
		t.Fatal(err)
	}
	res = f.put(t, "10.0.0.0/8", "192.0.2.0/24")
	if res.Outcome != OutcomeLKGRestored || res.Code != CodePolicyConflict {
		t.Fatalf("Put = %+v", res)
	}
	np := f.policy(t)
	if np.Annotations[AnnotationVerificationState] != v1alpha1.StatePolicyConflict || np.Annotations[AnnotationVerificationErrorCode] != CodePolicyConflict {
		t.Fatalf("annotations = %v", np.Annotations)
	}
	st = f.get(t)
	if st.NetworkReady || st.NotReadyReason != ReasonNotVerified || !slices.Equal(st.Conflicts, []string{"team-allow-all"}) ||
		!slices.Equal(rulesOf(st.ConfiguredEgress), []string{"10.0.0.0/8"}) {
		t.Fatalf("Get = %+v", st)
	}
	if ev := f.lastEvent(); !strings.Contains(ev, "Warning BatchSandbox/sbx EgressUpdateFailed") || !strings.Contains(ev, "LKG restored") {
		t.Fatalf("event = %q", ev)
	}

	// A policy that only narrows (covered CIDR) is no conflict.
	if err := env.Client.Delete(ctx, open); err != nil {
		t.Fatal(err)
	}
	narrow := open.DeepCopy()
	narrow.ResourceVersion, narrow.Name = "", "team-narrow"
	narrow.Spec.Egress[0].To[0].IPBlock.CIDR = "10.1.0.0/16"
	if err := env.Client.Create(ctx, narrow); err != nil {
		t.Fatal(err)
	}
	if res := f.put(t, "10.0.0.0/8"); res.Outcome != OutcomeVerified {
		t.Fatalf("Put with a narrowing policy = %+v", res)
	}
}

// TestConflictFromAPolicyWithAForgedPlatformLabel: a tenant's policy that
// carries app.kubernetes.io/managed-by=corectl (anyone who may create
// NetworkPolicies can set it) and widens the sandbox's egress is a
// conflict, for the PUT and for GET (issue 29 item 8; before, the label
// alone exempted it and the PUT answered Verified).
func TestConflictFromAPolicyWithAForgedPlatformLabel(t *testing.T) {
	f := newFixture(t)
	if res := f.put(t, "10.0.0.0/8"); res.Outcome != OutcomeVerified {
		t.Fatalf("first Put = %+v", res)
	}
	forged := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "looks-like-the-platform", Namespace: f.ns,
			Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelSandboxID: "sbx"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"allocation-id": "a1"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}},
		},
	}
	if err := env.Client.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	st := f.get(t)
	if st.NetworkReady || !slices.Equal(st.Conflicts, []string{"looks-like-the-platform"}) {
		t.Fatalf("Get with the forged policy = %+v", st)
	}
	res := f.put(t, "10.0.0.0/8", "192.0.2.0/24")
	if res.Outcome != OutcomeLKGRestored || res.Code != CodePolicyConflict || !slices.Equal(res.Conflicts, []string{"looks-like-the-platform"}) {
		t.Fatalf("Put with the forged policy = %+v", res)
	}
	// Another sandbox's real policy in the namespace is no conflict: it
	// selects only its own allocation.
	if err := env.Client.Delete(ctx, forged); err != nil {
		t.Fatal(err)
	}
	other := forged.DeepCopy()
	other.ResourceVersion, other.Name = "", "sandbox-egress-a2"
	other.Spec.PodSelector.MatchLabels = map[string]string{"allocation-id": "a2"}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if res := f.put(t, "10.0.0.0/8"); res.Outcome != OutcomeVerified {
		t.Fatalf("Put beside another sandbox's policy = %+v", res)
	}
}

func TestCNIGate(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name   string
		mutate func(c *cluster.Cluster)
		ok     bool
	}{
		{"qualified", func(*cluster.Cluster) {}, true},
		{"record missing", func(c *cluster.Cluster) { c.CNIQualification = nil }, false},
		{"fingerprint changed", func(c *cluster.Cluster) { c.CNI.Fingerprint = "sha256:new" }, false},
		{"version changed", func(c *cluster.Cluster) { c.CNI.Version = "v3.29.0" }, false},
		{"record of another cluster", func(c *cluster.Cluster) { c.CNIQualification.ClusterID = "c2" }, false},
		{"gate off for this cluster", func(c *cluster.Cluster) { c.CNIQualification = nil; c.CNIQualificationRequired = &no }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.mutate(f.eng.Cluster)
			res := f.put(t, "10.0.0.0/8")
			if tc.ok != (res.Outcome == OutcomeVerified) {
				t.Fatalf("Put = %+v", res)
			}
			if !tc.ok && (res.Code != CodeCNIUnqualified || res.Outcome != OutcomeNewPolicyDeleted || f.policy(t) != nil) {
				t.Fatalf("Put = %+v, policy kept: %v", res, f.policy(t) != nil)
			}
		})
	}
}

func TestPutRefusesBeforeWriting(t *testing.T) {
	f := newFixture(t)
	if _, err := f.eng.Put(ctx, f.ns, "missing", nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing sandbox: %v", err)
	}
	if _, err := f.eng.Put(ctx, f.ns, "Bad_ID", nil); !errors.Is(err, sandbox.ErrInvalidID) {
		t.Fatalf("invalid ID: %v", err)
	}
	env.BatchSandbox(t, f.ns, "noalloc", map[string]string{"app": "x"})
	if _, err := f.eng.Put(ctx, f.ns, "noalloc", nil); !errors.Is(err, sandbox.ErrNoAllocation) {
		t.Fatalf("no allocation label: %v", err)
	}
	st, err := f.eng.Get(ctx, f.ns, "noalloc")
	if err != nil || st.NetworkReady || st.NotReadyReason != ReasonAllocationUnknown {
		t.Fatalf("Get without allocation = %+v, %v", st, err)
	}

	// Deleting: a finalizer keeps the object with a deletion timestamp.
	u := kubetest.NewBatchSandbox(f.ns, "gone", map[string]string{"allocation-id": "g1"})
	u.SetFinalizers([]string{"test/hold"})
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, u); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Put(ctx, f.ns, "gone", nil); !errors.Is(err, sandbox.ErrDeleting) {
		t.Fatalf("deleting sandbox: %v", err)
	}

	// A policy of that name that is not corectl's is never touched.
	foreign := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-egress-a1", Namespace: f.ns},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	before := f.policy(t).ResourceVersion
	if _, err := f.eng.Put(ctx, f.ns, "sbx", prefixes(t, "10.0.0.0/8")); !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("foreign policy: %v", err)
	}
	if f.policy(t).ResourceVersion != before {
		t.Fatal("the foreign policy was written")
	}
	if st := f.get(t); st.NetworkReady || st.NotReadyReason != ReasonPolicyNotManaged {
		t.Fatalf("Get = %+v", st)
	}
}

func TestPutRefusesACorruptLKG(t *testing.T) {
	f := newFixture(t)
	f.put(t, "10.0.0.0/8")
	np := f.policy(t)
	np.Annotations[AnnotationLastVerifiedSpec] = `{"podSelector":`
	if err := env.Client.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	before := f.policy(t)
	if _, err := f.eng.Put(ctx, f.ns, "sbx", prefixes(t, "0.0.0.0/0")); !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("Put over a corrupt LKG: %v", err)
	}
	if after := f.policy(t); after.ResourceVersion != before.ResourceVersion {
		t.Fatal("a PUT over a corrupt LKG wrote the policy")
	}
}

func TestGetStatesAreStableAndReadOnly(t *testing.T) {
	f := newFixture(t)
	st := f.get(t)
	if st.NetworkReady || st.NotReadyReason != ReasonPolicyMissing || st.ConfiguredEgress != nil || st.LastVerifiedEgress != nil || st.PolicyName != "sandbox-egress-a1" {
		t.Fatalf("missing policy: %+v", st)
	}
	if _, err := f.eng.Get(ctx, f.ns, "nope"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing sandbox: %v", err)
	}
	f.put(t, "10.0.0.0/8")

	edit := func(fn func(np *networkingv1.NetworkPolicy)) {
		t.Helper()
		np := f.policy(t)
		fn(np)
		if err := env.Client.Update(ctx, np); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name, reason string, configured, verified bool) {
		t.Helper()
		rv := f.policy(t).ResourceVersion
		st := f.get(t)
		if st.NetworkReady || st.NotReadyReason != reason || (st.ConfiguredEgress != nil) != configured || (st.LastVerifiedEgress != nil) != verified {
			t.Fatalf("%s: Get = %+v (configured %v, lastVerified %v)", name, st, st.ConfiguredEgress != nil, st.LastVerifiedEgress != nil)
		}
		if f.policy(t).ResourceVersion != rv {
			t.Fatalf("%s: GET wrote the policy", name)
		}
	}
	good := f.policy(t).Annotations
	ann := func() map[string]string { return maps.Clone(good) }

	edit(func(np *networkingv1.NetworkPolicy) { np.Annotations[AnnotationLastVerifiedSpec] = "{" })
	check("corrupt LKG", ReasonAnnotationCorrupt, true, false)

	edit(func(np *networkingv1.NetworkPolicy) {
		np.Annotations = ann()
		np.Annotations[AnnotationVerificationState] = "Bogus"
	})
	check("unknown state", ReasonAnnotationCorrupt, true, true)

	edit(func(np *networkingv1.NetworkPolicy) {
		np.Annotations = ann()
		delete(np.Annotations, AnnotationLastVerifiedSpec)
	})
	check("LKG missing", ReasonAnnotationCorrupt, true, false)

	edit(func(np *networkingv1.NetworkPolicy) {
		np.Annotations = ann()
		tcp := corev1.ProtocolTCP
		np.Spec.Egress[1].Ports = []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: kubetest.IntOrString(443)}}
	})
	check("hand-edited spec", ReasonSpecUndecodable, false, true)

	edit(func(np *networkingv1.NetworkPolicy) {
		np.Spec = Compile(f.eng.Cluster, "allocation-id", "a1", []string{"0.0.0.0/0"})
	})
	check("spec drifted from the LKG", ReasonSpecDrift, true, true)
	st = f.get(t)
	if !slices.Equal(rulesOf(st.ConfiguredEgress), []string{"0.0.0.0/0"}) || !slices.Equal(rulesOf(st.LastVerifiedEgress), []string{"10.0.0.0/8"}) {
		t.Fatalf("drift: %+v", st)
	}
}

// step names one apiserver call of a PUT to fail ("np" NetworkPolicies,
// "pod" pod lists); with Mutate a get reads back a widened policy.
type step = kubetest.Fault

// faulty wraps the envtest client and fails (or alters) the steps given.
func faulty(steps ...step) client.Client {
	kindOf := func(obj any) string {
		switch o := obj.(type) {
		case *networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList:
			return "np"
		case *corev1.PodList:
			return "pod"
		case *metav1.PartialObjectMetadataList:
			if o.Kind == "PodList" {
				return "pod"
			}
		}
		return ""
	}
	widen := func(obj client.Object) {
		np := obj.(*networkingv1.NetworkPolicy)
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{})
	}
	return env.FaultyClient(kindOf, widen, steps...)
}

// TestInjectedFailuresRollBackAndNeverWiden fails every apiserver call of a
// PUT in turn, with and without an earlier LKG, and checks the outcome, the
// code, and that nothing was widened: the verified state never advances,
// and unless the outcome is StateUncertain the live policy is exactly the
// earlier one (or absent when there was none).
func TestInjectedFailuresRollBackAndNeverWiden(t *testing.T) {
	// Calls of a PUT over an LKG: get#1 prior, update#1 write, get#2 read
	// back, list pods#1, list np#1, update#2 commit, get#3 read back;
	// rollback: get, update, get.
	withLKG := []struct {
		name    string
		steps   []step
		outcome Outcome
		code    string
	}{
		{"write", []step{{Verb: "update", Kind: "np", N: 1}}, OutcomeLKGRestored, CodeWriteFailed},
		{"read back", []step{{Verb: "get", Kind: "np", N: 2}}, OutcomeLKGRestored, CodeReadFailed},
		{"read back differs", []step{{Verb: "get", Kind: "np", N: 2, Mutate: true}}, OutcomeLKGRestored, CodeReadBackMismatch},
		{"list pods", []step{{Verb: "list", Kind: "pod", N: 1}}, OutcomeLKGRestored, CodeReadFailed},
		{"list policies", []step{{Verb: "list", Kind: "np", N: 1}}, OutcomeLKGRestored, CodeReadFailed},
		{"commit", []step{{Verb: "update", Kind: "np", N: 2}}, OutcomeLKGRestored, CodeWriteFailed},
		{"final read back", []step{{Verb: "get", Kind: "np", N: 3}}, OutcomeLKGRestored, CodeReadFailed},
		{"final read back differs", []step{{Verb: "get", Kind: "np", N: 3, Mutate: true}}, OutcomeLKGRestored, CodeReadBackMismatch},
		{"commit and restore write", []step{{Verb: "update", Kind: "np", N: 2}, {Verb: "update", Kind: "np", N: 3}}, OutcomeStateUncertain, CodeWriteFailed},
		{"commit and restore read", []step{{Verb: "update", Kind: "np", N: 2}, {Verb: "get", Kind: "np", N: 3}}, OutcomeStateUncertain, CodeWriteFailed},
		{"commit and restore read back", []step{{Verb: "update", Kind: "np", N: 2}, {Verb: "get", Kind: "np", N: 4}}, OutcomeStateUncertain, CodeWriteFailed},
		{"read back and restore read back differs", []step{{Verb: "get", Kind: "np", N: 2}, {Verb: "get", Kind: "np", N: 4, Mutate: true}}, OutcomeStateUncertain, CodeReadFailed},
	}
	for _, tc := range withLKG {
		t.Run("with LKG/"+tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.put(t, "10.0.0.0/8")
			before := f.policy(t)
			// The faults are the client's: the policy list goes through
			// it too (the lister's failure: TestPolicyListerAgreesWithTheTypedList).
			f.eng.Client, f.eng.Policies = faulty(tc.steps...), nil
			res := f.put(t, "0.0.0.0/0")
			if res.Outcome != tc.outcome || res.Code != tc.code {
				t.Fatalf("Put = %+v, want %s/%s", res, tc.outcome, tc.code)
			}
			after := f.policy(t)
			if after.Annotations[AnnotationLastVerifiedSpec] != before.Annotations[AnnotationLastVerifiedSpec] {
				t.Fatal("the LKG advanced after a failed PUT")
			}
			f.eng.Client = env.Client
			st := f.get(t)
			if tc.outcome == OutcomeLKGRestored {
				if Canonical(&after.Spec) != Canonical(&before.Spec) {
					t.Fatalf("policy after restore = %s", Canonical(&after.Spec))
				}
				if !st.NetworkReady || st.LastErrorCode != tc.code || !slices.Equal(rulesOf(st.ConfiguredEgress), []string{"10.0.0.0/8"}) {
					t.Fatalf("Get after restore = %+v", st)
				}
			} else if !slices.Equal(rulesOf(st.LastVerifiedEgress), []string{"10.0.0.0/8"}) ||
				(st.NetworkReady && !slices.Equal(rulesOf(st.ConfiguredEgress), []string{"10.0.0.0/8"})) {
				// Uncertain: the rollback may or may not have landed, but GET
				// is only ready when the live policy is the LKG.
				t.Fatalf("Get after an uncertain rollback = %+v", st)
			}
		})
	}

	// Calls of a first PUT: get#1 (not found), create#1, get#2, list pods,
	// list np, update#1 commit, get#3; rollback: get, delete#1, get.
	first := []struct {
		name    string
		steps   []step
		outcome Outcome
		code    string
	}{
		{"create", []step{{Verb: "create", Kind: "np", N: 1}}, OutcomeNewPolicyDeleted, CodeWriteFailed},
		{"read back", []step{{Verb: "get", Kind: "np", N: 2}}, OutcomeNewPolicyDeleted, CodeReadFailed},
		{"list policies", []step{{Verb: "list", Kind: "np", N: 1}}, OutcomeNewPolicyDeleted, CodeReadFailed},
		{"commit", []step{{Verb: "update", Kind: "np", N: 1}}, OutcomeNewPolicyDeleted, CodeWriteFailed},
		{"final read back differs", []step{{Verb: "get", Kind: "np", N: 3, Mutate: true}}, OutcomeNewPolicyDeleted, CodeReadBackMismatch},
		{"read back and delete", []step{{Verb: "get", Kind: "np", N: 2}, {Verb: "delete", Kind: "np", N: 1}}, OutcomeStateUncertain, CodeReadFailed},
		{"read back and confirm", []step{{Verb: "get", Kind: "np", N: 2}, {Verb: "get", Kind: "np", N: 4}}, OutcomeStateUncertain, CodeReadFailed},
	}
	for _, tc := range first {
		t.Run("first/"+tc.name, func(t *testing.T) {
			f := newFixture(t)
			// The faults are the client's: the policy list goes through
			// it too (the lister's failure: TestPolicyListerAgreesWithTheTypedList).
			f.eng.Client, f.eng.Policies = faulty(tc.steps...), nil
			res := f.put(t, "0.0.0.0/0")
			if res.Outcome != tc.outcome || res.Code != tc.code {
				t.Fatalf("Put = %+v, want %s/%s", res, tc.outcome, tc.code)
			}
			np := f.policy(t)
			if tc.outcome == OutcomeNewPolicyDeleted && np != nil {
				t.Fatal("the new policy was kept")
			}
			if np != nil {
				if _, ok := np.Annotations[AnnotationLastVerifiedSpec]; ok {
					t.Fatal("an unverified first policy got an LKG")
				}
				f.eng.Client = env.Client
				if st := f.get(t); st.NetworkReady || st.NotReadyReason != ReasonNoLKG {
					t.Fatalf("Get = %+v", st)
				}
			}
		})
	}
}

// interrupt leaves the policy as a PUT of set leaves it after its write
// step, as if corectl stopped right there.
func (f *fixture) interrupt(t *testing.T, set ...string) {
	t.Helper()
	sb, err := sandbox.Get(ctx, env.Client, f.ns, "sbx", "allocation-id")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := f.eng.readPrior(ctx, sb, "sandbox-egress-a1")
	if err != nil {
		t.Fatal(err)
	}
	desired := Compile(f.eng.Cluster, "allocation-id", "a1", set)
	obj := f.eng.build(sb, "sandbox-egress-a1", pr, &desired)
	if pr.obj == nil {
		err = env.Client.Create(ctx, obj)
	} else {
		obj.ResourceVersion = pr.obj.ResourceVersion
		err = env.Client.Update(ctx, obj)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestResumeFinishesAnInterruptedPut(t *testing.T) {
	f := newFixture(t)
	f.interrupt(t, "10.0.0.0/8")
	if st := f.get(t); st.NetworkReady || st.VerificationState != "Verifying" || st.NotReadyReason != ReasonNoLKG {
		t.Fatalf("interrupted first PUT: %+v", st)
	}
	if _, err := f.eng.Put(ctx, f.ns, "sbx", prefixes(t, "1.1.1.1/32")); !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("PUT over an interrupted first PUT: %v, want ErrIndeterminate", err)
	}
	res, err := f.eng.Resume(ctx, f.ns, "sandbox-egress-a1")
	if err != nil || res == nil || res.Outcome != OutcomeVerified {
		t.Fatalf("Resume = %+v, %v", res, err)
	}
	if st := f.get(t); !st.NetworkReady || !slices.Equal(rulesOf(st.LastVerifiedEgress), []string{"10.0.0.0/8"}) {
		t.Fatalf("after Resume: %+v", st)
	}
	if res, err := f.eng.Resume(ctx, f.ns, "sandbox-egress-a1"); res != nil || err != nil {
		t.Fatalf("Resume of a Verified policy = %+v, %v; want nothing to do", res, err)
	}

	// Interrupted over an LKG, and now in conflict: the LKG comes back.
	f.interrupt(t, "0.0.0.0/0")
	f.eng.Cluster.CNIQualification = nil
	res, err = f.eng.Resume(ctx, f.ns, "sandbox-egress-a1")
	if err != nil || res.Outcome != OutcomeLKGRestored || res.Code != CodeCNIUnqualified {
		t.Fatalf("Resume = %+v, %v", res, err)
	}
	if got, _ := Decompile(&f.policy(t).Spec); !slices.Equal(got, []string{"10.0.0.0/8"}) {
		t.Fatalf("policy after Resume = %v", got)
	}
}

func TestResumeDeletesAnInterruptedFirstPutThatFails(t *testing.T) {
	f := newFixture(t)
	f.interrupt(t, "0.0.0.0/0")
	f.eng.Cluster.CNIQualification = nil
	res, err := f.eng.Resume(ctx, f.ns, "sandbox-egress-a1")
	if err != nil || res.Outcome != OutcomeNewPolicyDeleted {
		t.Fatalf("Resume = %+v, %v", res, err)
	}
	if f.policy(t) != nil {
		t.Fatal("policy kept")
	}
}

// TestPolicyCreatedMeanwhileBySomeoneElse: between the read and the
// create, another writer creates a policy of the platform name. The PUT
// fails (ConcurrentUpdate), leaves that policy alone, and reports that no
// policy of its own remains.
func TestPolicyCreatedMeanwhileBySomeoneElse(t *testing.T) {
	f := newFixture(t)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	f.eng.Client = interceptor.NewClient(wc, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if np, ok := obj.(*networkingv1.NetworkPolicy); ok {
				other := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: np.Name, Namespace: np.Namespace},
					Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
				if err := env.Client.Create(ctx, other); err != nil {
					return err
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	res := f.put(t, "10.0.0.0/8")
	if res.Outcome != OutcomeNewPolicyDeleted || res.Code != CodeConcurrentUpdate {
		t.Fatalf("Put = %+v", res)
	}
	np := f.policy(t)
	if np == nil || np.Labels[v1alpha1.LabelManagedBy] != "" {
		t.Fatalf("the other writer's policy was changed or deleted: %+v", np)
	}
}

// TestCreatedStatusFindsAnEarlierConflict: the create's readiness view
// (CreatedStatus) of the policy it has just written names a hand-written
// policy that widens the sandbox's egress and was written before it,
// whether the namespace's policies were asked for at the policy's write
// (StartPolicies, as the create does) or by the view itself.
func TestCreatedStatusFindsAnEarlierConflict(t *testing.T) {
	for _, early := range []bool{true, false} {
		t.Run(map[bool]string{true: "listed at the write", false: "listed by the view"}[early], func(t *testing.T) {
			f := newFixture(t)
			if err := env.Client.Create(ctx, allowAll(f.ns)); err != nil {
				t.Fatal(err)
			}
			sb, err := sandbox.Get(ctx, env.Client, f.ns, "sbx", "allocation-id")
			if err != nil {
				t.Fatal(err)
			}
			np, _, err := f.eng.CreateVerified(ctx, sb, Allowlist{Allow: prefixes(t, "10.0.0.0/8")})
			if err != nil {
				t.Fatal(err)
			}
			var pre *NamespacePolicies
			if early {
				pre = f.eng.StartPolicies(ctx, f.ns)
			}
			st, err := f.eng.CreatedStatus(ctx, sb, np, pre)
			if err != nil {
				t.Fatal(err)
			}
			if st.NetworkReady || st.NotReadyReason != ReasonPolicyConflict || !slices.Equal(st.Conflicts, []string{"team-allow-all"}) {
				t.Fatalf("CreatedStatus = %+v; want not ready, %s, naming team-allow-all", st, ReasonPolicyConflict)
			}
		})
	}
}
