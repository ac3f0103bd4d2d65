package controller

import (
	"sync"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Queues holds the work queues of one cluster's controllers, given to
// each reconciler (their Queues field), so that their lengths can be read
// without gathering the metrics registry: the daemon's first orphan scan
// waits for them to be empty (the start-up replay). A controller's queue
// is made when the controller starts (after the manager won the leader
// election), so it is recorded from then on; until then it counts as
// empty, as its workqueue_depth series did, which does not exist before.
// The zero value records nothing yet; a nil *Queues records nothing.
type Queues struct {
	mu     sync.Mutex
	queues []interface{ Len() int }
}

// Pending reports whether a recorded queue holds a request ready to be
// reconciled: its Len, which controller-runtime's workqueue_depth gauge
// of that queue counts (the requests added and not yet handed to a
// worker; with the priority queue, those whose rate-limited or requeue
// delay is over).
func (q *Queues) Pending() bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.queues {
		if w.Len() > 0 {
			return true
		}
	}
	return false
}

// with sets o.NewQueue to make the queue controller-runtime would make
// for mgr (its priority queue unless the manager's controller options
// turn it off, with their logger, and the rate limiter controller-runtime
// passes: controller.NewTypedUnmanaged's default NewQueue) and record it;
// nil q leaves o as it is.
func (q *Queues) with(mgr ctrl.Manager, o crcontroller.Options) crcontroller.Options {
	if q == nil {
		return o
	}
	cfg := mgr.GetControllerOptions()
	priority, log := ptr.Deref(cfg.UsePriorityQueue, true), cfg.Logger
	o.NewQueue = func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		var w workqueue.TypedRateLimitingInterface[reconcile.Request]
		if priority {
			w = priorityqueue.New(name, func(po *priorityqueue.Opts[reconcile.Request]) {
				po.Log = log.WithValues("controller", name)
				po.RateLimiter = rl
			})
		} else {
			w = workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Name: name})
		}
		q.mu.Lock()
		q.queues = append(q.queues, w)
		q.mu.Unlock()
		return w
	}
	return o
}
