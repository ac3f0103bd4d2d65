package lifecycle

// The count the per-credential concurrency limit is checked against
// (package quota).

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Running returns how many sandboxes of namespace ns credential
// credentialID created and are live: listed by the credential's label
// (v1alpha1.LabelCredential), with the creating credential recorded as
// credentialID, not expired and not being deleted (Deleting,
// CleanupFailed or a deletion timestamp), as List counts them; Creating
// ones count. Errors: ErrUnavailable.
func (o *Orchestrator) Running(ctx context.Context, credentialID, ns string) (int, error) {
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
	sel := client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: o.Cluster.ID,
		v1alpha1.LabelCredential: sandbox.CredentialLabelValue(credentialID)}
	if err := o.Client.List(ctx, &list, client.InNamespace(ns), sel); err != nil {
		return 0, fmt.Errorf("%w: list BatchSandboxes: %s", ErrUnavailable, err.Error())
	}
	n := 0
	for i := range list.Items {
		u := &list.Items[i]
		st := u.GetAnnotations()[v1alpha1.AnnotationLifecycle]
		if sandbox.OwnerOf(u) != credentialID || o.expired(u) || u.GetDeletionTimestamp() != nil ||
			st == StateDeleting || st == StateCleanupFailed {
			continue
		}
		n++
	}
	return n, nil
}
