// Package pacer waits until a due time precisely, for the open-loop load
// tools (hack/nodeload, hack/corectlload): an operation's latency is
// measured from its scheduled send, so whatever the tool adds between the
// due time and the actual send is counted against the program measured.
//
// Go's own timers (time.Sleep, time.Timer) are run by the runtime's
// scheduler, which waits for the next timer in epoll_pwait with a
// millisecond timeout: a timer fires up to about 1 ms late. Until instead
// sleeps on the calling goroutine's OS thread in
// clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), with that thread's
// timer slack set to 1 ns for the sleep (PR_SET_TIMERSLACK; a normal
// thread's default is 50 µs, which the kernel may add to any sleep of
// that thread to group wake-ups). What is left is the kernel's wake-up
// and the scheduler giving the thread a CPU, which on a loaded machine
// can still be late: the tools report that lateness apart (Split).
package pacer

import (
	"errors"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// t0 and mono0 are the same instant read from Go's monotonic clock and
// from CLOCK_MONOTONIC. On Linux the runtime's monotonic clock is
// CLOCK_MONOTONIC read through the vDSO, counted from the process's
// start, so the two differ by a constant (TestMonotonicClocksAgree): a
// due time's CLOCK_MONOTONIC reading is mono0 + due.Sub(t0).
var t0, mono0 = time.Now(), monotonic()

// Until returns once due has come (at once if it has already). It sleeps
// in clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) until due's
// CLOCK_MONOTONIC reading, on the calling goroutine's OS thread, locked
// to it for the wait only, with the thread's timer slack at 1 ns for the
// sleep and given back after it. The goroutine is not left locked: a
// locked goroutine pays a switch of OS threads each time it is woken (by
// a network read, say), since only its own thread may run it.
//
// An absolute wake-up time makes a sleep that a signal interrupted
// (EINTR: the Go runtime's preemption signals do) resume towards the
// same instant, without drifting. due must carry a monotonic reading (a
// time.Time from time.Now, or Add on one); a due without one (Round,
// Truncate, time.Unix) is waited for by its wall-clock time through
// time.Until. If the thread's timer slack cannot be read or set (it
// always can on Linux 2.6.28 and newer), the sleep keeps the slack the
// thread has.
func Until(due time.Time) {
	ts := unix.NsecToTimespec(mono0 + int64(due.Sub(t0)))
	if due.Round(0) == due {
		// No monotonic reading: from the wall clock, now.
		ts = unix.NsecToTimespec(monotonic() + int64(time.Until(due)))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	slack, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err == nil && slack != 1 {
		if unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) == nil {
			defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0)
		}
	}
	for {
		err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// Procs raises GOMAXPROCS by n, one P for each goroutine that will sleep
// in Until at the same time, and returns a function that sets it back. A
// goroutine in a system call keeps its P: the runtime's sysmon takes it
// back only after 20 µs to 10 ms, and not at all while another P is idle.
// Without the extra Ps the sleepers hold the Ps that the rest of the
// process needs: a goroutine handed work waits for sysmon, and so does
// the network poller that wakes a goroutine whose answer has arrived
// (measured in hack/corectlload: 16 workers sleeping in Until with
// GOMAXPROCS 2 read their answers at p50 0.5–0.9 ms after the send,
// against 0.1–0.2 ms when they slept in Go's timers). The extra Ps cost
// nothing while idle; they allow that many more goroutines to run at
// once, which the load tools, allocation-free in their timed phases, do
// not otherwise use.
func Procs(n int) (restore func()) {
	before := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(before + n)
	return func() { runtime.GOMAXPROCS(before) }
}

// monotonic is CLOCK_MONOTONIC now, in nanoseconds.
func monotonic() int64 {
	var ts unix.Timespec
	// CLOCK_MONOTONIC cannot fail on Linux.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Split divides an operation's send delay (due → sent) into the tool's
// own lateness and the wait for a free worker, for a load tool whose
// workers each have one operation in flight at a time: free is when the
// worker that sent the operation was free to send it (it had read the
// answer to its previous one), sent when it began to send. The part
// before free, if the worker was still busy at due, is wait: the
// program measured had not yet answered an earlier operation, so that
// time is the program's, and stays in the latency from the scheduled
// send. The rest, from the later of due and free to sent, is late: the
// tool's own wake-up and hand-off. All three are Unix nanoseconds (or
// any one clock's); late + wait is sent − due. A tool without workers
// (an operation never waits for one) passes free = due.
func Split(due, free, sent int64) (late, wait time.Duration) {
	ready := max(due, free)
	return time.Duration(sent - ready), time.Duration(ready - due)
}
