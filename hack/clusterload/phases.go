package main

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// phaseKind is what a phase of the hung comparison does to the last
// cluster's apiserver.
type phaseKind int

const (
	// normalPhase: every apiserver runs.
	normalPhase phaseKind = iota
	// hungPhase: the last cluster's apiserver is stopped (SIGSTOP).
	hungPhase
)

func (k phaseKind) String() string {
	if k == hungPhase {
		return "hung"
	}
	return "normal"
}

// schedule is the order of the hung comparison's phases for pairs pairs:
// normal, hung, normal, hung, …, normal (2 × pairs + 1 phases), so that
// every hung phase has a normal phase just before and just after it and a
// drift of the machine's load over the run moves both of its neighbours
// with it. pairs < 1 gives no phase.
func schedule(pairs int) []phaseKind {
	if pairs < 1 {
		return nil
	}
	s := make([]phaseKind, 0, 2*pairs+1)
	for range pairs {
		s = append(s, normalPhase, hungPhase)
	}
	return append(s, normalPhase)
}

// sendAt is when the i-th of count creates of a phase that starts at start
// and lasts length is sent: evenly spread, the first at start (a create
// that answers after the next one's time delays that one; the phase keeps
// its count, not its spacing).
func sendAt(start time.Time, length time.Duration, count, i int) time.Time {
	if count < 1 {
		return start
	}
	return start.Add(time.Duration(int64(length) * int64(i) / int64(count)))
}

// pairRatio is one hung phase's comparison: the p50s (ms) of the normal
// phase before it, of the hung phase and of the normal phase after it.
type pairRatio struct {
	before, hung, after float64
}

// ratio is the hung phase's p50 ÷ the mean of its two neighbours' p50s
// (a linear drift of the machine over the three phases cancels).
func (p pairRatio) ratio() float64 { return p.hung / ((p.before + p.after) / 2) }

// ratioBefore is the hung phase's p50 ÷ the p50 of the normal phase before
// it alone.
func (p pairRatio) ratioBefore() float64 { return p.hung / p.before }

// pairRatios groups the p50s of a schedule(n) run, phase by phase in its order
// (2n+1 values: normal, hung, …, normal), into its n comparisons. Errors:
// a count that is not 2n+1 for some n ≥ 1, or a p50 that is not positive
// (a ratio needs both).
func pairRatios(p50s []float64) ([]pairRatio, error) {
	if len(p50s) < 3 || len(p50s)%2 == 0 {
		return nil, fmt.Errorf("%d phases: want normal, hung, …, normal (an odd number, at least 3)", len(p50s))
	}
	if i := slices.IndexFunc(p50s, func(v float64) bool { return !(v > 0) }); i >= 0 {
		return nil, fmt.Errorf("phase %d: p50 %v is not positive", i+1, p50s[i])
	}
	out := make([]pairRatio, 0, len(p50s)/2)
	for i := 1; i < len(p50s); i += 2 {
		out = append(out, pairRatio{before: p50s[i-1], hung: p50s[i], after: p50s[i+1]})
	}
	return out, nil
}

// spread is the median of xs (the mean of the middle two for an even
// count) and its least and greatest value. Error: xs empty.
func spread(xs []float64) (median, lo, hi float64, err error) {
	if len(xs) == 0 {
		return 0, 0, 0, errors.New("no values")
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	median = s[m]
	if len(s)%2 == 0 {
		median = (s[m-1] + s[m]) / 2
	}
	return median, s[0], s[len(s)-1], nil
}
