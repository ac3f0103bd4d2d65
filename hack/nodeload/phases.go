package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/hack/gctrace"
)

// answerLog is the nodes' process's record of when each node got its
// requests: per node (by index in the node list), in arrival order, the
// wall-clock times (Unix nanoseconds) at which the request frame was
// queued on the node's socket (the kernel's receive stamp of the last
// read before it, stampConn: on loopback, when the gateway wrote it), at
// which the request had been read and decoded (sim.Config.Answer was
// called) and at which its response was built, just before the node
// writes it. The tool matches the j-th
// record of node n with the j-th operation it sent to n: operations to
// one node are len(nodes)/rate seconds apart, so they arrive in order.
type answerLog struct {
	mu    sync.Mutex
	times [][][3]int64
}

func newAnswerLog(nodes int) *answerLog { return &answerLog{times: make([][][3]int64, nodes)} }

// add records one request of node i and returns its index among node
// i's records.
func (l *answerLog) add(i int, frameIn, received, answered int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.times[i] = append(l.times[i], [3]int64{frameIn, received, answered})
	return len(l.times[i]) - 1
}

// save writes the records as JSON to path.
func (l *answerLog) save(path string) error {
	l.mu.Lock()
	data, err := json.Marshal(l.times)
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// loadAnswerLog reads a file answerLog.save wrote.
func loadAnswerLog(path string) ([][][3]int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var times [][][3]int64
	if err := json.Unmarshal(data, &times); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return times, nil
}

// opTiming is one operation's timeline in wall-clock Unix nanoseconds,
// all from the same clock (the tool and the nodes' process run on the
// same machine): due (the schedule's time), sent (the tool began writing
// the request), written (the tool's write returned: on loopback the
// request is on the gateway's socket), frameIn (the request frame was queued on the node's
// socket: the kernel's receive stamp, stampConn), received and answered
// (the node's answerLog record), answerIn (the gateway's answer was
// queued on the tool's socket, its receive stamp), done (the tool had
// read the whole answer). A time the tool has no record of is 0.
type opTiming struct {
	due, sent, written, frameIn, received, answered, answerIn, done int64
}

// phaseReport prints where the operations' time went: the quantiles of
// each segment of the timeline (send delay: due → sent; out: sent → the
// node had read the request, i.e. the tool's write, the gateway's HTTP
// server, API handler and hub, its WebSocket write and the nodes'
// process's read and decode; node: building the response; back: the
// node's write, the gateway's read, decode and HTTP answer, the tool's
// read), with "out" and "back" each cut where the kernel queued the bytes
// on the reader's socket (opTiming's frameIn and answerIn: what is before
// the cut is the writer's and the gateway's, what is after it is the
// reading process's wake-up), then for the operations at or over the
// round trip's p99 and p99.9 the median of each segment, and how many of
// the slowest 1 % overlapped a collection of the gateway or of the nodes'
// process (with the share of all operations that did, for comparison).
// It returns the result-line figures.
func phaseReport(w io.Writer, ops []opTiming, gw, nodes []gctrace.Window) result {
	r := result{}
	var full []opTiming
	stamped := true
	for _, o := range ops {
		if o.received != 0 && o.done != 0 {
			full = append(full, o)
			stamped = stamped && o.written != 0 && o.frameIn != 0 && o.answerIn != 0
		}
	}
	if len(full) == 0 {
		fmt.Fprintln(w, "phases: no operation has a node record")
		return r
	}
	type seg struct {
		key, name string
		of        func(opTiming) int64
	}
	segs := []seg{
		{"delay", "send delay", func(o opTiming) int64 { return o.sent - o.due }},
		{"out", "out (tool write → gateway → node read)", func(o opTiming) int64 { return o.received - o.sent }},
	}
	if stamped {
		segs = append(segs,
			seg{"write", "  … the tool's write", func(o opTiming) int64 { return o.written - o.sent }},
			seg{"gwout", "  … written → frame on the node's socket", func(o opTiming) int64 { return o.frameIn - o.written }},
			seg{"nodewake", "  … on the node's socket → read, decoded", func(o opTiming) int64 { return o.received - o.frameIn }})
	}
	segs = append(segs,
		seg{"node", "node", func(o opTiming) int64 { return o.answered - o.received }},
		seg{"back", "back (node write → gateway → tool read)", func(o opTiming) int64 { return o.done - o.answered }})
	if stamped {
		segs = append(segs,
			seg{"gwback", "  … node write → answer on the tool's socket", func(o opTiming) int64 { return o.answerIn - o.answered }},
			seg{"toolwake", "  … on the tool's socket → read", func(o opTiming) int64 { return o.done - o.answerIn }})
	}
	q := func(v []int64, p float64) time.Duration {
		i := min(len(v)-1, max(0, int(float64(len(v))*p/100+0.5)-1))
		return time.Duration(v[i]).Round(time.Microsecond)
	}
	fmt.Fprintf(w, "phases of %d operations (wall clock shared by the processes; \"on the … socket\": the kernel's receive stamp):\n", len(full))
	for _, s := range segs {
		v := make([]int64, len(full))
		for i, o := range full {
			v[i] = s.of(o)
		}
		slices.Sort(v)
		fmt.Fprintf(w, "  %-46s p50 %s, p99 %s, p99.9 %s, max %s\n", s.name, q(v, 50), q(v, 99), q(v, 99.9), time.Duration(v[len(v)-1]))
		r["phase_"+s.key+"_p99_ms"] = ms(q(v, 99))
	}
	// The slowest 1 % and 0.1 %: their segments, and the collections the
	// slowest 1 % met.
	slices.SortFunc(full, func(a, b opTiming) int { return int((a.done - a.due) - (b.done - b.due)) })
	slowest := func(label, prefix string, n int) []opTiming {
		tail := full[len(full)-max(1, n):]
		fmt.Fprintf(w, "  the slowest %s (%d operations, round trip ≥ %s):", label, len(tail), time.Duration(tail[0].done-tail[0].due).Round(time.Microsecond))
		for _, s := range segs {
			v := make([]int64, len(tail))
			for i, o := range tail {
				v[i] = s.of(o)
			}
			slices.Sort(v)
			fmt.Fprintf(w, " %s median %s;", s.key, q(v, 50))
			r[prefix+s.key+"_ms"] = ms(q(v, 50))
		}
		fmt.Fprintln(w)
		return tail
	}
	tail := slowest("1%", "tail_", len(full)/100)
	tail999 := slowest("0.1%", "tail999_", len(full)/1000)
	count := func(set []opTiming, ws []gctrace.Window) int {
		n := 0
		for _, o := range set {
			if gctrace.Overlaps(ws, o.due, o.done) {
				n++
			}
		}
		return n
	}
	if gw != nil || nodes != nil {
		tg, tn := count(tail, gw), count(tail, nodes)
		ag, an := count(full, gw), count(full, nodes)
		// The phase: from the first scheduled send to the last answer.
		from, to := full[0].due, full[0].done
		for _, o := range full {
			from, to = min(from, o.due), max(to, o.done)
		}
		inPhase := func(ws []gctrace.Window) int {
			n := 0
			for _, w := range ws {
				if w.Start <= to && from <= w.End {
					n++
				}
			}
			return n
		}
		fmt.Fprintf(w, "  collections (gctrace): gateway %d in the run, %d in the dispatch phase; nodes' process %d, %d; of the slowest 1%%, %.0f%% overlap a gateway collection (%.1f%% of all operations do), %.0f%% a collection of the nodes' process (%.1f%% of all); of the slowest 0.1%%, %d of %d and %d of %d\n",
			len(gw), inPhase(gw), len(nodes), inPhase(nodes), 100*float64(tg)/float64(len(tail)), 100*float64(ag)/float64(len(full)),
			100*float64(tn)/float64(len(tail)), 100*float64(an)/float64(len(full)),
			count(tail999, gw), len(tail999), count(tail999, nodes), len(tail999))
		r["phase_gw_gcs"], r["phase_nodes_gcs"] = float64(inPhase(gw)), float64(inPhase(nodes))
		r["tail_gw_gc_pct"], r["tail_nodes_gc_pct"] = 100*float64(tg)/float64(len(tail)), 100*float64(tn)/float64(len(tail))
		r["tail999_gw_gc_pct"] = 100 * float64(count(tail999, gw)) / float64(len(tail999))
		r["tail999_nodes_gc_pct"] = 100 * float64(count(tail999, nodes)) / float64(len(tail999))
	}
	return r
}

// phases is what the tool gathers after a dispatch phase to break the
// round trip down: the nodes' answerLog and, with -gctrace, the
// collections of the gateway and of the nodes' process.
type phases struct {
	answers        [][][3]int64
	gateway, nodes []gctrace.Window
}

// runDelay is the time the threads of process pid have spent runnable
// but waiting for a CPU, summed over its threads now alive: the second
// field of each /proc/<pid>/task/<tid>/schedstat (nanoseconds; the
// kernel's scheduler statistics). A thread that ended in between takes
// its share with it, so over a phase the difference is a lower bound.
func runDelay(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var total int64
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread ended
		}
		v, err := parseSchedstat(string(data))
		if err != nil {
			return 0, err
		}
		total += v
	}
	return time.Duration(total), nil
}

