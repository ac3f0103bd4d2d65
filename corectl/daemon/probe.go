package daemon

import (
	"context"
	"errors"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// clusterRun is the run state of one cluster's manager, for /readyz, and
// what a new manager of the cluster is built from.
type clusterRun struct {
	id       string
	parts    *clusterParts
	mu       sync.Mutex
	mgr      manager.Manager // the current manager (runCluster replaces a stopped one)
	running  atomic.Bool     // runCluster runs
	leading  atomic.Bool     // the leader-only runnables have been started
	restarts atomic.Int64    // managers that stopped on their own and were replaced
}

// manager returns the cluster's current manager.
func (c *clusterRun) manager() manager.Manager {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mgr
}

// setManager makes m the cluster's current manager.
func (c *clusterRun) setManager(m manager.Manager) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mgr = m
}

// cacheSyncWait bounds one readiness check's wait for a cache sync.
const cacheSyncWait = 200 * time.Millisecond

// ready reports why the cluster's manager is not ready (nil: ready): its
// manager must run and its caches be synced, and once this replica is the
// cluster's leader, its leader loops must have started. Once a manager of
// the cluster was replaced (runCluster: its apiserver stopped answering),
// the cluster no longer decides the replica's readiness: every replica
// sees the same apiserver, so failing /readyz would take every replica,
// and with them the API of every other cluster, out of the Service; the
// restarts are counted in corectl_cluster_manager_restarts_total and the
// cluster's own requests fail on its request timeout instead.
func (c *clusterRun) ready(r *http.Request) error {
	err := c.readyErr(r)
	if err != nil && c.restarts.Load() > 0 {
		return nil
	}
	return err
}

func (c *clusterRun) readyErr(r *http.Request) error {
	if !c.running.Load() {
		return errors.New("the manager is not running")
	}
	mgr := c.manager()
	ctx, cancel := context.WithTimeout(r.Context(), cacheSyncWait)
	defer cancel()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("caches not synced")
	}
	select {
	case <-mgr.Elected():
		if !c.leading.Load() {
			return errors.New("elected leader, but the reconcilers have not started")
		}
	default:
	}
	return nil
}

// buildProbes builds the probe handler: /healthz (the process serves),
// /readyz (every cluster ready, the API serving and not shutting down),
// /metrics and, with Options.Profiling, /debug/pprof/.
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
	if d.opts.Profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	d.probeHandler = mux
}

// ProbeHandler returns the handler of the probe listener: /healthz,
// /readyz, /metrics and, with Options.Profiling, /debug/pprof/.
func (d *Daemon) ProbeHandler() http.Handler { return d.probeHandler }

// swapReader is the API's view of a cluster's informer cache
// (httpapi.ClusterHandle.Cache): it reads the current manager's cache.
type swapReader struct {
	cur atomic.Pointer[client.Reader]
}

func (s *swapReader) set(r client.Reader) { s.cur.Store(&r) }

func (s *swapReader) reader() client.Reader { return *s.cur.Load() }

// Get reads from the current manager's cache.
func (s *swapReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return s.reader().Get(ctx, key, obj, opts...)
}

// List lists from the current manager's cache.
func (s *swapReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return s.reader().List(ctx, list, opts...)
}
