package e2bdataplane

import (
	"errors"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/drain"
)

// metrics are the data plane's Prometheus collectors, registered in Caddy's
// metrics registry (served by Caddy's metrics handler / admin /metrics):
//
//	sandgate_dataplane_requests_total{operation, outcome}            counter
//	sandgate_dataplane_request_duration_seconds{operation, outcome}  histogram
//	sandgate_dataplane_streams_in_flight{kind}                       gauge
//	sandgate_dataplane_busy_total{bound}                             counter
//	sandgate_dataplane_port_requests_total{outcome}                  counter
//	sandgate_dataplane_port_requests_in_progress                     gauge
//
// operation is one of the six operations or "unsupported"; outcome is "ok"
// or the stable error code (TOKEN_INVALID, SANDBOX_NOT_FOUND, …); kind is
// "command" (Process/Start and Connect streams) or "transfer" (/files
// uploads and downloads), the requests a shutdown drains (package drain).
// busy_total counts the GATEWAY_BUSY outcomes of requests_total again by
// the bound each met (dataplane.Bound: max_requests_per_credential,
// max_requests, max_upstream_calls_per_sandbox, max_upstream_calls,
// max_process_calls_per_credential, large_lines_per_sandbox,
// large_lines), every one present from the start at 0: a tenant at its own
// share told from the gateway at its capacity.
//
// The port_requests series count host routing's requests to a port other
// than envd's (and Hosts it does not serve): outcome is relayed,
// upstream_error, upstream_timeout, client_closed (the port* constants)
// or package portroute's refusal code (TOO_MANY_PORT_REQUESTS,
// GATEWAY_BUSY, TRAFFIC_TOKEN_INVALID, …), so the gateway's own 429 and
// 503 are told from a sandbox server's; the in-progress gauge counts the
// requests an Admission holds a place for. Neither has the sandbox or the
// port as a label: both are unbounded. requests_in_progress counts the
// data plane's requests admitted by max_requests_per_credential and
// max_requests (the process's, every configuration's), without the
// credential as a label.
type metrics struct {
	requests    *prometheus.CounterVec
	busy        *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	streams     *prometheus.GaugeVec
	ports       *prometheus.CounterVec
	portsNow    prometheus.GaugeFunc
	requestsNow prometheus.GaugeFunc
}

// The outcomes of a port request that was admitted and handed to
// reverse_proxy, from the error it returns.
const (
	// portRelayed: the fixed entry answered and its answer was passed on
	// (whatever its status: a sandbox server's own 429 is relayed).
	portRelayed = "relayed"
	// portUpstreamError: the fixed entry could not be reached or broke
	// off (reverse_proxy's 502).
	portUpstreamError = "upstream_error"
	// portUpstreamTimeout: the fixed entry did not answer in time
	// (reverse_proxy's 504).
	portUpstreamTimeout = "upstream_timeout"
	// portClientClosed: the client went away before the answer
	// (reverse_proxy's 499).
	portClientClosed = "client_closed"
)

var (
	metricsOnce sync.Once
	collectors  metrics
)

// registerMetrics creates the collectors once per process and registers
// them in reg; registering again (a config reload) is not an error, as in
// Caddy's reverse_proxy metrics.
func registerMetrics(reg *prometheus.Registry) *metrics {
	metricsOnce.Do(func() {
		labels := []string{"operation", "outcome"}
		collectors.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandgate", Subsystem: "dataplane", Name: "requests_total",
			Help: "E2B data-plane requests by operation and outcome (ok or the stable error code).",
		}, labels)
		collectors.busy = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandgate", Subsystem: "dataplane", Name: "busy_total",
			Help: "E2B data-plane requests refused with GATEWAY_BUSY, by the bound they met (the directive that sets it).",
		}, []string{"bound"})
		for _, b := range dataplane.Bounds {
			collectors.busy.WithLabelValues(string(b))
		}
		collectors.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sandgate", Subsystem: "dataplane", Name: "request_duration_seconds",
			Help:    "Time to serve an E2B data-plane request, in seconds (streams: until the stream ends).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, labels)
		collectors.streams = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sandgate", Subsystem: "dataplane", Name: "streams_in_flight",
			Help: "E2B data-plane command streams and file transfers in progress, by kind (command, transfer).",
		}, []string{"kind"})
		for _, k := range drain.Kinds {
			collectors.streams.WithLabelValues(string(k))
		}
		collectors.ports = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandgate", Subsystem: "dataplane", Name: "port_requests_total",
			Help: "Sandbox port requests of host routing by outcome (relayed, upstream_error, upstream_timeout, client_closed or the gateway's refusal code).",
		}, []string{"outcome"})
		collectors.portsNow = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sandgate", Subsystem: "dataplane", Name: "port_requests_in_progress",
			Help: "Sandbox port requests of host routing in progress (admitted, not yet ended).",
		}, func() float64 { return float64(processPortCounts.InProgress()) })
		collectors.requestsNow = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sandgate", Subsystem: "dataplane", Name: "requests_in_progress",
			Help: "E2B data-plane requests in progress (admitted by max_requests_per_credential and max_requests, not yet ended).",
		}, func() float64 { all, _ := processRequests.Held(""); return float64(all) })
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{collectors.requests, collectors.busy, collectors.duration, collectors.streams, collectors.ports, collectors.portsNow, collectors.requestsNow} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					panic(err)
				}
			}
		}
	}
	return &collectors
}

func (m *metrics) observe(o dataplane.Outcome) {
	outcome := "ok"
	if o.Code != "" {
		outcome = string(o.Code)
	}
	m.requests.WithLabelValues(o.Operation, outcome).Inc()
	m.duration.WithLabelValues(o.Operation, outcome).Observe(o.Duration.Seconds())
	if o.Bound != "" {
		m.busy.WithLabelValues(string(o.Bound)).Inc()
	}
}

// inFlight moves the in-flight gauge of kind by delta (drain.New's
// observer).
func (m *metrics) inFlight(kind drain.Kind, delta int) {
	m.streams.WithLabelValues(string(kind)).Add(float64(delta))
}

// portRefused counts a port request the gateway refused with code.
func (m *metrics) portRefused(code string) { m.ports.WithLabelValues(code).Inc() }

// portServed counts a port request reverse_proxy served, by the error it
// returned: nil is relayed, else its status (caddyhttp.HandlerError) says
// which failure it was.
func (m *metrics) portServed(err error) {
	outcome := portRelayed
	if err != nil {
		outcome = portUpstreamError
		var he caddyhttp.HandlerError
		if errors.As(err, &he) {
			switch he.StatusCode {
			case http.StatusGatewayTimeout:
				outcome = portUpstreamTimeout
			case 499:
				outcome = portClientClosed
			}
		}
	}
	m.ports.WithLabelValues(outcome).Inc()
}
