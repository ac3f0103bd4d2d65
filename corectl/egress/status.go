package egress

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Status is the GET /sandboxes/{id}/network answer (spec §3.1.1 IV).
// ConfiguredEgress and LastVerifiedEgress are absent (nil) when they cannot
// be stated — never an empty list standing in for an unknown one.
type Status struct {
	// SandboxID is the sandbox.
	SandboxID string `json:"sandboxID"`
	// NetworkReady is true only when verificationState is Verified, the
	// current spec equals the LKG, the selector is the allocation's and
	// selects the template labels and current pods, and no non-platform
	// policy widens it (spec §3.1.1 III).
	NetworkReady bool `json:"networkReady"`
	// VerificationState is the verification-state annotation ("" when
	// there is no policy).
	VerificationState string `json:"verificationState"`
	// ConfiguredEgress is decompiled from the current policy spec.
	ConfiguredEgress *[]Rule `json:"configuredEgress,omitempty"`
	// LastVerifiedEgress is decompiled from last-verified-spec.
	LastVerifiedEgress *[]Rule `json:"lastVerifiedEgress,omitempty"`
	// LastErrorCode is the verification-error-code annotation.
	LastErrorCode string `json:"lastErrorCode"`
	// NotReadyReason is the first Reason* that makes NetworkReady false
	// ("" when ready).
	NotReadyReason string `json:"notReadyReason,omitempty"`
	// PolicyName is the NetworkPolicy's name ("" when the allocation is
	// unknown).
	PolicyName string `json:"policyName,omitempty"`
	// Conflicts names conflicting non-platform policies.
	Conflicts []string `json:"conflicts,omitempty"`
}

// Get computes the GET view of sandbox namespace/id. It only reads: the
// BatchSandbox, the policy, the sandbox's pods and the namespace's
// NetworkPolicies. Errors: the sandbox package's errors for the
// BatchSandbox itself (not found, deleting, unreadable), except
// ErrNoAllocation which gives a Status with ReasonAllocationUnknown; and
// ErrUnavailable when the apiserver cannot answer.
func (e *Engine) Get(ctx context.Context, namespace, id string) (*Status, error) {
	sb, err := sandbox.Get(ctx, e.Client, namespace, id, e.Cluster.AllocationLabelKey())
	return e.view(ctx, id, sb, err)
}

// GetOf is Get for BatchSandbox obj, which the caller has just read whole
// from the apiserver (lifecycle's Status, after the control API's
// ownership check read it), so the view reads the sandbox no second
// time. The policy, the namespace's policies and the sandbox's pods are
// still read live: the view is what a getInfo right after a create or a
// PUT reports, and what Connect's readiness rests on. Errors: as Get's.
func (e *Engine) GetOf(ctx context.Context, obj client.Object) (*Status, error) {
	sb, err := sandbox.From(obj, e.Cluster.AllocationLabelKey())
	return e.view(ctx, obj.GetName(), sb, err)
}

// view is Get's view of sandbox sb (id), as sandbox.Get or sandbox.From
// gave it with err.
func (e *Engine) view(ctx context.Context, id string, sb *sandbox.Sandbox, err error) (*Status, error) {
	st := &Status{SandboxID: id}
	if err != nil {
		if sb != nil && errors.Is(err, sandbox.ErrNoAllocation) {
			st.NotReadyReason = ReasonAllocationUnknown
			return st, nil
		}
		return nil, err
	}
	st.PolicyName = PolicyName(sb.AllocationID)
	np := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: st.PolicyName}, np); err != nil {
		if apierrors.IsNotFound(err) {
			st.NotReadyReason = ReasonPolicyMissing
			return st, nil
		}
		return nil, fmt.Errorf("%w: read policy: %s", ErrUnavailable, err.Error())
	}
	return e.StatusOf(ctx, sb, np)
}

// StatusOf computes the GET view of sandbox sb from np, its policy as
// just read from the apiserver (the caller already holds both: the create
// orchestration after its owner back-fill's read-back). It reads the
// sandbox's pods and the namespace's NetworkPolicies. Errors:
// ErrUnavailable when the apiserver cannot answer.
func (e *Engine) StatusOf(ctx context.Context, sb *sandbox.Sandbox, np *networkingv1.NetworkPolicy) (*Status, error) {
	return e.statusOf(ctx, sb, np, nil, nil)
}

// CreatedStatus is StatusOf for the create orchestration, whose np it
// has just written (the policy as the apiserver answered its write) for
// sb, the BatchSandbox it has just created. The namespace's policies are
// a consistent read, as StatusOf's, which waits for the apiserver's watch
// cache to reach the store's current revision (when nothing of the kind
// was written since, the cache's next progress notification, requested
// at most every 100 ms: kube-apiserver's progressRequestPeriod). pre, when
// not nil, is that list asked for as soon as np was written
// (StartPolicies), so the wait ran beside the create's next steps; nil:
// it is asked now. The pods are read from the cache as it stands
// (resourceVersion 0): the only pods sb can have are the ones its
// controller made from the template since sb was written, whose labels
// the static check of the template labels covers; a pod seen later is
// checked by every later view. Errors: as StatusOf's.
func (e *Engine) CreatedStatus(ctx context.Context, sb *sandbox.Sandbox, np *networkingv1.NetworkPolicy, pre *NamespacePolicies) (*Status, error) {
	pods := &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}
	return e.statusOf(ctx, sb, np, pods, pre)
}

