package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The gctrace and schedstat readers below are hack/nodeload's (phases.go),
// reduced to what the authz goal reports.

// gcWindow is one garbage collection of corectl as its
// GODEBUG=gctrace=1 line reported it: from start to end, wall-clock Unix
// nanoseconds.
type gcWindow struct{ start, end int64 }

// gcWatch is a writer of corectl's standard error that keeps, for every
// gctrace line ("gc N @Xs P%: a+b+c ms clock, …"), the window from the
// line's arrival less the collection's wall-clock time to its arrival
// (the runtime prints the line when the collection ends, so the window
// is late by the pipe's delay), and passes every line on to next.
type gcWatch struct {
	next    io.Writer
	mu      sync.Mutex
	partial []byte
	windows []gcWindow
}

func (w *gcWatch) Write(p []byte) (int, error) {
	now := time.Now().UnixNano()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := w.partial[:i+1]
		if d, gc := gctraceClock(string(line[:i])); gc {
			w.windows = append(w.windows, gcWindow{start: now - int64(d), end: now})
		}
		w.partial = w.partial[i+1:]
	}
	return w.next.Write(p)
}

// snapshot returns the windows so far.
func (w *gcWatch) snapshot() []gcWindow {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.windows)
}

// gctraceClock returns the wall-clock length of the collection a
// GODEBUG=gctrace=1 line reports: the sum of its "a+b+c ms clock" phases
// (sweep termination, concurrent mark, mark termination).
func gctraceClock(line string) (time.Duration, bool) {
	if !strings.HasPrefix(line, "gc ") {
		return 0, false
	}
	_, rest, ok := strings.Cut(line, "%: ")
	if !ok {
		return 0, false
	}
	clock, _, ok := strings.Cut(rest, " ms clock")
	if !ok {
		return 0, false
	}
	var total float64
	for _, f := range strings.Split(clock, "+") {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, false
		}
		total += v
	}
	return time.Duration(total * float64(time.Millisecond)), true
}

// overlaps reports whether [from, to] meets one of the windows.
func overlaps(ws []gcWindow, from, to int64) bool {
	for _, w := range ws {
		if w.start <= to && from <= w.end {
			return true
		}
	}
	return false
}

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
