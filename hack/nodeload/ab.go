package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// variant is one gateway set-up of an A/B series: a name, a binary and
// the environment added to the gateway's (the -variant flag,
// "name:binary[:VAR=value,…]").
type variant struct {
	name, caddy, env string
}

// variants is the repeatable -variant flag.
type variants []variant

func (v *variants) String() string { return fmt.Sprint(*v) }

// Set parses "name:binary[:VAR=value,VAR=value]".
func (v *variants) Set(s string) error {
	name, rest, ok := strings.Cut(s, ":")
	if !ok || name == "" || rest == "" {
		return fmt.Errorf("-variant %q: want name:binary[:VAR=value,…]", s)
	}
	caddy, env, _ := strings.Cut(rest, ":")
	for _, kv := range strings.Split(env, ",") {
		if env != "" && !strings.Contains(kv, "=") {
			return fmt.Errorf("-variant %q: %q is not VAR=value", s, kv)
		}
	}
	for _, o := range *v {
		if o.name == name {
			return fmt.Errorf("-variant %q: the name %q is given twice", s, name)
		}
	}
	*v = append(*v, variant{name: name, caddy: caddy, env: env})
	return nil
}

// resultPrefix starts the one line of a run's figures that the A/B
// driver reads from each run (printResult).
const resultPrefix = "result:"

// result is one run's figures, as printResult writes them: milliseconds
// for times (+Inf for a hub quantile beyond the last finite bucket, NaN
// when there is none), percent of one core for CPU, MiB for the gateway's
// VmRSS with the nodes connected and at the end.
type result map[string]float64

// resultKeys are the figures of a run, in the order printed.
var resultKeys = []string{"ops_per_s", "ok", "total", "rtt_p50_ms", "rtt_p90_ms", "rtt_p99_ms", "rtt_p999_ms",
	"rtt_max_ms", "send_delay_p99_ms", "hub_p50_ms", "hub_p99_ms", "hub_p999_ms", "gateway_gcs", "gateway_cpu", "nodes_cpu", "tool_cpu", "rss_nodes_mib", "rss_end_mib",
	"phase_delay_p99_ms", "phase_out_p99_ms", "phase_node_p99_ms", "phase_back_p99_ms",
	"tail_delay_ms", "tail_out_ms", "tail_node_ms", "tail_back_ms", "tail_gw_gc_pct", "tail_nodes_gc_pct",
	"nodes_rss_mib", "gateway_us_per_msg", "nodes_us_per_msg", "tool_us_per_msg",
	"gateway_wait_ms", "nodes_wait_ms", "tool_wait_ms", "phase_gw_gcs", "phase_nodes_gcs",
	"gateway_sysmon_pct", "gateway_wakeups_per_s",
	"tail_write_ms", "tail_gwout_ms", "tail_nodewake_ms", "tail_gwback_ms", "tail_toolwake_ms",
	"tail999_delay_ms", "tail999_out_ms", "tail999_write_ms", "tail999_gwout_ms", "tail999_nodewake_ms", "tail999_node_ms",
	"tail999_back_ms", "tail999_gwback_ms", "tail999_toolwake_ms", "tail999_gw_gc_pct", "tail999_nodes_gc_pct", "gateway_major_faults"}

// printResult writes r as one line "result: key=value …" in resultKeys'
// order, NaN for a figure the run did not reach.
func printResult(w io.Writer, r result) {
	var b strings.Builder
	b.WriteString(resultPrefix)
	for _, k := range resultKeys {
		v, ok := r[k]
		if !ok {
			v = math.NaN()
		}
		fmt.Fprintf(&b, " %s=%s", k, strconv.FormatFloat(v, 'g', 6, 64))
	}
	fmt.Fprintln(w, b.String())
}

// parseResult reads a printResult line.
func parseResult(line string) (result, error) {
	rest, ok := strings.CutPrefix(line, resultPrefix)
	if !ok {
		return nil, errors.New("not a result line")
	}
	r := result{}
	for _, f := range strings.Fields(rest) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("result field %q is not key=value", f)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("result field %q: %w", f, err)
		}
		r[k] = x
	}
	return r, nil
}

