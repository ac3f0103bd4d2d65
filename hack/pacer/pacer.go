// Package pacer waits until a due time precisely, for the open-loop load
// tools (hack/nodeload, hack/corectlload): an operation's latency is
// measured from its scheduled send, so whatever the tool adds between the
// due time and the actual send is counted against the program measured.
//
// Go's own timers (time.Sleep, time.Timer) are run by the runtime's
// scheduler, which waits for the next timer in epoll_pwait with a
// millisecond timeout: a timer fires up to about 1 ms late. A Pacer
// instead waits on an OS thread of its own, locked to the calling
// goroutine, in clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), with that
// thread's timer slack set to 1 ns (PR_SET_TIMERSLACK; a normal thread's
// default is 50 µs, which the kernel may add to any sleep of that thread
// to group wake-ups). What is left is the kernel's wake-up and the
// scheduler giving the thread a CPU, which on a loaded machine can still
// be late: the tools report that lateness apart (Split).
package pacer

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// A Pacer waits for due times on the OS thread of the goroutine that
// made it (New). Its methods must be called from that goroutine, which
// stays locked to the thread until Close.
type Pacer struct {
	// t0 and mono0 are the same instant read from Go's monotonic clock
	// and from CLOCK_MONOTONIC. On Linux the runtime's monotonic clock is
	// CLOCK_MONOTONIC read through the vDSO, counted from the process's
	// start, so the two differ by a constant (TestMonotonicClocksAgree):
	// a due time's CLOCK_MONOTONIC reading is mono0 + due.Sub(t0).
	t0    time.Time
	mono0 int64
	// slack is the thread's timer slack before New, in nanoseconds,
	// given back by Close.
	slack uintptr
}

// New locks the calling goroutine to its OS thread and sets that
// thread's timer slack to 1 ns (prctl PR_SET_TIMERSLACK), so that the
// kernel wakes its sleeps at the time asked and not up to 50 µs later.
// The goroutine must Close the Pacer when done, which gives the thread
// its slack back and unlocks it. Errors: the prctl calls' (the thread is
// unlocked again then).
func New() (*Pacer, error) {
	runtime.LockOSThread()
	slack, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err == nil {
		err = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	}
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("pacer: timer slack: %w", err)
	}
	p := &Pacer{slack: uintptr(slack)}
	p.t0, p.mono0 = time.Now(), monotonic()
	return p, nil
}

// Close gives the thread its timer slack back and unlocks the goroutine
// from it. It must be called from the goroutine that called New.
func (p *Pacer) Close() {
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, p.slack, 0, 0, 0)
	runtime.UnlockOSThread()
}

// Until returns once due has come (at once if it has already): it sleeps
// in clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) until due's
// CLOCK_MONOTONIC reading. An absolute wake-up time makes a sleep that a
// signal interrupted (EINTR: the Go runtime's preemption signals do)
// resume towards the same instant, without drifting. due must carry a
// monotonic reading (a time.Time from time.Now or Add on one); a due
// without one (Round, Truncate, Unix) is waited for by its wall-clock
// time through time.Until.
func (p *Pacer) Until(due time.Time) {
	ts := unix.NsecToTimespec(p.mono0 + int64(due.Sub(p.t0)))
	if due.Round(0) == due {
		// No monotonic reading: from the wall clock, now.
		ts = unix.NsecToTimespec(monotonic() + int64(time.Until(due)))
	}
	for {
		err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
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
