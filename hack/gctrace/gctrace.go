// Package gctrace reads the GODEBUG=gctrace=1 lines a Go process writes to
// its standard error and keeps when each garbage collection ran, so that
// the load tools (hack/nodeload, hack/corectlload) can say which of their
// timed operations overlapped a collection of the process they measure.
package gctrace

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Window is one garbage collection as its gctrace line reported it: from
// Start to End, wall-clock Unix nanoseconds.
type Window struct{ Start, End int64 }

// Watch is a writer of a process's output that keeps, for every gctrace
// line ("gc N @Xs P%: a+b+c ms clock, …"), the window from the line's
// arrival less the collection's wall-clock time to its arrival. The
// runtime prints the line when the collection ends, so the window is late
// by the pipe's delay, well under a millisecond on an idle CPU. Every
// other line is passed on to Next (nil: dropped), the gctrace lines too
// when KeepGC is set; a failed write to Next loses that line only. The
// zero value with Next set is ready to use; it is safe for concurrent use.
type Watch struct {
	// Next receives the lines passed on.
	Next io.Writer
	// KeepGC passes the gctrace lines on to Next too.
	KeepGC bool

	mu      sync.Mutex
	partial []byte
	windows []Window
}

// Write splits p into lines (a line's end may come in a later Write) and
// keeps the collections' windows; it never fails.
func (w *Watch) Write(p []byte) (int, error) {
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
		w.partial = w.partial[i+1:]
		d, gc := Clock(string(line[:i]))
		if gc {
			w.windows = append(w.windows, Window{Start: now - int64(d), End: now})
		}
		if w.Next != nil && (!gc || w.KeepGC) {
			_, _ = w.Next.Write(line) // a side channel: a failed write loses the line only
		}
	}
	return len(p), nil
}

// Snapshot returns a copy of the windows so far, oldest first.
func (w *Watch) Snapshot() []Window {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.windows)
}

// Clock returns the wall-clock length of the collection a gctrace line
// reports: the sum of its "a+b+c ms clock" phases (sweep termination,
// concurrent mark, mark termination). ok is false for any other line.
func Clock(line string) (d time.Duration, ok bool) {
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

// Overlaps reports whether the interval [from, to] (Unix nanoseconds)
// meets one of the windows ws.
func Overlaps(ws []Window, from, to int64) bool {
	for _, w := range ws {
		if w.Start <= to && from <= w.End {
			return true
		}
	}
	return false
}
