package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// exposition is a /metrics answer with the hub histogram: 100
// observations, 90 at or below 100 µs, 9 more at or below 500 µs, 1
// above 1 ms.
const exposition = `# HELP sandgate_node_hub_duration_seconds x
# TYPE sandgate_node_hub_duration_seconds histogram
sandgate_node_hub_duration_seconds_bucket{le="0.0001"} 90
sandgate_node_hub_duration_seconds_bucket{le="0.0005"} 99
sandgate_node_hub_duration_seconds_bucket{le="0.001"} 99
sandgate_node_hub_duration_seconds_bucket{le="+Inf"} 100
sandgate_node_hub_duration_seconds_sum 0.02
sandgate_node_hub_duration_seconds_count 100
# TYPE sandgate_node_online gauge
sandgate_node_online 3
`

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// TestHubQuantiles: the quantiles interpolate within the bucket as
// histogram_quantile does, one in the +Inf bucket says "over", and the
// difference of two scrapes holds only the later observations.
func TestHubQuantiles(t *testing.T) {
	h, err := parseHub(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if h.count() != 100 {
		t.Fatalf("count %v", h.count())
	}
	if v, over, ok := h.quantile(0.5); !ok || over || !near(v, 0.0001*50/90) {
		t.Fatalf("p50 %v %v %v", v, over, ok)
	}
	if v, over, ok := h.quantile(0.99); !ok || over || !near(v, 0.0005) {
		t.Fatalf("p99 %v %v %v", v, over, ok)
	}
	if v, over, ok := h.quantile(0.999); !ok || !over || v != 0.001 {
		t.Fatalf("p99.9 %v %v %v", v, over, ok)
	}
	if got := h.describe(0.999); got != "over 1.00 ms" {
		t.Fatalf("describe p99.9: %q", got)
	}
	before, err := parseHub(strings.NewReader(strings.NewReplacer(`"} 90`, `"} 80`, `"} 99`, `"} 89`, `"} 100`, `"} 90`).Replace(exposition)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.since(before)
	if err != nil {
		t.Fatal(err)
	}
	if d.count() != 10 {
		t.Fatalf("difference: %v observations", d.count())
	}
	if v, _, _ := d.quantile(0.5); !near(v, 0.00005) {
		t.Fatalf("difference p50 %v", v)
	}
	if _, _, ok := (hubHistogram{}).quantile(0.5); ok {
		t.Fatal("a quantile of no observations")
	}
}

// TestHubMissing: an exposition without the histogram (a gateway built
// before it) is an error that says so.
func TestHubMissing(t *testing.T) {
	_, err := parseHub(strings.NewReader("# TYPE sandgate_node_online gauge\nsandgate_node_online 3\n"))
	if err == nil || !strings.Contains(err.Error(), "no sandgate_node_hub_duration_seconds") {
		t.Fatalf("err %v", err)
	}
}

// TestGatewayCollections: the Go collector's go_gc_duration_seconds count
// is the collections; the difference of two scrapes is those between
// them, and a /metrics without it gives NaN.
func TestGatewayCollections(t *testing.T) {
	gc := func(n int) string {
		return exposition + "# TYPE go_gc_duration_seconds summary\ngo_gc_duration_seconds{quantile=\"0.5\"} 0.0001\n" +
			"go_gc_duration_seconds_sum 0.01\ngo_gc_duration_seconds_count " + strconv.Itoa(n) + "\n"
	}
	before, err := parseHub(strings.NewReader(gc(7)))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseHub(strings.NewReader(gc(12)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := after.since(before)
	if err != nil || d.gcs != 5 {
		t.Fatalf("collections between the scrapes = %v, %v", d.gcs, err)
	}
	h, err := parseHub(strings.NewReader(exposition))
	if err != nil || !math.IsNaN(h.gcs) {
		t.Fatalf("without the Go collector: %v, %v", h.gcs, err)
	}
}
