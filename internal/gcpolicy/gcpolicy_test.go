package gcpolicy

import (
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

// restoreGC puts the collector's settings back after a test.
func restoreGC(t *testing.T) {
	gogc := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(gogc)
		debug.SetMemoryLimit(limit)
	})
}

// TestApplySetsGOGC: with no GOGC in the environment Apply sets the
// package's GOGC and reports the memory limit in force, which it leaves
// as it was.
func TestApplySetsGOGC(t *testing.T) {
	t.Setenv("GOGC", "")
	restoreGC(t)
	debug.SetMemoryLimit(1 << 30)
	// t.Setenv cannot unset; Apply looks the variable up, so unset it here
	// (t.Setenv restores it afterwards).
	unsetenv(t, "GOGC")
	d := Apply()
	if d.GOGC != GOGC || d.Operator || d.MemoryLimit != 1<<30 {
		t.Fatalf("decision %+v", d)
	}
	if got := debug.SetGCPercent(100); got != GOGC {
		t.Fatalf("GOGC in force %d, want %d", got, GOGC)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Fatalf("memory limit changed to %d", got)
	}
	if s := d.String(); !strings.Contains(s, "GOGC=400 (the gateway's default") || !strings.Contains(s, "1073741824 bytes") {
		t.Fatalf("log line %q", s)
	}
}

// TestApplyKeepsTheOperatorsGOGC: a GOGC in the environment (which the
// runtime read at start) is kept and reported, "off" included.
func TestApplyKeepsTheOperatorsGOGC(t *testing.T) {
	restoreGC(t)
	t.Setenv("GOGC", "off")
	debug.SetGCPercent(-1) // what the runtime made of GOGC=off at start
	d := Apply()
	if !d.Operator || d.GOGC != -1 {
		t.Fatalf("decision %+v", d)
	}
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Fatalf("GOGC in force %d, want off", got)
	}
	if s := d.String(); !strings.HasPrefix(s, "GOGC=off set by the operator: kept") {
		t.Fatalf("log line %q", s)
	}
}

// TestStringWithoutLimit: no soft limit (math.MaxInt64) says so.
func TestStringWithoutLimit(t *testing.T) {
	s := Decision{GOGC: GOGC, MemoryLimit: math.MaxInt64}.String()
	if !strings.HasSuffix(s, "; no soft memory limit") {
		t.Fatalf("log line %q", s)
	}
}

// unsetenv removes key for the rest of the test; t.Setenv before it
// restores the old value.
func unsetenv(t *testing.T, key string) {
	t.Helper()
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}

// TestApplyTheEnvironmentsGOGC: the package's GOGC applies when the
// environment has no GOGC or an empty one (the runtime reads GOGC= as
// 100, no setting); an explicit GOGC (200, off) is kept.
func TestApplyTheEnvironmentsGOGC(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      *string // nil: unset
		runtime  int     // what the runtime made of the environment at start
		operator bool
		want     int
	}{
		{"unset", nil, 100, false, GOGC},
		{"empty", ptr(""), 100, false, GOGC},
		{"200", ptr("200"), 200, true, 200},
		{"off", ptr("off"), -1, true, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restoreGC(t)
			t.Setenv("GOGC", "")
			if tc.env == nil {
				unsetenv(t, "GOGC")
			} else {
				t.Setenv("GOGC", *tc.env)
			}
			if got := OperatorGOGC(); got != tc.operator {
				t.Fatalf("OperatorGOGC() = %v, want %v", got, tc.operator)
			}
			debug.SetGCPercent(tc.runtime)
			d := Apply()
			if d.Operator != tc.operator || d.GOGC != tc.want {
				t.Fatalf("decision %+v, want Operator %v, GOGC %d", d, tc.operator, tc.want)
			}
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Fatalf("GOGC in force %d, want %d", got, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }
