package egress

import (
	"context"
	"fmt"
	"slices"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateVerified creates the egress policy of a sandbox being created
// (the create's policy step, spec §3.1.1 II): prov is the sandbox as
// provisioned (namespace, ID, allocation label and identity, owner; no
// UID yet, the BatchSandbox is written after the policy) and list the
// resolved egress allowlist (in Carve's normal form; its carve-outs are
// E2B's denyOut and allow_internet_access: false). The policy is written
// with list compiled (CompileExcept) as its spec, already Verified with that spec as its LKG (there
// is no earlier policy to fall back to: a failed create deletes it), then
// read back; the spec and the LKG annotation read back must both be the
// canonical spec written. The read-back is the create's answer (the
// object as the apiserver stored it, after admission; a GET right after
// would return the same unless someone wrote in between, which
// AdoptOwner's conditional update then fails on). It returns that object,
// which AdoptOwner writes over, and whether the create was accepted (so
// the caller knows to remove the policy on failure). Errors: the write
// failed, or its answer differs.
func (e *Engine) CreateVerified(ctx context.Context, prov *sandbox.Sandbox, list Allowlist) (np *networkingv1.NetworkPolicy, written bool, err error) {
	spec := CompileExcept(e.Cluster, prov.AllocationLabel, prov.AllocationID, list)
	lbl := prov.IdentityLabels(e.Cluster.ID)
	lbl[v1alpha1.LabelAllocationID] = prov.AllocationID
	lkg := Canonical(&spec)
	key := client.ObjectKey{Namespace: prov.Namespace, Name: PolicyName(prov.AllocationID)}
	np = &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: key.Name, Namespace: key.Namespace, Labels: lbl,
			Annotations: map[string]string{
				AnnotationLastVerifiedSpec:      lkg,
				AnnotationVerificationState:     v1alpha1.StateVerified,
				AnnotationVerificationErrorCode: "",
				v1alpha1.AnnotationOwner:        prov.OwnerAnnotation(),
			},
		},
		Spec: spec,
	}
	prov.MarkOwner(np)
	if err := e.Client.Create(ctx, np); err != nil {
		return nil, false, fmt.Errorf("create NetworkPolicy %s: %w", key, err)
	}
	// np is now the create's answer: the policy as the apiserver stored
	// it (after admission), its read-back.
	if Canonical(&np.Spec) != lkg || np.Annotations[AnnotationLastVerifiedSpec] != lkg {
		return nil, true, fmt.Errorf("NetworkPolicy %s as created differs from what was written", key)
	}
	return np, true, nil
}

// AdoptOwner makes the BatchSandbox sb (as created, with its UID) the
// owner of created, the policy as CreateVerified returned it: it adds
// sb's owner reference and owner annotation, writes over created at its
// resourceVersion (so a write by anyone since then fails this update),
// and checks that the update's answer (its read-back, as in
// CreateVerified) carries the owner and still the spec and verification
// annotations (LKG, state, error code) of created. It returns that
// answer. Errors: the write failed, the owner is missing from its answer,
// or the spec or a verification annotation changed.
func (e *Engine) AdoptOwner(ctx context.Context, sb *sandbox.Sandbox, created *networkingv1.NetworkPolicy) (*networkingv1.NetworkPolicy, error) {
	key := client.ObjectKeyFromObject(created)
	np := created.DeepCopy()
	np.Annotations[v1alpha1.AnnotationOwner] = sb.OwnerAnnotation()
	if !sb.HasOwnerReference(np.OwnerReferences) {
		np.OwnerReferences = append(np.OwnerReferences, sb.OwnerReference())
	}
	if err := e.Client.Update(ctx, np); err != nil {
		return nil, fmt.Errorf("back-fill the owner of NetworkPolicy %s: %w", key, err)
	}
	rb := np // the update's answer
	if !sb.HasOwnerReference(rb.OwnerReferences) || rb.Annotations[v1alpha1.AnnotationOwner] != sb.OwnerAnnotation() {
		return nil, fmt.Errorf("NetworkPolicy %s lost its owner reference in the update's answer", key)
	}
	for _, k := range []string{AnnotationLastVerifiedSpec, AnnotationVerificationState, AnnotationVerificationErrorCode} {
		if rb.Annotations[k] != created.Annotations[k] {
			return nil, fmt.Errorf("NetworkPolicy %s changed its %s during the owner back-fill", key, k)
		}
	}
	if Canonical(&rb.Spec) != Canonical(&created.Spec) {
		return nil, fmt.Errorf("NetworkPolicy %s changed its spec during the owner back-fill", key)
	}
	return rb, nil
}

// ReleaseOwner removes the owner reference to the BatchSandbox of UID uid
// from the egress policy namespace/name, before a delete removes that
// BatchSandbox: otherwise the garbage collector deletes the policy as soon
// as the BatchSandbox is gone, in parallel with the sandbox's pods, and a
// pod may run on without its egress policy (spec §5.3: the policy goes
// after the sandbox and its pods; issue 29 item 7). The update is
// conditional on the resourceVersion read and is read back. A policy that
// is absent, or carries no such reference, needs nothing. The owner
// annotation stays (it names the sandbox for people and for the orphan
// scan's logs). Errors: the read, the write or the read-back failed, or the
// reference is still there.
func (e *Engine) ReleaseOwner(ctx context.Context, namespace, name string, uid types.UID) error {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	np := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, key, np); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("read NetworkPolicy %s: %w", key, err)
	}
	keep := slices.DeleteFunc(slices.Clone(np.OwnerReferences), func(r metav1.OwnerReference) bool { return r.UID == uid })
	if len(keep) == len(np.OwnerReferences) {
		return nil
	}
	np.OwnerReferences = keep
	if err := e.Client.Update(ctx, np); err != nil {
		return fmt.Errorf("release the owner of NetworkPolicy %s: %w", key, err)
	}
	rb := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, key, rb); err != nil {
		return fmt.Errorf("read back NetworkPolicy %s: %w", key, err)
	}
	if slices.ContainsFunc(rb.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == uid }) {
		return fmt.Errorf("NetworkPolicy %s still names BatchSandbox %s as its owner", key, uid)
	}
	return nil
}
