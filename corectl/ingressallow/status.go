package ingressallow

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Rule is one CIDR of an applied, configured or verified allowlist.
type Rule struct {
	// CIDR is a normalised IPv4 CIDR.
	CIDR string `json:"cidr"`
}

// Reasons GET gives for ready=false (Status.NotReadyReason). Stable.
const (
	// ReasonNotConfigured: the sandbox has no SandboxIngressAllowlist
	// (no instance ingress allowlist was ever set).
	ReasonNotConfigured = "NotConfigured"
	// ReasonPending: the desired version has not been applied yet.
	ReasonPending = "Pending"
	// ReasonNotVerified: the last cycle failed (see lastErrorCode).
	ReasonNotVerified = "NotVerified"
	// ReasonCarrierMissing: no managed Ingress exists.
	ReasonCarrierMissing = "CarrierMissing"
	// ReasonCarrierDrift: the live managed Ingress no longer matches the
	// LKG (edited, or its allowlist annotation is unreadable).
	ReasonCarrierDrift = "CarrierDrift"
	// ReasonPathClaimed: another Ingress claims the sandbox path.
	ReasonPathClaimed = "PathClaimed"
)

// Status is the GET /sandboxes/{id}/network/ingress answer (spec §5.2).
// List fields are absent (nil) when they cannot be stated.
type Status struct {
	// SandboxID is the sandbox.
	SandboxID string `json:"sandboxID"`
	// Ready is true when verificationState is Verified for the current
	// desired version and the live carrier still matches the LKG with no
	// other Ingress claiming the path.
	Ready bool `json:"ready"`
	// Desired is the desired rules (spec.desired).
	Desired *[]v1alpha1.IngressRule `json:"desired,omitempty"`
	// DesiredVersion is the allowlist object's metadata.generation.
	DesiredVersion int64 `json:"desiredVersion"`
	// Applied is the set read back after the last successful write.
	Applied *[]Rule `json:"applied,omitempty"`
	// AppliedVersion is the carrier's resourceVersion at that read-back.
	AppliedVersion string `json:"appliedVersion,omitempty"`
	// Configured is decompiled from the live carrier's annotation now.
	Configured *[]Rule `json:"configured,omitempty"`
	// LastVerified is the LKG.
	LastVerified *[]Rule `json:"lastVerified,omitempty"`
	// VerificationState is Pending, Verifying, Verified, UnverifiedSpec or
	// Indeterminate ("" when not configured).
	VerificationState string `json:"verificationState"`
	// LastErrorCode is the code of the last failure.
	LastErrorCode string `json:"lastErrorCode"`
	// LastErrorMessage explains it.
	LastErrorMessage string `json:"lastErrorMessage,omitempty"`
	// CarrierRef names the managed Ingress.
	CarrierRef *v1alpha1.CarrierRef `json:"carrierRef,omitempty"`
	// NotReadyReason is the first Reason* that makes Ready false.
	NotReadyReason string `json:"notReadyReason,omitempty"`
	// Claimants names other Ingresses claiming the path.
	Claimants []string `json:"claimants,omitempty"`
}

func rules(set []string) *[]Rule {
	if set == nil {
		return nil
	}
	out := make([]Rule, len(set))
	for i, s := range set {
		out[i] = Rule{CIDR: s}
	}
	return &out
}

// Get computes the GET view of sandbox namespace/id. It only reads (the
// BatchSandbox, the allowlist object, the carrier and the Ingress list).
// Errors: the sandbox package's errors for the BatchSandbox (a missing
// allocation label is no error here); ErrUnavailable.
func (e *Engine) Get(ctx context.Context, namespace, id string) (*Status, error) {
	sb, err := sandbox.Get(ctx, e.Client, namespace, id, e.Cluster.AllocationLabelKey())
	return e.view(ctx, namespace, id, sb, err)
}

// GetOf is Get for BatchSandbox obj, which the caller has just read whole
// from the apiserver (lifecycle's Status, after the control API's
// ownership check read it), so the view reads the sandbox no second
// time. The allowlist, the carrier and the Ingresses that could claim
// its path are still read live: the view is what a getInfo right after a
// create or a PUT /network/ingress reports, and what Connect's readiness
// rests on. Errors: as Get's.
func (e *Engine) GetOf(ctx context.Context, obj client.Object) (*Status, error) {
	sb, err := sandbox.From(obj, e.Cluster.AllocationLabelKey())
	return e.view(ctx, obj.GetNamespace(), obj.GetName(), sb, err)
}

// view is Get's view of sandbox namespace/id, sb as sandbox.Get or
// sandbox.From gave it with err.
func (e *Engine) view(ctx context.Context, namespace, id string, sb *sandbox.Sandbox, err error) (*Status, error) {
	if err != nil && !errors.Is(err, sandbox.ErrNoAllocation) {
		return nil, err
	}
	out := &Status{SandboxID: id, CarrierRef: Ref(e.Cluster, sb)}
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: id}, al); err != nil {
		if apierrors.IsNotFound(err) {
			out.NotReadyReason = ReasonNotConfigured
			return out, nil
		}
		return nil, fmt.Errorf("%w: read SandboxIngressAllowlist: %s", ErrUnavailable, err.Error())
	}
	st := al.Status
	d := slices.Clone(al.Spec.Desired)
	out.Desired, out.DesiredVersion = &d, al.Generation
	out.Applied, out.AppliedVersion = rules(st.Applied), st.AppliedVersion
	out.LastVerified = rules(st.LastVerified)
	out.LastErrorCode, out.LastErrorMessage = st.LastErrorCode, st.LastErrorMessage
	out.VerificationState = st.VerificationState
	if out.VerificationState == "" || (st.ObservedGeneration != al.Generation && out.VerificationState != v1alpha1.StateVerifying) {
		out.VerificationState = v1alpha1.StatePending
	}
	reason := ""
	note := func(r string) {
		if reason == "" {
			reason = r
		}
	}
	switch out.VerificationState {
	case v1alpha1.StateVerified:
	case v1alpha1.StatePending, v1alpha1.StateVerifying:
		note(ReasonPending)
	default:
		note(ReasonNotVerified)
	}
	key := client.ObjectKey{Namespace: e.Cluster.Ingress.Namespace, Name: IngressName(id)}
	cur := &networkingv1.Ingress{}
	if err := e.Client.Get(ctx, key, cur); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: read Ingress %s: %s", ErrUnavailable, key, err.Error())
		}
		note(ReasonCarrierMissing)
	} else {
		if set, err := Configured(cur, st.LastVerified); err == nil && isOurs(e.Cluster, sb, cur) {
			out.Configured = rules(set)
		}
		if code, _ := CheckCarrier(e.Cluster, sb, cur, st.LastVerified); code != "" || len(st.LastVerified) == 0 {
			note(ReasonCarrierDrift)
		}
		list, err := e.candidates(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("%w: list Ingresses: %s", ErrUnavailable, err.Error())
		}
		if c := Claimants(list, key.String(), e.Cluster.Ingress.Host, e.Cluster.Ingress.ClassName, Path(id)); len(c) > 0 {
			out.Claimants = c
			note(ReasonPathClaimed)
		}
	}
	out.NotReadyReason = reason
	out.Ready = reason == ""
	return out, nil
}
