package buildinfo

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The gauge is 1 with the build's labels, and registering it twice (a
// reload) is not an error.
func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		if err := Register(reg, "gateway"); err != nil {
			t.Fatal(err)
		}
	}
	if err := Register(nil, "gateway"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "sandgate_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v", mfs)
	}
	m := mfs[0].GetMetric()[0]
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"program": "gateway", "version": "unknown", "commit_time": "", "modified": "false", "go_version": runtime.Version()}
	if len(got) != len(want) || m.GetGauge().GetValue() != 1 {
		t.Fatalf("labels %v value %v, want %v 1", got, m.GetGauge().GetValue(), want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
}
