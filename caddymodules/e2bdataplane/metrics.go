package e2bdataplane

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/drain"
)

// metrics are the data plane's Prometheus collectors, registered in Caddy's
// metrics registry (served by Caddy's metrics handler / admin /metrics):
//
//	sandgate_dataplane_requests_total{operation, outcome}            counter
//	sandgate_dataplane_request_duration_seconds{operation, outcome}  histogram
//	sandgate_dataplane_streams_in_flight{kind}                       gauge
//
// operation is one of the six operations or "unsupported"; outcome is "ok"
// or the stable error code (TOKEN_INVALID, SANDBOX_NOT_FOUND, …); kind is
// "command" (Process/Start and Connect streams) or "transfer" (/files
// uploads and downloads), the requests a shutdown drains (package drain).
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	streams  *prometheus.GaugeVec
}

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
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{collectors.requests, collectors.duration, collectors.streams} {
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
}

// inFlight moves the in-flight gauge of kind by delta (drain.New's
// observer).
func (m *metrics) inFlight(kind drain.Kind, delta int) {
	m.streams.WithLabelValues(string(kind)).Add(float64(delta))
}
