package keypair

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/gateway/keypair"
)

// The pairs' metrics, in Caddy's metrics registry (served with the
// gateway's other metrics on the admin endpoint's /metrics):
//
//	sandgate_tls_certificate_not_after_timestamp_seconds{cert_file}  gauge
//	sandgate_tls_certificate_stale_seconds{cert_file}                gauge
//
// not_after is the served certificate's expiry (Unix time); stale_seconds
// is 0 while the files on disk are the served pair, else how long they
// have been failing to load (the previous pair is served meanwhile). The
// alerts SandgateTLSCertificateStale and SandgateTLSCertificateExpiring of
// deploy/monitoring/rules.yaml fire on them.
var (
	labels    = []string{"cert_file"}
	notAfterD = prometheus.NewDesc("sandgate_tls_certificate_not_after_timestamp_seconds",
		"Unix time the TLS certificate the gateway serves from files (key_pair_files) expires.", labels, nil)
	staleD = prometheus.NewDesc("sandgate_tls_certificate_stale_seconds",
		"Seconds the TLS certificate files have been failing to load (the previous certificate is served meanwhile); 0 when the served certificate is the files'.", labels, nil)
)

// collector reads the running pairs at each scrape.
type collector struct {
	mu    sync.Mutex
	pairs map[*keypair.Pair]struct{}
}

var pairs = &collector{pairs: map[*keypair.Pair]struct{}{}}

func track(p *keypair.Pair) {
	pairs.mu.Lock()
	pairs.pairs[p] = struct{}{}
	pairs.mu.Unlock()
}

func untrack(p *keypair.Pair) {
	pairs.mu.Lock()
	delete(pairs.pairs, p)
	pairs.mu.Unlock()
}

// registerMetrics registers the collector in reg (a configuration's
// registry; nil: nowhere); registering again (a reload) is not an error.
func registerMetrics(reg *prometheus.Registry) {
	if reg == nil {
		return
	}
	if err := reg.Register(pairs); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- notAfterD
	ch <- staleD
}

// Collect implements prometheus.Collector. Two pairs of one certificate
// file (with different key files or intervals) export one of them only: a series
// is one file.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	list := make([]*keypair.Pair, 0, len(c.pairs))
	for p := range c.pairs {
		list = append(list, p)
	}
	c.mu.Unlock()
	now := time.Now()
	done := map[string]bool{}
	for _, p := range list {
		st := p.Stats()
		if done[st.CertFile] {
			continue
		}
		done[st.CertFile] = true
		stale := 0.0
		if !st.FailingSince.IsZero() {
			stale = now.Sub(st.FailingSince).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(notAfterD, prometheus.GaugeValue, float64(st.NotAfter.Unix()), st.CertFile)
		ch <- prometheus.MustNewConstMetric(staleD, prometheus.GaugeValue, stale, st.CertFile)
	}
}