// parseSchedstat returns the run-queue wait, the second of the three
// numbers of a schedstat file ("<on cpu ns> <waiting ns> <timeslices>").
func parseSchedstat(s string) (int64, error) {
	st, err := parseSchedstatAll(s)
	return st.wait, err
}

// schedstat is one thread's line of /proc/<pid>/task/<tid>/schedstat:
// time on a CPU and time runnable but waiting for one (nanoseconds), and
// the timeslices it ran (each wake-up or preemption starts one).
type schedstat struct {
	run, wait, slices int64
}

// parseSchedstatAll parses the three numbers of a schedstat file.
func parseSchedstatAll(s string) (schedstat, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return schedstat{}, fmt.Errorf("schedstat %q: want three fields", s)
	}
	var v [3]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return schedstat{}, fmt.Errorf("schedstat %q: %w", s, err)
		}
		v[i] = n
	}
	return schedstat{run: v[0], wait: v[1], slices: v[2]}, nil
}

// threadStats is the schedstat line of every thread of process pid now
// alive, by thread ID.
func threadStats(pid int) (map[int]schedstat, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	out := make(map[int]schedstat, len(tasks))
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
		if err != nil {
			continue // the thread ended
		}
		st, err := parseSchedstatAll(string(data))
		if err != nil {
			return nil, err
		}
		out[tid] = st
	}
	return out, nil
}

