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
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/browser"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/cnicheck"
	"github.com/sandgate/sandgate/corectl/controller"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/fairshare"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/nsrights"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/corectl/sandboxlogs"
	"github.com/sandgate/sandgate/corectl/scanmeta"
	"github.com/sandgate/sandgate/corectl/template"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/entryprobe"
	"github.com/sandgate/sandgate/gateway/token"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options configure a Daemon.
type Options struct {
	// Config is the cluster configuration (package cluster).
	Config *cluster.Config
	// Keys are the API keys: a *apikey.File (reloaded as the file
	// changes; its state is exported as corectl_api_key_file_* metrics) or
	// a fixed *apikey.Keys.
	Keys apikey.Source
	// Credentials re-reads resource credentials.
	Credentials credential.Source
	// Listen is the API's TCP address (default "127.0.0.1:8090"; port 0
	// picks one, see Addr). It must be empty when Listener is set.
	Listen string
	// Listener, when set, is the API's listener, already bound: the
	// daemon serves it instead of binding Listen (a caller that must know
	// the port before the daemon starts holds it from the moment it picks
	// it). Setting both Listener and Listen is an error from New. The
	// daemon owns it from New on: New closes it when it returns an error,
	// Run when it returns, as it does a listener it bound itself. Default
	// nil: New binds Listen.
	Listener net.Listener
	// LeaderElection turns leader election on (it should be on whenever
	// more than one replica may run).
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease in every cluster (default
	// "corectl-system").
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election
	// (zero: controller-runtime's 15 s, 10 s, 2 s; the corectl command's
	// flags default to DefaultLeaseDuration, DefaultRenewDeadline and
	// DefaultRetryPeriod).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// EgressGrace is EgressRecovery's grace (default
	// controller.DefaultGrace).
	EgressGrace time.Duration
	// IngressWait bounds an ingress PUT's wait (see httpapi.Server).
	IngressWait time.Duration
	// APIShare is each credential's share of its cluster's apiserver
	// requests for its API calls, and its calls in progress (package
	// fairshare; zero value: the defaults, fairshare.DefaultRate,
	// DefaultBurst and DefaultInProgress).
	APIShare fairshare.Config
	// RESTConfig returns a cluster's apiserver connection (default
	// (*cluster.Cluster).RESTConfig); tests point it at envtest. The
	// daemon sets the cluster's client limits on the returned config
	// (cluster.ClientLimits), so tests run with the production limits.
	RESTConfig func(*cluster.Cluster) (*rest.Config, error)
	// Log is the logger (zero value: discard).
	Log logr.Logger
	// TokenKey signs envd access tokens (the gateway's key); nil disables
	// the lifecycle routes (create/connect/get/delete answer 503
	// lifecycle_disabled) and the orphan scan.
	TokenKey *token.SigningKey
	// CNICheckInterval is how often every replica re-reads the CNI facts
	// of clusters with a cniSource (package cnicheck; default 1 min).
	CNICheckInterval time.Duration
	// NamespaceRightsInterval is how often every replica checks that it
	// may write in each namespace a cluster serves (package nsrights:
	// the ingress namespace and the credentials' project namespaces); 0
	// means nsrights.DefaultInterval. The check runs only when Credentials
	// can be listed (a *credential.File or credential.Static).
	NamespaceRightsInterval time.Duration
	// InternalToken authenticates the gateway's sandbox authorizer on GET
	// /internal/v1/authorize (httpapi.Server.InternalToken); empty turns
	// that route off unless InternalTokens has one.
	InternalToken string
	// InternalTokens are further accepted internal tokens
	// (httpapi.Server.InternalTokens): during a rotation the old and the
	// new one.
	InternalTokens []string
	// MaxTimeout is the longest sandbox timeout and lifetime
	// (lifecycle.Orchestrator.MaxTimeout; default 1 h).
	MaxTimeout time.Duration
	// TokenGrace is how long a token outlives the latest end of its
	// sandbox (lifecycle.Orchestrator.TokenGrace; default 30 s).
	TokenGrace time.Duration
	// ReadyBudget bounds a create's readiness check (default 60 s).
	ReadyBudget time.Duration
	// OrphanInterval is the period of the orphan scan, which also runs at
	// start-up on the leader (default 1 min).
	OrphanInterval time.Duration
	// NativeResync is the period of the Native Browser carriers' resync
	// on the leader (browser.Keeper; 0 means browser.DefaultResync).
	NativeResync time.Duration
	// OrphanGrace is the age below which the orphan scan leaves objects
	// alone (default 5 min).
	OrphanGrace time.Duration
	// ProbeSourceDiscovery turns on probe-source discovery and merging
	// (spec §5.2.2) for every cluster: the ingress engine and the create
	// orchestration merge the discovered sources into restricted
	// carriers. The command always sets it (zero configuration); test
	// fixtures whose fixed entry does not echo leave it off.
	ProbeSourceDiscovery bool
	// ProbeRelay, when set, sends every cluster's readiness checks and
	// probe-source discovery dials through the gateway's probe relay
	// (fixed_entry_probe, package gateway/entryprobe) instead of from
	// corectl: the discovered probe sources are then the gateway's data
	// plane's own and a ready sandbox is reachable by the data plane (same
	// source, same Host), by construction. Run checks first that the
	// gateway's clusters match this configuration (entryprobe.Client.Check:
	// fixed entry, and the Host the gateway sends = ingress.host) and
	// fails naming every mismatch. Nil: corectl probes the fixed entries
	// itself (one host, or gateway and corectl behind one source NAT).
	ProbeRelay *entryprobe.Client
	// ProbeRelayWait bounds Run's wait for the relay to answer that check
	// (the gateway may start after corectl; default 2 min).
	ProbeRelayWait time.Duration
	// Lifecycle, when set, adjusts each cluster's orchestrator after it is
	// built (tests: fault injection, readiness client).
	Lifecycle func(*lifecycle.Orchestrator)
	// LogSource, when set, replaces every cluster's pods/log reader of the
	// sandbox log routes (tests: log content without a kubelet).
	LogSource sandboxlogs.Source
	// Metrics receives corectl's metrics (package metrics); nil makes a
	// new registry. Other packages register their collectors on
	// Metrics.Registry.
	Metrics *metrics.Metrics
	// ProbeListen is the TCP address of the probe listener: GET /healthz,
	// GET /readyz (with /readyz/<check> and ?verbose) and GET /metrics.
	// Default "": no listener (ProbeHandler still serves them); port 0
	// picks one (see ProbeAddr).
	ProbeListen string
	// Profiling adds Go's runtime profiles (net/http/pprof: heap,
	// allocs, goroutine, profile, trace …) under /debug/pprof/ to the
	// probe handler (ProbeHandler, ProbeListen). Default false: they are
	// for measuring (hack/corectlload -heap-profile), and a CPU profile or
	// trace costs the process while it runs, so the listener must not be
	// reachable by others when it is on.
	Profiling bool
	// ShutdownGrace bounds how long Run waits for in-flight API requests
	// once its context ends (default 30 s); requests still running then
	// are cut off, and what a cut-off create leaves behind is removed by
	// the orphan scan.
	ShutdownGrace time.Duration
}

// The corectl command's leader-election defaults. A kill -9'd leader is
// replaced within DefaultLeaseDuration + DefaultRetryPeriod (11 s; with
// controller-runtime's 15 s and 2 s it was up to 17 s, and the leader-only
// cycles resumed after 17–18 s in hack/corectlload, too close to the 20 s
// goal of issue 33). The leader renews every DefaultRetryPeriod (one Lease
// update a second per cluster) and steps down when it could not renew for
// DefaultRenewDeadline (7 s: seven attempts; the FlowSchema
// corectl-leader-election keeps them from queueing behind other
// workloads, docs/runbook.md).
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewDeadline = 7 * time.Second
	DefaultRetryPeriod   = 1 * time.Second
)

