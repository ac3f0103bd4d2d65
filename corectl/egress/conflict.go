package egress

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/sandgate/sandgate/corectl/cidr"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Conflicts returns the names, sorted, of the non-platform policies among
// policies that can select any of labelSets and widen egress beyond
// allowed plus the platform DNS rule dns (spec §3.1.1 III, §5.3
// "union-based permission widening").
//
// NetworkPolicies are additive: a second policy that selects the pod and
// has Egress in its policy types adds its rules to ours. Such a policy
// widens unless every one of its egress rules is covered: each peer is an
// IPv4 ipBlock inside one allowed CIDR (ports do not matter, ours allow all
// ports), or the platform DNS peer with ports among UDP/TCP 53. A rule
// with no peers (all destinations), a pod or namespace selector, an IPv6
// or unparsable block, or a policy whose selector cannot be evaluated
// counts as widening. Only the policy named own (the reserved name
// sandbox-egress-<allocationID> that the caller wrote and read back as
// its own) is skipped. Labels are not trusted: anyone who may create
// NetworkPolicies in the namespace can set app.kubernetes.io/managed-by,
// so a policy carrying it is judged like any other (issue 29 item 8).
// Another sandbox's platform policy selects only that sandbox's
// allocation label, so it never matches this sandbox's label sets and is
// no conflict on its own merits. Egress-only deny policies (Egress type,
// no rules) and ingress-only policies never widen egress.
func Conflicts(policies []networkingv1.NetworkPolicy, own string, labelSets []labels.Set, allowed []string, dns networkingv1.NetworkPolicyEgressRule) []string {
	j := newJudge(own, labelSets, allowed, dns)
	var out []string
	for i := range policies {
		if j.conflicts(&policies[i]) {
			out = append(out, policies[i].Name)
		}
	}
	slices.Sort(out)
	return out
}

// judge holds what one Conflicts call compares every policy with: the
// allowed prefixes parsed once and the label keys validated so far.
type judge struct {
	own      string
	sets     []labels.Set
	prefixes []netip.Prefix
	dns      networkingv1.NetworkPolicyEgressRule
	keys     map[string]bool
}

func newJudge(own string, labelSets []labels.Set, allowed []string, dns networkingv1.NetworkPolicyEgressRule) *judge {
	prefixes := make([]netip.Prefix, 0, len(allowed))
	for _, s := range allowed {
		if p, err := cidr.Parse(s); err == nil {
			prefixes = append(prefixes, p)
		}
	}
	return &judge{own: own, sets: labelSets, prefixes: prefixes, dns: dns, keys: map[string]bool{}}
}

// conflicts judges np, fully decoded: it is not the sandbox's own policy,
// and its selector cannot be evaluated or selects the sandbox and widens.
func (j *judge) conflicts(np *networkingv1.NetworkPolicy) bool {
	if np.Name == j.own {
		return false
	}
	selects, err := j.selects(&np.Spec.PodSelector)
	return err != nil || selects && j.widens(&np.Spec)
}

// selects is selectsAny for the judge's label sets; an error counts as a
// conflict.
func (j *judge) selects(sel *metav1.LabelSelector) (bool, error) {
	return selectsAny(sel, j.sets, j.keys)
}

// widens reports whether a policy that selects the sandbox, of spec spec,
// widens its egress: it affects egress and one of its rules is not
// covered.
func (j *judge) widens(spec *networkingv1.NetworkPolicySpec) bool {
	if !affectsEgress(spec) {
		return false
	}
	return slices.ContainsFunc(spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool { return !covered(r, j.prefixes, j.dns) })
}

// selectsAny reports whether sel selects any of sets, with the answer
// and the error of metav1.LabelSelectorAsSelector and Selector.Matches.
// A selector of matchLabels only (every platform policy's, one per
// sandbox of the namespace) is judged without building the Selector: its
// keys are validated once per Conflicts call (keys memoises them: one
// allocation label for all the sandboxes), its values as NewRequirement
// validates them, and a set matches when it has every key with its value
// (the Equals requirement). Building a Selector for each policy was most
// of Conflicts' time (the key's regular expression, per policy).
func selectsAny(sel *metav1.LabelSelector, sets []labels.Set, keys map[string]bool) (bool, error) {
	if len(sel.MatchExpressions) != 0 || len(sel.MatchLabels) == 0 {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(sets, func(set labels.Set) bool { return s.Matches(set) }), nil
	}
	for k, v := range sel.MatchLabels {
		ok, seen := keys[k]
		if !seen {
			// Exists takes no values: the error, if any, is the key's.
			_, err := labels.NewRequirement(k, selection.Exists, nil)
			ok = err == nil
			keys[k] = ok
		}
		if !ok || len(validation.IsValidLabelValue(v)) != 0 {
			// The error LabelSelectorAsSelector would return.
			_, err := labels.NewRequirement(k, selection.Equals, []string{v})
			if err == nil {
				err = fmt.Errorf("invalid label selector %s=%s", k, v)
			}
			return false, err
		}
	}
	return slices.ContainsFunc(sets, func(set labels.Set) bool {
		for k, v := range sel.MatchLabels {
			if got, ok := set[k]; !ok || got != v {
				return false
			}
		}
		return true
	}), nil
}

// affectsEgress applies the API's defaulting rule: policyTypes, when
// empty, is Ingress plus Egress if there are egress rules.
func affectsEgress(spec *networkingv1.NetworkPolicySpec) bool {
	if len(spec.PolicyTypes) == 0 {
		return len(spec.Egress) > 0
	}
	return slices.Contains(spec.PolicyTypes, networkingv1.PolicyTypeEgress)
}

// covered reports whether rule r allows nothing beyond allowed and dns.
func covered(r networkingv1.NetworkPolicyEgressRule, allowed []netip.Prefix, dns networkingv1.NetworkPolicyEgressRule) bool {
	if len(r.To) == 0 {
		return false
	}
	for _, peer := range r.To {
		switch {
		case peer.IPBlock != nil && peer.PodSelector == nil && peer.NamespaceSelector == nil:
			p, err := cidr.Parse(peer.IPBlock.CIDR)
			if err != nil {
				return false
			}
			if !slices.ContainsFunc(allowed, func(a netip.Prefix) bool { return cidr.Covers(a, p) }) {
				return false
			}
		case len(dns.To) == 1 && sameDNSPeer(peer, dns.To[0]) && isDNSPorts(r.Ports, false):
		default:
			return false
		}
	}
	return true
}
