package authorizer

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the HTTP authorizer's Prometheus collectors, registered in
// Caddy's metrics registry (served with the gateway's other metrics):
//
//	sandgate_authorizer_requests_total{outcome}            counter
//	sandgate_authorizer_request_duration_seconds{outcome}  histogram
//
// One observation per request sent to corectl (a cached answer sends
// none); outcome is "allowed", the refusal reason (not_found, deleting,
// expired, not_ready) or "unavailable" (the data plane then answers
// AUTHORIZER_UNAVAILABLE).
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

var (
	metricsOnce sync.Once
	collectors  metrics
)

// registerMetrics creates the collectors once per process and registers
// them in reg (nil: nowhere); registering again (a reload) is not an
// error.
func registerMetrics(reg *prometheus.Registry) *metrics {
	metricsOnce.Do(func() {
		collectors.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandgate", Subsystem: "authorizer", Name: "requests_total",
			Help: "Requests the gateway sent to the sandbox authorizer (corectl), by outcome (allowed, a refusal reason, or unavailable).",
		}, []string{"outcome"})
		collectors.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sandgate", Subsystem: "authorizer", Name: "request_duration_seconds",
			Help:    "Time for the sandbox authorizer (corectl) to answer the gateway, in seconds, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, []string{"outcome"})
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{collectors.requests, collectors.duration} {
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

func (m *metrics) observe(outcome string, d time.Duration) {
	m.requests.WithLabelValues(outcome).Inc()
	m.duration.WithLabelValues(outcome).Observe(d.Seconds())
}
