package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The schedstat reader below is a reduced form of hack/nodeload's
// (phases.go), to what the authz goal reports.

// schedTotals is the sum over a process's threads now alive of their
// /proc/<pid>/task/<tid>/schedstat lines: time on a CPU, time runnable
// but waiting for one (the run-queue wait), both in nanoseconds, and
// timeslices.
type schedTotals struct{ run, wait, slices int64 }

// readSched sums the schedstat lines of process pid's threads (threads
// that ended between two readings drop out of the second: compare
// readings of a process whose threads live on, as Go's do).
func readSched(pid int) schedTotals {
	var t schedTotals
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return t
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) != 3 {
			continue
		}
		var v [3]int64
		for i := range f {
			v[i], _ = strconv.ParseInt(f[i], 10, 64)
		}
		t.run, t.wait, t.slices = t.run+v[0], t.wait+v[1], t.slices+v[2]
	}
	return t
}

func (a schedTotals) sub(b schedTotals) schedTotals {
	return schedTotals{run: a.run - b.run, wait: a.wait - b.wait, slices: a.slices - b.slices}
}

func (a schedTotals) String() string {
	return fmt.Sprintf("ran %s, waited for a CPU %s, %d timeslices", time.Duration(a.run).Round(time.Millisecond),
		time.Duration(a.wait).Round(time.Millisecond), a.slices)
}
