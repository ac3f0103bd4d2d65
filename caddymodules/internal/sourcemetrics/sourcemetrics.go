// Package sourcemetrics exports the state of sandgate's file credential
// sources (the resource credential file, the node credential file) as
// Prometheus metrics in Caddy's metrics registry (admin endpoint
// /metrics), so that an alert can fire when what the gateway serves is
// not what the file on disk says:
//
//	sandgate_credential_source_stale_seconds{kind, path}                gauge
//	sandgate_credential_source_last_load_timestamp_seconds{kind, path}  gauge
//	sandgate_credential_source_entries{kind, path}                      gauge
//	sandgate_credential_source_missing{kind, path}                      gauge
//
// kind is "resource" or "node"; path is the watched file. stale_seconds is
// 0 while the last reload succeeded, else how long reloads have been
// failing (the file missing, unreadable or invalid; the last good version
// is served meanwhile). last_load_timestamp_seconds is when the served
// version was loaded (Unix time). entries is how many credentials the
// served version holds. missing is 1 while the file does not exist; after
// filewatch.DefaultMissingGrace the served version is the empty one
// (entries 0). Example alert: sandgate_credential_source_stale_seconds > 60.
package sourcemetrics

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/internal/filewatch"
)

// Source is a watched file whose state is exported.
type Source interface {
	// Stats returns the file's current state: the served version, its
	// entries and load time, whether reloads are failing or the file is
	// missing.
	Stats() filewatch.Stats
}

var (
	labels   = []string{"kind", "path"}
	staleD   = prometheus.NewDesc("sandgate_credential_source_stale_seconds", "Seconds the credential file's reloads have been failing (missing, unreadable or invalid; the last good version is served meanwhile); 0 when the last reload succeeded.", labels, nil)
	loadD    = prometheus.NewDesc("sandgate_credential_source_last_load_timestamp_seconds", "Unix time the served version of the credential file was loaded.", labels, nil)
	entriesD = prometheus.NewDesc("sandgate_credential_source_entries", "Credentials in the served version of the credential file.", labels, nil)
	missingD = prometheus.NewDesc("sandgate_credential_source_missing", "1 while the credential file does not exist (after the grace the empty version is served), else 0.", labels, nil)
)

// collector reads the registered sources at each scrape.
type collector struct {
	mu      sync.Mutex
	sources map[*entry]struct{}
}

type entry struct {
	kind string
	src  Source
}

var sources = &collector{sources: map[*entry]struct{}{}}

// Add exports src under kind ("resource", "node") until remove is called.
func Add(kind string, src Source) (remove func()) {
	e := &entry{kind: kind, src: src}
	sources.mu.Lock()
	sources.sources[e] = struct{}{}
	sources.mu.Unlock()
	return func() {
		sources.mu.Lock()
		delete(sources.sources, e)
		sources.mu.Unlock()
	}
}

// Register registers the metrics in reg (a config's registry); registering
// in a registry that has them already is not an error.
func Register(reg *prometheus.Registry) {
	if reg == nil {
		return
	}
	if err := reg.Register(sources); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{staleD, loadD, entriesD, missingD} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	list := make([]*entry, 0, len(c.sources))
	for e := range c.sources {
		list = append(list, e)
	}
	c.mu.Unlock()
	now := time.Now()
	for _, e := range list {
		st := e.src.Stats()
		stale := 0.0
		if !st.FailingSince.IsZero() {
			stale = now.Sub(st.FailingSince).Seconds()
		}
		missing := 0.0
		if st.Missing {
			missing = 1
		}
		ch <- prometheus.MustNewConstMetric(staleD, prometheus.GaugeValue, stale, e.kind, st.Path)
		ch <- prometheus.MustNewConstMetric(loadD, prometheus.GaugeValue, float64(st.LastLoad.UnixNano())/1e9, e.kind, st.Path)
		ch <- prometheus.MustNewConstMetric(entriesD, prometheus.GaugeValue, float64(st.Entries), e.kind, st.Path)
		ch <- prometheus.MustNewConstMetric(missingD, prometheus.GaugeValue, missing, e.kind, st.Path)
	}
}