// DefaultShutdownGrace is Options.ShutdownGrace's default.
const DefaultShutdownGrace = 30 * time.Second

// Daemon is a configured corectl.
type Daemon struct {
	opts     Options
	gc       atomic.Pointer[startupGC] // set by Run: GOGC lowered while a replay runs
	api      *httpapi.Server
	listener net.Listener
	metrics  *metrics.Metrics

	probe         net.Listener // nil without ProbeListen
	clusters      []*clusterRun
	draining      atomic.Bool // set when Run's context ended
	serving       atomic.Bool // the API server is serving
	probeHandler  http.Handler
	healthHandler *healthz.Handler
	readyHandler  *healthz.Handler
}

// batchSandboxes is the BatchSandbox kind as the cache keys it: the
// cache holds BatchSandboxes as *sandbox.Cached, and every cached reader
// asks with that type (asked with *unstructured.Unstructured, the cache
// would start a second informer of whole objects).
func batchSandboxes() client.Object { return sandbox.NewCached() }

// cacheOptions is the informer cache of one cluster's manager: only the
// NetworkPolicies, Ingresses and BatchSandboxes corectl manages (label
// selector managed), no object's managed fields (they are most of a small
// object's size and nothing reads them), and every kind trimmed to what
// its cached readers use: BatchSandboxes decoded into sandbox.Cached and
// trimmed by sandbox.TrimCached (the authorizer, the Locate question, the
// list routes, the expiry reconciler and the ingress reconciler's settled
// test), NetworkPolicies by
// egress.TrimCached (metadata only, for EgressRecovery), allowlists by
// ingressallow.TrimCached and managed Ingresses by
// ingressallow.TrimCachedCarrier (the ingress reconciler's filters and
// settled test). No reader writes a cached object back: every write goes
// through the uncached client on an object read there. BatchSandboxes are
// handed out without a deep copy: their readers only read them, and a
// copy per question was most of the authorizer's allocation at 10,000
// sandboxes (hack/corectlload).
func cacheOptions(managed labels.Selector) cache.Options {
	noCopy := true
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&networkingv1.NetworkPolicy{}:       {Label: managed, Transform: egress.TrimCached},
			&networkingv1.Ingress{}:             {Label: managed, Transform: ingressallow.TrimCachedCarrier},
			&v1alpha1.SandboxIngressAllowlist{}: {Transform: ingressallow.TrimCached},
			batchSandboxes():                    {Label: managed, Transform: sandbox.TrimCached, UnsafeDisableDeepCopy: &noCopy},
		},
	}
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

