package egress

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// canonical spec written. It returns the object as read back, which
// AdoptOwner writes over, and whether the create was accepted (so the
// caller knows to remove the policy on failure). Errors: the write or the read-back failed, or
// the read-back differs.
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
	rb := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, key, rb); err != nil {
		return nil, true, fmt.Errorf("read back NetworkPolicy %s: %w", key, err)
	}
	if Canonical(&rb.Spec) != lkg || rb.Annotations[AnnotationLastVerifiedSpec] != lkg {
		return nil, true, fmt.Errorf("NetworkPolicy %s read back differs from what was written", key)
	}
	return rb, true, nil
}

// AdoptOwner makes the BatchSandbox sb (as created, with its UID) the
// owner of created, the policy as CreateVerified read it back: it adds
// sb's owner reference and owner annotation, writes over created at its
// resourceVersion (so a write by anyone since then fails this update),
// reads the policy back and checks that it carries the owner and still
// the spec and verification annotations (LKG, state, error code) of
// created. It returns the object as read back. Errors: the write or the
// read-back failed, the owner is missing on read-back, or the spec or a
// verification annotation changed.
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
	rb := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, key, rb); err != nil {
		return nil, fmt.Errorf("read back NetworkPolicy %s: %w", key, err)
	}
	if !sb.HasOwnerReference(rb.OwnerReferences) || rb.Annotations[v1alpha1.AnnotationOwner] != sb.OwnerAnnotation() {
		return nil, fmt.Errorf("NetworkPolicy %s lost its owner reference on read-back", key)
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