// hubMS is the hub histogram's q-quantile in milliseconds for the result
// line: +Inf beyond its last finite bucket, NaN with no observation.
func hubMS(h hubHistogram, q float64) float64 {
	v, over, ok := h.quantile(q)
	switch {
	case !ok:
		return math.NaN()
	case over:
		return math.Inf(1)
	}
	return v * 1e3
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// abRun is one run of a series.
type abRun struct {
	round      int
	variant    string
	res        result // nil when the run printed no result
	err        error
	before     string // load average before and after
	after      string
	wall       time.Duration
	resultLine string
}

// runAB runs every variant rounds times, each run this binary with the
// same flags but -caddy and -gateway-env of the variant (args are the
// flags less -variant and -rounds), interleaved with the order rotating
// each round (round 2 starts with the second variant), and prints each
// run's figures as it ends and then, per variant, the median and range
// over its rounds.
func runAB(vs variants, rounds int, args []string, out io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "A/B: %d variants, %d rounds, order rotating; load average %s; %s\n", len(vs), rounds, loadAverage(), gitCommit())
	for _, v := range vs {
		fmt.Fprintf(out, "  %s: %s %s, environment %q\n", v.name, v.caddy, binaryVersion(v.caddy), v.env)
	}
	var runs []abRun
	began := time.Now()
	for r := range rounds {
		for i := range vs {
			v := vs[(i+r)%len(vs)]
			run := abRun{round: r + 1, variant: v.name, before: loadAverage()}
			argv := append(slices.Clone(args), "-caddy", v.caddy, "-gateway-env", v.env)
			cmd := exec.Command(self, argv...)
			cmd.Stderr = os.Stderr
			pipe, err := cmd.StdoutPipe()
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "== round %d, %s (load average %s)\n", run.round, v.name, run.before)
			start := time.Now()
			// Registered before the start: while an interrupt is handled
			// onSignal blocks, so no further run starts.
			exited := make(chan struct{})
			onSignal(func() { // the run undoes its own gateway and nodes
				if cmd.Process != nil {
					_ = cmd.Process.Signal(syscall.SIGTERM)
					select {
					case <-exited:
					case <-time.After(30 * time.Second):
					}
				}
			})
			if err := cmd.Start(); err != nil {
				return err
			}
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				line := sc.Text()
				fmt.Fprintln(out, "   ", line)
				if strings.HasPrefix(line, resultPrefix) {
					run.resultLine = line
					run.res, run.err = parseResult(line)
				}
			}
			if err := cmd.Wait(); err != nil {
				run.err = errors.Join(run.err, err)
			}
			close(exited)
			run.wall, run.after = time.Since(start), loadAverage()
			fmt.Fprintf(out, "== round %d, %s: %s in %s (load average after %s)\n", run.round, v.name,
				runVerdict(run), run.wall.Round(time.Second), run.after)
			runs = append(runs, run)
		}
	}
	printSummary(out, vs, runs)
	fmt.Fprintf(out, "series: %d runs in %s; load average now %s\n", len(runs), time.Since(began).Round(time.Second), loadAverage())
	for _, r := range runs {
		if r.err != nil || r.res == nil {
			return errors.New("not every run succeeded")
		}
	}
	return nil
}

func runVerdict(r abRun) string {
	switch {
	case r.res == nil:
		return fmt.Sprintf("no result (%v)", r.err)
	case r.err != nil:
		return fmt.Sprintf("failed (%v)", r.err)
	}
	return "ok"
}

// summaryKeys are the figures of the summary table, with their headings.
var summaryKeys = []struct{ key, head string }{
	{"rtt_p50_ms", "RTT p50"}, {"rtt_p99_ms", "RTT p99"}, {"rtt_p999_ms", "RTT p99.9"},
	{"hub_p99_ms", "hub p99"}, {"hub_p999_ms", "hub p99.9"}, {"send_delay_p99_ms", "send delay p99"},
	{"tool_late_p99_ms", "tool's lateness p99"}, {"worker_wait_p99_ms", "waiting for a worker p99"},
	{"gateway_gcs", "gateway GCs"}, {"gateway_cpu", "gateway CPU %"}, {"ops_per_s", "ops/s"},
	{"rss_end_mib", "gateway VmRSS at the end, MiB"},
	{"tail_out_ms", "slowest 1%: out"}, {"tail_back_ms", "slowest 1%: back"},
	{"gateway_wait_ms", "gateway waited for a CPU, ms"}, {"gateway_us_per_msg", "gateway CPU per message, µs"},
	{"gateway_sysmon_pct", "sysmon % of the gateway's CPU"}, {"gateway_wakeups_per_s", "gateway wake-ups/s"},
	{"tail999_delay_ms", "slowest 0.1%: send delay"}, {"tail999_gwout_ms", "slowest 0.1%: gateway, out"},
	{"tail999_nodewake_ms", "slowest 0.1%: node's wake-up"}, {"tail999_gwback_ms", "slowest 0.1%: gateway, back"},
	{"tail999_toolwake_ms", "slowest 0.1%: tool's wake-up"}, {"tail999_gw_gc_pct", "slowest 0.1% in a gateway GC, %"},
	{"tail999_nodes_gc_pct", "slowest 0.1% in a nodes' GC, %"},
}

