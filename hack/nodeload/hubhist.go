package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// hubMetric is the gateway's histogram of the hub's own time per answered
// operation (nodecore/core).
const hubMetric = "sandgate_node_hub_duration_seconds"

// maxMetricsAnswer bounds how much of /metrics scrapeHub reads, in bytes.
const maxMetricsAnswer = 16 << 20

// hubHistogram is the cumulative buckets of hubMetric at one scrape, or
// the difference of two scrapes.
type hubHistogram struct {
	upper []float64 // bucket upper bounds in seconds, ascending, +Inf last
	cum   []float64 // cumulative counts, one per bound
	// gcs is the gateway's completed garbage collections (gcMetric's
	// count), NaN when /metrics has none.
	gcs float64
}

// gcMetric is the Go collector's summary of collection pauses, which
// Caddy's registry exports; its count is the collections so far.
const gcMetric = "go_gc_duration_seconds"

// scrapeHub reads hubMetric from the gateway's admin endpoint (a base
// URL).
func scrapeHub(admin string) (hubHistogram, error) {
	resp, err := statusClient.Get(admin + "/metrics")
	if err != nil {
		return hubHistogram{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return hubHistogram{}, fmt.Errorf("/metrics: %s", resp.Status)
	}
	body := &io.LimitedReader{R: resp.Body, N: maxMetricsAnswer + 1}
	h, err := parseHub(body)
	if body.N <= 0 {
		return hubHistogram{}, fmt.Errorf("/metrics: the answer is over %d MiB", maxMetricsAnswer>>20)
	}
	return h, err
}

// parseHub finds hubMetric in a Prometheus text exposition.
func parseHub(r io.Reader) (hubHistogram, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return hubHistogram{}, fmt.Errorf("/metrics: %w", err)
	}
	mf, ok := families[hubMetric]
	if !ok || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetHistogram() == nil {
		return hubHistogram{}, errors.New("/metrics: no " + hubMetric + " histogram (a gateway built before it?)")
	}
	hist := mf.GetMetric()[0].GetHistogram()
	h := hubHistogram{gcs: math.NaN()}
	if gc, ok := families[gcMetric]; ok && len(gc.GetMetric()) == 1 && gc.GetMetric()[0].GetSummary() != nil {
		h.gcs = float64(gc.GetMetric()[0].GetSummary().GetSampleCount())
	}
	for _, b := range hist.GetBucket() {
		h.upper = append(h.upper, b.GetUpperBound())
		h.cum = append(h.cum, float64(b.GetCumulativeCount()))
	}
	if len(h.upper) == 0 || !math.IsInf(h.upper[len(h.upper)-1], 1) {
		h.upper = append(h.upper, math.Inf(1))
		h.cum = append(h.cum, float64(hist.GetSampleCount()))
	}
	return h, nil
}

// since returns the observations h holds that before did not.
func (h hubHistogram) since(before hubHistogram) (hubHistogram, error) {
	if len(before.upper) == 0 {
		return h, nil
	}
	if len(before.upper) != len(h.upper) {
		return hubHistogram{}, errors.New(hubMetric + ": the buckets changed between two scrapes")
	}
	d := hubHistogram{upper: h.upper, cum: make([]float64, len(h.cum)), gcs: h.gcs - before.gcs}
	for i := range h.cum {
		d.cum[i] = h.cum[i] - before.cum[i]
	}
	return d, nil
}

// count is the number of observations.
func (h hubHistogram) count() float64 {
	if len(h.cum) == 0 {
		return 0
	}
	return h.cum[len(h.cum)-1]
}

// quantile estimates the q-quantile (0..1) in seconds as PromQL's
// histogram_quantile does: linearly within the bucket it falls in, from
// 0 for the first; in the +Inf bucket it is the largest finite bound, and
// over says so. ok is false without observations.
func (h hubHistogram) quantile(q float64) (v float64, over, ok bool) {
	n := h.count()
	if n == 0 {
		return 0, false, false
	}
	rank := q * n
	i := sort.SearchFloat64s(h.cum, rank)
	if i >= len(h.cum) {
		i = len(h.cum) - 1
	}
	if math.IsInf(h.upper[i], 1) {
		if i == 0 {
			return 0, true, true
		}
		return h.upper[i-1], true, true
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.upper[i-1], h.cum[i-1]
	}
	inBucket := h.cum[i] - below
	if inBucket == 0 {
		return h.upper[i], false, true
	}
	return lower + (h.upper[i]-lower)*(rank-below)/inBucket, false, true
}

// describe formats the q-quantile for the report.
func (h hubHistogram) describe(q float64) string {
	v, over, ok := h.quantile(q)
	switch {
	case !ok:
		return "none"
	case over:
		return fmt.Sprintf("over %s", fmtSeconds(v))
	}
	return fmtSeconds(v)
}

// fmtSeconds prints seconds in µs below a millisecond, else in ms.
func fmtSeconds(s float64) string {
	if s < 0.001 {
		return fmt.Sprintf("%.0f µs", s*1e6)
	}
	return fmt.Sprintf("%.2f ms", s*1e3)
}
