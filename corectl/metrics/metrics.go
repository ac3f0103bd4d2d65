// Package metrics holds corectl's Prometheus collectors and the registry
// they live in. One Metrics serves one corectl process (package daemon
// builds it, or takes the caller's); other corectl packages register their
// own collectors on Metrics.Registerer.
//
// Served at GET /metrics on corectl's probe listener, together with
// controller-runtime's registry (controller_runtime_reconcile_total,
// workqueue_*, rest_client_*, leader_election_master_status, and the Go
// and process collectors):
//
//	corectl_http_requests_total{route, code}                       counter
//	corectl_http_request_duration_seconds{route}                   histogram
//	corectl_authorize_duration_seconds                             histogram (AuthorizeBuckets)
//	corectl_reconcile_total{cluster, controller, outcome}          counter
//	corectl_lifecycle_steps_total{cluster, operation, step, outcome}      counter
//	corectl_lifecycle_step_duration_seconds{cluster, operation, step}     histogram
//	corectl_cni_gate_open{cluster}                                 gauge, 1 or 0
//	corectl_cni_checks_total{cluster, outcome}                     counter (ok, unreadable)
//	corectl_orphan_scans_total{cluster, outcome}                   counter (ok, incomplete, failed)
//	corectl_cluster_manager_restarts_total{cluster}                counter
//	corectl_cluster_manager_build_failures_total{cluster}          counter
//	corectl_api_refusals_total{reason}                             counter (Refusal* reasons)
//	corectl_api_key_file_stale_seconds                             gauge
//	corectl_api_key_file_entries                                   gauge
//	corectl_api_key_file_last_load_timestamp_seconds               gauge
//	sandgate_build_info{program="corectl", version, …}             gauge, 1 (package internal/buildinfo)
//
// corectl_authorize_duration_seconds is the gateway authorizer's own
// handling time per question (GET /internal/v1/authorize): from its
// handler's start to its answer written to the connection's buffer, so
// without the HTTP server's reading and parsing of the request and its
// flush of the answer. Its buckets are dense below a millisecond, where
// the answer from the cache lies; a not_ready answer's read from the
// apiserver falls in the upper ones.
//
// A refusal is an API request turned away before its route's work began
// because of who asked (the reason is one of the Refusal* constants).
// The key file gauges exist when the API keys come from a watched file:
// stale_seconds is how long its reloads have been failing (missing,
// unreadable or invalid; the last good version is served meanwhile), 0
// when the last reload succeeded; an alert such as
// corectl_api_key_file_stale_seconds > 60 tells the operator a key change
// is not in force.
//
// route is the API route's method and pattern ("PUT /sandboxes/{sandboxID}/network"),
// or "unmatched"; code the HTTP status. outcome of a reconcile is the
// engine's outcome (Verified, LKGRestored, …) or "error" for a cycle that
// returned an error (retried with backoff); outcome of a lifecycle step is
// "ok" or "failed". operation is "create", "compensate" or "delete".
// A cluster's manager restart is a manager that stopped on its own and
// was replaced; a build failure is an attempt to build a cluster's manager
// (at start or for a replacement) that failed, mostly because the
// cluster's apiserver did not answer the API discovery within the
// cluster's request timeout; each failed attempt is counted, and it is
// tried again after the restart pause.
// outcome of an orphan scan (run by the cluster's leader) is "ok",
// "incomplete" (some leftovers could not be deleted; the next scan retries
// them) or "failed" (the scan stopped with an error).
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sandgate/sandgate/internal/buildinfo"
	"github.com/sandgate/sandgate/internal/filewatch"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Operations of the lifecycle step metrics.
const (
	OperationCreate     = "create"
	OperationCompensate = "compensate"
	OperationDelete     = "delete"
)

// Outcomes of a lifecycle step.
const (
	StepOK     = "ok"
	StepFailed = "failed"
)

// Outcomes of an orphan scan.
const (
	ScanOK         = "ok"
	ScanIncomplete = "incomplete"
	ScanFailed     = "failed"
)

// OutcomeError is the reconcile outcome of a cycle that returned an error.
const OutcomeError = "error"

// RouteUnmatched is the route label of a request no route matched.
const RouteUnmatched = "unmatched"

// Metrics is corectl's collectors in their own registry. Its methods are
// safe for concurrent use; a nil *Metrics records nothing.
type Metrics struct {
	// Registry holds corectl's collectors; register more on it (it is a
	// prometheus.Registerer). Collectors with the same name and labels are
	// refused by it as by any registry.
	Registry *prometheus.Registry

	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	authorize      prometheus.Histogram
	reconciles     *prometheus.CounterVec
	steps          *prometheus.CounterVec
	stepDuration   *prometheus.HistogramVec
	cniChecks      *prometheus.CounterVec
	orphanScans    *prometheus.CounterVec
	restarts       *prometheus.CounterVec
	buildFailures  *prometheus.CounterVec
	refusals       *prometheus.CounterVec
	createRefusals *prometheus.CounterVec
	nsRights       *prometheus.GaugeVec
}