// New builds the engines, clients and API server and binds the listener,
// without a request to any apiserver; nothing runs until Run, which builds
// each cluster's manager in that cluster's own goroutine (a manager's
// build reads the cluster's API discovery: runCluster) and builds and
// starts the clusters' Events broadcasters. New starts no goroutine
// (TestNewStartsNoGoroutine), so a Daemon that is never Run holds its
// listeners only. Errors: a cluster's REST configuration or client cannot
// be built, a cluster's execdTokenSecretFile cannot be read or is too short
// (cluster.Cluster.LoadExecdTokenSecret), both Listener and Listen are
// set, or an address cannot be bound. On an error, New closes
// opts.Listener (when set).
func New(opts Options) (d *Daemon, err error) {
	if opts.Listener != nil {
		defer func() {
			if err != nil {
				_ = opts.Listener.Close()
			}
		}()
		if opts.Listen != "" {
			return nil, errors.New("daemon: Listener and Listen are both set; give one")
		}
	}
	if opts.Config == nil || opts.Keys == nil || opts.Credentials == nil {
		return nil, errors.New("daemon: Config, Keys and Credentials are required")
	}
	if opts.Listen == "" && opts.Listener == nil {
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
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
	}
	if f, ok := opts.Keys.(*apikey.File); ok {
		if err := opts.Metrics.WatchKeyFile(f.Stats); err != nil {
			return nil, err
		}
	}
	d = &Daemon{opts: opts, metrics: opts.Metrics}
	d.api = &httpapi.Server{Keys: opts.Keys, Credentials: opts.Credentials, Clusters: map[string]*httpapi.ClusterHandle{},
		IngressWait: opts.IngressWait, Log: opts.Log.WithName("api"), Metrics: opts.Metrics, InternalToken: opts.InternalToken, InternalTokens: opts.InternalTokens,
		Shares: fairshare.New(opts.APIShare)}
	for i := range opts.Config.Clusters {
		c := &opts.Config.Clusters[i]
		// The execd token secret is read at start (a configuration
		// Validate did not see is read here); a bad file stops corectl.
		if err := c.LoadExecdTokenSecret(); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
		}
		cfg, err := opts.RESTConfig(c)
		if err != nil {
			return nil, err
		}
		c.ApplyClientLimits(cfg)
		// Every apiserver request of an API call is charged to the
		// caller's share (package fairshare); the others pass.
		cfg.Wrap(fairshare.Transport)
		// The uncached client of the engines, the orchestration and the
		// API, and the clientset of the Events, the SelfSubjectAccessReviews
		// and pods/log: every request bounded by the cluster's request
		// timeout (cluster.Cluster.RequestConfig), so a hung apiserver
		// holds its callers (this cluster's) that long at most. The
		// manager's client is not: its watches are long.
		dcfg := c.RequestConfig(cfg)
		direct, err := client.New(dcfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
		}
		cs, err := kubernetes.NewForConfig(dcfg)
		if err != nil {
			return nil, err
		}
		// The cluster's Events (engines, CNI gate, leader election) go
		// through one events.k8s.io broadcaster that outlives its
		// managers, built, started and stopped by Run (New starts no
		// goroutine): not the manager's, which starts a second, core/v1
		// broadcaster beside it that corectl never uses.
		sink := &flushSink{EventSink: &events.EventSinkImpl{Interface: cs.EventsV1()}}
		p := &clusterParts{c: c, cfg: cfg, scheme: scheme, direct: direct, cache: newSwapReader(c.ID),
			sink: sink, events: &notingRecorder{sink: sink}}
		rec := p.events
		policies, err := egress.NewPolicyLister(dcfg)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
		}
		scanMeta, err := scanmeta.New(dcfg)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
		}
		eg := &egress.Engine{Client: direct, Cluster: c, Events: rec, Policies: policies}
		in := &ingressallow.Engine{Client: direct, Cluster: c, Events: rec}
		p.egress, p.ingress = eg, in
		// The client of the readiness checks and the discovery dials:
		// through the gateway's relay, or nil (each package's default,
		// direct).
		var entryHTTP *http.Client
		if opts.ProbeRelay != nil {
			entryHTTP = &http.Client{Transport: opts.ProbeRelay.Transport(c.ID, c.FixedEntry), Timeout: 10 * time.Second}
		}
		var probe *probesource.Discoverer
		if opts.ProbeSourceDiscovery {
			probe = &probesource.Discoverer{Client: direct, Cluster: c, HTTP: entryHTTP}
			in.Probe = probe.Sources
		}
		if err := opts.Metrics.WatchCNIGate(c.ID, c.CNIGate); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
		}
		p.cni = &cnicheck.Checker{Cluster: c, Reader: direct, Client: direct, Events: rec, Namespace: opts.LeaderElectionNamespace,
			Interval: opts.CNICheckInterval, Metrics: opts.Metrics, Log: opts.Log.WithValues("cluster", c.ID)}
		if c.CNISource == nil && (c.CNIQualificationRequired == nil || *c.CNIQualificationRequired) {
			// Static facts: the gate is evaluated but never follows the
			// cluster (issue 30 item 10). Said at start and in the
			// CNIQualification object's Watching condition.
			opts.Log.Info("warning: "+cnicheck.StaticFactsWarning, "cluster", c.ID)
		}
		if all := listCredentials(opts.Credentials); all != nil {
			id := c.ID
			p.rights = &nsrights.Checker{Cluster: c, Credentials: all, Reviewer: cs.AuthorizationV1().SelfSubjectAccessReviews(),
				Interval: opts.NamespaceRightsInterval, Log: opts.Log.WithValues("cluster", c.ID),
				Report: func(held map[[2]string]bool) { opts.Metrics.NamespaceRights(id, held) }}
		}
		h := &httpapi.ClusterHandle{Cluster: c, Reader: direct, Cache: p.cache, Egress: eg, Ingress: in,
			Logs: sandboxlogs.Kube{Pods: cs.CoreV1()}, Browser: &browser.Binder{Client: direct, Cluster: c}}
		if opts.LogSource != nil {
			h.Logs = opts.LogSource
		}
		p.handle = h
		if opts.TokenKey != nil {
			lc := &lifecycle.Orchestrator{Client: direct, Metadata: scanMeta, Cache: p.cache, Cluster: c, Egress: eg, Ingress: in, Key: *opts.TokenKey,
				Template: opts.Config.SandboxTemplate, MaxTimeout: opts.MaxTimeout, TokenGrace: opts.TokenGrace, ReadyBudget: opts.ReadyBudget, OrphanGrace: opts.OrphanGrace, Probe: probe,
				Metrics: opts.Metrics, HTTP: entryHTTP}
			if opts.Lifecycle != nil {
				opts.Lifecycle(lc)
			}
			h.Lifecycle = lc
		}
		// The cluster's manager is built by Run (runCluster), not here:
		// building one reads the cluster's API discovery, and a cluster
		// whose apiserver does not answer must not hold up corectl's
		// start, and with it every other cluster's API.
		cr := &clusterRun{id: c.ID, parts: p, unbuilt: make(chan struct{})}
		h.CacheSynced = p.cache.synced.Load
		d.clusters = append(d.clusters, cr)
		d.api.Clusters[c.ID] = h
		if c.ID == opts.Config.Templates.ClusterID {
			d.api.Templates = &template.Store{Client: direct, Namespace: opts.Config.Templates.Namespace}
		}
	}
	// A create inherits its template's network defaults from the one
	// template store, whichever cluster it lives in.
	for _, h := range d.api.Clusters {
		if h.Lifecycle != nil {
			h.Lifecycle.Templates = d.api.Templates
		}
	}
	d.buildProbes()
	l := opts.Listener
	if l == nil {
		if l, err = net.Listen("tcp", opts.Listen); err != nil {
			return nil, err
		}
	}
	if opts.ProbeListen != "" {
		pl, err := net.Listen("tcp", opts.ProbeListen)
		if err != nil {
			if opts.Listener == nil {
				l.Close() // a given listener is closed by New's deferred call
			}
			return nil, fmt.Errorf("probe listener: %w", err)
		}
		d.probe = pl
	}
	d.listener = l
	return d, nil
}

