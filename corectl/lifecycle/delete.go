package lifecycle

// Delete: the fail-closed removal of a sandbox's objects (spec §5.2).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/browser"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// deleteConfirm deletes obj (absent is fine) and reads it back to confirm
// it is gone.
func deleteConfirm(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("confirm deletion of %s: %w", client.ObjectKeyFromObject(obj), err)
	default:
		return fmt.Errorf("%s still exists after deletion", client.ObjectKeyFromObject(obj))
	}
}

// deleteIngress deletes the managed Ingress of sandbox ns/id and confirms
// it is gone. An Ingress of that name that is not corectl's (identity
// labels differ) is never touched: ours is not there.
func (o *Orchestrator) deleteIngress(ctx context.Context, ns, id string) error {
	key := client.ObjectKey{Namespace: o.Cluster.Ingress.Namespace, Name: ingressallow.IngressName(id)}
	cur := &networkingv1.Ingress{}
	if err := o.Client.Get(ctx, key, cur); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("read Ingress %s: %w", key, err)
	}
	l := cur.Labels
	if l[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue || l[v1alpha1.LabelSandboxID] != id ||
		l[v1alpha1.LabelSandboxNamespace] != ns || l[v1alpha1.LabelClusterID] != o.Cluster.ID {
		return nil
	}
	return deleteConfirm(ctx, o.Client, cur)
}

// DeleteError is a Delete whose Ingress revocation could not be
// confirmed: the sandbox is CleanupFailed and refuses access.
type DeleteError struct {
	// Reason says why.
	Reason string
}

// Error implements error.
func (e *DeleteError) Error() string { return CodeDeletePending + ": " + e.Reason }

// Delete deletes sandbox ns/id in the fail-closed order (spec §5.2, §5.3):
// mark it Deleting (every network route and connect refuse it from then
// on), delete the managed Ingress and confirm it is gone (else
// CleanupFailed and a *DeleteError; the rule is never reopened), then the
// ingress desired state and the BatchSandbox, each confirmed, and last the
// egress policy, once no pod it selects is left (podsGone, up to
// PodGoneWait): the pod never runs without its egress policy. When the
// pods outlast the wait, the policy is kept, still confining them, and the
// delete succeeds; the orphan scan removes the policy once they are gone.
// Once the sandbox is found, the delete no longer follows ctx's
// cancellation: a caller that goes away (the DELETE's client disconnects)
// does not leave it Deleting half-way, as the create's compensation does
// not; it is bounded by deleteTimeout instead.
// read, when not nil, is BatchSandbox ns/id as the caller has read it
// whole from the apiserver within this call (as for Status), used instead
// of reading it again, as fresh as the read it replaces: the delete
// takes its UID and template labels, which corectl never changes, and
// its deletion timestamp, which only skips the Deleting mark (a merge
// patch of the live object, harmless when it is already being deleted).
// Errors: ErrNotFound, ErrUnavailable, *DeleteError.
func (o *Orchestrator) Delete(ctx context.Context, ns, id string, read *unstructured.Unstructured) error {
	u, err := o.readOnce(ctx, ns, id, read)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	return o.deleteSandbox(ctx, u, o.podGoneWait())
}

// deleteTimeout bounds a Delete once it has begun (the control API's own
// bound on a request, httpapi's requestContext).
const deleteTimeout = 60 * time.Second

// deleteSandbox runs the delete of BatchSandbox u; podWait bounds the wait
// for the policy's pods (0: one look, the orphan scan's).
func (o *Orchestrator) deleteSandbox(ctx context.Context, u client.Object, podWait time.Duration) error {
	ns, id := u.GetNamespace(), u.GetName()
	if u.GetDeletionTimestamp() == nil {
		if err := o.setLifecycle(ctx, ns, id, StateDeleting); err != nil {
			return fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
		}
	}
	// No ingress cycle may run between removing the carrier and removing
	// the desired state it would be rewritten from.
	unlock := o.Ingress.Lock(ns, id)
	err := o.timed(metrics.OperationDelete, StepDeleteIngress, func() error {
		if err := o.fault(id, StepDeleteIngress); err != nil {
			return err
		}
		return o.deleteIngress(ctx, ns, id)
	})
	if err != nil {
		unlock()
		_ = o.setLifecycle(ctx, ns, id, StateCleanupFailed)
		return &DeleteError{Reason: err.Error()}
	}
	// The Native Browser carrier (package browser) is another way in:
	// removed right after the managed Ingress, fail-closed like it.
	if err := browser.Remove(ctx, o.Client, o.Cluster, ns, id); err != nil {
		unlock()
		_ = o.setLifecycle(ctx, ns, id, StateCleanupFailed)
		return &DeleteError{Reason: "native browser carrier: " + err.Error()}
	}
	var errs []error
	if err := o.timed(metrics.OperationDelete, StepDeleteDesired, func() error {
		return deleteConfirm(ctx, o.Client, &v1alpha1.SandboxIngressAllowlist{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: id}})
	}); err != nil {
		errs = append(errs, err)
	}
	unlock()
	labels, _ := sandbox.TemplateLabels(u)
	alloc := labels[o.Cluster.AllocationLabelKey()]
	if alloc != "" && sandbox.ValidateID(alloc) != nil {
		alloc = ""
	}
	bsErr := o.timed(metrics.OperationDelete, StepDeleteBatchSandbox, func() error {
		// The policy must not go with the BatchSandbox (garbage
		// collection), only after its pods.
		if alloc != "" {
			if err := o.Egress.ReleaseOwner(ctx, ns, egress.PolicyName(alloc), u.GetUID()); err != nil {
				return err
			}
		}
		return deleteConfirm(ctx, o.Client, batchSandboxRef(ns, id))
	})
	if bsErr != nil {
		// Its pods may run on: the policy stays until the BatchSandbox
		// is gone (a later delete or the orphan scan).
		errs = append(errs, bsErr)
	}
	if bsErr == nil && alloc != "" {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: egress.PolicyName(alloc)}}
		if err := o.Client.Get(ctx, client.ObjectKeyFromObject(np), np); err == nil && np.Labels[v1alpha1.LabelSandboxID] == id &&
			np.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue {
			err := o.timed(metrics.OperationDelete, StepDeletePolicy, func() error {
				if err := o.podsGone(ctx, ns, alloc, podWait); err != nil {
					return err
				}
				return deleteConfirm(ctx, o.Client, np)
			})
			if err != nil && !errors.Is(err, errPodsRemain) {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		// The Ingress is gone; what is left is converged by the orphan
		// scan (and ownerReference GC for all but the policy, which is
		// removed only once no pod it selects is left).
		return fmt.Errorf("%w: %s", ErrUnavailable, errors.Join(errs...).Error())
	}
	return nil
}
