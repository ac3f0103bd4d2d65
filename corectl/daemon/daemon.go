// Package daemon assembles corectl: for every configured compute cluster a
// controller-runtime manager with leader election (a Lease in that
// cluster) running the reconcilers of package controller, the egress and
// ingress engines with an uncached client, and one HTTP server (package
// httpapi) that every replica serves. Only the elected replica of a
// cluster runs its reconcilers; API writes on any replica are either
// synchronous with optimistic concurrency (egress) or persisted as desired
// state for the leader (ingress), so two replicas are safe.
package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/controller"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/template"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/token"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options configure a Daemon.
type Options struct {
	// Config is the cluster configuration (package cluster).
	Config *cluster.Config
	// Keys are the API keys.
	Keys *apikey.Keys
	// Credentials re-reads resource credentials.
	Credentials credential.Source
	// Listen is the API's TCP address (default "127.0.0.1:8090"; port 0
	// picks one, see Addr).
	Listen string
	// LeaderElection turns leader election on (it should be on whenever
	// more than one replica may run).
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease in every cluster (default
	// "corectl-system").
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election
	// (zero: controller-runtime's 15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// EgressGrace is EgressRecovery's grace (default
	// controller.DefaultGrace).
	EgressGrace time.Duration
	// IngressWait bounds an ingress PUT's wait (see httpapi.Server).
	IngressWait time.Duration
	// RESTConfig returns a cluster's apiserver connection (default
	// (*cluster.Cluster).RESTConfig); tests point it at envtest.
	RESTConfig func(*cluster.Cluster) (*rest.Config, error)
	// Log is the logger (zero value: discard).
	Log logr.Logger
	// TokenKey signs envd access tokens (the gateway's key); nil disables
	// the lifecycle routes (create/connect/get/delete answer 503
	// lifecycle_disabled) and the orphan scan.
	TokenKey *token.SigningKey
	// TokenTTL is the token lifetime (default 24 h).
	TokenTTL time.Duration
	// ReadyBudget bounds a create's readiness check (default 60 s).
	ReadyBudget time.Duration
	// OrphanInterval is the period of the orphan scan, which also runs at
	// start-up on the leader (default 1 min).
	OrphanInterval time.Duration
	// OrphanGrace is the age below which the orphan scan leaves objects
	// alone (default 5 min).
	OrphanGrace time.Duration
	// ProbeSourceDiscovery turns on probe-source discovery and merging
	// (spec §5.2.2) for every cluster: the ingress engine and the create
	// orchestration merge the discovered sources into restricted
	// carriers. The command always sets it (zero configuration); test
	// fixtures whose fixed entry does not echo leave it off.
	ProbeSourceDiscovery bool
	// Lifecycle, when set, adjusts each cluster's orchestrator after it is
	// built (tests: fault injection, readiness client).
	Lifecycle func(*lifecycle.Orchestrator)
}

// Daemon is a configured corectl.
type Daemon struct {
	opts     Options
	managers map[string]manager.Manager
	api      *httpapi.Server
	listener net.Listener
}

// LeaseName returns the leader-election Lease name for a cluster ID:
// "corectl-<id>" when that is a valid name, else "corectl-<hash>".
func LeaseName(clusterID string) string {
	n := "corectl-" + strings.ToLower(clusterID)
	if len(validation.IsDNS1123Label(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(clusterID))
	return "corectl-" + hex.EncodeToString(sum[:6])
}

// New builds the managers, engines and API server and binds the listener;
// nothing runs until Run. Errors: a cluster's REST configuration or client
// cannot be built, or the address cannot be bound.
func New(opts Options) (*Daemon, error) {
	if opts.Config == nil || opts.Keys == nil || opts.Credentials == nil {
		return nil, errors.New("daemon: Config, Keys and Credentials are required")
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:8090"
	}
	if opts.LeaderElectionNamespace == "" {
		opts.LeaderElectionNamespace = "corectl-system"
	}
	if opts.RESTConfig == nil {
		opts.RESTConfig = (*cluster.Cluster).RESTConfig
	}
	scheme, err := cluster.NewScheme()
	if err != nil {
		return nil, err
	}
	d := &Daemon{opts: opts, managers: map[string]manager.Manager{}}
	d.api = &httpapi.Server{Keys: opts.Keys, Credentials: opts.Credentials, Clusters: map[string]*httpapi.ClusterHandle{},
		IngressWait: opts.IngressWait, Log: opts.Log.WithName("api")}
	managed := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})
	for i := range opts.Config.Clusters {
		c := &opts.Config.Clusters[i]
		cfg, err := opts.RESTConfig(c)
		if err != nil {
			return nil, err
		}
		mopts := ctrl.Options{
			Scheme:                        scheme,
			Logger:                        opts.Log.WithValues("cluster", c.ID),
			Metrics:                       metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress:        "0",
			LeaderElection:                opts.LeaderElection,
			LeaderElectionID:              LeaseName(c.ID),
			LeaderElectionNamespace:       opts.LeaderElectionNamespace,
			LeaderElectionReleaseOnCancel: true,
			Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
				&networkingv1.NetworkPolicy{}: {Label: managed},
				&networkingv1.Ingress{}:       {Label: managed},
			}},
		}
		if opts.LeaseDuration > 0 {
			mopts.LeaseDuration, mopts.RenewDeadline, mopts.RetryPeriod = &opts.LeaseDuration, &opts.RenewDeadline, &opts.RetryPeriod
		}
		// The leader-election identity is "<hostname>_<uuid>", unique per
		// replica (controller-runtime).
		mgr, err := ctrl.NewManager(cfg, mopts)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
		}
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
		}
		rec := mgr.GetEventRecorder("corectl")
		eg := &egress.Engine{Client: direct, Cluster: c, Events: rec}
		in := &ingressallow.Engine{Client: direct, Cluster: c, Events: rec}
		var probe *probesource.Discoverer
		if opts.ProbeSourceDiscovery {
			probe = &probesource.Discoverer{Client: direct, Cluster: c}
			in.Probe = probe.Sources
		}
		if err := (&controller.IngressReconciler{Engine: in}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&controller.EgressRecovery{Engine: eg, Reader: mgr.GetClient(), Grace: opts.EgressGrace}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		h := &httpapi.ClusterHandle{Cluster: c, Egress: eg, Ingress: in}
		if opts.TokenKey != nil {
			lc := &lifecycle.Orchestrator{Client: direct, Cluster: c, Egress: eg, Ingress: in, Key: *opts.TokenKey,
				TokenTTL: opts.TokenTTL, ReadyBudget: opts.ReadyBudget, OrphanGrace: opts.OrphanGrace, Probe: probe}
			if opts.Lifecycle != nil {
				opts.Lifecycle(lc)
			}
			h.Lifecycle = lc
			if err := mgr.Add(&orphanScanner{o: lc, every: opts.OrphanInterval, log: opts.Log.WithValues("cluster", c.ID)}); err != nil {
				return nil, err
			}
		}
		d.managers[c.ID] = mgr
		d.api.Clusters[c.ID] = h
		if c.ID == opts.Config.Templates.ClusterID {
			d.api.Templates = &template.Store{Client: direct, Namespace: opts.Config.Templates.Namespace}
		}
	}
	l, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, err
	}
	d.listener = l
	return d, nil
}

