package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"runtime/trace"

	xtrace "golang.org/x/exp/trace"
)

// opLogCategory is the category of the runtime trace log events that
// name the operation a goroutine is handling (-load-trace): in the nodes'
// process "<node index> <record index>" when a node's Answer runs, in
// the tool "<operation index>" when an answer has been read.
const opLogCategory = "nodeload.op"

// logOp writes one opLogCategory event on the calling goroutine when a
// runtime execution trace is running.
func logOp(message func() string) {
	if trace.IsEnabled() {
		trace.Log(context.Background(), opLogCategory, message())
	}
}

// wakeup is how the goroutine that logged an operation got to run, from
// a runtime execution trace, in wall-clock Unix nanoseconds: unblocked
// (its last transition to runnable before the log: for a goroutine that
// waited on the network, when the runtime's poller handed it the socket),
// running (its last transition to running before the log), logged (the
// log event), and whether the unblocking had no P (sysmon's poll of the
// network, not a P that looked for work) and what it had waited on.
type wakeup struct {
	unblocked, running, logged int64
	noP                        bool
	reason                     string
}

// activity is what a traced process's Ps did over time, in wall-clock
// Unix nanoseconds: the intervals in which at least one goroutine ran
// (in order, disjoint) and those of the collector's concurrent mark
// phases.
type activity struct {
	busy, mark [][2]int64
	// first and last are the times of the trace's first and last events
	// after its first clock snapshot.
	first, last int64
}

// within is how much of [from, to] the intervals ivs (in order,
// disjoint) cover, in nanoseconds.
func within(ivs [][2]int64, from, to int64) int64 {
	if to <= from {
		return 0
	}
	i, _ := slices.BinarySearchFunc(ivs, from, func(iv [2]int64, t int64) int {
		if iv[1] <= t {
			return -1
		}
		return 1
	})
	var n int64
	for ; i < len(ivs) && ivs[i][0] < to; i++ {
		n += min(ivs[i][1], to) - max(ivs[i][0], from)
	}
	return n
}

// readWakeups reads a runtime execution trace and returns, for every
// opLogCategory log event, its message and the wake-up of the goroutine
// that wrote it, and when the process's goroutines ran. Times are
// converted to the wall clock by the trace's clock snapshots (Go 1.25
// and newer).
func readWakeups(r io.Reader) (map[string]wakeup, activity, error) {
	var act activity
	tr, err := xtrace.NewReader(r)
	if err != nil {
		return nil, act, err
	}
	running, busySince := 0, int64(0)
	onP := map[xtrace.GoID]bool{}
	markSince := int64(-1)
	type gstate struct {
		unblocked, running int64
		noP                bool
		reason             string
	}
	gs := map[xtrace.GoID]*gstate{}
	get := func(g xtrace.GoID) *gstate {
		s := gs[g]
		if s == nil {
			s = &gstate{}
			gs[g] = s
		}
		return s
	}
	blocked := map[xtrace.GoID]string{}
	out := map[string]wakeup{}
	var snapTrace, snapWall int64
	haveSnap := false
	wall := func(t xtrace.Time) int64 { return snapWall + int64(t) - snapTrace }
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, act, err
		}
		if haveSnap {
			t := wall(ev.Time())
			if act.first == 0 {
				act.first = t
			}
			act.last = max(act.last, t)
		}
		switch ev.Kind() {
		case xtrace.EventRangeBegin, xtrace.EventRangeActive:
			if strings.HasPrefix(ev.Range().Name, "GC concurrent mark") && haveSnap && markSince < 0 {
				markSince = wall(ev.Time())
			}
		case xtrace.EventRangeEnd:
			if strings.HasPrefix(ev.Range().Name, "GC concurrent mark") && markSince >= 0 {
				act.mark = append(act.mark, [2]int64{markSince, wall(ev.Time())})
				markSince = -1
			}
		case xtrace.EventSync:
			if cs := ev.Sync().ClockSnapshot; cs != nil {
				snapTrace, snapWall, haveSnap = int64(cs.Trace), cs.Wall.UnixNano(), true
			}
		case xtrace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != xtrace.ResourceGoroutine {
				continue
			}
			g := st.Resource.Goroutine()
			from, to := st.Goroutine()
			if haveSnap && to == xtrace.GoRunning && !onP[g] {
				onP[g] = true
				if running == 0 {
					busySince = wall(ev.Time())
				}
				running++
			} else if haveSnap && to != xtrace.GoRunning && onP[g] {
				delete(onP, g)
				running--
				if running == 0 {
					act.busy = append(act.busy, [2]int64{busySince, wall(ev.Time())})
				}
			}
			switch {
			case to == xtrace.GoWaiting && (from == xtrace.GoUndetermined || from == xtrace.GoWaiting):
				// a goroutine's state restated at a generation's start: no reason
			case to == xtrace.GoWaiting:
				blocked[g] = st.Reason
			case from == xtrace.GoWaiting && to == xtrace.GoRunnable:
				s := get(g)
				s.unblocked, s.noP, s.reason = wall(ev.Time()), ev.Proc() == xtrace.NoProc, blocked[g]
			case to == xtrace.GoRunning:
				s := get(g)
				s.running = wall(ev.Time())
				if from == xtrace.GoWaiting { // unblocked and run in one step
					s.unblocked, s.noP, s.reason = s.running, ev.Proc() == xtrace.NoProc, blocked[g]
				}
			}
		case xtrace.EventLog:
			l := ev.Log()
			if l.Category != opLogCategory {
				continue
			}
			if !haveSnap {
				return nil, act, errors.New("the trace has no clock snapshot (Go 1.25 and newer write one)")
			}
			s := get(ev.Goroutine())
			out[l.Message] = wakeup{unblocked: s.unblocked, running: s.running, logged: wall(ev.Time()), noP: s.noP, reason: s.reason}
		}
	}
	// What still ran, or marked, when the trace ended.
	if running > 0 {
		act.busy = append(act.busy, [2]int64{busySince, act.last})
	}
	if markSince >= 0 {
		act.mark = append(act.mark, [2]int64{markSince, act.last})
	}
	return out, act, nil
}

