package egress

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/kubetest"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestCompileDecompileRoundTrip(t *testing.T) {
	c := kubetest.Cluster("c1", "ingress")
	for _, set := range [][]string{{}, {"10.0.0.0/8"}, {"1.1.1.1/32", "10.0.0.0/8", "203.0.113.0/24"}} {
		spec := Compile(c, "allocation-id", "a1", set)
		got, err := Decompile(&spec)
		if err != nil || !slices.Equal(got, set) {
			t.Fatalf("Decompile(Compile(%v)) = %v, %v", set, got, err)
		}
		lkg, lset, err := ParseLKG(Canonical(&spec))
		if err != nil || Canonical(lkg) != Canonical(&spec) || !slices.Equal(lset, set) {
			t.Fatalf("ParseLKG(Canonical) = %v, %v", lset, err)
		}
	}
	spec := Compile(c, "allocation-id", "a1", []string{"10.0.0.0/8"})
	if spec.Egress[0].Ports[0].Protocol == nil || *spec.Egress[0].Ports[0].Protocol != corev1.ProtocolUDP || spec.Egress[0].Ports[0].Port.IntVal != 53 ||
		*spec.Egress[0].Ports[1].Protocol != corev1.ProtocolTCP || spec.Egress[0].Ports[1].Port.IntVal != 53 {
		t.Fatalf("DNS rule ports = %+v", spec.Egress[0].Ports)
	}
	for _, bad := range []string{"", "{", `{"podSelector":{}}`, `{"podSelector":{"matchLabels":{"a":"b"}},"egress":[],"policyTypes":["Egress"]}`} {
		if _, _, err := ParseLKG(bad); err == nil {
			t.Errorf("ParseLKG(%q) accepted", bad)
		}
	}
	// Non-canonical JSON (key order changed) is refused: the LKG must be byte-comparable.
	if _, _, err := ParseLKG(`{"policyTypes":["Egress"],` + Canonical(&spec)[1:]); err == nil {
		t.Error("ParseLKG accepted non-canonical JSON")
	}
}

func TestConflictsTable(t *testing.T) {
	c := kubetest.Cluster("c1", "ingress")
	dns := DNSRule(c)
	tmpl := labels.Set{"allocation-id": "a1", "app": "sbx"}
	egressType := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	ipRule := func(cidrs ...string) networkingv1.NetworkPolicyEgressRule {
		var peers []networkingv1.NetworkPolicyPeer
		for _, s := range cidrs {
			peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: s}})
		}
		return networkingv1.NetworkPolicyEgressRule{To: peers}
	}
	np := func(name string, sel map[string]string, types []networkingv1.PolicyType, rules ...networkingv1.NetworkPolicyEgressRule) networkingv1.NetworkPolicy {
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: types, Egress: rules}}
	}
	platform := np("platform", nil, egressType, ipRule("0.0.0.0/0"))
	platform.Labels = map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}
	platformOther := np("sandbox-egress-a2", map[string]string{"allocation-id": "a2"}, egressType, ipRule("0.0.0.0/0"))
	platformOther.Labels = platform.Labels
	bad := np("bad-selector", nil, egressType, ipRule("0.0.0.0/0"))
	bad.Spec.PodSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Bogus"}}
	for _, tc := range []struct {
		name string
		np   networkingv1.NetworkPolicy
		want bool
	}{
		{"allow-all to everything", np("p", map[string]string{"app": "sbx"}, egressType, networkingv1.NetworkPolicyEgressRule{}), true},
		{"select-all namespace policy", np("p", nil, egressType, ipRule("8.8.8.8/32")), true},
		{"wider CIDR", np("p", map[string]string{"app": "sbx"}, egressType, ipRule("10.0.0.0/7")), true},
		{"covered CIDR", np("p", map[string]string{"app": "sbx"}, egressType, ipRule("10.1.0.0/16")), false},
		{"IPv6 block", np("p", map[string]string{"app": "sbx"}, egressType, ipRule("::/0")), true},
		{"pod selector peer", np("p", map[string]string{"app": "sbx"}, egressType, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}}), true},
		{"same DNS peer, port 53", np("p", map[string]string{"app": "sbx"}, egressType, networkingv1.NetworkPolicyEgressRule{To: dns.To, Ports: dns.Ports[:1]}), false},
		{"same DNS peer, all ports", np("p", map[string]string{"app": "sbx"}, egressType, networkingv1.NetworkPolicyEgressRule{To: dns.To}), true},
		{"deny-all egress", np("p", map[string]string{"app": "sbx"}, egressType), false},
		{"ingress only", np("p", map[string]string{"app": "sbx"}, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}), false},
		{"no policyTypes with egress rules", np("p", map[string]string{"app": "sbx"}, nil, ipRule("8.8.8.8/32")), true},
		{"other labels", np("p", map[string]string{"app": "other"}, egressType, ipRule("0.0.0.0/0")), false},
		{"managed-by label set by a tenant", platform, true},
		{"another sandbox's platform policy", platformOther, false},
		{"own policy", np("own", nil, egressType, ipRule("0.0.0.0/0")), false},
		{"unevaluable selector", bad, true},
	} {
		got := Conflicts([]networkingv1.NetworkPolicy{tc.np}, "own", []labels.Set{tmpl}, []string{"10.0.0.0/8"}, dns)
		if (len(got) > 0) != tc.want {
			t.Errorf("%s: Conflicts = %v, want conflict %v", tc.name, got, tc.want)
		}
	}
	// A policy matching only a current pod's extra label counts too.
	podOnly := np("p", map[string]string{"pod-template-hash": "x"}, egressType, ipRule("0.0.0.0/0"))
	if got := Conflicts([]networkingv1.NetworkPolicy{podOnly}, "own", []labels.Set{tmpl, {"allocation-id": "a1", "pod-template-hash": "x"}}, nil, dns); len(got) != 1 {
		t.Errorf("pod-label conflict = %v, want [p]", got)
	}
}