// Addr is the API's bound address.
func (d *Daemon) Addr() string { return d.listener.Addr().String() }

// Elected returns a channel closed when this replica leads cluster id (at
// once without leader election); nil for an unknown cluster.
func (d *Daemon) Elected(id string) <-chan struct{} {
	m, ok := d.managers[id]
	if !ok {
		return nil
	}
	return m.Elected()
}

// Handler returns the API handler (for tests and embedding).
func (d *Daemon) Handler() http.Handler { return d.api.Handler() }

// Run serves the API and runs every cluster's manager until ctx ends or
// one of them fails; it then stops the rest (releasing leases) and returns
// the first error (nil on a clean stop).
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: d.api.Handler(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	errc := make(chan error, len(d.managers)+1)
	for id, m := range d.managers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Start(ctx); err != nil {
				errc <- fmt.Errorf("cluster %s: %w", id, err)
				cancel()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(d.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			cancel()
		}
	}()
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	close(errc)
	return <-errc
}

// orphanScanner runs the orphan scan on the leader: once at start-up, then
// every interval.
type orphanScanner struct {
	o     *lifecycle.Orchestrator
	every time.Duration
	log   logr.Logger
}

// NeedLeaderElection is true: only the leader scans.
func (s *orphanScanner) NeedLeaderElection() bool { return true }

// Start scans until ctx ends.
func (s *orphanScanner) Start(ctx context.Context) error {
	every := s.every
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rep, err := s.o.Scan(ctx)
		switch {
		case err != nil:
			s.log.Info("orphan scan failed", "error", err.Error())
		case len(rep.Deleted)+len(rep.Failed) > 0:
			s.log.Info("orphan scan", "deleted", rep.Deleted, "failed", rep.Failed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
