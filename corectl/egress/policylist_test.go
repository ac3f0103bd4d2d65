package egress

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"google.golang.org/protobuf/encoding/protowire"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// judgedPolicies is a namespace as the conflict step meets it: other
// sandboxes' platform policies, the sandbox's own, and tenants' policies
// of every kind Conflicts tells apart (widening, covered, ingress-only,
// egress deny, matchExpressions, a forged platform label, an invalid
// selector, which no apiserver stores but Conflicts counts).
func judgedPolicies() []networkingv1.NetworkPolicy {
	c := kubetest.Cluster("c1", "ingress")
	set := []string{"203.0.113.0/24"}
	var out []networkingv1.NetworkPolicy
	for i := range 20 {
		id := "a" + strconv.Itoa(i)
		out = append(out, networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName(id),
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "corectl"},
			Annotations: map[string]string{AnnotationLastVerifiedSpec: "{}"}},
			Spec: Compile(c, "allocation-id", id, set)})
	}
	egress := func(cidr string) []networkingv1.NetworkPolicyEgressRule {
		return []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}}}
	}
	egressType := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	app := metav1.LabelSelector{MatchLabels: map[string]string{"app": "sbx"}}
	port := intstr.FromInt32(443)
	out = append(out,
		networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-allow-all"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: app, PolicyTypes: egressType, Egress: egress("0.0.0.0/0")}},
		networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-narrow"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: app, PolicyTypes: egressType, Egress: egress("203.0.113.0/25")}},
		networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-ingress-only"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: app, Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}},
		networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-deny"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egressType}},
		networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-everyone-443"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egressType, Egress: []networkingv1.NetworkPolicyEgressRule{
				{Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}}}},
		networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-expressions"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "allocation-id", Operator: metav1.LabelSelectorOpIn, Values: []string{"a5", "a6"}}}},
				PolicyTypes: egressType, Egress: egress("10.0.0.0/8")}},
		networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "looks-like-the-platform",
			Labels: map[string]string{"app.kubernetes.io/managed-by": "corectl"}},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"allocation-id": "a5"}},
				PolicyTypes: egressType, Egress: egress("198.51.100.0/24")}},
		networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bad-selector"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"-bad key": "x"}}}},
	)
	return out
}

// encodeList is the apiserver's protobuf answer to a list of policies
// without its 4-byte prefix: a runtime.Unknown holding the
// NetworkPolicyList.
func encodeList(t testing.TB, policies []networkingv1.NetworkPolicy) []byte {
	t.Helper()
	list := &networkingv1.NetworkPolicyList{Items: policies}
	raw, err := list.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	unk := runtime.Unknown{Raw: raw, TypeMeta: runtime.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicyList"}}
	b, err := unk.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConflictsInProtobufAgreesWithConflicts: the lister's partial
// decoding names the same conflicts as Conflicts on the decoded list, for
// the sandbox whose policy is a5 (label sets of its template and a pod)
// and for one no tenant policy selects; a policy whose spec occurs twice
// in its encoding (protobuf merges the two) is judged on the merge.
func TestConflictsInProtobufAgreesWithConflicts(t *testing.T) {
	c := kubetest.Cluster("c1", "ingress")
	dns := DNSRule(c)
	policies := judgedPolicies()
	data := encodeList(t, policies)
	for _, tc := range []struct {
		own  string
		sets []labels.Set
		want []string
	}{
		{PolicyName("a5"), []labels.Set{{"allocation-id": "a5", "app": "sbx"}, {"allocation-id": "a5", "app": "sbx", "pod-template-hash": "x"}},
			[]string{"bad-selector", "looks-like-the-platform", "team-allow-all", "team-everyone-443", "team-expressions"}},
		{PolicyName("a7"), []labels.Set{{"allocation-id": "a7"}}, []string{"bad-selector", "team-everyone-443"}},
	} {
		allowed := []string{"203.0.113.0/24"}
		want := Conflicts(policies, tc.own, tc.sets, allowed, dns)
		if !slices.Equal(want, tc.want) {
			t.Fatalf("Conflicts for %s = %v, want %v", tc.own, want, tc.want)
		}
		got, err := conflictsInProtobuf(data, newJudge(tc.own, tc.sets, allowed, dns))
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("conflictsInProtobuf for %s = %v, %v; want %v", tc.own, got, err, want)
		}
	}

	// team-narrow's spec again, now selecting every pod with a rule to
	// anywhere: the decoded policy is the merge, which widens.
	i := slices.IndexFunc(policies, func(np networkingv1.NetworkPolicy) bool { return np.Name == "team-narrow" })
	item, err := policies[i].Marshal()
	if err != nil {
		t.Fatal(err)
	}
	extra, err := (&networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{}}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	item = protowire.AppendBytes(protowire.AppendTag(item, 2, protowire.BytesType), extra)
	raw := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), item)
	unk, err := (&runtime.Unknown{Raw: raw}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var merged networkingv1.NetworkPolicyList
	if err := merged.Unmarshal(raw); err != nil || len(merged.Items[0].Spec.Egress) != 2 {
		t.Fatalf("the merged encoding decodes to %+v, %v", merged.Items, err)
	}
	sets := []labels.Set{{"allocation-id": "a5", "app": "sbx"}}
	got, err := conflictsInProtobuf(unk, newJudge("own", sets, []string{"203.0.113.0/24"}, dns))
	if err != nil || !slices.Equal(got, []string{"team-narrow"}) {
		t.Fatalf("merged spec: %v, %v; want [team-narrow]", got, err)
	}
}