// clusterParts are what one cluster's manager is built on and what
// outlives it: the REST configuration, the uncached client, the engines,
// the CNI checker, the API's handle with its orchestrator, the Events
// recorder, and the API's view of the informer cache, which the caller of
// newManager points at each new manager's.
type clusterParts struct {
	c       *cluster.Cluster
	cfg     *rest.Config
	scheme  *runtime.Scheme
	direct  client.Client
	egress  *egress.Engine
	ingress *ingressallow.Engine
	cni     *cnicheck.Checker
	handle  *httpapi.ClusterHandle
	// events records the cluster's Events through broadcaster, which
	// sends them to its apiserver; both exist while Run runs (before and
	// after, Events are dropped).
	events      *notingRecorder
	broadcaster events.EventBroadcaster
	sink        *flushSink
	cache       *swapReader
	// rights checks corectl's write rights in the namespaces the cluster
	// serves (package nsrights); nil when the credential source cannot
	// list its credentials.
	rights *nsrights.Checker
}

// newManager builds cluster cr's controller-runtime manager (leader
// election in that cluster; informers of the managed objects) with its
// reconcilers and loops over cr's parts (the caller points the API's cache
// view at it). restart is true when it replaces a manager that stopped
// (controller-runtime then allows the controllers' names again).
func (d *Daemon) newManager(cr *clusterRun, restart bool) (manager.Manager, error) {
	opts, p, c := d.opts, cr.parts, cr.parts.c
	managed := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})
	mopts := ctrl.Options{
		Scheme:                        p.scheme,
		Logger:                        opts.Log.WithValues("cluster", c.ID),
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              LeaseName(c.ID),
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOptions(managed),
		// The uncached client's REST mapper: its discovery requests are
		// bounded by the cluster's request timeout (the manager's own
		// would use the watches' configuration, without one), and the
		// cluster's API groups are discovered once, not once per client
		// and per replaced manager.
		MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return p.direct.RESTMapper(), nil },
	}
	if restart {
		skip := true
		mopts.Controller.SkipNameValidation = &skip
	}
	renew := 10 * time.Second // controller-runtime's default
	if opts.LeaseDuration > 0 {
		mopts.LeaseDuration, mopts.RenewDeadline, mopts.RetryPeriod = &opts.LeaseDuration, &opts.RenewDeadline, &opts.RetryPeriod
		renew = opts.RenewDeadline
	}
	if opts.LeaderElection {
		// The Lease lock as controller-runtime builds it (identity, client
		// timeout), its Events recorded through the cluster's one recorder
		// (leaderEvents) rather than a broadcaster of their own. It sets
		// its user agent and client timeout on the configuration it is
		// given: a copy, as the manager's own would be.
		lock, err := leaderelection.NewResourceLock(rest.CopyConfig(p.cfg), leaderEvents{p.events}, leaderelection.Options{LeaderElection: true,
			LeaderElectionID: LeaseName(c.ID), LeaderElectionNamespace: opts.LeaderElectionNamespace, RenewDeadline: renew})
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
		}
		mopts.LeaderElectionResourceLockInterface = lock
	}
	// The leader-election identity is "<hostname>_<uuid>", unique per
	// replica (controller-runtime).
	mgr, err := ctrl.NewManager(p.cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
	}
	// The authorizer's Locate question finds a BatchSandbox by name
	// across namespaces (httpapi.IndexSandboxName).
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), batchSandboxes(), httpapi.IndexSandboxName,
		func(o client.Object) []string { return []string{o.GetName()} }); err != nil {
		return nil, fmt.Errorf("cluster %s: the sandbox name index: %w", c.ID, err)
	}
	// The list routes find a credential's sandboxes in the cache by
	// namespace and credential (sandbox.IndexCredential).
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), batchSandboxes(), sandbox.IndexCredential,
		sandbox.CredentialIndex); err != nil {
		return nil, fmt.Errorf("cluster %s: the sandbox credential index: %w", c.ID, err)
	}
	// The controllers' work queues, whose lengths end the start-up replay
	// (replayOver).
	queues := &controller.Queues{}
	if err := (&controller.IngressReconciler{Engine: p.ingress, Metrics: opts.Metrics, Reader: mgr.GetCache(), Queues: queues}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&controller.EgressRecovery{Engine: p.egress, Reader: mgr.GetClient(), Grace: opts.EgressGrace, Metrics: opts.Metrics, Queues: queues}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if c.CNISource != nil {
		if err := mgr.Add(p.cni.Observer()); err != nil {
			return nil, err
		}
	}
	if p.rights != nil {
		if err := mgr.Add(p.rights); err != nil {
			return nil, err
		}
	}
	// The leader's periodic work (the CNI gate's report, the orphan scan,
	// the Native Browser carriers' resync) and its mark run in one
	// runnable, one goroutine while idle (leaderLoops).
	rep, keeper := p.cni.Reporter(), &browser.Keeper{Binder: p.handle.Browser, Every: opts.NativeResync, Log: opts.Log.WithValues("cluster", c.ID)}
	loops := &leaderLoops{c: cr, log: opts.Log.WithValues("cluster", c.ID), loops: []periodic{
		{name: "cni-gate-report", every: rep.Every(), wake: rep.Wake(), now: true, run: rep.ReportOnce},
		{name: "native-browser-resync", every: keeper.Interval(), run: keeper.SyncOnce},
	}}
	if lc := p.handle.Lifecycle; lc != nil {
		scan := &orphanScanner{o: lc, every: opts.OrphanInterval, log: opts.Log.WithValues("cluster", c.ID),
			cluster: c.ID, metrics: opts.Metrics}
		loops.loops = append(loops.loops, periodic{name: "orphan-scan", every: scan.interval(), now: true, first: d.afterReplay(mgr, c.ID, queues), run: scan.scanOnce})
		if err := (&controller.Expiry{Orchestrator: lc, Reader: mgr.GetCache(), Log: opts.Log.WithValues("cluster", c.ID),
			Metrics: opts.Metrics, Queues: queues}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
	}
	if err := mgr.Add(loops); err != nil {
		return nil, err
	}
	return mgr, nil
}

// listCredentials returns a function listing src's credentials, or nil when
// src cannot list them (an HTTP source answers one ID at a time).
func listCredentials(src credential.Source) func() map[string]credential.Credential {
	switch s := src.(type) {
	case *credential.File:
		return s.Load
	case credential.Static:
		return func() map[string]credential.Credential { return s }
	}
	return nil
}

// Addr is the API's bound address.
func (d *Daemon) Addr() string { return d.listener.Addr().String() }

// ProbeAddr is the probe listener's bound address ("" when it is off).
func (d *Daemon) ProbeAddr() string {
	if d.probe == nil {
		return ""
	}
	return d.probe.Addr().String()
}

// Metrics returns the daemon's metrics.
func (d *Daemon) Metrics() *metrics.Metrics { return d.metrics }

// Elected returns a channel closed when this replica leads cluster id (at
// once without leader election); nil for an unknown cluster. Before Run
// has built the cluster's first manager it is a channel that is never
// closed (ask again).
func (d *Daemon) Elected(id string) <-chan struct{} {
	for _, c := range d.clusters {
		if c.id == id {
			if m := c.manager(); m != nil {
				return m.Elected()
			}
			return c.unbuilt
		}
	}
	return nil
}

// Handler returns the API handler (for tests and embedding).
func (d *Daemon) Handler() http.Handler { return d.api.Handler() }

// Run serves the API and the probes and runs every cluster's manager
// until ctx ends or the API or probe listener fails; a cluster's manager
// that stops on its own is replaced (runCluster), the other clusters
// untouched. Then it shuts down gracefully:
// /readyz fails at once, the API stops accepting connections and waits up
// to ShutdownGrace for the requests in flight (a create's readiness wait
// included) while the managers keep running, then the managers stop
// (releasing their leases) and the probe listener closes. It returns the
// first error (nil on a clean stop).
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.checkRelay(ctx); err != nil {
		_ = d.listener.Close()
		if d.probe != nil {
			_ = d.probe.Close()
		}
		return err
	}
	// Each cluster's Events broadcaster, built here, runs until Run
	// returns, after its managers (which record Events until they stop):
	// then the Events on their way (the Lease's "stopped leading") are let
	// through, within EventsFlushWait, before their context ends.
	ectx, cancelEvents := context.WithCancel(context.WithoutCancel(ctx))
	var recording []*clusterRun
	defer func() {
		var fw sync.WaitGroup
		for _, c := range recording {
			fw.Go(func() {
				if !c.parts.sink.flush(EventsFlushWait) {
					d.opts.Log.Info("Events still being written at shutdown were dropped", "cluster", c.id, "waited", EventsFlushWait.String())
				}
				c.parts.events.set(nil)
				c.parts.broadcaster.Shutdown()
			})
		}
		fw.Wait()
		cancelEvents()
	}()
	for _, c := range d.clusters {
		p := c.parts
		p.broadcaster = events.NewBroadcaster(p.sink)
		if err := p.broadcaster.StartRecordingToSinkWithContext(ectx); err != nil {
			p.broadcaster.Shutdown()
			_ = d.listener.Close()
			if d.probe != nil {
				_ = d.probe.Close()
			}
			return fmt.Errorf("cluster %s: the Events broadcaster: %w", c.id, err)
		}
		p.events.set(p.broadcaster.NewRecorder(p.scheme, "corectl"))
		recording = append(recording, c)
	}
	gc := newStartupGC()
	for _, c := range d.clusters {
		if c.parts.handle.Lifecycle != nil {
			gc.lower(c.id)
		}
	}
	d.gc.Store(gc)
	defer gc.restore()
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	// The managers outlive runCtx until the API has drained.
	mctx, cancelManagers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelManagers()
	srv := &http.Server{Handler: d.api.Handler(), ReadHeaderTimeout: 10 * time.Second}
	var probeSrv *http.Server
	var wg, probeWG sync.WaitGroup
	errc := make(chan error, len(d.clusters)+2)
	for _, c := range d.clusters {
		wg.Add(1)
		c.running.Store(true)
		go func() {
			defer wg.Done()
			defer c.running.Store(false)
			d.runCluster(mctx, c)
		}()
	}
	wg.Add(1)
	d.serving.Store(true)
	go func() {
		defer wg.Done()
		if err := srv.Serve(d.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			cancelRun()
		}
	}()
	if d.probe != nil {
		probeSrv = &http.Server{Handler: d.probeHandler, ReadHeaderTimeout: 10 * time.Second}
		probeWG.Add(1)
		go func() {
			defer probeWG.Done()
			if err := probeSrv.Serve(d.probe); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("probe listener: %w", err)
				cancelRun()
			}
		}()
	}
	<-runCtx.Done()
	d.draining.Store(true)
	sctx, scancel := context.WithTimeout(context.Background(), d.opts.ShutdownGrace)
	if err := srv.Shutdown(sctx); err != nil {
		d.opts.Log.Info("shutdown grace ran out; cutting off the API requests still in flight", "grace", d.opts.ShutdownGrace.String())
		_ = srv.Close()
	}
	scancel()
	d.serving.Store(false)
	cancelManagers()
	wg.Wait()
	if probeSrv != nil {
		_ = probeSrv.Close()
		probeWG.Wait()
	}
	close(errc)
	return <-errc
}

