package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestScheduleAlternatesAndEndsNormal(t *testing.T) {
	n, h := normalPhase, hungPhase
	for pairs, want := range map[int][]phaseKind{
		0: nil,
		1: {n, h, n},
		3: {n, h, n, h, n, h, n},
	} {
		if got := schedule(pairs); !slices.Equal(got, want) {
			t.Errorf("schedule(%d) = %v, want %v", pairs, got, want)
		}
	}
	if got := schedule(-1); got != nil {
		t.Errorf("schedule(-1) = %v, want none", got)
	}
}

func TestSendAtSpreadsTheCreatesOverThePhase(t *testing.T) {
	start := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	var got []time.Duration
	for i := range 4 {
		got = append(got, sendAt(start, 30*time.Second, 4, i).Sub(start))
	}
	want := []time.Duration{0, 7500 * time.Millisecond, 15 * time.Second, 22500 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Errorf("offsets %v, want %v", got, want)
	}
	if at := sendAt(start, 30*time.Second, 0, 0); !at.Equal(start) {
		t.Errorf("no creates: %v, want the start", at)
	}
}

func TestPairRatiosAgainstBothNeighbours(t *testing.T) {
	// normal 20, hung 30, normal 40, hung 33, normal 26.
	prs, err := pairRatios([]float64{20, 30, 40, 33, 26})
	if err != nil {
		t.Fatal(err)
	}
	want := []pairRatio{{20, 30, 40}, {40, 33, 26}}
	if !slices.Equal(prs, want) {
		t.Fatalf("pairs %v, want %v", prs, want)
	}
	// 30 ÷ mean(20, 40) = 1; 33 ÷ mean(40, 26) = 1; against the one before:
	// 1.5 and 0.825. A linear drift (20 → 40) cancels in the first.
	for i, w := range []struct{ both, before float64 }{{1, 1.5}, {1, 0.825}} {
		if got := prs[i].ratio(); math.Abs(got-w.both) > 1e-12 {
			t.Errorf("pair %d: ratio %v, want %v", i+1, got, w.both)
		}
		if got := prs[i].ratioBefore(); math.Abs(got-w.before) > 1e-12 {
			t.Errorf("pair %d: ratioBefore %v, want %v", i+1, got, w.before)
		}
	}
}

func TestPairRatiosRefusesAMalformedRun(t *testing.T) {
	for _, p50s := range [][]float64{nil, {20}, {20, 30}, {20, 30, 40, 33}, {20, 0, 40}, {20, 30, math.NaN()}, {-1, 30, 40}} {
		if prs, err := pairRatios(p50s); err == nil {
			t.Errorf("pairRatios(%v) = %v, want an error", p50s, prs)
		}
	}
}

func TestSpreadMedianAndRange(t *testing.T) {
	for _, c := range []struct {
		xs          []float64
		med, lo, hi float64
	}{
		{[]float64{1.2}, 1.2, 1.2, 1.2},
		{[]float64{1.3, 0.9, 1.1}, 1.1, 0.9, 1.3},
		{[]float64{1.4, 0.8, 1.0, 1.2}, 1.1, 0.8, 1.4}, // even: the mean of the middle two
	} {
		in := slices.Clone(c.xs)
		med, lo, hi, err := spread(c.xs)
		if err != nil || math.Abs(med-c.med) > 1e-12 || lo != c.lo || hi != c.hi {
			t.Errorf("spread(%v) = %v, %v, %v, %v; want %v, %v, %v", c.xs, med, lo, hi, err, c.med, c.lo, c.hi)
		}
		if !slices.Equal(in, c.xs) {
			t.Errorf("spread reordered its argument: %v", c.xs)
		}
	}
	if _, _, _, err := spread(nil); err == nil {
		t.Error("spread(nil): no error")
	}
}
