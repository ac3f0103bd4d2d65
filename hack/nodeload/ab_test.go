package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestVariantFlag(t *testing.T) {
	var vs variants
	for _, s := range []string{"base:/tmp/caddy-main", "new:bin/caddy:GOGC=100,GODEBUG=gctrace=1"} {
		if err := vs.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	want := variants{{"base", "/tmp/caddy-main", ""}, {"new", "bin/caddy", "GOGC=100,GODEBUG=gctrace=1"}}
	if !slices.Equal(vs, want) {
		t.Fatalf("variants %+v", vs)
	}
	for _, bad := range []string{"", "name", ":bin/caddy", "x:", "base:bin/caddy", "y:bin/caddy:GOGC"} {
		if err := vs.Set(bad); err == nil {
			t.Errorf("-variant %q accepted", bad)
		}
	}
}

func TestResultLineRoundTrip(t *testing.T) {
	r := result{"ops_per_s": 1000, "ok": 30000, "total": 30000, "rtt_p99_ms": 1.234567, "hub_p99_ms": math.Inf(1),
		"hub_p999_ms": math.NaN()}
	var b bytes.Buffer
	printResult(&b, r)
	line := strings.TrimSuffix(b.String(), "\n")
	got, err := parseResult(line)
	if err != nil {
		t.Fatal(err)
	}
	if got["ops_per_s"] != 1000 || got["rtt_p99_ms"] != 1.23457 || !math.IsInf(got["hub_p99_ms"], 1) ||
		!math.IsNaN(got["hub_p999_ms"]) || len(got) != len(resultKeys) {
		t.Fatalf("%q parsed as %v", line, got)
	}
	for _, bad := range []string{"dispatch: x", "result: a", "result: a=b"} {
		if _, err := parseResult(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestAbArgsDropsTheSeriesFlags(t *testing.T) {
	got := abArgs([]string{"-nodes", "10", "-variant", "a:x", "--variant=b:y", "-rounds", "3", "-rounds=2", "-pin-gateway", "0"})
	if want := []string{"-nodes", "10", "-pin-gateway", "0"}; !slices.Equal(got, want) {
		t.Fatalf("abArgs = %q", got)
	}
}

func TestMedianRange(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want string
	}{
		{nil, "—"},
		{[]float64{2.5}, "2.5"},
		{[]float64{3, 1, 2}, "2 [1–3]"},
		{[]float64{4, 1, 2, 3}, "2.5 [1–4]"},
		{[]float64{1, math.Inf(1), 2}, "2 [1–over 50]"},
		{[]float64{13500, 14, 27100}, "13500 [14.0–27100]"},
	} {
		if got := medianRange(c.xs); got != c.want {
			t.Errorf("medianRange(%v) = %q, want %q", c.xs, got, c.want)
		}
	}
}
