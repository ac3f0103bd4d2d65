package core

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/node/proto"
)

// hubCount returns the sample count and sum of
// sandgate_node_hub_duration_seconds in reg.
func hubCount(t *testing.T, reg *prometheus.Registry) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sandgate_node_hub_duration_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatal("sandgate_node_hub_duration_seconds is not registered")
	return 0, 0
}

// TestHubTimeObserved: the hub's time of one answered operation is one
// observation of sandgate_node_hub_duration_seconds, in seconds; a
// dispatch without it (Dispatched alone) adds none.
func TestHubTimeObserved(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := RegisterMetrics(reg, nil)
	n0, s0 := hubCount(t, reg)
	m.Dispatched(proto.OpInfo, "node_offline", time.Millisecond)
	if n, _ := hubCount(t, reg); n != n0 {
		t.Fatalf("a refused dispatch was observed: %d → %d", n0, n)
	}
	m.Dispatched(proto.OpInfo, "success", time.Millisecond)
	m.HubTime(proto.OpInfo, 120*time.Microsecond)
	n1, s1 := hubCount(t, reg)
	if n1 != n0+1 || s1-s0 < 0.000119 || s1-s0 > 0.000121 {
		t.Fatalf("after one answered dispatch: count %d → %d, sum %g → %g", n0, n1, s0, s1)
	}
}
