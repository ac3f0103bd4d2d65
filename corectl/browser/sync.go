package browser

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultResync is Keeper.Every's default: how often every bound carrier
// is brought in step with its sandbox and pod between requests.
const DefaultResync = 10 * time.Second

// Sync brings the carrier of sandbox ns/id, if it has one, in step with
// what is there now, without answering anyone: removed when the
// BatchSandbox is gone or being deleted or has an ingress allowlist (a
// sandbox restricted after its carrier was bound); emptied when it has no
// running pod; re-bound, with the checks of Bind, when its pod or
// allocation changed. A sandbox without a carrier is left alone (the
// carrier is made on request only).
func (b *Binder) Sync(ctx context.Context, ns, id string) error {
	eps := &discoveryv1.EndpointSlice{}
	err := b.Client.Get(ctx, client.ObjectKey{Namespace: b.Cluster.Ingress.Namespace, Name: Name(id)}, eps)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return refuse(CodeUnavailable, "read the EndpointSlice: %s", err.Error())
	}
	r, err := b.read(ctx, ns, id)
	if CodeOf(err) == CodeNotFound {
		return Remove(ctx, b.Client, b.Cluster, ns, id)
	}
	if err != nil {
		return err
	}
	al := &v1alpha1.SandboxIngressAllowlist{}
	switch err := b.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, al); {
	case err == nil:
		return Remove(ctx, b.Client, b.Cluster, ns, id)
	case !apierrors.IsNotFound(err):
		return refuse(CodeUnavailable, "read the ingress allowlist: %s", err.Error())
	}
	if r.pod == nil {
		return b.unbind(ctx, ns, id)
	}
	if eps.Annotations[AnnotationBinding] == r.binding() && len(eps.Endpoints) == 1 {
		return nil
	}
	if err := b.check(ctx, ns, id, r); err != nil {
		return err
	}
	return b.write(ctx, r)
}

// SyncAll runs Sync for every carrier of the cluster (the EndpointSlices
// with corectl's labels, this cluster's ID and LabelNative in the ingress
// namespace) and returns how many it synced and what failed.
func (b *Binder) SyncAll(ctx context.Context) (int, error) {
	var list discoveryv1.EndpointSliceList
	if err := b.Client.List(ctx, &list, client.InNamespace(b.Cluster.Ingress.Namespace), client.MatchingLabels{
		v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: b.Cluster.ID, LabelNative: "true"}); err != nil {
		return 0, refuse(CodeUnavailable, "list the carriers: %s", err.Error())
	}
	var errs []error
	for i := range list.Items {
		eps := &list.Items[i]
		ns, id := eps.Labels[v1alpha1.LabelSandboxNamespace], eps.Labels[v1alpha1.LabelSandboxID]
		if err := b.Sync(ctx, ns, id); err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s/%s: %w", ns, id, err))
		}
	}
	return len(list.Items), errors.Join(errs...)
}

// Keeper runs SyncAll every Every (default DefaultResync) on the leader,
// so a carrier follows its pod and sandbox between requests: a pod gone or
// replaced unbinds or re-binds within one interval, a sandbox restricted
// or deleted loses its carrier within one interval.
type Keeper struct {
	// Binder is the cluster's binder.
	Binder *Binder
	// Every is the interval; 0 means DefaultResync.
	Every time.Duration
	// Log receives one line per failed pass.
	Log logr.Logger
}

// NeedLeaderElection is true: only the leader writes carriers between
// requests.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Start runs until ctx ends (controller-runtime's Runnable): SyncOnce
// every Interval.
func (k *Keeper) Start(ctx context.Context) error {
	t := time.NewTicker(k.Interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			k.SyncOnce(ctx)
		}
	}
}

// Interval is Every, or DefaultResync when it is 0.
func (k *Keeper) Interval() time.Duration {
	if k.Every <= 0 {
		return DefaultResync
	}
	return k.Every
}

// SyncOnce runs SyncAll once, logging what was not in step.
func (k *Keeper) SyncOnce(ctx context.Context) {
	if n, err := k.Binder.SyncAll(ctx); err != nil {
		k.Log.Info("native browser carriers not all in step", "carriers", n, "error", err.Error())
	}
}