// printSummary prints, per variant, each figure's median and range over
// the runs that gave a result (a failed run, one that missed the rate or
// an operation, still gives one and is counted as failed), and the load
// averages seen.
func printSummary(out io.Writer, vs variants, runs []abRun) {
	fmt.Fprintln(out, "summary (median [min–max] over the rounds; times in ms):")
	head := []string{"variant", "runs"}
	for _, k := range summaryKeys {
		head = append(head, k.head)
	}
	head = append(head, "load average before → after")
	fmt.Fprintln(out, "| "+strings.Join(head, " | ")+" |")
	fmt.Fprintln(out, "|"+strings.Repeat("---|", len(head)))
	for _, v := range vs {
		var got []result
		var loads []string
		failed := 0
		for _, r := range runs {
			if r.variant != v.name {
				continue
			}
			loads = append(loads, r.before+" → "+r.after)
			if r.res != nil {
				got = append(got, r.res)
			}
			if r.err != nil {
				failed++
			}
		}
		n := strconv.Itoa(len(got))
		if failed > 0 {
			n += fmt.Sprintf(" (%d failed)", failed)
		}
		row := []string{v.name, n}
		for _, k := range summaryKeys {
			var xs []float64
			for _, r := range got {
				xs = append(xs, r[k.key])
			}
			row = append(row, medianRange(xs))
		}
		row = append(row, strings.Join(loads, "; "))
		fmt.Fprintln(out, "| "+strings.Join(row, " | ")+" |")
	}
}

// medianRange formats the median and range of xs ("—" when empty).
func medianRange(xs []float64) string {
	if len(xs) == 0 {
		return "—"
	}
	s := slices.Clone(xs)
	slices.SortFunc(s, func(a, b float64) int {
		switch {
		case math.IsNaN(a) || a < b:
			return -1
		case math.IsNaN(b) || a > b:
			return 1
		}
		return 0
	})
	var med float64
	if n := len(s); n%2 == 1 {
		med = s[n/2]
	} else {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	if len(s) == 1 {
		return num(med)
	}
	return fmt.Sprintf("%s [%s–%s]", num(med), num(s[0]), num(s[len(s)-1]))
}

// num formats a figure: whole numbers from 100, one decimal from 10,
// else three significant digits ("over 50" for a hub quantile past the
// histogram's last finite bucket).
func num(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "over 50"
	case math.IsNaN(x):
		return "none"
	}
	switch a := math.Abs(x); {
	case a >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// gitCommit names the working tree's commit, for the record ("commit
// unknown" outside a git checkout).
func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "commit unknown"
	}
	return "commit " + strings.TrimSpace(string(out))
}

// binaryVersion is the gateway binary's own `sandgate-version` line.
func binaryVersion(caddy string) string {
	out, err := exec.Command(caddy, "sandgate-version").Output()
	if err != nil {
		return "(version unknown)"
	}
	return "(" + strings.TrimSpace(string(out)) + ")"
}

// abArgs returns the command line's flags less -variant and -rounds
// (each with its value, as "-f v", "-f=v", "--f v" or "--f=v").
func abArgs(argv []string) []string {
	var out []string
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		name := strings.TrimLeft(a, "-")
		base, _, hasValue := strings.Cut(name, "=")
		if strings.HasPrefix(a, "-") && (base == "variant" || base == "rounds") {
			if !hasValue {
				i++ // its value
			}
			continue
		}
		out = append(out, a)
	}
	return out
}