// wakeupReport prints, for the operations at or over the round trip's
// p99 and p99.9, how the node's reader and the tool's sender got to run
// after the kernel queued their bytes: on the socket → unblocked by the
// runtime's poller → running → the log (the frame read and decoded, or
// the answer read), the medians of each, and how many of those wake-ups
// came from a poll without a P (sysmon's: the process's P was busy, or
// its thread had no CPU). nodes maps "<node> <record>" and tool maps
// "<operation>" (readWakeups); node and rec give operation i's node and
// record index.
func wakeupReport(w io.Writer, ops []opTiming, node func(i int) (int, int), nodes, tool map[string]wakeup, nodesAct, toolAct activity) result {
	r := result{}
	type row struct {
		op            opTiming
		nw, tw        wakeup
		haveN, haveT  bool
		roundTripNano int64
	}
	var rows []row
	for i, o := range ops {
		if o.received == 0 || o.done == 0 || o.frameIn == 0 || o.answerIn == 0 {
			continue
		}
		n, j := node(i)
		nw, okN := nodes[strconv.Itoa(n)+" "+strconv.Itoa(j)]
		tw, okT := tool[strconv.Itoa(i)]
		rows = append(rows, row{op: o, nw: nw, tw: tw, haveN: okN && nw.unblocked != 0, haveT: okT && tw.unblocked != 0, roundTripNano: o.done - o.due})
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "wake-ups: no operation has both a trace record and receive stamps")
		return r
	}
	slices.SortFunc(rows, func(a, b row) int { return int(a.roundTripNano - b.roundTripNano) })
	med := func(v []int64) time.Duration {
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return time.Duration(v[(len(v)-1)/2]).Round(time.Microsecond)
	}
	fmt.Fprintf(w, "wake-ups from the load side's runtime traces (-load-trace; socket: the kernel's receive stamp; poller: the goroutine made runnable; run: it ran):\n")
	for _, t := range []struct {
		label, key string
		n          int
	}{{"all", "all", len(rows)}, {"the slowest 1%", "tail", len(rows) / 100}, {"the slowest 0.1%", "tail999", len(rows) / 1000}} {
		set := rows[len(rows)-max(1, t.n):]
		var sp, pr, rl, tsp, tpr, trl []int64
		noP, nN, tNoP, nT := 0, 0, 0, 0
		// How much of the wait for the poller the process's P spent
		// running goroutines (busy: Go's scheduler did not look at the
		// network; idle: its thread waited in epoll for the kernel to run
		// it), and in a collection's mark phase.
		var busyN, markN, busyT, markT, waitN, waitT int64
		reasons := map[string]int{}
		for _, x := range set {
			if x.haveN {
				sp = append(sp, x.nw.unblocked-x.op.frameIn)
				waitN += max(0, x.nw.unblocked-x.op.frameIn)
				busyN += within(nodesAct.busy, x.op.frameIn, x.nw.unblocked)
				markN += within(nodesAct.mark, x.op.frameIn, x.nw.unblocked)
				pr = append(pr, x.nw.running-x.nw.unblocked)
				rl = append(rl, x.op.received-x.nw.running)
				nN++
				if x.nw.noP {
					noP++
				}
				reasons[x.nw.reason]++
			}
			if x.haveT {
				tsp = append(tsp, x.tw.unblocked-x.op.answerIn)
				waitT += max(0, x.tw.unblocked-x.op.answerIn)
				busyT += within(toolAct.busy, x.op.answerIn, x.tw.unblocked)
				markT += within(toolAct.mark, x.op.answerIn, x.tw.unblocked)
				tpr = append(tpr, x.tw.running-x.tw.unblocked)
				trl = append(trl, x.op.done-x.tw.running)
				nT++
				if x.tw.noP {
					tNoP++
				}
			}
		}
		var rs []string
		for k, v := range reasons {
			rs = append(rs, fmt.Sprintf("%q %d", k, v))
		}
		slices.Sort(rs)
		share := func(part, whole int64) float64 { return 100 * float64(part) / float64(max(whole, 1)) }
		fmt.Fprintf(w, "  %s (%d operations): node: socket → poller %s, poller → run %s, run → read %s (medians; %d of %d unblocked by a poll without a P; waited on %s; of the socket → poller time the P ran goroutines %.0f%%, in a mark phase %.0f%%); tool: socket → poller %s, poller → run %s, run → read %s (%d of %d without a P; P busy %.0f%%, mark %.0f%%)\n",
			t.label, len(set), med(sp), med(pr), med(rl), noP, nN, strings.Join(rs, ", "), share(busyN, waitN), share(markN, waitN),
			med(tsp), med(tpr), med(trl), tNoP, nT, share(busyT, waitT), share(markT, waitT))
		if nN > 0 {
			r[t.key+"_node_busy_pct"] = share(busyN, waitN)
			r[t.key+"_node_poll_ms"], r[t.key+"_node_runq_ms"] = ms(med(sp)), ms(med(pr))
			r[t.key+"_node_noP_pct"] = 100 * float64(noP) / float64(nN)
		}
		if nT > 0 {
			r[t.key+"_tool_poll_ms"], r[t.key+"_tool_runq_ms"] = ms(med(tsp)), ms(med(tpr))
		}
	}
	return r
}

