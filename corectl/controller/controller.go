// Package controller holds corectl's reconcilers, run by a
// controller-runtime manager per compute cluster under leader election (so
// only one replica writes):
//
//   - IngressReconciler applies each SandboxIngressAllowlist's desired
//     version to its managed Ingress (ingressallow.Engine.Reconcile), and
//     repairs a verified carrier that drifted; Ingress events are mapped
//     back to the allowlist through the identity labels; the updates that
//     are a cycle's own writes (ingressallow.IsCycleWrite) wake it only
//     after CycleWriteRecheck.
//   - EgressRecovery finishes egress PUTs interrupted after their write (a
//     platform NetworkPolicy left in Verifying longer than a grace period)
//     with egress.Engine.Resume.
//
// The reconcilers react to the objects, not to events' contents: each run
// reads the current state again, so a restarted or newly elected corectl
// picks up where the last one stopped.
package controller

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// IngressReconciler reconciles SandboxIngressAllowlists of one cluster.
type IngressReconciler struct {
	// Engine does the work; its Client must be uncached.
	Engine *ingressallow.Engine
	// Workers is how many allowlists are reconciled at once (default
	// DefaultWorkers); one object is never reconciled by two workers.
	Workers int
	// Metrics counts each cycle's outcome (corectl_reconcile_total with
	// controller "ingress"); nil records nothing.
	Metrics *metrics.Metrics
	// Reader, if not nil, is the manager's cache (of allowlists, managed
	// Ingresses and BatchSandboxes): a request whose allowlist the cache
	// does not hold, or whose allowlist, sandbox and carrier the cache
	// shows settled (settledInCache), ends there (NoChange) without a
	// request to the apiserver. Managed Ingress events of a create arrive
	// before its allowlist exists; should the cache lag behind an
	// allowlist that does exist, that allowlist's own create event
	// brings the request back. Every cycle still reads the allowlist
	// from the apiserver (Engine).
	Reader client.Reader
	// RateLimiter paces the retries of failed cycles; nil is
	// controller-runtime's default (per allowlist, 5 ms doubling up to
	// 1000 s, and 10 retries/s with bursts of 100 overall).
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// CycleWriteRecheck is how long after a cycle's own carrier write
	// (ingressallow.IsCycleWrite) the allowlist is looked at again: such
	// a write wakes no cycle at once (the cycle that wrote records its
	// result), but an update the informer only saw folded into one with
	// a cycle's write (after a broken watch), an edit that forged a later
	// mark, or a cycle that died after its write would otherwise wait for
	// the allowlist's next cycle. The recheck of a settled carrier
	// writes nothing (NoChange). 0 is DefaultCycleWriteRecheck; negative
	// never rechecks.
	CycleWriteRecheck time.Duration
	// Queues, if not nil, records the controller's work queue (Queues).
	Queues *Queues
}

// DefaultCycleWriteRecheck is IngressReconciler.CycleWriteRecheck's
// default: long enough for the cycle that wrote to have recorded its
// result (a cycle takes well under a second; a create's readiness wait,
// which follows it, is bounded by 30 s), so the recheck finds it settled
// instead of superseding it.
const DefaultCycleWriteRecheck = 30 * time.Second

// Controller names of corectl_reconcile_total.
const (
	ControllerIngress        = "ingress"
	ControllerEgressRecovery = "egress-recovery"
)

// DefaultWorkers is IngressReconciler's default concurrency: the cycle is
// apiserver round trips, so several in flight raise throughput (see
// BenchmarkReconcileSandboxNetworks).
const DefaultWorkers = 8

// Reconcile implements reconcile.Reconciler: one ingressallow cycle;
// transient failures are returned so the request is retried with backoff.
func (r *IngressReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if r.Reader != nil {
		al := &v1alpha1.SandboxIngressAllowlist{}
		err := r.Reader.Get(ctx, req.NamespacedName, al)
		if apierrors.IsNotFound(err) || err == nil && r.settledInCache(ctx, al) {
			r.Metrics.Reconciled(r.Engine.Cluster.ID, ControllerIngress, string(ingressallow.OutcomeNoChange))
			return reconcile.Result{}, nil
		}
	}
	res, err := r.Engine.Reconcile(ctx, req.Namespace, req.Name)
	outcome := metrics.OutcomeError
	if err == nil && res != nil {
		outcome = string(res.Outcome)
	}
	r.Metrics.Reconciled(r.Engine.Cluster.ID, ControllerIngress, outcome)
	return reconcile.Result{}, err
}