// Reasons of corectl_api_refusals_total.
const (
	// RefusalMissingKey: no X-API-Key.
	RefusalMissingKey = "missing_key"
	// RefusalUnknownKey: a key the key file does not hold (never held, or
	// removed or changed since).
	RefusalUnknownKey = "unknown_key"
	// RefusalNoCredential: a key without a resource credential on a route
	// that needs one.
	RefusalNoCredential = "no_credential"
	// RefusalUnknownCredential: the key's credential is not in the
	// credential source.
	RefusalUnknownCredential = "unknown_credential"
	// RefusalCredentialDisabled: the key's credential is disabled.
	RefusalCredentialDisabled = "credential_disabled"
	// RefusalCredentialUnavailable: the credential source cannot answer.
	RefusalCredentialUnavailable = "credential_unavailable"
	// RefusalHintMismatch: a cluster or namespace hint differs from the
	// credential's.
	RefusalHintMismatch = "hint_mismatch"
	// RefusalClusterUnknown: the credential's cluster is not configured.
	RefusalClusterUnknown = "cluster_unknown"
	// RefusalNotOwner: the sandbox exists but the caller does not see it
	// (answered as a missing sandbox).
	RefusalNotOwner = "not_owner"
	// RefusalOwnerUnchecked: the sandbox's owner could not be read, or the
	// cluster has no reader to read it with (fail closed).
	RefusalOwnerUnchecked = "owner_unchecked"
	// RefusalNotTemplateAdmin: a template-default change by a key that is
	// not a template administrator.
	RefusalNotTemplateAdmin = "not_template_admin"
	// RefusalShareSpent: the credential's share of its cluster's apiserver
	// requests is spent, or it has its calls in progress (package
	// fairshare; 429 rate_limited).
	RefusalShareSpent = "share_spent"
	// RefusalLogReadsBusy: a sandbox log read past the log reads in
	// progress allowed to the credential or to corectl (429 rate_limited).
	RefusalLogReadsBusy = "log_reads_busy"
)

// New returns Metrics with every collector above registered in a new
// registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "corectl", Subsystem: "http", Name: "requests_total",
			Help: "corectl API requests by route (method and pattern) and HTTP status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "corectl", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time to answer a corectl API request, in seconds, by route.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"route"}),
		authorize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "corectl", Name: "authorize_duration_seconds",
			Help:    "The gateway authorizer's own handling time per question (GET /internal/v1/authorize: the handler's start to its answer written), in seconds.",
			Buckets: AuthorizeBuckets,
		}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "corectl", Name: "reconcile_total",
			Help: "Reconcile cycles by cluster, controller and outcome (the engine's outcome, or error when retried).",
		}, []string{"cluster", "controller", "outcome"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "corectl", Subsystem: "lifecycle", Name: "steps_total",
			Help: "Create, compensation and delete steps by cluster, operation, step and outcome (ok or failed).",
		}, []string{"cluster", "operation", "step", "outcome"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "corectl", Subsystem: "lifecycle", Name: "step_duration_seconds",
			Help:    "Duration of create, compensation and delete steps, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"cluster", "operation", "step"}),
		cniChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "corectl", Subsystem: "cni", Name: "checks_total",
			Help: "Readings of a cluster's CNI facts from the cluster (cniSource) by outcome (ok or unreadable).",
		}, []string{"cluster", "outcome"}),
		orphanScans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "corectl", Subsystem: "orphan", Name: "scans_total",
			Help: "Orphan scans by cluster and outcome (ok, incomplete: some deletions failed and are retried, failed: the scan stopped with an error).",
		}, []string{"cluster", "outcome"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "corectl", Subsystem: "cluster", Name: "manager_restarts_total",
			Help: "Managers of a cluster that stopped on their own (leader election lost: the cluster's apiserver did not answer within the renew deadline) and were replaced, by cluster.",
		}, []string{"cluster"}),
		buildFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "corectl", Subsystem: "cluster", Name: "manager_build_failures_total",
			Help: "Attempts to build a cluster's manager (at start or to replace a stopped one) that failed, by cluster; each is tried again after the restart pause. The usual cause: the cluster's apiserver did not answer the API discovery within the cluster's request timeout.",
		}, []string{"cluster"}),
		createRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "corectl", Subsystem: "create", Name: "refusals_total",
			Help: "Creates refused before anything is written, by reason: a credential limit (concurrent_sandboxes, creates_per_minute, max_timeout) or unsupported_field (a NewSandbox field sandgate cannot honour).",
		}, []string{"reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "corectl", Subsystem: "api", Name: "refusals_total",
			Help: "API requests refused because of who asked, by reason (missing_key, unknown_key, not_owner, ...).",
		}, []string{"reason"}),
		nsRights: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "corectl", Subsystem: "namespace", Name: "rights_missing",
			Help: "1 when corectl may not write in a namespace the cluster serves (no RoleBinding to the ClusterRole role there: run corectl rbac), 0 when it may; one series per ingress and project namespace of the cluster's credentials (package nsrights).",
		}, []string{"cluster", "namespace", "role"}),
	}
	m.Registry.MustRegister(m.requests, m.duration, m.authorize, m.reconciles, m.steps, m.stepDuration, m.cniChecks, m.orphanScans, m.restarts, m.buildFailures, m.createRefusals, m.refusals, m.nsRights,
		buildinfo.Collector("corectl"))
	return m
}