// Restart pauses of a cluster's manager that stopped on its own: from
// RestartBackoff doubling to MaxRestartBackoff.
const (
	RestartBackoff    = time.Second
	MaxRestartBackoff = 30 * time.Second
)

// runCluster builds cluster c's manager and runs it until ctx ends. A
// manager that cannot be built (its apiserver does not answer the API
// discovery within the cluster's request timeout) is counted
// (corectl_cluster_manager_build_failures_total) and built again after a
// pause, as a replaced one is; until a build succeeds, the last one's
// error is the cluster's /readyz reason. A manager that stops on its own (its
// leader election lost because the cluster's apiserver did not answer
// within the renew deadline, or a cache or runnable failed) concerns that
// cluster alone: it is logged and counted
// (corectl_cluster_manager_restarts_total), and a new manager for the
// same cluster is built and started after a pause (RestartBackoff
// doubling to MaxRestartBackoff, reset once a manager ran for
// MaxRestartBackoff), while every other cluster and the API go on. The
// new manager campaigns for the cluster's Lease again; its leader loops
// start only once it holds it, as at start-up. runCluster returns once
// ctx ends, even while a build waits for the apiserver.
func (d *Daemon) runCluster(ctx context.Context, c *clusterRun) {
	pause := RestartBackoff
	stopWaiting := func() {} // ends the wait for a manager's cache sync
	defer func() { stopWaiting() }()
	// use makes mgr the cluster's current manager. The first one's cache
	// is the API's view at once (its reads wait for the sync, as they
	// always did at start-up); a replacement's once synced: until then the
	// API reads the stopped manager's cache (its last state: the data
	// plane's authorizer questions still find the cluster's sandboxes).
	use := func(mgr manager.Manager, first bool) {
		c.setManager(mgr)
		if first {
			c.parts.cache.set(mgr.GetCache())
		}
		wctx, cancel := context.WithCancel(ctx)
		stopWaiting = cancel
		go func() {
			if mgr.GetCache().WaitForCacheSync(wctx) {
				c.parts.cache.set(mgr.GetCache())
				c.parts.cache.synced.Store(true)
			}
		}()
	}
	// build builds a manager, after a pause unless it is the first
	// attempt at the first manager, until one is built; false when ctx
	// ended first.
	build := func(first bool) bool {
		for attempt := 0; ; attempt++ {
			if attempt > 0 || !first {
				t := time.NewTimer(pause)
				select {
				case <-ctx.Done():
					t.Stop()
					return false
				case <-t.C:
				}
				pause = min(2*pause, MaxRestartBackoff)
			}
			// A build after the first may repeat the controllers' names.
			mgr, err := d.buildManager(ctx, c, !first || attempt > 0)
			if ctx.Err() != nil {
				return false
			}
			if err == nil {
				c.buildErr.Store(nil)
				use(mgr, first)
				return true
			}
			msg := err.Error()
			c.buildErr.Store(&msg)
			d.metrics.ClusterBuildFailure(c.id)
			d.opts.Log.Info("cluster manager could not be built; retrying, the other clusters are not affected", "cluster", c.id, "error", err.Error(), "after", pause.String())
		}
	}
	if !build(true) {
		return
	}
	for {
		started := time.Now()
		err := c.manager().Start(ctx)
		stopWaiting()
		if ctx.Err() != nil {
			if err != nil {
				d.opts.Log.Info("cluster manager stopped with an error at shutdown", "cluster", c.id, "error", err.Error())
			}
			return
		}
		if time.Since(started) >= MaxRestartBackoff {
			pause = RestartBackoff
		}
		msg := "stopped"
		if err != nil {
			msg = err.Error()
		}
		c.restarts.Add(1)
		d.metrics.ClusterRestart(c.id)
		d.opts.Log.Info("cluster manager stopped; restarting it, the other clusters are not affected", "cluster", c.id, "error", msg, "after", pause.String())
		if !build(false) {
			return
		}
	}
}

