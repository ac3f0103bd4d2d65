// Package egress owns a sandbox's egress allowlist: the platform
// NetworkPolicy sandbox-egress-<allocationID> (spec §5.3), the PUT write
// flow with read-back, selector and conflict checks, the CNI gate and LKG
// rollback (spec §3.1.1 III), and the read-only GET view (spec §3.1.1 IV).
//
// State lives only in the NetworkPolicy: its spec is the configured egress,
// and the annotations the spec names hold the rest —
// last-verified-spec (the LKG, the canonical JSON of the NetworkPolicy
// spec), verification-state and verification-error-code.
package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/internal/strictjson"
)

// Annotations on the platform NetworkPolicy (spec §5.3, names as written
// there).
const (
	// AnnotationLastVerifiedSpec holds the LKG: the canonical JSON of the
	// last NetworkPolicy spec that passed every check.
	AnnotationLastVerifiedSpec = "last-verified-spec"
	// AnnotationVerificationState is Verifying, Verified or PolicyConflict.
	AnnotationVerificationState = "verification-state"
	// AnnotationVerificationErrorCode is the code of the last failure, ""
	// after a verified write.
	AnnotationVerificationErrorCode = "verification-error-code"
)

// PolicyNamePrefix prefixes the allocation ID in the policy name.
const PolicyNamePrefix = "sandbox-egress-"

// PolicyName returns "sandbox-egress-<allocationID>".
func PolicyName(allocationID string) string { return PolicyNamePrefix + allocationID }

// Failure codes of a PUT (the PUT answer's code and the
// verification-error-code annotation / GET lastErrorCode). Stable.
const (
	// CodePolicyConflict: a non-platform NetworkPolicy selects the
	// sandbox's label set and allows egress the platform policy does not.
	CodePolicyConflict = "PolicyConflict"
	// CodeReadBackMismatch: the object read back differs from what was
	// written.
	CodeReadBackMismatch = "ReadBackMismatch"
	// CodeSelectorMismatch: the podSelector does not select the template
	// labels or a current pod of the sandbox.
	CodeSelectorMismatch = "SelectorMismatch"
	// CodeCNIUnqualified: the cluster's CNI qualification record is
	// missing or invalidated (spec §5.3).
	CodeCNIUnqualified = "CNIUnqualified"
	// CodeWriteFailed: the apiserver refused or failed a write.
	CodeWriteFailed = "WriteFailed"
	// CodeReadFailed: a read-back or a list failed.
	CodeReadFailed = "ReadFailed"
	// CodeConcurrentUpdate: the object changed under us (resourceVersion
	// conflict); another writer is active.
	CodeConcurrentUpdate = "ConcurrentUpdate"
)

// Reasons GET gives for networkReady=false (Status.NotReadyReason).
// Stable.
const (
	// ReasonAllocationUnknown: the BatchSandbox has no usable allocation
	// label, so the policy cannot be named.
	ReasonAllocationUnknown = "AllocationUnknown"
	// ReasonPolicyMissing: no sandbox-egress-<allocationID> policy.
	ReasonPolicyMissing = "PolicyMissing"
	// ReasonPolicyNotManaged: a policy of that name exists but corectl did
	// not write it (no managed-by label, or another sandbox's).
	ReasonPolicyNotManaged = "PolicyNotManaged"
	// ReasonAnnotationCorrupt: a state annotation is missing where it must
	// exist, undecodable, or has an unknown value.
	ReasonAnnotationCorrupt = "AnnotationCorrupt"
	// ReasonSpecUndecodable: the policy spec is not the shape corectl
	// writes (someone edited it), so its rules cannot be stated.
	ReasonSpecUndecodable = "SpecUndecodable"
	// ReasonNoLKG: nothing has been verified yet.
	ReasonNoLKG = "NoLKG"
	// ReasonNotVerified: verification-state is not Verified.
	ReasonNotVerified = "NotVerified"
	// ReasonSpecDrift: the current spec differs from the LKG.
	ReasonSpecDrift = "SpecDrift"
	// ReasonSelectorMismatch: the podSelector does not select the template
	// labels or a current pod.
	ReasonSelectorMismatch = "SelectorMismatch"
	// ReasonPolicyConflict: a non-platform policy widens the sandbox's
	// egress.
	ReasonPolicyConflict = "PolicyConflict"
)

// Outcome is how a PUT ended.
type Outcome string

// Outcomes of a PUT (spec §3.1.1 III).
const (
	// OutcomeVerified: the new policy is written, verified and is the LKG.
	OutcomeVerified Outcome = "Verified"
	// OutcomeLKGRestored: "update failed, LKG restored" — the previous LKG
	// is back and read back.
	OutcomeLKGRestored Outcome = "LKGRestored"
	// OutcomeNewPolicyDeleted: the update failed and there was no earlier
	// LKG; the policy this PUT created is deleted and its absence
	// confirmed.
	OutcomeNewPolicyDeleted Outcome = "NewPolicyDeleted"
	// OutcomeStateUncertain: "update failed, state uncertain" — the
	// rollback could not be written or confirmed.
	OutcomeStateUncertain Outcome = "StateUncertain"
)

