package egress

import (
	"slices"
	"testing"

	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/kubetest"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestCarve(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		allow, deny           []string
		wantAllow, wantExcept []string
	}{
		{"nothing denied", []string{"10.0.0.0/8"}, nil, []string{"10.0.0.0/8"}, []string{}},
		{"deny inside", []string{"0.0.0.0/0"}, []string{"10.0.0.0/8", "169.254.169.254"}, []string{"0.0.0.0/0"}, []string{"10.0.0.0/8", "169.254.169.254/32"}},
		{"deny covering drops the allow", []string{"10.1.0.0/16", "192.0.2.0/24"}, []string{"10.0.0.0/8"}, []string{"192.0.2.0/24"}, []string{}},
		{"deny equal drops the allow", []string{"10.0.0.0/8"}, []string{"10.0.0.0/8"}, []string{}, []string{}},
		{"deny everything", []string{"10.0.0.0/8", "1.1.1.1"}, []string{"0.0.0.0/0"}, []string{}, []string{}},
		{"deny outside changes nothing", []string{"10.0.0.0/8"}, []string{"192.0.2.0/24"}, []string{"10.0.0.0/8"}, []string{}},
		{"nested denies keep the outer", []string{"0.0.0.0/0"}, []string{"10.0.0.0/8", "10.1.0.0/16"}, []string{"0.0.0.0/0"}, []string{"10.0.0.0/8"}},
	} {
		got := Carve(prefixes(t, tc.allow...), prefixes(t, tc.deny...))
		if !slices.Equal(cidr.Strings(got.Allow), tc.wantAllow) || !slices.Equal(cidr.Strings(got.Except), tc.wantExcept) {
			t.Errorf("%s: Carve = %v except %v, want %v except %v", tc.name, got.Allow, got.Except, tc.wantAllow, tc.wantExcept)
		}
	}
}

func TestCompileExceptRoundTrip(t *testing.T) {
	c := kubetest.Cluster("c1", "ingress")
	list := Carve(prefixes(t, "0.0.0.0/0", "203.0.113.0/24"), prefixes(t, "10.0.0.0/8", "203.0.113.7"))
	spec := CompileExcept(c, "allocation-id", "a1", list)
	if got := spec.Egress[1].To[0].IPBlock; got.CIDR != "0.0.0.0/0" || !slices.Equal(got.Except, []string{"10.0.0.0/8", "203.0.113.7/32"}) {
		t.Fatalf("ipBlock 0.0.0.0/0 = %+v", got)
	}
	if got := spec.Egress[2].To[0].IPBlock; got.CIDR != "203.0.113.0/24" || !slices.Equal(got.Except, []string{"203.0.113.7/32"}) {
		t.Fatalf("ipBlock 203.0.113.0/24 = %+v", got)
	}
	set, except, err := DecompileExcept(&spec)
	if err != nil || !slices.Equal(set, []string{"0.0.0.0/0", "203.0.113.0/24"}) || !slices.Equal(except, []string{"10.0.0.0/8", "203.0.113.7/32"}) {
		t.Fatalf("DecompileExcept = %v, %v, %v", set, except, err)
	}
	if _, err := Decompile(&spec); err == nil {
		t.Fatal("Decompile (no excepts) accepted a spec with excepts")
	}
	if _, lset, err := ParseLKG(Canonical(&spec)); err != nil || !slices.Equal(lset, set) {
		t.Fatalf("ParseLKG = %v, %v", lset, err)
	}
	rules := RulesExcept(set, except)
	if len(rules) != 2 || !slices.Equal(rules[0].Except, []string{"10.0.0.0/8", "203.0.113.7/32"}) || !slices.Equal(rules[1].Except, []string{"203.0.113.7/32"}) {
		t.Fatalf("RulesExcept = %+v", rules)
	}
	// Not the normal form: an except missing from one block, an except
	// outside its block, an unsorted except.
	for name, mutate := range map[string]func(){
		"missing":  func() { spec.Egress[2].To[0].IPBlock.Except = nil },
		"outside":  func() { spec.Egress[2].To[0].IPBlock.Except = []string{"10.0.0.0/8", "203.0.113.7/32"} },
		"unsorted": func() { spec.Egress[1].To[0].IPBlock.Except = []string{"203.0.113.7/32", "10.0.0.0/8"} },
	} {
		spec = CompileExcept(c, "allocation-id", "a1", list)
		mutate()
		if _, _, err := DecompileExcept(&spec); err == nil {
			t.Errorf("%s: DecompileExcept accepted %+v", name, spec.Egress)
		}
	}
}

func TestSubtract(t *testing.T) {
	got := cidr.Strings(Subtract(Allowlist{Allow: prefixes(t, "10.0.0.0/8"), Except: prefixes(t, "10.0.0.0/9")}))
	if !slices.Equal(got, []string{"10.128.0.0/9"}) {
		t.Fatalf("10/8 - 10/9 = %v", got)
	}
	got = cidr.Strings(Subtract(Allowlist{Allow: prefixes(t, "0.0.0.0/0"), Except: prefixes(t, "128.0.0.0/1", "0.0.0.0/2")}))
	if !slices.Equal(got, []string{"64.0.0.0/2"}) {
		t.Fatalf("0/0 - 128/1 - 0/2 = %v", got)
	}
	got = cidr.Strings(Subtract(Allowlist{Allow: prefixes(t, "0.0.0.0/0"), Except: prefixes(t, "255.255.255.255")}))
	if len(got) != 32 || got[len(got)-1] != "255.255.255.254/32" {
		t.Fatalf("0/0 - 255.255.255.255 = %d CIDRs %v", len(got), got)
	}
}

// TestConflictsWithCarveOuts: compared against the allowed ranges minus
// the carve-outs (Subtract), a foreign policy that re-allows a carved-out
// range conflicts, one inside what stays allowed does not.
func TestConflictsWithCarveOuts(t *testing.T) {
	c := kubetest.Cluster("c1", "ingress")
	allowed := cidr.Strings(Subtract(Carve(prefixes(t, "0.0.0.0/0"), prefixes(t, "10.0.0.0/8"))))
	sets := []labels.Set{{"allocation-id": "a1"}}
	foreign := func(block string) []networkingv1.NetworkPolicy {
		return []networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}, Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: block}}}}},
		}}}
	}
	for block, want := range map[string]bool{"10.1.0.0/16": true, "0.0.0.0/0": true, "192.0.2.0/24": false} {
		if got := len(Conflicts(foreign(block), "own", sets, allowed, DNSRule(c))) > 0; got != want {
			t.Errorf("a foreign policy allowing %s: conflict %v, want %v", block, got, want)
		}
	}
}
