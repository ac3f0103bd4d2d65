package daemon

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// clusterRun is the run state of one cluster's manager, for /readyz.
type clusterRun struct {
	id      string
	mgr     manager.Manager
	running atomic.Bool // Start was called and has not returned
	leading atomic.Bool // the leader-only runnables have been started
}

// leaderMark is a leader-only runnable that records that the manager
// started its leader runnables (the reconcilers and the orphan scan start
// in the same group).
type leaderMark struct{ c *clusterRun }

// NeedLeaderElection is true: it starts with the leader's loops.
func (m leaderMark) NeedLeaderElection() bool { return true }

// Start marks the loops running until ctx ends.
func (m leaderMark) Start(ctx context.Context) error {
	m.c.leading.Store(true)
	<-ctx.Done()
	m.c.leading.Store(false)
	return nil
}

// cacheSyncWait bounds one readiness check's wait for a cache sync.
const cacheSyncWait = 200 * time.Millisecond

// ready reports why the cluster's manager is not ready (nil: ready): its
// manager must run and its caches be synced, and once this replica is the
// cluster's leader, its leader loops must have started.
func (c *clusterRun) ready(r *http.Request) error {
	if !c.running.Load() {
		return errors.New("the manager is not running")
	}
	ctx, cancel := context.WithTimeout(r.Context(), cacheSyncWait)
	defer cancel()
	if !c.mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("caches not synced")
	}
	select {
	case <-c.mgr.Elected():
		if !c.leading.Load() {
			return errors.New("elected leader, but the reconcilers have not started")
		}
	default:
	}
	return nil
}

// buildProbes builds the probe handler: /healthz (the process serves),
// /readyz (every cluster ready, the API serving and not shutting down) and
// /metrics.
func (d *Daemon) buildProbes() {
	d.healthHandler = &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	checks := map[string]healthz.Checker{
		"api": func(*http.Request) error {
			switch {
			case d.draining.Load():
				return errors.New("shutting down")
			case !d.serving.Load():
				return errors.New("the API is not serving")
			}
			return nil
		},
	}
	for _, c := range d.clusters {
		checks["cluster-"+c.id] = c.ready
	}
	d.readyHandler = &healthz.Handler{Checks: checks}
	mux := http.NewServeMux()
	mux.Handle("/healthz", http.StripPrefix("/healthz", d.healthHandler))
	mux.Handle("/healthz/", http.StripPrefix("/healthz", d.healthHandler))
	mux.Handle("/readyz", http.StripPrefix("/readyz", d.readyHandler))
	mux.Handle("/readyz/", http.StripPrefix("/readyz", d.readyHandler))
	mux.Handle("GET /metrics", d.metrics.Handler())
	d.probeHandler = mux
}

// ProbeHandler returns the handler of the probe listener: /healthz,
// /readyz and /metrics.
func (d *Daemon) ProbeHandler() http.Handler { return d.probeHandler }
