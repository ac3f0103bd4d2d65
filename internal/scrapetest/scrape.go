// Package scrapetest reads a Prometheus text exposition (what a /metrics
// endpoint answers) into samples that tests can look up by
// name and labels. It uses the Prometheus text parser; histograms and
// summaries appear as their _count and _sum samples.
package scrapetest

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MaxBody bounds the exposition read by Get (64 MiB).
const MaxBody = 64 << 20

// Sample is one sample: its metric name, labels and value.
type Sample struct {
	// Name is the metric name (with _count or _sum for histograms and
	// summaries).
	Name string
	// Labels are the sample's labels.
	Labels map[string]string
	// Value is the sample's value.
	Value float64
}

// Samples are the samples of one exposition.
type Samples []Sample

// Parse reads a text exposition. The error is the parser's.
func Parse(r io.Reader) (Samples, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var out Samples
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out = append(out, Sample{name, labels, m.GetCounter().GetValue()})
			case dto.MetricType_GAUGE:
				out = append(out, Sample{name, labels, m.GetGauge().GetValue()})
			case dto.MetricType_HISTOGRAM:
				out = append(out, Sample{name + "_count", labels, float64(m.GetHistogram().GetSampleCount())},
					Sample{name + "_sum", labels, m.GetHistogram().GetSampleSum()})
			case dto.MetricType_SUMMARY:
				out = append(out, Sample{name + "_count", labels, float64(m.GetSummary().GetSampleCount())},
					Sample{name + "_sum", labels, m.GetSummary().GetSampleSum()})
			default:
				out = append(out, Sample{name, labels, m.GetUntyped().GetValue()})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get fetches url with client (nil: http.DefaultClient) and parses the
// answer. Errors: the request's, a status other than 200, or the parser's.
func Get(client *http.Client, url string) (Samples, error) {
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape: GET %s: %s", url, resp.Status)
	}
	return Parse(io.LimitReader(resp.Body, MaxBody))
}

// Sum adds the values of every sample named name whose labels include
// want (pairs of name and value); ok is false when none matched.
func (s Samples) Sum(name string, want ...string) (sum float64, ok bool) {
	if len(want)%2 != 0 {
		panic("scrape: Sum needs label name/value pairs")
	}
	for _, x := range s {
		if x.Name != name || !x.has(want) {
			continue
		}
		sum += x.Value
		ok = true
	}
	return sum, ok
}

// Value is Sum's total, 0 when nothing matched.
func (s Samples) Value(name string, want ...string) float64 {
	v, _ := s.Sum(name, want...)
	return v
}

func (x Sample) has(want []string) bool {
	for i := 0; i < len(want); i += 2 {
		if v, ok := x.Labels[want[i]]; !ok || v != want[i+1] {
			return false
		}
	}
	return true
}

// String lists the samples, one per line, for failure messages.
func (s Samples) String() string {
	var b strings.Builder
	for _, x := range s {
		keys := make([]string, 0, len(x.Labels))
		for k := range x.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + fmt.Sprintf("%q", x.Labels[k])
		}
		fmt.Fprintf(&b, "%s{%s} %g\n", x.Name, strings.Join(parts, ","), x.Value)
	}
	return b.String()
}
