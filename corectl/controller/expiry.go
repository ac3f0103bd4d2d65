package controller

import (
	"cmp"
	"context"
	"strings"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/sandbox"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Expiry deletes the sandboxes of one cluster whose end time has passed
// (v1alpha1.AnnotationEndAt; docs/corectl.md "Lifetime"), through the
// orchestrator's fail-closed delete. It is driven by the BatchSandboxes
// themselves: every reconcile reads the object, and a sandbox not yet due
// is requeued for the moment it is, so a newly elected leader (or a
// restarted corectl) picks up every end time from the initial list. Only
// the leader runs it.
type Expiry struct {
	// Orchestrator decides (ExpiryDue) and deletes (Expire); its Client
	// must be uncached.
	Orchestrator *lifecycle.Orchestrator
	// Reader reads BatchSandboxes (the manager's cache) as
	// *sandbox.Cached.
	Reader client.Reader
	// Log receives one line per expired sandbox.
	Log logr.Logger
	// Metrics counts reconciles (controller "expiry"; outcome "Expired",
	// "Waiting" or "error").
	Metrics *metrics.Metrics
	// Workers is how many sandboxes are expired at once (default
	// DefaultExpiryWorkers).
	Workers int
	// Queues, if not nil, records the controller's work queue (Queues).
	Queues *Queues
}

// DefaultExpiryWorkers is Expiry's default concurrency. An expiry is the
// fail-closed delete, about ten sequential apiserver round trips; with 2
// workers 1,000 sandboxes ending in the same second took 99 s to delete
// under load (hack/corectlload -goals expiry), against the 60 s of issue
// 33. 16 deletes in flight stay well inside the client limits
// (cluster.DefaultClientQPS).
const DefaultExpiryWorkers = 16

// Reconcile implements reconcile.Reconciler.
func (r *Expiry) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	u := sandbox.NewCached()
	if err := r.Reader.Get(ctx, req.NamespacedName, u); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cluster := r.Orchestrator.Cluster.ID
	if due, wait := r.Orchestrator.ExpiryDue(u); !due {
		if wait > 0 {
			r.Metrics.Reconciled(cluster, "expiry", "Waiting")
		}
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	deleted, err := r.Orchestrator.Expire(ctx, req.Namespace, req.Name)
	if err != nil {
		// A CleanupFailed sandbox is retried here with backoff and by the
		// orphan scan.
		r.Metrics.Reconciled(cluster, "expiry", metrics.OutcomeError)
		return reconcile.Result{}, err
	}
	if deleted {
		r.Metrics.Reconciled(cluster, "expiry", "Expired")
		r.Log.Info("sandbox expired and deleted", "namespace", req.Namespace, "sandbox", req.Name)
	}
	return reconcile.Result{}, nil
}

// SetupWithManager registers the reconciler for this cluster's
// BatchSandboxes (managed-by corectl and this cluster's label).
func (r *Expiry) SetupWithManager(mgr ctrl.Manager) error {
	clusterID := r.Orchestrator.Cluster.ID
	return ctrl.NewControllerManagedBy(mgr).
		Named("expiry-"+strings.ToLower(clusterID)).
		WithOptions(r.Queues.with(mgr, options(cmp.Or(r.Workers, DefaultExpiryWorkers)))).
		For(sandbox.NewCached(), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue && o.GetLabels()[v1alpha1.LabelClusterID] == clusterID
		}))).
		Complete(r)
}
