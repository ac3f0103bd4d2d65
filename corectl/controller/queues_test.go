package controller

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// workqueueDepth is controller-runtime's workqueue_depth gauge of the
// queue named name (what the replay's wait read before Queues), and
// whether the series exists.
func workqueueDepth(t *testing.T, name string) (float64, bool) {
	t.Helper()
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "workqueue_depth" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == name {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestQueuesPendingIsTheWorkqueueDepth: the queue Queues records for a
// controller is the kind controller-runtime would make (its priority
// queue, or the client-go queue when the manager turns that off), and
// Pending is true exactly while that queue's workqueue_depth gauge is
// above 0: a request added, not one waiting for its delay, not once
// handed to a worker.
func TestQueuesPendingIsTheWorkqueueDepth(t *testing.T) {
	for _, tc := range []struct {
		name     string
		priority bool
	}{{"priority", true}, {"client-go", false}} {
		t.Run(tc.name, func(t *testing.T) {
			prio := tc.priority
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
				Controller: config.Controller{UsePriorityQueue: &prio}})
			if err != nil {
				t.Fatal(err)
			}
			var q *Queues
			if o := q.with(mgr, options(1)); o.NewQueue != nil {
				t.Fatal("a nil Queues set NewQueue")
			}
			q = &Queues{}
			o := q.with(mgr, options(1))
			name := fmt.Sprintf("queuestest-%s-%d", tc.name, time.Now().UnixNano()) // a series of its own per run
			w := o.NewQueue(name, workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			t.Cleanup(w.ShutDown)
			if _, isPriority := w.(interface {
				GetWithPriority() (reconcile.Request, int, bool)
			}); isPriority != tc.priority {
				t.Fatalf("the queue is a priority queue: %v, want %v", isPriority, tc.priority)
			}
			agree := func(step string, want bool) {
				t.Helper()
				got := q.Pending()
				depth, _ := workqueueDepth(t, name)
				if got != want || (depth > 0) != want {
					t.Fatalf("%s: Pending %v, workqueue_depth %v; want Pending %v", step, got, depth, want)
				}
			}
			agree("empty", false)
			a := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}}
			w.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "later"}}, time.Hour)
			agree("a request an hour away", false)
			w.Add(a)
			agree("a request added", true)
			got, shutdown := w.Get()
			if shutdown || got != a {
				t.Fatalf("Get = %v, %v; want %v", got, shutdown, a)
			}
			agree("the request handed to a worker", false)
			w.Done(got)
			agree("the request done", false)
		})
	}
}

// BenchmarkReplayPoll: one read of whether the start-up replay's queues
// are empty, from three controllers' queues (Queues.Pending) and, for
// comparison, by gathering controller-runtime's metrics registry for
// their workqueue_depth gauges, the read before Queues (in this test
// process the registry holds fewer series than corectl's). -benchmem gives
// the allocation per read; the replay reads four times a second.
func BenchmarkReplayPoll(b *testing.B) {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		b.Fatal(err)
	}
	q := &Queues{}
	for i := range 3 {
		w := q.with(mgr, options(1)).NewQueue(fmt.Sprintf("replaypoll-%d-%d", i, time.Now().UnixNano()), workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		b.Cleanup(w.ShutDown)
	}
	b.Run("read=queues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if q.Pending() {
				b.Fatal("pending")
			}
		}
	})
	b.Run("read=gather", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ctrlmetrics.Registry.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
