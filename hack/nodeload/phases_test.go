package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/hack/gctrace"
)

// TestAnswerLogRoundTrip: what the nodes' process saves the tool loads,
// per node in arrival order.
func TestAnswerLogRoundTrip(t *testing.T) {
	l := newAnswerLog(3)
	l.add(2, 9, 10, 11)
	l.add(0, 19, 20, 21)
	l.add(2, 29, 30, 32)
	path := filepath.Join(t.TempDir(), "answers.json")
	if err := l.save(path); err != nil {
		t.Fatal(err)
	}
	got, err := loadAnswerLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got[0]) != 1 || len(got[1]) != 0 || len(got[2]) != 2 || got[2][1] != [3]int64{29, 30, 32} || got[0][0] != [3]int64{19, 20, 21} {
		t.Fatalf("loaded %v", got)
	}
}

// TestPhaseReportNamesTheSlowSegment: with one operation in a hundred
// slow on its way back during a gateway collection, the tail's median
// "back" is that delay, the other segments stay the fast ones, every
// slow operation overlapped the collection, and so did the two sent in
// the 20 ms after each slow one (3 % of all).
func TestPhaseReportNamesTheSlowSegment(t *testing.T) {
	ms := int64(time.Millisecond)
	var ops []opTiming
	var gc []gctrace.Window
	for i := range 1000 {
		due := int64(i) * 10 * ms
		o := opTiming{due: due, sent: due + ms/10, written: due + ms/10, frameIn: due + ms/5, received: due + ms/2, answered: due + ms/2 + ms/100,
			answerIn: due + ms*9/10, done: due + ms}
		if i%100 == 0 {
			o.done += 20 * ms
			gc = append(gc, gctrace.Window{Start: o.answered, End: o.done})
		}
		ops = append(ops, o)
	}
	var out bytes.Buffer
	r := phaseReport(&out, ops, gc, nil)
	if r["tail_back_ms"] != 20.49 || r["tail_out_ms"] != 0.4 || r["tail_delay_ms"] != 0.1 {
		t.Errorf("tail medians %v; want back 20.49, out 0.4, delay 0.1 ms\n%s", r, out.String())
	}
	// The slow part of "back" is after the answer reached the tool's
	// socket: the tool's wake-up, not the gateway.
	if r["tail_gwback_ms"] != 0.39 || r["tail_toolwake_ms"] != 20.1 || r["tail_gwout_ms"] != 0.1 || r["tail_nodewake_ms"] != 0.3 {
		t.Errorf("tail medians of the cut segments %v; want gwback 0.39, toolwake 20.1, gwout 0.1, nodewake 0.3 ms\n%s", r, out.String())
	}
	if r["tail999_toolwake_ms"] != 20.1 {
		t.Errorf("slowest 0.1%%'s tool wake-up %v ms; want 20.1\n%s", r["tail999_toolwake_ms"], out.String())
	}
	if r["tail999_gw_gc_pct"] != 100 || r["tail999_nodes_gc_pct"] != 0 {
		t.Errorf("slowest 0.1%% overlapping collections: gateway %v%%, nodes %v%%; want 100, 0", r["tail999_gw_gc_pct"], r["tail999_nodes_gc_pct"])
	}
	if r["tail_gw_gc_pct"] != 100 || r["tail_nodes_gc_pct"] != 0 {
		t.Errorf("tail overlapping collections %v; want 100%% gateway, 0%% nodes\n%s", r, out.String())
	}
	if r["phase_gw_gcs"] != 10 || r["phase_nodes_gcs"] != 0 {
		t.Errorf("collections in the phase: gateway %v, nodes %v; want 10, 0", r["phase_gw_gcs"], r["phase_nodes_gcs"])
	}
	if !strings.Contains(out.String(), "(3.0% of all operations do)") {
		t.Errorf("report does not give the share of all operations overlapping:\n%s", out.String())
	}
}