// TestConflictsInProtobufRefusesGarbage: an answer that is not a
// protobuf message, or that is compressed inside the envelope, is an
// error, never an empty list of conflicts.
func TestConflictsInProtobufRefusesGarbage(t *testing.T) {
	j := newJudge("own", []labels.Set{{"app": "sbx"}}, nil, networkingv1.NetworkPolicyEgressRule{})
	truncated := encodeList(t, judgedPolicies())
	truncated = truncated[:len(truncated)-7]
	gz, err := (&runtime.Unknown{Raw: []byte{1, 2, 3}, ContentEncoding: "gzip"}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"truncated": truncated, "content encoding": gz, "bad tag": {0xff, 0xff, 0xff}} {
		if got, err := conflictsInProtobuf(b, j); !errors.Is(err, errProtobuf) {
			t.Errorf("%s: %v, %v; want errProtobuf", name, got, err)
		}
	}
}

// FuzzConflictsInProtobuf: whenever an encoding decodes as a
// NetworkPolicyList, the lister's partial decoding names exactly the
// conflicts Conflicts names on that decoded list (go test -run '^$'
// -fuzz FuzzConflictsInProtobuf -fuzzminimizetime 5s -parallel 1
// ./corectl/egress/; the default minimisation, up to 60 s per new input,
// stalls the run for as long).
func FuzzConflictsInProtobuf(f *testing.F) {
	policies := judgedPolicies()[18:] // two platform policies and every tenant kind
	list := &networkingv1.NetworkPolicyList{Items: policies}
	raw, err := list.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte{})
	dns := DNSRule(kubetest.Cluster("c1", "ingress"))
	sets := []labels.Set{{"allocation-id": "a5", "app": "sbx"}}
	allowed := []string{"203.0.113.0/24"}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var list networkingv1.NetworkPolicyList
		if list.Unmarshal(raw) != nil {
			return
		}
		unk, err := (&runtime.Unknown{Raw: raw}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want := Conflicts(list.Items, PolicyName("a5"), sets, allowed, dns)
		got, err := conflictsInProtobuf(unk, newJudge(PolicyName("a5"), sets, allowed, dns))
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("conflictsInProtobuf = %v, %v; Conflicts = %v", got, err, want)
		}
	})
}