// Errors of Put and Get before anything is written. Put also returns the
// sandbox package's errors (ErrInvalidID, ErrNotFound, ErrDeleting,
// ErrNoAllocation, ErrUnavailable).
var (
	// ErrBadRequest: the PUT body is not the rule model of spec §3.1.1 I.
	ErrBadRequest = errors.New("egress: bad request")
	// ErrIndeterminate: the current policy exists but its LKG annotation is
	// missing or corrupt, or it is not corectl's; a PUT could not roll back
	// safely, so nothing is written.
	ErrIndeterminate = errors.New("egress: current policy state is indeterminate")
	// ErrUnavailable: the apiserver could not answer a read made before
	// any write.
	ErrUnavailable = errors.New("egress: apiserver unavailable")
)

// Rule is one egress rule of the API: a destination CIDR, all protocols
// and ports.
type Rule struct {
	// CIDR is a normalised IPv4 CIDR.
	CIDR string `json:"cidr"`
}

// Request is the PUT /sandboxes/{id}/network body (spec §3.1.1 I).
type Request struct {
	// DefaultAction must be "deny".
	DefaultAction string `json:"defaultAction"`
	// Egress is the complete allowlist (full replacement).
	Egress []Rule `json:"egress"`
}

// MaxRequestSize bounds a PUT body, in bytes (64 KiB).
const MaxRequestSize = 64 << 10

// DecodeRequest decodes a PUT body strictly and returns the normalised CIDR
// set. Rules: a JSON object with exactly the fields defaultAction (the
// string "deny") and egress (an array, possibly empty, of objects with
// exactly the field cidr); unknown fields anywhere (protocol and port
// included), duplicate keys at any depth, null fields, trailing data, and invalid CIDRs are
// errors wrapping ErrBadRequest (and cidr.ErrInvalid or cidr.ErrTooMany for
// CIDRs, with the rule index).
func DecodeRequest(body []byte) ([]string, error) {
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
	for k, v := range raw {
		if k != "defaultAction" && k != "egress" {
			return nil, fmt.Errorf("%w: unknown field %q (only defaultAction and egress[].cidr)", ErrBadRequest, k)
		}
		if string(bytes.TrimSpace(v)) == "null" {
			return nil, fmt.Errorf("%w: field %s is null", ErrBadRequest, k)
		}
	}
	for _, k := range []string{"defaultAction", "egress"} {
		if _, ok := raw[k]; !ok {
			return nil, fmt.Errorf("%w: missing field %s", ErrBadRequest, k)
		}
	}
	var action string
	if err := json.Unmarshal(raw["defaultAction"], &action); err != nil {
		return nil, fmt.Errorf("%w: defaultAction must be a string", ErrBadRequest)
	}
	if action != "deny" {
		return nil, fmt.Errorf("%w: defaultAction must be \"deny\"", ErrBadRequest)
	}
	var rules []map[string]json.RawMessage
	if err := json.Unmarshal(raw["egress"], &rules); err != nil {
		return nil, fmt.Errorf("%w: egress must be an array of objects", ErrBadRequest)
	}
	list := make([]string, len(rules))
	for i, r := range rules {
		if r == nil {
			return nil, fmt.Errorf("%w: egress[%d] must be an object", ErrBadRequest, i)
		}
		for k := range r {
			if k != "cidr" {
				return nil, fmt.Errorf("%w: egress[%d]: unknown field %q (rules allow a destination CIDR only)", ErrBadRequest, i, k)
			}
		}
		v, ok := r["cidr"]
		if !ok {
			return nil, fmt.Errorf("%w: egress[%d]: missing field cidr", ErrBadRequest, i)
		}
		if err := json.Unmarshal(v, &list[i]); err != nil || string(bytes.TrimSpace(v)) == "null" {
			return nil, fmt.Errorf("%w: egress[%d].cidr must be a string", ErrBadRequest, i)
		}
	}
	set, err := cidr.Normalize(list)
	if err != nil {
		var ee *cidr.EntryError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%w: egress[%d].cidr: %w", ErrBadRequest, ee.Index, err)
		}
		return nil, fmt.Errorf("%w: egress: %w", ErrBadRequest, err)
	}
	return set, nil
}

// Rules turns a CIDR set into API rules (never nil).
func Rules(set []string) []Rule {
	out := make([]Rule, len(set))
	for i, c := range set {
		out[i] = Rule{CIDR: c}
	}
	return out
}