// TestPhaseReportWithoutStamps: when an operation has no receive stamp
// the report leaves the cut segments out instead of printing nonsense.
func TestPhaseReportWithoutStamps(t *testing.T) {
	ms := int64(time.Millisecond)
	ops := []opTiming{
		{due: 0, sent: ms / 10, written: ms / 10, frameIn: ms / 5, received: ms / 2, answered: ms, answerIn: 2 * ms, done: 3 * ms},
		{due: 10 * ms, sent: 11 * ms, received: 12 * ms, answered: 13 * ms, done: 14 * ms},
	}
	var out bytes.Buffer
	r := phaseReport(&out, ops, nil, nil)
	if _, ok := r["tail_gwout_ms"]; ok || strings.Contains(out.String(), "socket →") {
		t.Errorf("cut segments reported without stamps: %v\n%s", r, out.String())
	}
	if r["tail_out_ms"] != 1 {
		t.Errorf("tail out %v ms; want 1\n%s", r["tail_out_ms"], out.String())
	}
}

// TestRunDelay: the schedstat line's second field is the wait; a line of
// another shape is an error; this process's own threads give a figure.
func TestRunDelay(t *testing.T) {
	if v, err := parseSchedstat("169531844 57402846 419\n"); err != nil || v != 57402846 {
		t.Fatalf("parseSchedstat = %d, %v; want 57402846", v, err)
	}
	for _, bad := range []string{"", "1 2", "1 x 3", "1 2 3 4"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q) took it", bad)
		}
	}
	if _, err := runDelay(os.Getpid()); err != nil {
		t.Fatalf("runDelay(self): %v", err)
	}
}

// TestThreadReport: sysmon is the lowest thread ID after the process's
// own; the busiest of the others is named; the rest are summed; sysmon's
// share is of the CPU of every thread in the window.
func TestThreadReport(t *testing.T) {
	ms := int64(time.Millisecond)
	before := map[int]schedstat{100: {run: 5 * ms}, 101: {run: 1 * ms, wait: 1 * ms, slices: 10}, 105: {}, 106: {}}
	after := map[int]schedstat{
		100: {run: 6 * ms, wait: 1 * ms, slices: 2},
		101: {run: 11 * ms, wait: 21 * ms, slices: 210},
		105: {run: 70 * ms, wait: 8 * ms, slices: 400},
		106: {run: 19 * ms, wait: 2 * ms, slices: 100},
		107: {run: 0, wait: 0, slices: 0},
	}
	s, share := threadReport(100, before, after, 2*time.Second)
	for _, want := range []string{
		"sysmon (thread 101) ran 10ms, waited 20ms, 100 wake-ups/s",
		"busiest thread (105) ran 70ms, waited 8ms, 200 wake-ups/s",
		"3 others ran 20ms, waited 3ms, 51 wake-ups/s",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report %q lacks %q", s, want)
		}
	}
	if share != 10 {
		t.Errorf("sysmon's share %v%%; want 10%% (10 of 100 ms)", share)
	}
	if got, err := parseSchedstatAll("1 2 3\n"); err != nil || got != (schedstat{run: 1, wait: 2, slices: 3}) {
		t.Errorf("parseSchedstatAll = %+v, %v", got, err)
	}
}

// TestParseFaults: minflt and majflt are fields 10 and 12 of a stat line,
// counted after the command name, which may hold spaces and parentheses;
// this process's own line parses.
func TestParseFaults(t *testing.T) {
	line := "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 5120 0 7 0 10 3 0 0 20 0 1 0 100 1000 200"
	minor, major, err := parseFaults(line)
	if err != nil || minor != 5120 || major != 7 {
		t.Fatalf("parseFaults = %d, %d, %v; want 5120, 7", minor, major, err)
	}
	for _, bad := range []string{"", "1 (x S 1", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 x 0 7 0"} {
		if _, _, err := parseFaults(bad); err == nil {
			t.Errorf("parseFaults(%q) took it", bad)
		}
	}
	if _, _, err := pageFaults(os.Getpid()); err != nil {
		t.Fatalf("pageFaults(self): %v", err)
	}
}
