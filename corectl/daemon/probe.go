package daemon

import (
	"context"
	"errors"
	"fmt"
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
	mgr      manager.Manager        // the current manager (runCluster builds it and replaces a stopped one); nil until built
	unbuilt  chan struct{}          // never closed: Elected's answer until the first manager is built
	running  atomic.Bool            // runCluster runs
	leading  atomic.Bool            // the leader-only runnables have been started
	restarts atomic.Int64           // managers that stopped on their own and were replaced
	buildErr atomic.Pointer[string] // the last build's error while no build has succeeded since (runCluster); nil otherwise
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
// cluster's own requests fail on its request timeout instead. Nor is
// such a cluster checked at all: while its apiserver hangs, its new
// manager's caches never sync, and the check would wait cacheSyncWait for
// them on every /readyz, for every such cluster in turn (healthz runs the
// checks one after the other), until the kubelet's probe timeout (1 s by
// default) failed the replica after all.
func (c *clusterRun) ready(r *http.Request) error {
	if c.restarts.Load() > 0 {
		return nil
	}
	return c.readyErr(r)
}

func (c *clusterRun) readyErr(r *http.Request) error {
	if !c.running.Load() {
		return errors.New("the manager is not running")
	}
	mgr := c.manager()
	if mgr == nil {
		if e := c.buildErr.Load(); e != nil {
			return fmt.Errorf("the manager could not be built (tried again after a pause): %s", *e)
		}
		return errors.New("the manager has not been built: the cluster's apiserver has not answered the API discovery")
	}
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
// (httpapi.ClusterHandle.Cache): it reads the current manager's cache
// (runCluster points it at the first manager's once built, and at each
// replacement's once synced). Until the first manager is built a read
// waits for it, within the caller's context (as a read of the first
// manager's cache waits for its sync), then fails with ErrNoCache.
type swapReader struct {
	id    string
	cur   atomic.Pointer[client.Reader]
	built chan struct{} // closed by the first set
	once  sync.Once
	// synced is set once a manager's cache of the cluster has synced; it
	// stays set (a replaced manager's cache is read until the new one has
	// synced).
	synced atomic.Bool
}

// newSwapReader returns cluster id's view, with no cache yet.
func newSwapReader(id string) *swapReader {
	return &swapReader{id: id, built: make(chan struct{})}
}

// ErrNoCache: the cluster's first manager was not built (its apiserver
// had not answered the API discovery) before the reader's context ended,
// so there was no cache to read.
var ErrNoCache = errors.New("the cluster's informer cache does not exist yet (its apiserver has not answered)")

func (s *swapReader) set(r client.Reader) {
	s.cur.Store(&r)
	s.once.Do(func() { close(s.built) })
}

func (s *swapReader) reader(ctx context.Context) (client.Reader, error) {
	if r := s.cur.Load(); r != nil {
		return *r, nil
	}
	select {
	case <-s.built:
		return *s.cur.Load(), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("cluster %s: %w (%w)", s.id, ErrNoCache, ctx.Err())
	}
}

// Get reads from the current manager's cache.
func (s *swapReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r, err := s.reader(ctx)
	if err != nil {
		return err
	}
	return r.Get(ctx, key, obj, opts...)
}

// List lists from the current manager's cache.
func (s *swapReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r, err := s.reader(ctx)
	if err != nil {
		return err
	}
	return r.List(ctx, list, opts...)
}