// settledInCache reports whether the cache's allowlist al, its
// BatchSandbox and its carrier say that a cycle would find nothing to do
// (ingressallow.Settled); any of them missing from the cache, or al being
// deleted or of another cluster, is left to the cycle. The cache may lag
// behind the apiserver, but every change that could unsettle it (a new
// desired version, a carrier written or removed) reaches the cache before
// the event that requests the next cycle, and a cycle's own status
// records are looked at again after CycleWriteRecheck; so the answer is
// never the last word on a change. This spares a leader's start-up replay
// (one request per allowlist) its three apiserver reads per settled
// allowlist.
func (r *IngressReconciler) settledInCache(ctx context.Context, al *v1alpha1.SandboxIngressAllowlist) bool {
	c := r.Engine.Cluster
	if al.DeletionTimestamp != nil || al.Spec.ClusterID != c.ID {
		return false
	}
	sb, err := sandbox.GetCached(ctx, r.Reader, al.Namespace, al.Name, c.AllocationLabelKey())
	if err != nil {
		return false
	}
	cur := &networkingv1.Ingress{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: c.Ingress.Namespace, Name: ingressallow.IngressName(al.Name)}, cur); err != nil {
		return false
	}
	return ingressallow.Settled(c, al, sb, cur)
}

// SetupWithManager registers the reconciler: for SandboxIngressAllowlists
// of this cluster, and for managed Ingresses (mapped to their allowlist by
// the sandbox ID and namespace labels).
func (r *IngressReconciler) SetupWithManager(mgr ctrl.Manager) error {
	clusterID := r.Engine.Cluster.ID
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue && o.GetLabels()[v1alpha1.LabelClusterID] == clusterID
	})
	recheck := r.CycleWriteRecheck
	if recheck == 0 {
		recheck = DefaultCycleWriteRecheck
	}
	toAllowlist := carrierEvents(recheck)
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandboxingressallowlist-"+strings.ToLower(clusterID)).
		WithOptions(r.Queues.with(mgr, withRateLimiter(options(r.Workers), r.RateLimiter))).
		// Status-only updates are the cycles' own records (Verifying, the
		// result): they carry no new desired version, so they wake no cycle.
		For(&v1alpha1.SandboxIngressAllowlist{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			al, ok := o.(*v1alpha1.SandboxIngressAllowlist)
			return ok && al.Spec.ClusterID == clusterID
		}), predicate.GenerationChangedPredicate{})).
		Watches(&networkingv1.Ingress{}, toAllowlist, builder.WithPredicates(ours)).
		Complete(r)
}

// carrierEvents maps managed Ingress events to their allowlist (by the
// sandbox ID and namespace labels). A cycle's own carrier write
// (ingressallow.IsCycleWrite) wakes no cycle at once: the cycle that
// wrote records its result, and a failed one is retried through the rate
// limiter; were it to wake one, a carrier that an admission webhook
// alters on every write would have each failed cycle start the next at
// once. It is looked at again after recheck (negative: never), which
// catches what such an update may hide (IngressReconciler.
// CycleWriteRecheck). Every other event wakes a cycle at once.
func carrierEvents(recheck time.Duration) handler.TypedEventHandler[client.Object, reconcile.Request] {
	request := func(o client.Object) (reconcile.Request, bool) {
		l := o.GetLabels()
		if l[v1alpha1.LabelSandboxID] == "" || l[v1alpha1.LabelSandboxNamespace] == "" {
			return reconcile.Request{}, false
		}
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: l[v1alpha1.LabelSandboxNamespace], Name: l[v1alpha1.LabelSandboxID]}}, true
	}
	add := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if req, ok := request(o); ok {
			q.Add(req)
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, ok1 := e.ObjectOld.(*networkingv1.Ingress)
			cur, ok2 := e.ObjectNew.(*networkingv1.Ingress)
			if !ok1 || !ok2 || !ingressallow.IsCycleWrite(old, cur) {
				add(e.ObjectNew, q)
				return
			}
			if req, ok := request(e.ObjectNew); ok && recheck >= 0 {
				q.AddAfter(req, recheck)
			}
		},
	}
}

