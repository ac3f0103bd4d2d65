// Command othertasks runs a command and then lists the machine's other
// threads that ran while it did: every thread that existed before the
// command started and still exists after it ended (so the command's own
// processes, started by it, are left out), with the CPU time it ran, how
// many times it was put on a CPU, the CPU it last ran on and the CPUs it
// may run on. A benchmark that pins its processes to CPUs shares them with
// these threads: a kernel thread or another program's worker that runs
// for milliseconds at a time on the pinned CPU delays whatever waits
// there for as long.
//
//	go run ./hack/othertasks -- taskset -c 1 bin/nodeload -caddy bin/caddy -pin-gateway 0 -rate 1000
//
// The command's own output goes to its standard output and error as
// usual; the list follows on standard output, the threads that ran
// longest first (-top of them). Times come from
// /proc/<pid>/task/<tid>/schedstat (nanoseconds on a CPU, time slices);
// the CPU from field 39 of .../stat and the allowed CPUs from
// Cpus_allowed_list in .../status.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// thread is what othertasks reads of one thread.
type thread struct {
	name    string
	cpu     int           // the CPU it last ran on
	ran     time.Duration // time on a CPU since it started
	slices  int64         // times it was put on a CPU
	allowed string        // Cpus_allowed_list
}

// key names a thread: its process and its own id.
type key struct{ pid, tid int }

func main() {
	top := flag.Int("top", 20, "how many threads to list")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: othertasks [-top N] -- command [args...]")
		os.Exit(2)
	}
	before := snapshot()
	start := time.Now()
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	runErr := cmd.Run()
	elapsed := time.Since(start)
	after := snapshot()
	fmt.Printf("other threads that ran during the command's %v:\n", elapsed.Round(time.Millisecond))
	for _, r := range ranDuring(before, after, *top) {
		fmt.Printf("  %9.1f ms in %6d slices  %-28s pid %d tid %d, last on CPU %d, allowed %s\n",
			float64(r.ran)/1e6, r.slices, r.name, r.k.pid, r.k.tid, r.cpu, r.allowed)
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "othertasks:", runErr)
		os.Exit(1)
	}
}

// delta is one thread's run time between two snapshots.
type delta struct {
	k key
	thread
}

// ranDuring returns the threads present in both snapshots that ran
// between them, the longest first, at most top of them; ran and slices
// are the differences.
func ranDuring(before, after map[key]thread, top int) []delta {
	var out []delta
	for k, a := range after {
		b, ok := before[k]
		if !ok || a.ran <= b.ran {
			continue
		}
		a.ran -= b.ran
		a.slices -= b.slices
		out = append(out, delta{k, a})
	}
	slices.SortFunc(out, func(x, y delta) int { return int(y.ran - x.ran) })
	return out[:min(top, len(out))]
}

// snapshot reads every thread of every process it can; a thread that
// ends while it is read is left out.
func snapshot() map[key]thread {
	m := map[key]thread{}
	stats, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/stat")
	for _, st := range stats {
		dir := filepath.Dir(st)
		tid, err1 := strconv.Atoi(filepath.Base(dir))
		pid, err2 := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dir))))
		if errors.Join(err1, err2) != nil {
			continue
		}
		t, err := readThread(dir)
		if err != nil {
			continue
		}
		m[key{pid, tid}] = t
	}
	return m
}

// readThread reads one thread's directory /proc/<pid>/task/<tid>.
func readThread(dir string) (thread, error) {
	var t thread
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return t, err
	}
	if t.name, t.cpu, err = parseStat(string(stat)); err != nil {
		return t, err
	}
	sched, err := os.ReadFile(filepath.Join(dir, "schedstat"))
	if err != nil {
		return t, err
	}
	if t.ran, t.slices, err = parseSchedstat(string(sched)); err != nil {
		return t, err
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return t, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			t.allowed = strings.TrimSpace(v)
		}
	}
	return t, nil
}

// parseStat returns the command name and the CPU last run on (field 39)
// of a .../stat line; the name is between the first '(' and the last ')'.
func parseStat(s string) (name string, cpu int, err error) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 > len(s) {
		return "", 0, errors.New("stat: no command name in parentheses")
	}
	f := strings.Fields(s[end+2:])
	if len(f) < 37 {
		return "", 0, fmt.Errorf("stat: %d fields after the command name, want at least 37", len(f))
	}
	cpu, err = strconv.Atoi(f[36])
	return s[open+1 : end], cpu, err
}

// parseSchedstat returns the time on a CPU and the time slices of a
// .../schedstat line ("<ns on CPU> <ns waiting> <slices>").
func parseSchedstat(s string) (time.Duration, int64, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return 0, 0, fmt.Errorf("schedstat: %d fields, want 3", len(f))
	}
	ran, err1 := strconv.ParseInt(f[0], 10, 64)
	n, err2 := strconv.ParseInt(f[2], 10, 64)
	return time.Duration(ran), n, errors.Join(err1, err2)
}
