package egress

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/cluster"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// errUndecodable: a spec is not in the shape Compile produces.
var errUndecodable = errors.New("egress: policy spec is not in the platform shape")

// DNSPort is the port of the platform DNS rule.
const DNSPort = 53

// DNSRule is the platform DNS rule of a cluster: UDP and TCP 53 to the
// cluster's DNS pods (spec §3.1.1 I, §5.3). It is always the first egress
// rule and users cannot change it.
func DNSRule(c *cluster.Cluster) networkingv1.NetworkPolicyEgressRule {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	port := intstr.FromInt32(DNSPort)
	ns := c.DNS.NamespaceSelector.DeepCopy()
	pod := c.DNS.PodSelector.DeepCopy()
	return networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: ns, PodSelector: pod}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &port}, {Protocol: &tcp, Port: &port}},
	}
}

// Compile returns the normalised NetworkPolicy spec for an allocation and a
// normalised CIDR set: podSelector matchLabels {allocationLabel:
// allocationID}, policyTypes [Egress], the DNS rule, then one rule with one
// ipBlock per CIDR, in set order. No ingress rules: the policy does not
// restrict ingress.
func Compile(c *cluster.Cluster, allocationLabel, allocationID string, set []string) networkingv1.NetworkPolicySpec {
	rules := make([]networkingv1.NetworkPolicyEgressRule, 0, len(set)+1)
	rules = append(rules, DNSRule(c))
	for _, s := range set {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: s}}},
		})
	}
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{allocationLabel: allocationID}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress:      rules,
	}
}

// Canonical returns the canonical JSON of a spec (the value of
// last-verified-spec and the basis of every comparison): encoding/json of
// the networking/v1 type, whose field order is fixed and whose empty
// fields are omitted, so a spec and its apiserver read-back give the same
// bytes.
func Canonical(spec *networkingv1.NetworkPolicySpec) string {
	b, err := json.Marshal(spec)
	if err != nil {
		// A NetworkPolicySpec always marshals; keep the signature total.
		panic(fmt.Sprintf("egress: marshal NetworkPolicySpec: %v", err))
	}
	return string(b)
}

// ParseLKG decodes a last-verified-spec annotation value: strict JSON of a
// NetworkPolicySpec that is canonical (re-encoding gives the same bytes)
// and decompiles (DecompileExcept; set is its allowed CIDRs, the spec
// holds the excepts). The error says what is wrong.
func ParseLKG(v string) (*networkingv1.NetworkPolicySpec, []string, error) {
	if v == "" {
		return nil, nil, errors.New("empty last-verified-spec")
	}
	var spec networkingv1.NetworkPolicySpec
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		return nil, nil, fmt.Errorf("last-verified-spec is not a NetworkPolicy spec: %w", err)
	}
	if Canonical(&spec) != v {
		return nil, nil, errors.New("last-verified-spec is not in canonical form")
	}
	set, _, err := DecompileExcept(&spec)
	if err != nil {
		return nil, nil, fmt.Errorf("last-verified-spec: %w", err)
	}
	return &spec, set, nil
}

// Decompile returns the CIDR set of a spec in the shape Compile produces:
// a podSelector with one matchLabels entry and no expressions,
// policyTypes exactly [Egress], no ingress rules, a first egress rule that
// is a DNS rule (one peer with both a namespace and a pod selector, ports
// exactly UDP 53 and TCP 53), then rules of one ipBlock peer each, without
// except or ports, whose CIDRs form a normalised set. Anything else is
// errUndecodable: the object's rules cannot be stated in the API model.
func Decompile(spec *networkingv1.NetworkPolicySpec) ([]string, error) {
	if len(spec.PodSelector.MatchLabels) != 1 || len(spec.PodSelector.MatchExpressions) != 0 {
		return nil, fmt.Errorf("%w: podSelector is not one matchLabels entry", errUndecodable)
	}
	if !slices.Equal(spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		return nil, fmt.Errorf("%w: policyTypes is not [Egress]", errUndecodable)
	}
	if len(spec.Ingress) != 0 {
		return nil, fmt.Errorf("%w: has ingress rules", errUndecodable)
	}
	if len(spec.Egress) == 0 || !isDNSRule(spec.Egress[0]) {
		return nil, fmt.Errorf("%w: first egress rule is not the platform DNS rule", errUndecodable)
	}
	set := make([]string, 0, len(spec.Egress)-1)
	for i, r := range spec.Egress[1:] {
		if len(r.Ports) != 0 || len(r.To) != 1 || r.To[0].IPBlock == nil || r.To[0].PodSelector != nil ||
			r.To[0].NamespaceSelector != nil || len(r.To[0].IPBlock.Except) != 0 {
			return nil, fmt.Errorf("%w: egress[%d] is not a single ipBlock without ports", errUndecodable, i+1)
		}
		set = append(set, r.To[0].IPBlock.CIDR)
	}
	if !cidr.IsNormalized(set) {
		return nil, fmt.Errorf("%w: ipBlock CIDRs are not a normalised set", errUndecodable)
	}
	return set, nil
}

// isDNSRule reports whether r has the platform DNS rule's shape.
func isDNSRule(r networkingv1.NetworkPolicyEgressRule) bool {
	if len(r.To) != 1 || r.To[0].IPBlock != nil || r.To[0].NamespaceSelector == nil || r.To[0].PodSelector == nil {
		return false
	}
	return isDNSPorts(r.Ports, true)
}

// isDNSPorts reports whether ports are exactly {UDP 53, TCP 53} (exact) or
// a non-empty subset of them (!exact).
func isDNSPorts(ports []networkingv1.NetworkPolicyPort, exact bool) bool {
	if len(ports) == 0 {
		return false
	}
	seen := map[corev1.Protocol]bool{}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if p.Port == nil || p.EndPort != nil || p.Port.Type != intstr.Int || p.Port.IntVal != DNSPort ||
			(proto != corev1.ProtocolUDP && proto != corev1.ProtocolTCP) {
			return false
		}
		seen[proto] = true
	}
	if exact {
		return len(ports) == 2 && seen[corev1.ProtocolUDP] && seen[corev1.ProtocolTCP]
	}
	return true
}

// selectorIsAllocation reports whether sel is exactly matchLabels
// {label: id}.
func selectorIsAllocation(sel metav1.LabelSelector, label, id string) bool {
	return len(sel.MatchExpressions) == 0 && maps.Equal(sel.MatchLabels, map[string]string{label: id})
}

// sameDNSPeer reports whether a peer selects exactly what the platform DNS
// rule's peer selects (the same selectors, semantically).
func sameDNSPeer(p networkingv1.NetworkPolicyPeer, dns networkingv1.NetworkPolicyPeer) bool {
	return p.IPBlock == nil && p.NamespaceSelector != nil && p.PodSelector != nil &&
		apiequality.Semantic.DeepEqual(p.NamespaceSelector, dns.NamespaceSelector) &&
		apiequality.Semantic.DeepEqual(p.PodSelector, dns.PodSelector)
}
