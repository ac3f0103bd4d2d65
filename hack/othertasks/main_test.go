package main

import (
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	line := "83 (kdamond (x) 0) I 2 0 0 0 -1 2129984 0 0 0 0 0 26377 0 0 20 0 1 0 1200 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	name, cpu, err := parseStat(line)
	if err != nil || name != "kdamond (x) 0" || cpu != 1 {
		t.Fatalf("parseStat = %q, %d, %v; want \"kdamond (x) 0\", 1", name, cpu, err)
	}
	for _, bad := range []string{"", "83 kdamond I 2", "83 (x) I 2 0 0", "83 (x)"} {
		if _, _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	ran, n, err := parseSchedstat("510300000 1200 205\n")
	if err != nil || ran != 510300*time.Microsecond || n != 205 {
		t.Fatalf("parseSchedstat = %v, %d, %v", ran, n, err)
	}
	for _, bad := range []string{"", "1 2", "x 2 3", "1 2 y"} {
		if _, _, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q): no error", bad)
		}
	}
}

// TestRanDuring: only threads in both snapshots that ran between them,
// as differences, the longest first, at most top.
func TestRanDuring(t *testing.T) {
	before := map[key]thread{
		{1, 1}: {name: "a", ran: 10 * time.Millisecond, slices: 5},
		{2, 2}: {name: "b", ran: 20 * time.Millisecond, slices: 1},
		{3, 3}: {name: "idle", ran: time.Millisecond, slices: 1},
		{4, 4}: {name: "gone", ran: time.Millisecond, slices: 1},
	}
	after := map[key]thread{
		{1, 1}: {name: "a", ran: 15 * time.Millisecond, slices: 7},
		{2, 2}: {name: "b", ran: 40 * time.Millisecond, slices: 3},
		{3, 3}: {name: "idle", ran: time.Millisecond, slices: 1},
		{5, 5}: {name: "new", ran: time.Second, slices: 9},
	}
	got := ranDuring(before, after, 10)
	if len(got) != 2 || got[0].name != "b" || got[0].ran != 20*time.Millisecond || got[0].slices != 2 ||
		got[1].name != "a" || got[1].ran != 5*time.Millisecond || got[1].slices != 2 {
		t.Fatalf("ranDuring = %+v", got)
	}
	if got := ranDuring(before, after, 1); len(got) != 1 || got[0].name != "b" {
		t.Fatalf("ranDuring top 1 = %+v", got)
	}
}

// TestSnapshotSeesThisThread: a snapshot of the machine holds this
// process's threads with a name and a run time.
func TestSnapshotSeesThisThread(t *testing.T) {
	s := snapshot()
	found := false
	for k, th := range s {
		if k.pid == os.Getpid() && th.name != "" && th.ran > 0 && th.allowed != "" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no thread of this process (pid %d) in a snapshot of %d threads", os.Getpid(), len(s))
	}
}
