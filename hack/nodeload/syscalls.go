package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	xtrace "golang.org/x/exp/trace"
)

// syscallStats is what a runtime execution trace says of a process's
// system calls and hand-offs (the gateway's, -trace): counts the machine's
// load hardly moves, unlike the time each takes.
type syscallStats struct {
	// sites are the system calls made through the runtime's
	// entersyscall (every read, write, accept and close of a socket; not
	// the poller's epoll_wait or the runtime's futex and nanosleep), by
	// call site (syscallSite).
	sites map[string]*siteStats
	// calls is the sum over sites; lostP is how many of them returned
	// without their P (sysmon took it while the call ran, handoffp gave it
	// to another thread, and the calling goroutine waited to get one).
	calls, lostP int
	// pStarts is how often a P started running; pMoves how often it did
	// so on another OS thread than the last one that ran it.
	pStarts, pMoves int
	// created and unblocked count goroutines created and made runnable
	// after a wait (channel, lock, network, …); unblockedNoP those of
	// them made runnable with no P (a poll of the network by sysmon or by
	// a thread that had no P).
	created, unblocked, unblockedNoP int
	// threads is how many distinct OS threads ran a P.
	threads int
	// first and last are the wall-clock times (Unix ns) of the first and
	// last events after the trace's first clock snapshot.
	first, last int64
}

// siteStats are one call site's system calls: how many, how many lost
// their P, and their durations in ns (entry to exit, in the trace).
type siteStats struct {
	n, lostP int
	took     []int64
}

// syscallSite names a system call by its function in package syscall
// and the first two callers outside the runtime and the standard
// library's I/O packages (runtime, syscall, internal/…, net, os, bufio,
// io, crypto/tls), e.g. "syscall.write ← websocket.(*Conn).write ←
// hub.(*conn).writeBytes".
func syscallSite(st xtrace.Stack) string {
	call := ""
	var callers []string
	for f := range st.Frames() {
		fn := f.Func
		if call == "" && strings.HasPrefix(fn, "syscall.") && !strings.HasPrefix(fn, "syscall.Syscall") && !strings.HasPrefix(fn, "syscall.RawSyscall") {
			call = fn
			continue
		}
		if call == "" || libraryFrame(fn) {
			continue
		}
		if i := strings.LastIndex(fn, "/"); i >= 0 {
			fn = fn[i+1:]
		}
		callers = append(callers, fn)
		if len(callers) == 2 {
			break
		}
	}
	if call == "" {
		call = "(no syscall frame)"
	}
	return strings.Join(append([]string{call}, callers...), " ← ")
}