// Registerer returns the registry as a prometheus.Registerer (nil for a
// nil *Metrics).
func (m *Metrics) Registerer() prometheus.Registerer {
	if m == nil {
		return nil
	}
	return m.Registry
}

// Handler serves the Prometheus text (or protobuf) exposition of
// corectl's registry together with controller-runtime's.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(prometheus.Gatherers{ctrlmetrics.Registry, m.Registry},
		promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Instrument wraps h to count and time its requests under route: after
// h returns, corectl_http_requests_total{route, code} is counted (code is
// the status h wrote, 200 when it wrote none) and the time since the
// request reached the wrapper observed in
// corectl_http_request_duration_seconds{route}, the series promhttp's
// InstrumentHandlerCounter and InstrumentHandlerDuration give, without
// their allocations per request (a label map and a response writer
// each): the gateway's authorizer asks thousands of times a second. h
// gets a ResponseWriter that records the status; it offers the
// original's other interfaces (http.Flusher, …) only through Unwrap
// (http.ResponseController), and is reused once h has returned, so h
// must not keep it.
func (m *Metrics) Instrument(route string, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	byCode := &routeCounter{vec: m.requests.MustCurryWith(prometheus.Labels{"route": route}), codes: map[int]prometheus.Counter{}}
	observer := m.duration.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := statusWriters.Get().(*statusWriter)
		sw.ResponseWriter, sw.status = w, 0
		h.ServeHTTP(sw, r)
		status := sw.status
		*sw = statusWriter{}
		statusWriters.Put(sw)
		byCode.of(status).Inc()
		observer.Observe(time.Since(start).Seconds())
	})
}

// statusWriter is the ResponseWriter Instrument hands its handler: it
// records the first status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

// WriteHeader records code (the first time) and writes it.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records 200 when no status was written, then writes b.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the original ResponseWriter (for
// http.ResponseController).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// routeCounter is one route's corectl_http_requests_total by status code,
// each code's counter looked up in the vector once.
type routeCounter struct {
	vec   *prometheus.CounterVec
	mu    sync.RWMutex
	codes map[int]prometheus.Counter
}

