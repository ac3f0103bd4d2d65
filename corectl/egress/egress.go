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
	"errors"
	"net/netip"

	"github.com/sandgate/sandgate/corectl/cidr"
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
	// ErrIndeterminate: the current policy exists but its LKG annotation is
	// missing or corrupt, or it is not corectl's; a PUT could not roll back
	// safely, so nothing is written.
	ErrIndeterminate = errors.New("egress: current policy state is indeterminate")
	// ErrUnavailable: the apiserver could not answer a read made before
	// any write.
	ErrUnavailable = errors.New("egress: apiserver unavailable")
)

// Rule is one egress rule of the API: a destination CIDR, all protocols
// and ports, minus the CIDRs of Except.
type Rule struct {
	// CIDR is a normalised IPv4 CIDR.
	CIDR string `json:"cidr"`
	// Except is the carved-out CIDRs strictly inside CIDR (E2B's denyOut,
	// the policy's ipBlock.except), normalised; absent when none.
	Except []string `json:"except,omitempty"`
}

// RulesExcept turns an allowlist as DecompileExcept returns it into API
// rules (never nil), each with the excepts inside its CIDR.
func RulesExcept(set, except []string) []Rule {
	out := Rules(set)
	if len(except) == 0 {
		return out
	}
	ex, err := cidr.NormalizePrefixes(except)
	if err != nil {
		return out
	}
	for i := range out {
		if p, err := netip.ParsePrefix(out[i].CIDR); err == nil {
			out[i].Except = exceptsInside(p, ex)
		}
	}
	return out
}

// Rules turns a CIDR set into API rules (never nil).
func Rules(set []string) []Rule {
	out := make([]Rule, len(set))
	for i, c := range set {
		out[i] = Rule{CIDR: c}
	}
	return out
}
