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
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/internal/strictjson"
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
	// ErrBadRequest: the PUT body is not a non-empty ingress allowlist.
	ErrBadRequest = errors.New("ingressallow: bad request")
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

// MaxRequestSize bounds a PUT body, in bytes (128 KiB).
const MaxRequestSize = 128 << 10

// MaxDescription bounds a rule description, in bytes.
const MaxDescription = 256

// DecodeRequest decodes a PUT /sandboxes/{id}/network/ingress body:
// {"ingress": [{"cidr": "...", "description": "..."}, ...]}, strictly
// (unknown or duplicate fields, nulls, wrong types and trailing data are
// errors). The list must not be empty (spec §5.2.1: an empty PUT would
// clear the allowlist). CIDRs are normalised; entries that normalise to the
// same CIDR are merged, keeping the first non-empty description. Errors
// wrap ErrBadRequest, and cidr.ErrInvalid or cidr.ErrTooMany for CIDRs
// (naming ingress[i]).
func DecodeRequest(body []byte) ([]v1alpha1.IngressRule, error) {
	if len(body) > MaxRequestSize {
		return nil, fmt.Errorf("%w: body larger than %d bytes", ErrBadRequest, MaxRequestSize)
	}
	if err := strictjson.Check(body); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return nil, fmt.Errorf("%w: body must be a JSON object", ErrBadRequest)
	}
	for k := range raw {
		if k != "ingress" {
			return nil, fmt.Errorf("%w: unknown field %q (only ingress)", ErrBadRequest, k)
		}
	}
	v, ok := raw["ingress"]
	if !ok {
		return nil, fmt.Errorf("%w: missing field ingress", ErrBadRequest)
	}
	rules, err := DecodeRules(v, "ingress")
	if err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: ingress must not be empty (an empty list would clear the allowlist)", ErrBadRequest)
	}
	return rules, nil
}

// DecodeRules decodes a JSON array of {cidr, description?} objects named
// field (for messages), strictly, and returns the normalised rules. null
// is refused. Errors wrap ErrBadRequest (and cidr errors).
func DecodeRules(v json.RawMessage, field string) ([]v1alpha1.IngressRule, error) {
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil || items == nil {
		return nil, fmt.Errorf("%w: %s must be an array of objects", ErrBadRequest, field)
	}
	in := make([]v1alpha1.IngressRule, len(items))
	for i, it := range items {
		if it == nil {
			return nil, fmt.Errorf("%w: %s[%d] must be an object", ErrBadRequest, field, i)
		}
		for k, val := range it {
			switch k {
			case "cidr":
				if err := json.Unmarshal(val, &in[i].CIDR); err != nil || string(val) == "null" {
					return nil, fmt.Errorf("%w: %s[%d].cidr must be a string", ErrBadRequest, field, i)
				}
			case "description":
				if err := json.Unmarshal(val, &in[i].Description); err != nil || string(val) == "null" {
					return nil, fmt.Errorf("%w: %s[%d].description must be a string", ErrBadRequest, field, i)
				}
				if len(in[i].Description) > MaxDescription {
					return nil, fmt.Errorf("%w: %s[%d].description is longer than %d bytes", ErrBadRequest, field, i, MaxDescription)
				}
			default:
				return nil, fmt.Errorf("%w: %s[%d]: unknown field %q", ErrBadRequest, field, i, k)
			}
		}
		if _, ok := it["cidr"]; !ok {
			return nil, fmt.Errorf("%w: %s[%d]: missing field cidr", ErrBadRequest, field, i)
		}
	}
	out, err := NormalizeRules(in)
	if err != nil {
		var ee *cidr.EntryError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%w: %s[%d].cidr: %w", ErrBadRequest, field, ee.Index, err)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrBadRequest, field, err)
	}
	return out, nil
}

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