// DefaultGrace is how long an egress PUT may stay in Verifying before
// EgressRecovery takes it over (longer than any PUT's own deadline).
const DefaultGrace = 2 * time.Minute

// EgressRecovery finishes interrupted egress PUTs of one cluster.
type EgressRecovery struct {
	// Engine does the work; its Client must be uncached.
	Engine *egress.Engine
	// Reader reads NetworkPolicies (the manager's cache).
	Reader client.Reader
	// Grace is the Verifying age after which a policy is taken over
	// (default DefaultGrace).
	Grace time.Duration
	// Now returns the current time (nil: time.Now).
	Now func() time.Time
	// Metrics counts each takeover's outcome (corectl_reconcile_total with
	// controller "egress-recovery": the egress outcome, Indeterminate, or
	// error); cycles that find nothing to do are not counted. nil records
	// nothing.
	Metrics *metrics.Metrics
	// Queues, if not nil, records the controller's work queue (Queues).
	Queues *Queues
}

// Reconcile implements reconcile.Reconciler.
func (r *EgressRecovery) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	np := &networkingv1.NetworkPolicy{}
	if err := r.Reader.Get(ctx, req.NamespacedName, np); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if np.Annotations[egress.AnnotationVerificationState] != v1alpha1.StateVerifying {
		return reconcile.Result{}, nil
	}
	grace := r.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	if age := now().Sub(egress.VerifyingSince(np)); age < grace {
		return reconcile.Result{RequeueAfter: grace - age}, nil
	}
	res, err := r.Engine.Resume(ctx, req.Namespace, req.Name)
	switch {
	case err == nil && res != nil:
		r.Metrics.Reconciled(r.Engine.Cluster.ID, ControllerEgressRecovery, string(res.Outcome))
	case errors.Is(err, egress.ErrIndeterminate):
		r.Metrics.Reconciled(r.Engine.Cluster.ID, ControllerEgressRecovery, v1alpha1.StateIndeterminate)
	case err != nil && !apierrors.IsNotFound(err):
		r.Metrics.Reconciled(r.Engine.Cluster.ID, ControllerEgressRecovery, metrics.OutcomeError)
	}
	if errors.Is(err, egress.ErrIndeterminate) {
		// Needs an admin; the Event and annotations say so. No retry loop.
		return reconcile.Result{}, nil
	}
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, err
}

// SetupWithManager registers the reconciler for this cluster's platform
// NetworkPolicies.
func (r *EgressRecovery) SetupWithManager(mgr ctrl.Manager) error {
	clusterID := r.Engine.Cluster.ID
	return ctrl.NewControllerManagedBy(mgr).
		Named("egressrecovery-"+strings.ToLower(clusterID)).
		WithOptions(r.Queues.with(mgr, options(1))).
		For(&networkingv1.NetworkPolicy{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue && o.GetLabels()[v1alpha1.LabelClusterID] == clusterID
		}))).
		Complete(r)
}

// withRateLimiter sets o's rate limiter when rl is not nil.
func withRateLimiter(o crcontroller.Options, rl workqueue.TypedRateLimiter[reconcile.Request]) crcontroller.Options {
	if rl != nil {
		o.RateLimiter = rl
	}
	return o
}

// options sets the worker count (0: DefaultWorkers) and skips the
// controller-name uniqueness check: names carry the cluster ID, but several
// corectl instances may run in one process (tests, embedding); the name
// only labels metrics, which corectl does not serve.
func options(workers int) crcontroller.Options {
	if workers <= 0 {
		workers = DefaultWorkers
	}
	yes := true
	return crcontroller.Options{SkipNameValidation: &yes, MaxConcurrentReconciles: workers}
}