// TestSelectsAnyAgreesWithLabelSelectorAsSelector: Conflicts' shortcut
// for matchLabels selectors gives the answer, and fails where,
// metav1.LabelSelectorAsSelector and Selector.Matches do, invalid keys
// and values included, and the memo of keys carries no answer from one
// selector to the next.
func TestSelectsAnyAgreesWithLabelSelectorAsSelector(t *testing.T) {
	sets := []labels.Set{{"allocation-id": "a1", "app": "sbx"}, {"allocation-id": "a1", "pod-template-hash": "x"}}
	long := strings.Repeat("v", 64)
	sels := []metav1.LabelSelector{
		{},
		{MatchLabels: map[string]string{"allocation-id": "a1"}},
		{MatchLabels: map[string]string{"allocation-id": "a2"}},
		{MatchLabels: map[string]string{"allocation-id": "a1", "app": "sbx"}},
		{MatchLabels: map[string]string{"allocation-id": "a1", "app": "other"}},
		{MatchLabels: map[string]string{"pod-template-hash": "x"}},
		{MatchLabels: map[string]string{"app": ""}},
		{MatchLabels: map[string]string{"missing": ""}},
		{MatchLabels: map[string]string{"allocation-id": long}},
		{MatchLabels: map[string]string{"allocation-id": "not valid"}},
		{MatchLabels: map[string]string{"bad key!": "a1"}},
		{MatchLabels: map[string]string{"bad key!": "a1"}}, // the memoised invalid key
		{MatchLabels: map[string]string{"example.com/app": "sbx"}},
		{MatchLabels: map[string]string{"-example.com/app": "sbx"}},
		{MatchLabels: map[string]string{"allocation-id": "a1"}, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpExists}}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Bogus"}}},
	}
	keys := map[string]bool{}
	for _, sel := range sels {
		want, wantErr := false, error(nil)
		s, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			wantErr = err
		} else {
			want = slices.ContainsFunc(sets, func(set labels.Set) bool { return s.Matches(set) })
		}
		got, gotErr := selectsAny(&sel, sets, keys)
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("selectsAny(%v) = %v, %v; LabelSelectorAsSelector: %v, %v", sel, got, gotErr, want, wantErr)
		}
	}
}

// BenchmarkConflicts judges a namespace of 300 sandboxes' platform
// policies for one of them, as every egress PUT's conflict step does
// (go test -run '^$' -bench Conflicts -benchmem ./corectl/egress/).
func BenchmarkConflicts(b *testing.B) {
	c := kubetest.Cluster("c1", "ingress")
	set := []string{"203.0.113.0/24"}
	var policies []networkingv1.NetworkPolicy
	for i := range 300 {
		id := "a" + strconv.Itoa(i)
		policies = append(policies, networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName(id)},
			Spec: Compile(c, "allocation-id", id, set)})
	}
	sets := []labels.Set{{"allocation-id": "a5", "app": "sbx"}}
	dns := DNSRule(c)
	b.ReportAllocs()
	for b.Loop() {
		if got := Conflicts(policies, PolicyName("a5"), sets, set, dns); len(got) != 0 {
			b.Fatalf("Conflicts = %v", got)
		}
	}
}
