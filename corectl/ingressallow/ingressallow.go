// Package ingressallow owns a sandbox's instance ingress allowlist (spec
// §3.2, §5.2): the desired source CIDRs kept in a SandboxIngressAllowlist
// (package v1alpha1), and the managed networking.k8s.io/v1 Ingress that
// carries them to the shared fixed entry as
// nginx.ingress.kubernetes.io/whitelist-source-range on the sandbox's own
// path prefix /<sandboxID>/.
//
// Writing desired (SetDesired) and applying it (Reconcile) are separate:
// the HTTP API persists desired, and the leader's reconciler applies it,
// reads the Ingress back, verifies every condition of spec §5.2 and moves
// the LKG; on failure it keeps the previous applied state and LKG.
package ingressallow

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
)

// AnnotationWhitelist is the ingress-nginx annotation the allowlist is
// written to.
const AnnotationWhitelist = "nginx.ingress.kubernetes.io/whitelist-source-range"

// IngressNamePrefix prefixes the sandbox ID in the managed Ingress name.
const IngressNamePrefix = "sandbox-ingress-"

// IngressName returns "sandbox-ingress-<sandboxID>".
func IngressName(sandboxID string) string { return IngressNamePrefix + sandboxID }

// Path returns the sandbox's path prefix on the fixed entry,
// "/<sandboxID>/".
func Path(sandboxID string) string { return "/" + sandboxID + "/" }

// Failure codes (status.lastErrorCode). Stable.
const (
	// CodeWriteFailed: the apiserver refused or failed a write.
	CodeWriteFailed = "WriteFailed"
	// CodeReadFailed: a read-back or a list failed.
	CodeReadFailed = "ReadFailed"
	// CodeConcurrentUpdate: an object changed under us (resourceVersion
	// conflict).
	CodeConcurrentUpdate = "ConcurrentUpdate"
	// CodeCarrierMismatch: the Ingress read back does not have the
	// expected owner, labels, class, host, path or backend.
	CodeCarrierMismatch = "CarrierMismatch"
	// CodeAllowlistMismatch: the whitelist-source-range read back is not
	// exactly the desired normalised set.
	CodeAllowlistMismatch = "AllowlistMismatch"
	// CodePathClaimed: another Ingress claims the sandbox's path on the
	// same host and class.
	CodePathClaimed = "PathClaimed"
	// CodeCarrierForeign: an Ingress with the managed name exists but is
	// not corectl's for this sandbox; it is never overwritten.
	CodeCarrierForeign = "CarrierForeign"
	// CodeSandboxNotFound: the BatchSandbox does not exist (any more).
	CodeSandboxNotFound = "SandboxNotFound"
	// CodeDesiredInvalid: spec.desired is not a non-empty normalised set
	// (written by hand); nothing is applied.
	CodeDesiredInvalid = "DesiredInvalid"
)

// Errors.
var (
	// ErrUnavailable: the apiserver could not answer.
	ErrUnavailable = errors.New("ingressallow: apiserver unavailable")
	// ErrClusterMismatch: the SandboxIngressAllowlist belongs to another
	// cluster ID than the caller's.
	ErrClusterMismatch = errors.New("ingressallow: allowlist belongs to another cluster")
	// ErrNotOwned: the SandboxIngressAllowlist of that name is owned by
	// another BatchSandbox (a leftover of an earlier sandbox of the same
	// name); CreateDesired never adopts it.
	ErrNotOwned = errors.New("ingressallow: allowlist belongs to another BatchSandbox")
)

// MaxDescription bounds a rule description, in bytes.
const MaxDescription = 256

// NormalizeRules normalises the CIDRs of rules (package cidr), sorts by
// CIDR and merges duplicates, keeping the first non-empty description. The
// error is cidr's (*cidr.EntryError with the input index, or
// cidr.ErrTooMany).
func NormalizeRules(in []v1alpha1.IngressRule) ([]v1alpha1.IngressRule, error) {
	if len(in) > cidr.MaxEntries {
		return nil, fmt.Errorf("%w: %d entries, at most %d", cidr.ErrTooMany, len(in), cidr.MaxEntries)
	}
	byCIDR := map[string]string{}
	for i, r := range in {
		p, err := cidr.Parse(r.CIDR)
		if err != nil {
			return nil, &cidr.EntryError{Index: i, Reason: strings.TrimPrefix(err.Error(), cidr.ErrInvalid.Error()+": ")}
		}
		k := p.String()
		if d, seen := byCIDR[k]; !seen || d == "" {
			byCIDR[k] = r.Description
		}
	}
	keys := make([]string, 0, len(byCIDR))
	for k := range byCIDR {
		keys = append(keys, k)
	}
	set, err := cidr.Normalize(keys)
	if err != nil {
		return nil, err
	}
	out := make([]v1alpha1.IngressRule, len(set))
	for i, k := range set {
		out[i] = v1alpha1.IngressRule{CIDR: k, Description: byCIDR[k]}
	}
	return out, nil
}

// CIDRs returns the CIDRs of rules, in order.
func CIDRs(rules []v1alpha1.IngressRule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.CIDR
	}
	return out
}

// desiredSet returns the normalised CIDR set of an allowlist's spec, or
// an error when spec.desired is empty or not normalised (edited by hand).
func desiredSet(al *v1alpha1.SandboxIngressAllowlist) ([]string, error) {
	set := CIDRs(al.Spec.Desired)
	if len(set) == 0 {
		return nil, errors.New("spec.desired is empty")
	}
	if !cidr.IsNormalized(set) {
		return nil, errors.New("spec.desired is not a normalised CIDR set")
	}
	return slices.Clone(set), nil
}