// libraryFrame reports whether fn is in a package syscallSite skips.
func libraryFrame(fn string) bool {
	for _, p := range []string{"runtime.", "syscall.", "internal/", "net.", "os.", "bufio.", "io.", "crypto/tls."} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// readSyscalls reads a runtime execution trace and counts its system
// calls by site, those that lost their P, the Ps' moves between threads
// and the goroutines' creations and wake-ups.
func readSyscalls(r io.Reader) (syscallStats, error) {
	s := syscallStats{sites: map[string]*siteStats{}}
	tr, err := xtrace.NewReader(r)
	if err != nil {
		return s, err
	}
	type inCall struct {
		site  *siteStats
		since xtrace.Time
	}
	calling := map[xtrace.GoID]inCall{}
	lastThread := map[xtrace.ProcID]xtrace.ThreadID{}
	threads := map[xtrace.ThreadID]bool{}
	var snapTrace, snapWall int64
	haveSnap := false
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s, err
		}
		if haveSnap {
			t := snapWall + int64(ev.Time()) - snapTrace
			if s.first == 0 {
				s.first = t
			}
			s.last = max(s.last, t)
		}
		switch ev.Kind() {
		case xtrace.EventSync:
			if cs := ev.Sync().ClockSnapshot; cs != nil {
				snapTrace, snapWall, haveSnap = int64(cs.Trace), cs.Wall.UnixNano(), true
			}
			continue
		case xtrace.EventStateTransition:
		default:
			continue
		}
		st := ev.StateTransition()
		switch st.Resource.Kind {
		case xtrace.ResourceGoroutine:
			g := st.Resource.Goroutine()
			from, to := st.Goroutine()
			switch {
			case from == xtrace.GoRunning && to == xtrace.GoSyscall:
				site := syscallSite(ev.Stack())
				ss := s.sites[site]
				if ss == nil {
					ss = &siteStats{}
					s.sites[site] = ss
				}
				ss.n++
				s.calls++
				calling[g] = inCall{ss, ev.Time()}
			case from == xtrace.GoSyscall:
				if c, ok := calling[g]; ok {
					c.site.took = append(c.site.took, int64(ev.Time()-c.since))
					if to != xtrace.GoRunning {
						c.site.lostP++
						s.lostP++
					}
					delete(calling, g)
				}
			case from == xtrace.GoNotExist && to == xtrace.GoRunnable:
				s.created++
			case from == xtrace.GoWaiting && to == xtrace.GoRunnable:
				s.unblocked++
				if ev.Proc() == xtrace.NoProc {
					s.unblockedNoP++
				}
			}
		case xtrace.ResourceProc:
			p := st.Resource.Proc()
			if _, to := st.Proc(); to == xtrace.ProcRunning {
				th := ev.Thread()
				s.pStarts++
				if prev, ok := lastThread[p]; ok && prev != th {
					s.pMoves++
				}
				lastThread[p] = th
				threads[th] = true
			}
		}
	}
	s.threads = len(threads)
	return s, nil
}

// syscallReport prints, from the gateway's trace, its system calls per
// operation by call site (with their median and p99 time inside the
// call), how many lost their P to sysmon, how often its P moved to
// another thread and its goroutines' hand-offs, per operation answered
// within the trace (ops: the dispatch phase's timeline; heartbeats and
// their acks in the same window are in the counts too).
func syscallReport(w io.Writer, path string, ops []opTiming, r result) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := readSyscalls(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	n := 0
	for _, o := range ops {
		if o.done != 0 && o.done >= s.first && o.done <= s.last {
			n++
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "the gateway's trace covers no answered operation")
		return nil
	}
	per := func(c int) float64 { return float64(c) / float64(n) }
	fmt.Fprintf(w, "the gateway's system calls from its trace (-trace; %d operations answered in its %s, heartbeats in the counts): %.2f per operation, %d of them (%.4f per operation) returned without their P (sysmon took it during the call); its P started running %.2f times per operation, on another thread than before %.4f times (%d threads ran it); goroutines created %.2f, made runnable %.2f per operation (%.2f without a P)\n",
		n, time.Duration(s.last-s.first).Round(time.Millisecond), per(s.calls), s.lostP, per(s.lostP), per(s.pStarts), per(s.pMoves), s.threads,
		per(s.created), per(s.unblocked), per(s.unblockedNoP))
	sites := make([]string, 0, len(s.sites))
	for k := range s.sites {
		sites = append(sites, k)
	}
	slices.SortFunc(sites, func(a, b string) int { return s.sites[b].n - s.sites[a].n })
	for _, k := range sites {
		ss := s.sites[k]
		if per(ss.n) < 0.005 {
			continue
		}
		slices.Sort(ss.took)
		q := func(p int) time.Duration {
			if len(ss.took) == 0 {
				return 0
			}
			return time.Duration(ss.took[min(len(ss.took)-1, len(ss.took)*p/100)])
		}
		fmt.Fprintf(w, "  %.2f per operation: %s (in the call p50 %s, p99 %s; %d lost the P)\n", per(ss.n), k, q(50), q(99), ss.lostP)
	}
	r["gateway_syscalls_per_op"] = per(s.calls)
	r["gateway_syscalls_lost_p_per_op"] = per(s.lostP)
	r["gateway_p_moves_per_op"] = per(s.pMoves)
	r["gateway_p_starts_per_op"] = per(s.pStarts)
	r["gateway_goroutines_created_per_op"] = per(s.created)
	r["gateway_unblocked_per_op"] = per(s.unblocked)
	return nil
}