// loadWakeups reads the two load-side traces of -load-trace.
func loadWakeups(prefix string) (nodes, tool map[string]wakeup, nodesAct, toolAct activity, err error) {
	read := func(path string) (map[string]wakeup, activity, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, activity{}, err
		}
		defer f.Close()
		m, act, err := readWakeups(f)
		if err != nil {
			return nil, act, fmt.Errorf("%s: %w", path, err)
		}
		return m, act, nil
	}
	if nodes, nodesAct, err = read(prefix + ".nodes"); err != nil {
		return
	}
	tool, toolAct, err = read(prefix + ".tool")
	return
}

// gatewayActivityReport reads the gateway's runtime execution trace
// (-trace) and prints, for the operations the trace covers at or over
// the round trip's p99 and p99.9, how much of their time in the gateway
// its P spent running goroutines and in a collection's mark phase: on
// the way out from the tool's write's return to the frame on the node's
// socket (on loopback the request is on the gateway's socket once the
// write returned), and on the way back from the node's write to the answer on
// the tool's socket. A P that ran goroutines through most of that time
// was working on other messages (or collecting); one that was idle
// through it had nothing to run, so the time went to the gateway's
// thread waiting for its CPU or to the kernel.
func gatewayActivityReport(w io.Writer, path string, ops []opTiming, r result) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, act, err := readWakeups(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var cov []opTiming
	for _, o := range ops {
		if o.written != 0 && o.frameIn != 0 && o.answerIn != 0 && o.received != 0 && o.sent >= act.first && o.done <= act.last {
			cov = append(cov, o)
		}
	}
	if len(cov) == 0 {
		fmt.Fprintln(w, "the gateway's trace covers no operation with receive stamps")
		return nil
	}
	slices.SortFunc(cov, func(a, b opTiming) int { return int((a.done - a.due) - (b.done - b.due)) })
	fmt.Fprintf(w, "the gateway's P from its trace (-trace; %d operations covered):\n", len(cov))
	for _, t := range []struct {
		label, key string
		n          int
	}{{"all", "all", len(cov)}, {"the slowest 1%", "tail", len(cov) / 100}, {"the slowest 0.1%", "tail999", len(cov) / 1000}} {
		set := cov[len(cov)-max(1, t.n):]
		var out, outBusy, outMark, back, backBusy, backMark int64
		for _, o := range set {
			out += max(0, o.frameIn-o.written)
			outBusy += within(act.busy, o.written, o.frameIn)
			outMark += within(act.mark, o.written, o.frameIn)
			back += max(0, o.answerIn-o.answered)
			backBusy += within(act.busy, o.answered, o.answerIn)
			backMark += within(act.mark, o.answered, o.answerIn)
		}
		share := func(part, whole int64) float64 { return 100 * float64(part) / float64(max(whole, 1)) }
		fmt.Fprintf(w, "  %s (%d operations): out (request written → frame on the node's socket) %s in all, the P running goroutines %.0f%% of it, in a mark phase %.0f%%; back (node write → answer on the tool's socket) %s, busy %.0f%%, mark %.0f%%\n",
			t.label, len(set), time.Duration(out).Round(time.Microsecond), share(outBusy, out), share(outMark, out),
			time.Duration(back).Round(time.Microsecond), share(backBusy, back), share(backMark, back))
		r[t.key+"_gw_out_busy_pct"], r[t.key+"_gw_back_busy_pct"] = share(outBusy, out), share(backBusy, back)
	}
	return nil
}