// NamespacePolicies is the list of a namespace's NetworkPolicies that a
// create asked for as soon as it wrote its policy (StartPolicies), for
// its readiness check (CreatedStatus).
type NamespacePolicies struct {
	wait func() (*policySet, error)
}

// StartPolicies asks at once for the NetworkPolicies of namespace, a
// consistent read, for a create that has just written its policy there:
// the list then shows every policy written before it. CreatedStatus
// takes the answer; a create that fails first drops it.
func (e *Engine) StartPolicies(ctx context.Context, namespace string) *NamespacePolicies {
	type answer struct {
		set *policySet
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		set, err := e.policies(ctx, namespace)
		ch <- answer{set, err}
	}()
	return &NamespacePolicies{wait: func() (*policySet, error) {
		a := <-ch
		return a.set, a.err
	}}
}

// statusOf is StatusOf with further options of the pods list (nil: a
// consistent read) and the policies asked for already (nil: listed now).
func (e *Engine) statusOf(ctx context.Context, sb *sandbox.Sandbox, np *networkingv1.NetworkPolicy, podsAt *client.ListOptions, pre *NamespacePolicies) (*Status, error) {
	var podOpts []client.ListOption
	if podsAt != nil {
		podOpts = append(podOpts, podsAt)
	}
	namespace := sb.Namespace
	st := &Status{SandboxID: sb.ID, PolicyName: PolicyName(sb.AllocationID)}
	if !e.ours(np, sb) {
		st.NotReadyReason = ReasonPolicyNotManaged
		return st, nil
	}
	reason := ""
	note := func(r string) {
		if reason == "" {
			reason = r
		}
	}
	st.VerificationState = np.Annotations[AnnotationVerificationState]
	st.LastErrorCode = np.Annotations[AnnotationVerificationErrorCode]
	switch st.VerificationState {
	case v1alpha1.StateVerifying, v1alpha1.StateVerified, v1alpha1.StatePolicyConflict:
	default:
		note(ReasonAnnotationCorrupt)
	}
	var configured Allowlist
	if set, except, err := DecompileExcept(&np.Spec); err == nil {
		r := RulesExcept(set, except)
		st.ConfiguredEgress = &r
		configured, _ = allowlistOf(set, except) // both normalised: no error
	} else {
		note(ReasonSpecUndecodable)
	}
	lkgV, hasLKG := np.Annotations[AnnotationLastVerifiedSpec]
	switch {
	case !hasLKG && st.VerificationState == v1alpha1.StateVerifying:
		note(ReasonNoLKG)
	case !hasLKG:
		note(ReasonAnnotationCorrupt)
	default:
		if spec, _, err := ParseLKG(lkgV); err == nil {
			set, except, _ := DecompileExcept(spec) // ParseLKG decompiled it
			r := RulesExcept(set, except)
			st.LastVerifiedEgress = &r
		} else {
			note(ReasonAnnotationCorrupt)
		}
	}
	if st.VerificationState != v1alpha1.StateVerified {
		note(ReasonNotVerified)
	}
	if hasLKG && Canonical(&np.Spec) != lkgV {
		note(ReasonSpecDrift)
	}
	// The namespace's policies and the sandbox's pods (read by labelSets)
	// are independent reads: they go out together (measured on the
	// create's owners step, interleaved A/B: 21–24 ms against 23–27 ms).
	var list *policySet
	listErr := make(chan error, 1)
	go func() {
		var err error
		if pre != nil {
			list, err = pre.wait()
		} else {
			list, err = e.policies(ctx, namespace)
		}
		listErr <- err
	}()
	sets, f := e.labelSets(ctx, sb, &np.Spec, podOpts...)
	err := <-listErr
	if list != nil {
		defer list.release()
	}
	if f != nil {
		if f.code == CodeReadFailed {
			return nil, fmt.Errorf("%w: %s", ErrUnavailable, f.reason)
		}
		note(ReasonSelectorMismatch)
	} else {
		if err != nil {
			return nil, fmt.Errorf("%w: list NetworkPolicies: %s", ErrUnavailable, err.Error())
		}
		allowed := cidr.Strings(Subtract(configured))
		c, err := list.conflicts(st.PolicyName, sets, allowed, DNSRule(e.Cluster))
		if err != nil {
			return nil, fmt.Errorf("%w: list NetworkPolicies: %s", ErrUnavailable, err.Error())
		}
		if len(c) > 0 {
			st.Conflicts = c
			note(ReasonPolicyConflict)
		}
	}
	st.NotReadyReason = reason
	st.NetworkReady = reason == ""
	return st, nil
}
