package pacer

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMonotonicClocksAgree: Go's monotonic clock and CLOCK_MONOTONIC
// differ by a constant, the ground of Pacer's mapping of a due time. Each
// of two time.Now readings is bracketed by CLOCK_MONOTONIC readings taken
// just before and after it; if the clocks run together, the Go interval
// between the two lies within the bracket intervals, whatever the
// machine's load made the gaps.
func TestMonotonicClocksAgree(t *testing.T) {
	for i := range 100 {
		a0 := monotonic()
		t0 := time.Now()
		b0 := monotonic()
		// Some distance between the pairs: more of it each time.
		for j := 0; j < i*100; j++ {
			_ = monotonic()
		}
		a1 := monotonic()
		t1 := time.Now()
		b1 := monotonic()
		if d := int64(t1.Sub(t0)); d < a1-b0 || d > b1-a0 {
			t.Fatalf("pair %d: Go's monotonic interval %d ns outside CLOCK_MONOTONIC's bracket [%d, %d] ns", i, d, a1-b0, b1-a0)
		}
	}
}

// TestTimerSlack: the sleeping thread's timer slack is 1 ns while Until
// sleeps (read from another goroutine in /proc/<tid>/timerslack_ns) and
// what it was before once Until has returned. A sleep the reader did not
// get to run in (a loaded machine) is tried again, up to 20 times.
func TestTimerSlack(t *testing.T) {
	runtime.LockOSThread() // the same thread for the reads around Until
	defer runtime.UnlockOSThread()
	before, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if before == 1 {
		t.Fatal("the test thread's timer slack is already 1 ns")
	}
	file := fmt.Sprintf("/proc/%d/timerslack_ns", unix.Gettid())
	var got string
	for attempt := 0; attempt < 20 && got != "1"; attempt++ {
		var done atomic.Bool
		seen := make(chan string, 1)
		go func() {
			// Read the file until it shows 1 ns or the sleep is over.
			last := ""
			for !done.Load() {
				b, err := os.ReadFile(file)
				if err != nil {
					last = err.Error()
					break
				}
				if last = strings.TrimSpace(string(b)); last == "1" {
					break
				}
				runtime.Gosched()
			}
			seen <- last
		}()
		Until(time.Now().Add(100 * time.Millisecond))
		done.Store(true)
		got = <-seen
		if s, _ := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); s != before {
			t.Fatalf("timer slack %d ns after Until, want the %d before", s, before)
		}
	}
	if got != "1" {
		t.Errorf("timer slack during the sleep: %s, want 1 ns", got)
	}
}

// TestUntilNotEarly: Until returns no earlier than its due time, on both
// clocks, for due times in the future, the past, now, and one without a
// monotonic reading.
func TestUntilNotEarly(t *testing.T) {
	now := time.Now()
	for _, due := range []time.Time{
		now.Add(2 * time.Millisecond),
		now.Add(-time.Second),
		time.Now(),
		now.Add(5 * time.Millisecond).Add(300 * time.Microsecond),
		time.Now().Add(3 * time.Millisecond).Round(0), // wall clock only
	} {
		want := mono0 + int64(due.Sub(t0))
		Until(due)
		if got := time.Now(); got.Before(due) {
			t.Errorf("Until(%s) returned %s early", due, due.Sub(got))
		}
		if m := monotonic(); m < want && due.Round(0) != due {
			t.Errorf("Until(%s) returned %d ns early on CLOCK_MONOTONIC", due, want-m)
		}
	}
}

// TestUntilThroughSignals: signals sent to the sleeping thread
// (clock_nanosleep fails with EINTR after a handler ran, whatever
// SA_RESTART says) do not end the wait early. SIGURG is the Go runtime's
// own preemption signal, which it ignores when nothing is to be
// preempted. A sleep during which no signal could be sent (the sender
// did not get to run) is tried again, up to 20 times.
func TestUntilThroughSignals(t *testing.T) {
	pid := unix.Getpid()
	for attempt := 0; attempt < 20; attempt++ {
		var tid atomic.Int64
		var done atomic.Bool
		var sent atomic.Int64
		result := make(chan time.Time, 1)
		due := time.Now().Add(50 * time.Millisecond)
		go func() {
			runtime.LockOSThread() // Until's thread is this one
			defer runtime.UnlockOSThread()
			tid.Store(int64(unix.Gettid()))
			Until(due)
			back := time.Now()
			done.Store(true)
			result <- back
		}()
		for !done.Load() {
			if id := tid.Load(); id != 0 {
				if err := unix.Tgkill(pid, int(id), unix.SIGURG); err == nil {
					sent.Add(1)
				}
			}
			runtime.Gosched()
		}
		if back := <-result; back.Before(due) {
			t.Fatalf("Until returned %s early after %d signals", due.Sub(back), sent.Load())
		}
		if sent.Load() > 0 {
			return
		}
	}
	t.Fatal("no signal was sent while Until slept, in 20 tries")
}

// TestProcs: Procs raises GOMAXPROCS by n and its restore sets it back.
func TestProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	restore := Procs(3)
	if got := runtime.GOMAXPROCS(0); got != before+3 {
		t.Errorf("GOMAXPROCS %d after Procs(3), want %d", got, before+3)
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("GOMAXPROCS %d after the restore, want %d", got, before)
	}
}

// TestSplit: a send delay divided on constructed timelines (ns).
func TestSplit(t *testing.T) {
	for _, c := range []struct {
		name            string
		due, free, sent int64
		late, wait      time.Duration
	}{
		{"worker free before due, woke on time", 1000, 400, 1000, 0, 0},
		{"worker free before due, woke late", 1000, 400, 1250, 250, 0},
		{"worker busy at due, sent when free", 1000, 1700, 1700, 0, 700},
		{"worker busy at due, sent after free", 1000, 1700, 1760, 60, 700},
		{"worker free at due exactly", 1000, 1000, 1030, 30, 0},
		{"no workers: free = due", 1000, 1000, 1450, 450, 0},
	} {
		late, wait := Split(c.due, c.free, c.sent)
		if late != c.late || wait != c.wait {
			t.Errorf("%s: late %d, wait %d; want %d, %d", c.name, late, wait, c.late, c.wait)
		}
		if int64(late+wait) != c.sent-c.due {
			t.Errorf("%s: late + wait %d, want the send delay %d", c.name, late+wait, c.sent-c.due)
		}
	}
}

// BenchmarkLateness: how late a wait for a due time 200 µs ahead
// returns, with a Pacer and with time.Sleep (Go's timers), as the
// lateness's p50 and p99 in µs (late-p50-µs, late-p99-µs). A figure of
// the machine's load as much as of the waits: docs/benchmarks.md has the
// command and the load average beside its figures.
func BenchmarkLateness(b *testing.B) {
	for _, how := range []string{"pacer", "sleep"} {
		b.Run(how, func(b *testing.B) {
			wait := func(due time.Time) { time.Sleep(time.Until(due)) }
			if how == "pacer" {
				wait = Until
			}
			late := make([]time.Duration, 0, b.N)
			for b.Loop() {
				due := time.Now().Add(200 * time.Microsecond)
				wait(due)
				late = append(late, time.Since(due))
			}
			slices.Sort(late)
			b.ReportMetric(float64(late[len(late)/2].Nanoseconds())/1e3, "late-p50-µs")
			b.ReportMetric(float64(late[len(late)*99/100].Nanoseconds())/1e3, "late-p99-µs")
		})
	}
}