// buildManager builds cluster c's manager (newManager) and returns it, or
// ctx's error once ctx ends first: the build reads the cluster's API
// discovery (bounded by the cluster's request timeout: newManager), and
// shutdown does not wait for it.
func (d *Daemon) buildManager(ctx context.Context, c *clusterRun, restart bool) (manager.Manager, error) {
	type built struct {
		mgr manager.Manager
		err error
	}
	done := make(chan built, 1)
	go func() {
		mgr, err := d.newManager(c, restart)
		done <- built{mgr, err}
	}()
	select {
	case b := <-done:
		return b.mgr, b.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// orphanScanner is the orphan scan of a cluster's leader: run by its
// leaderLoops once at start-up, after the informers' replay (afterReplay),
// then every interval, counting each scan's outcome
// (corectl_orphan_scans_total).
type orphanScanner struct {
	o       *lifecycle.Orchestrator
	every   time.Duration
	log     logr.Logger
	cluster string
	metrics *metrics.Metrics
}

// interval is every, or 1 min when it is 0.
func (s *orphanScanner) interval() time.Duration {
	if s.every <= 0 {
		return time.Minute
	}
	return s.every
}

// scanOnce scans once, logging and counting the outcome; a scan that
// panics is counted as failed, and the panic goes on (to leaderLoops).
func (s *orphanScanner) scanOnce(ctx context.Context) {
	defer func() {
		if v := recover(); v != nil {
			s.metrics.OrphanScan(s.cluster, metrics.ScanFailed)
			panic(v)
		}
	}()
	rep, err := s.o.Scan(ctx)
	switch {
	case err != nil:
		s.log.Info("orphan scan failed", "error", err.Error())
	case len(rep.Deleted)+len(rep.Failed)+len(rep.Kept) > 0:
		s.log.Info("orphan scan", "deleted", rep.Deleted, "failed", rep.Failed, "kept", rep.Kept)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopped by the shutdown, not a failure.
	case err != nil:
		s.metrics.OrphanScan(s.cluster, metrics.ScanFailed)
	case len(rep.Failed) > 0:
		s.metrics.OrphanScan(s.cluster, metrics.ScanIncomplete)
	default:
		s.metrics.OrphanScan(s.cluster, metrics.ScanOK)
	}
}

// afterReplay is the wait of cluster id's first orphan scan on mgr, whose
// controllers' work queues are queues (replayOver), with GOGC lowered
// while it lasts (startupGC).
func (d *Daemon) afterReplay(mgr manager.Manager, id string, queues *controller.Queues) func(ctx context.Context) bool {
	wait := replayOver(mgr, queues)
	return func(ctx context.Context) bool {
		g := d.gc.Load()
		if g != nil {
			// This replica just became the leader: its controllers'
			// informers and start-up requests replay now.
			g.lower(id)
		}
		ok := wait(ctx)
		if g != nil {
			g.replayed(id)
		}
		return ok
	}
}

// checkRelay compares the gateway's probe relay's clusters with this
// configuration (Options.ProbeRelay): the same fixed entry for every
// cluster, and the gateway's Host the cluster's ingress.host. The error
// names every mismatch (entryprobe.ErrMismatch) or says the relay did not
// answer within ProbeRelayWait.
func (d *Daemon) checkRelay(ctx context.Context) error {
	if d.opts.ProbeRelay == nil {
		return nil
	}
	want := make([]entryprobe.Cluster, 0, len(d.opts.Config.Clusters))
	for _, c := range d.opts.Config.Clusters {
		want = append(want, entryprobe.Cluster{ID: c.ID, FixedEntry: c.FixedEntry, Host: c.Ingress.Host})
	}
	wait := d.opts.ProbeRelayWait
	if wait <= 0 {
		wait = 2 * time.Minute
	}
	if err := d.opts.ProbeRelay.WaitCheck(ctx, want, wait); err != nil {
		return fmt.Errorf("the gateway's probe relay: %w", err)
	}
	return nil
}
