package ingressallow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/corectl/cidr"
	networkingv1 "k8s.io/api/networking/v1"
)

// AnnotationProbeSources is the self-describing annotation on a managed
// Ingress: the JSON array of the control-plane probe-source CIDRs P merged
// into its whitelist-source-range (spec §5.2.2 IV). Missing means none
// (carriers written before discovery, or without it).
const AnnotationProbeSources = "network.sandgate.io/probe-source-cidrs"

// CodeProbeSourceUnknown: the probe source could not be discovered for a
// restricted sandbox, so no allowlist was written (fail closed, spec
// §5.2.2 IV).
const CodeProbeSourceUnknown = "ProbeSourceUnknown"

// Effective is the whitelist value written for user set u and probe
// sources p: the normalised union u ∪ p when u is non-empty, and nil (no
// annotation: unrestricted) when u is empty (spec §5.2.2 IV).
func Effective(u, p []string) []string {
	if len(u) == 0 {
		return nil
	}
	out, err := cidr.Normalize(append(slices.Clone(u), p...))
	if err != nil {
		// u and p are normalised sets; a failure here is a programming
		// error, and u alone is the fail-closed answer.
		return slices.Clone(u)
	}
	return out
}

// ProbeSources returns the P a carrier records (AnnotationProbeSources);
// nil when absent. An annotation that is not a JSON array of normalised
// /32 CIDRs (discovery records single hosts only) is an error.
func ProbeSources(ing *networkingv1.Ingress) ([]string, error) {
	v, ok := ing.Annotations[AnnotationProbeSources]
	if !ok || v == "" {
		return nil, nil
	}
	var p []string
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return nil, fmt.Errorf("%s is not a JSON array of strings", AnnotationProbeSources)
	}
	if !cidr.IsNormalized(p) {
		return nil, fmt.Errorf("%s is not a normalised CIDR set", AnnotationProbeSources)
	}
	// Discovery records single hosts only; a wider entry would let a hand
	// edit of both annotations pass the read-back as "no drift" and hide
	// a widened whitelist from GET.
	for _, c := range p {
		if !strings.HasSuffix(c, "/32") {
			return nil, fmt.Errorf("%s holds %s, not a single host (/32)", AnnotationProbeSources, c)
		}
	}
	return p, nil
}

// StripProbe returns the user view of an effective set e: e without the
// probe sources p, except CIDRs the user set u names explicitly (they stay
// visible, spec §5.2.2 IV).
func StripProbe(e, p, u []string) []string {
	out := []string{}
	for _, c := range e {
		if slices.Contains(p, c) && !slices.Contains(u, c) {
			continue
		}
		out = append(out, c)
	}
	return out
}