// threadReport describes where a Go process's threads ran and waited
// between two threadStats snapshots: the runtime's sysmon thread (the
// second thread of a Go process, which the runtime starts before any
// other: the lowest thread ID after the process's own), the busiest
// other thread, and the rest together, each with its CPU time, its
// run-queue wait and its timeslices (wake-ups) per second of the window.
// It also returns sysmon's share of the process's CPU, in percent.
func threadReport(pid int, before, after map[int]schedstat, window time.Duration) (string, float64) {
	sysmon := 0
	for tid := range after {
		if tid != pid && (sysmon == 0 || tid < sysmon) {
			sysmon = tid
		}
	}
	delta := func(tid int) schedstat {
		a, b := after[tid], before[tid]
		return schedstat{run: a.run - b.run, wait: a.wait - b.wait, slices: a.slices - b.slices}
	}
	busiest, rest, total := 0, schedstat{}, int64(0)
	for tid := range after {
		d := delta(tid)
		total += d.run
		if tid != sysmon && (busiest == 0 || d.run > delta(busiest).run) {
			busiest = tid
		}
	}
	n := 0
	for tid := range after {
		if tid != sysmon && tid != busiest {
			d := delta(tid)
			rest.run, rest.wait, rest.slices = rest.run+d.run, rest.wait+d.wait, rest.slices+d.slices
			n++
		}
	}
	secs := window.Seconds()
	line := func(name string, d schedstat) string {
		return fmt.Sprintf("%s ran %s, waited %s, %.0f wake-ups/s", name, time.Duration(d.run).Round(time.Millisecond),
			time.Duration(d.wait).Round(time.Millisecond), float64(d.slices)/secs)
	}
	s := line(fmt.Sprintf("sysmon (thread %d)", sysmon), delta(sysmon)) + "; " +
		line(fmt.Sprintf("busiest thread (%d)", busiest), delta(busiest)) + "; " +
		line(fmt.Sprintf("%d others", n), rest)
	share := 0.0
	if total > 0 {
		share = 100 * float64(delta(sysmon).run) / float64(total)
	}
	return s, share
}

// pageFaults returns process pid's minor and major page faults so far
// (fields 10 and 12 of /proc/<pid>/stat, after the command name in
// parentheses). A major fault waits for a read from disk: a thread that
// takes one in the dispatch phase stalls for it, whatever its scheduler.
func pageFaults(pid int) (minor, major int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	return parseFaults(string(data))
}

// parseFaults reads the minor and major fault counts of a
// /proc/<pid>/stat line.
func parseFaults(stat string) (minor, major int64, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("stat %.60q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 10 {
		return 0, 0, fmt.Errorf("stat %.60q: too few fields", stat)
	}
	if minor, err = strconv.ParseInt(f[7], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("stat minflt: %w", err)
	}
	if major, err = strconv.ParseInt(f[9], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("stat majflt: %w", err)
	}
	return minor, major, nil
}