// of returns the counter of status code (0, nothing written, counts as
// 200, as promhttp counts it).
func (c *routeCounter) of(code int) prometheus.Counter {
	if code == 0 {
		code = http.StatusOK
	}
	c.mu.RLock()
	ctr, ok := c.codes[code]
	c.mu.RUnlock()
	if ok {
		return ctr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctr, ok = c.codes[code]; !ok {
		ctr = c.vec.WithLabelValues(strconv.Itoa(code))
		c.codes[code] = ctr
	}
	return ctr
}

// AuthorizeBuckets are the upper bounds, in seconds, of
// corectl_authorize_duration_seconds: 10 µs to 1 s, dense below a
// millisecond (the goal of issue 33 is a p99 of at most 1 ms from the
// gateway's send, at 2,000 questions/s).
var AuthorizeBuckets = []float64{
	0.00001, 0.000025, 0.00005, 0.0001, 0.00015, 0.0002, 0.0003, 0.0005,
	0.00075, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1,
}

// Authorized records one authorizer question's handling time d.
func (m *Metrics) Authorized(d time.Duration) {
	if m == nil {
		return
	}
	m.authorize.Observe(d.Seconds())
}

// Reconciled counts one reconcile cycle of controller in cluster.
func (m *Metrics) Reconciled(cluster, controller, outcome string) {
	if m == nil {
		return
	}
	m.reconciles.WithLabelValues(cluster, controller, outcome).Inc()
}

// Step records one lifecycle step: its outcome (ok when err is nil) and
// duration.
func (m *Metrics) Step(cluster, operation, step string, d time.Duration, err error) {
	if m == nil {
		return
	}
	outcome := StepOK
	if err != nil {
		outcome = StepFailed
	}
	m.steps.WithLabelValues(cluster, operation, step, outcome).Inc()
	m.stepDuration.WithLabelValues(cluster, operation, step).Observe(d.Seconds())
}

// CNICheck counts one reading of cluster's CNI facts (package cnicheck)
// with outcome "ok" or "unreadable".
func (m *Metrics) CNICheck(cluster, outcome string) {
	if m == nil {
		return
	}
	m.cniChecks.WithLabelValues(cluster, outcome).Inc()
}

// OrphanScan counts one orphan scan of cluster with outcome ScanOK,
// ScanIncomplete or ScanFailed.
func (m *Metrics) OrphanScan(cluster, outcome string) {
	if m == nil {
		return
	}
	m.orphanScans.WithLabelValues(cluster, outcome).Inc()
}

// ClusterRestart counts one replaced manager of cluster
// (corectl_cluster_manager_restarts_total).
func (m *Metrics) ClusterRestart(cluster string) {
	if m == nil {
		return
	}
	m.restarts.WithLabelValues(cluster).Inc()
}

// ClusterBuildFailure counts one failed attempt to build cluster's
// manager (corectl_cluster_manager_build_failures_total).
func (m *Metrics) ClusterBuildFailure(cluster string) {
	if m == nil {
		return
	}
	m.buildFailures.WithLabelValues(cluster).Inc()
}

// Refusal reasons of CreateRefused besides package quota's.
const (
	// RefusalUnsupportedField: the create names a field sandgate cannot
	// honour (wire.UnsupportedError).
	RefusalUnsupportedField = "unsupported_field"
)

// CreateRefused counts one create refused before anything was written,
// with reason (package quota's Reason* or RefusalUnsupportedField).
func (m *Metrics) CreateRefused(reason string) {
	if m == nil {
		return
	}
	m.createRefusals.WithLabelValues(reason).Inc()
}

// WatchCNIGate registers corectl_cni_gate_open{cluster}: 1 while gate
// returns nil, 0 otherwise, evaluated at every scrape. Registering the
// same cluster twice is an error (prometheus.AlreadyRegisteredError).
func (m *Metrics) WatchCNIGate(cluster string, gate func() error) error {
	if m == nil {
		return nil
	}
	return m.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "corectl", Name: "cni_gate_open",
		Help:        "1 when the cluster's CNI qualification gate passes (enforced writes allowed), 0 when it refuses them.",
		ConstLabels: prometheus.Labels{"cluster": cluster},
	}, func() float64 {
		if gate() == nil {
			return 1
		}
		return 0
	}))
}

// NamespaceRights replaces cluster's corectl_namespace_rights_missing
// series: one per entry of held (keyed by namespace and ClusterRole), 0 when
// held, 1 when missing. Series of namespaces no longer served are removed.
func (m *Metrics) NamespaceRights(cluster string, held map[[2]string]bool) {
	if m == nil {
		return
	}
	m.nsRights.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	for k, ok := range held {
		v := 1.0
		if ok {
			v = 0
		}
		m.nsRights.WithLabelValues(cluster, k[0], k[1]).Set(v)
	}
}

// Refused counts one API request refused for reason (a Refusal* constant).
func (m *Metrics) Refused(reason string) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(reason).Inc()
}

// WatchKeyFile registers the corectl_api_key_file_* gauges, read from
// stats at every scrape (the key file's filewatch state). Registering
// twice is an error (prometheus.AlreadyRegisteredError).
func (m *Metrics) WatchKeyFile(stats func() filewatch.Stats) error {
	if m == nil {
		return nil
	}
	gauge := func(name, help string, f func(filewatch.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "corectl", Subsystem: "api_key_file", Name: name, Help: help},
			func() float64 { return f(stats()) })
	}
	for _, c := range []prometheus.Collector{
		gauge("stale_seconds", "Seconds the API key file's reloads have been failing (missing, unreadable or invalid; the last good version is served meanwhile); 0 when the last reload succeeded.",
			func(st filewatch.Stats) float64 {
				if st.FailingSince.IsZero() {
					return 0
				}
				return time.Since(st.FailingSince).Seconds()
			}),
		gauge("entries", "API keys in the version of the key file being served.", func(st filewatch.Stats) float64 { return float64(st.Entries) }),
		gauge("last_load_timestamp_seconds", "Unix time the served version of the API key file was loaded.",
			func(st filewatch.Stats) float64 { return float64(st.LastLoad.UnixNano()) / 1e9 }),
	} {
		if err := m.Registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}