// TestPolicyListerAgreesWithTheTypedList: against the apiserver, the
// lister's list is protobuf (so the partial decoding is what runs) and
// names the same conflicts as the typed client's consistent list; a lister whose apiserver cannot be
// reached fails the PUT's conflict step as ReadFailed and the PUT rolls
// back.
func TestPolicyListerAgreesWithTheTypedList(t *testing.T) {
	f := newFixture(t)
	for _, np := range judgedPolicies() {
		if np.Name == "bad-selector" {
			continue // the apiserver refuses it
		}
		np.Namespace = f.ns
		if err := env.Client.Create(ctx, &np); err != nil {
			t.Fatal(err)
		}
	}
	typed := &Engine{Client: env.Client, Cluster: f.eng.Cluster}
	sets := []labels.Set{{"allocation-id": "a5", "app": "sbx"}}
	allowed := []string{"203.0.113.0/24"}
	dns := DNSRule(f.eng.Cluster)
	got, err := f.eng.policies(ctx, f.ns)
	if err != nil {
		t.Fatal(err)
	}
	if got.buf == nil {
		t.Fatal("the lister's answer was not protobuf")
	}
	want, err := typed.policies(ctx, f.ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.items) != 27 {
		t.Fatalf("the typed list has %d policies, want 27", len(want.items))
	}
	g, err := got.conflicts(PolicyName("a5"), sets, allowed, dns)
	w, _ := want.conflicts(PolicyName("a5"), sets, allowed, dns)
	got.release()
	if err != nil || !slices.Equal(g, w) || len(w) != 4 {
		t.Fatalf("lister: %v, %v; typed list: %v (want 4 conflicts)", g, err, w)
	}
	if err := env.Client.DeleteAllOf(ctx, &networkingv1.NetworkPolicy{}, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://127.0.0.1:1"
	unreachable, err := NewPolicyLister(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.eng.Policies = unreachable
	res := f.put(t, "10.0.0.0/8")
	if res.Outcome != OutcomeNewPolicyDeleted || res.Code != CodeReadFailed || f.policy(t) != nil {
		t.Fatalf("Put with the list unreachable = %+v", res)
	}
}

// BenchmarkConflictsInProtobuf is BenchmarkConflicts on the protobuf
// answer of the same 300 policies, as the lister judges it
// (go test -run '^$' -bench Conflicts -benchmem ./corectl/egress/).
func BenchmarkConflictsInProtobuf(b *testing.B) {
	c := kubetest.Cluster("c1", "ingress")
	set := []string{"203.0.113.0/24"}
	var policies []networkingv1.NetworkPolicy
	for i := range 300 {
		id := "a" + strconv.Itoa(i)
		policies = append(policies, networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName(id)},
			Spec: Compile(c, "allocation-id", id, set)})
	}
	data := encodeList(b, policies)
	sets := []labels.Set{{"allocation-id": "a5", "app": "sbx"}}
	dns := DNSRule(c)
	b.ReportAllocs()
	for b.Loop() {
		if got, err := conflictsInProtobuf(data, newJudge(PolicyName("a5"), sets, set, dns)); err != nil || len(got) != 0 {
			b.Fatalf("conflictsInProtobuf = %v, %v", got, err)
		}
	}
}

// BenchmarkPodCheckList is the selector check's list of a namespace of
// 300 pods (kubetest's minimal pods: one container, no status), decoded
// in full (sandbox.Pods, before) and as metadata (sandbox.PodsMetadata,
// what labelSets reads) (go test -run '^$' -bench PodCheckList -benchmem
// ./corectl/egress/).
func BenchmarkPodCheckList(b *testing.B) {
	sb := env.Sandbox(b, map[string]string{"allocation-id": "a1"})
	s, err := sandbox.Get(ctx, env.Client, sb.Namespace, "sbx", "allocation-id")
	if err != nil {
		b.Fatal(err)
	}
	for i := range 300 {
		env.Pod(b, sb.CR, "sbx-"+strconv.Itoa(i), map[string]string{"allocation-id": "a1"})
	}
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if pods, err := s.Pods(ctx, env.Client); err != nil || len(pods) != 300 {
				b.Fatalf("Pods: %d, %v", len(pods), err)
			}
		}
	})
	b.Run("metadata", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if pods, err := s.PodsMetadata(ctx, env.Client); err != nil || len(pods) != 300 {
				b.Fatalf("PodsMetadata: %d, %v", len(pods), err)
			}
		}
	})
}
