// Command nodeload measures the node connection service of the built
// gateway: it starts bin/caddy with a generated configuration, connects N
// simulated sandbox nodes (package node/sim) that send heartbeats, and
// reports the gateway's resident memory per connection, its CPU use with
// the nodes heartbeating, and the round trip of provider operations sent
// at a fixed rate through the internal node API (p50, p99, max). Each
// round trip is timed from the operation's scheduled send time, so a send
// that leaves late (the tool's own goroutine or the CPU was busy) counts
// its delay: the load is open loop and nothing late drops out of the
// quantiles. The sends that left more than 1 ms late are counted. Beside
// them it reports the hub's own time over the same phase, the quantiles
// of the gateway's histogram sandgate_node_hub_duration_seconds read from
// Caddy's admin /metrics (on loopback) before and after it.
//
// It also breaks each round trip down (phaseReport): the nodes' process
// records when each node had read a request and built its answer
// (answerLog), and the tool, sharing the machine's wall clock, splits the
// round trip into the send delay, "out" (its write, the gateway's HTTP
// server, API handler and hub, the WebSocket write, the node's read),
// the node's own time and "back" (the node's write, the gateway's read
// and HTTP answer, the tool's read), with each segment's medians over the
// slowest 1 % and 0.1 %. With -gctrace the gateway and the nodes' process
// run with GODEBUG=gctrace=1 and it counts how many of the slowest 1 %
// and 0.1 % overlapped one of their collections. The nodes' and the
// tool's sockets take the kernel's receive stamps (stampConn), which cut
// "out" and "back" where the bytes reached the reader's socket: before
// it is the writer's and the gateway's part, after it the reading
// process's wake-up. With -load-trace the nodes' process and the tool
// write runtime execution traces of the phase and the tool says how
// their readers got to run (wakeupReport); with -trace, how busy the
// gateway's P was in the slowest operations' time in it
// (gatewayActivityReport).
//
// The simulated nodes' process and the tool collect garbage just before
// the dispatch phase and not again until it ends (-load-gc-in-phase lets
// them): one process holding 10,000 simulated hosts stalls all of them
// for its mark phase, and the tool beside it on the same CPU, which no
// real node's collection does to the others.
//
// With -pin-gateway <cpu> the gateway's threads are pinned to that CPU
// once it started; `make nodeload` runs the tool under taskset -c 1 and
// pins the gateway to CPU 0, so the gateway has a core of its own and the
// tool and the simulated nodes (which inherit the tool's affinity) share
// the other.
//
// Three processes take part, as in production where the nodes are other
// hosts: the gateway; a child of this tool that holds the simulated nodes
// (the same binary run with -role nodes, its GOGC set by -nodes-gogc);
// and this tool, which only schedules, sends and times the operations.
// The nodes' process sends every node's heartbeats from one goroutine
// (heartbeatAll), so it holds one goroutine per node, sim's reader
// (-per-node-heartbeats: sim's own heartbeat goroutine per node). So
// the nodes' goroutines and garbage collection do not run on the timing
// process's Go scheduler (they still share the machine's CPUs, and the
// CPU of each process is reported). The schedule waits with
// pacer.Until, its OS thread sleeping in clock_nanosleep with a timer
// slack of 1 ns (Go's own timers fire up to 1 ms late), and hands each
// operation to a goroutine of its own (-pacing workers: a pool of
// senders, each waiting with pacer.Until itself; the send delay is
// reported split into the tool's lateness and the wait for a free
// sender), and the API
// requests go over connections the tool keeps itself, each written and
// read on the goroutine that sends it, which costs about a third less
// CPU than net/http's client.
//
// Usage:
//
//	go run ./hack/nodeload [-caddy bin/caddy] [-nodes 10000] [-heartbeat 10s]
//		[-settle 20s] [-rate 1000] [-duration 30s] [-dial-concurrency 200]
//		[-gateway-output <file>] [-gateway-env GOGC=400,GOMEMLIMIT=768MiB]
//		[-tool-gogc 100] [-nodes-gogc 400] [-pin-gateway <cpu>]
//		[-rounds N] [-variant name:binary[:VAR=value,…] …] [-gctrace]
//		[-per-node-heartbeats] [-load-gc-in-phase] [-trace <file>]
//		[-load-trace <prefix>] [-sched-slice <d>] [-profile <file>]
//		[-pacing handoff|workers] [-workers 64]
//
// With -variant (repeated) or -rounds above 1 it runs an A/B series: each
// run is this tool again with the same flags and the variant's binary and
// gateway environment, every variant once per round, the order rotating
// each round (A B, B A, …); it prints each run's output as it goes, then
// per variant the median and range over the rounds of the round trip's
// p50/p99/p99.9, the hub's own p99/p99.9, the send delay, the gateway's
// CPU and the achieved rate, with the load average before and after each
// run and the commit. Every run ends its dispatch phase with one
// "result:" line of its figures (milliseconds, percent of a core), which
// the series reads.
//
// It raises its RLIMIT_NOFILE (the gateway inherits it) to the nodes plus
// 4,096, or as far as the hard limit allows when it may not raise that
// (without CAP_SYS_RESOURCE), and refuses to start when the hard limit is
// below the nodes plus 200: every node is one socket in the gateway and
// one in the nodes' process. It exits 1 with the reason when the gateway
// does not start, a node cannot connect or the nodes' process fails.
// With -rate 0 it measures the idle nodes only. The nodes answer every
// request at once (sim.Success), so the round trip is the gateway's own:
// API request → request frame → response frame → API answer, over
// loopback. Results are written to standard output; the
// figures of docs/node-connect.md come from it.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/hack/gctrace"
	"github.com/sandgate/sandgate/hack/pacer"
	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/api"
)

func main() {
	var o options
	flag.StringVar(&o.caddy, "caddy", "bin/caddy", "the gateway binary")
	flag.IntVar(&o.nodes, "nodes", 10000, "simulated nodes")
	flag.DurationVar(&o.heartbeat, "heartbeat", 10*time.Second, "heartbeat interval of each node; the gateway's idle timeout and online window keep their default ratios to it (3.5 and 4.5 intervals), so at most 13m20s")
	flag.DurationVar(&o.settle, "settle", 0, "steady-state window, after a warm-up of one heartbeat interval (default two intervals)")
	flag.IntVar(&o.rate, "rate", 1000, "operations per second through the internal API")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "length of the dispatch phase")
	flag.IntVar(&o.dialConcurrency, "dial-concurrency", 200, "connections opened at once")
	flag.IntVar(&o.toolGOGC, "tool-gogc", 100, "GOGC of this process, which times the operations; the gateway keeps its own environment")
	flag.BoolVar(&o.loadGCInPhase, "load-gc-in-phase", false, "let the simulated nodes' process and this tool collect garbage during the dispatch phase, as before 2026-12-06 (default: each collects once just before the phase and not again until it ends: one process holding 10,000 simulated hosts would otherwise stall all of them, and the tool beside them on the same CPU, for the length of its mark phase, a stall no real node's collection causes the others)")
	flag.StringVar(&o.pacing, "pacing", "handoff", "how the dispatch phase waits for each operation's due time (package hack/pacer: an OS thread sleeping in clock_nanosleep, not Go's timers): handoff (one schedule goroutine waits and hands each operation to a goroutine of its own) or workers (-workers goroutines, each waiting itself and sending the operation; one still waiting for an earlier answer at a due time makes that operation wait, reported apart)")
	flag.IntVar(&o.workers, "workers", 64, "senders of the dispatch phase with -pacing workers")
	flag.IntVar(&o.nodesGOGC, "nodes-gogc", 400, "GOGC of the child process that holds the simulated nodes (-1: off; they garbage-collect on the same CPUs as the gateway)")
	flag.StringVar(&o.role, "role", "", "internal: \"nodes\" runs the simulated nodes' process (started by the tool itself)")
	flag.StringVar(&o.nodesFile, "nodes-file", "", "internal: the nodes' process's node list")
	flag.StringVar(&o.url, "url", "", "internal: the gateway's URL, for the nodes' process")
	flag.StringVar(&o.profile, "profile", "", "file for a CPU profile of the gateway during the dispatch phase, with <file>.heap and <file>.goroutine taken after the steady state and <file>.heap-after after the dispatch phase (its allocations: go tool pprof -sample_index=alloc_space -base <file>.heap <file>.heap-after; from Caddy's admin endpoint, on loopback)")
	flag.StringVar(&o.trace, "trace", "", "file for a runtime execution trace of the gateway during the dispatch phase (go tool trace <file>; go tool trace -pprof=sched <file> gives where goroutines waited for a CPU; from Caddy's admin endpoint, on loopback)")
	flag.StringVar(&o.loadTrace, "load-trace", "", "file prefix for runtime execution traces of the load side during the dispatch phase: <prefix>.nodes (the simulated nodes' process) and <prefix>.tool (this tool); go tool trace <file>")
	flag.StringVar(&o.gatewayEnv, "gateway-env", "", "comma-separated VAR=value added to the gateway's environment only (e.g. GOGC=400,GOMEMLIMIT=768MiB)")
	flag.IntVar(&o.pinGateway, "pin-gateway", -1, "CPU to pin every thread of the gateway to once it started (as taskset -a -p -c <cpu> <pid>); -1: not pinned. `make nodeload` runs the tool under taskset -c 1 with -pin-gateway 0, so the gateway has a core of its own")
	flag.DurationVar(&o.schedSlice, "sched-slice", 0, "EEVDF time slice (sched_setattr, Linux 6.12 and newer; 100µs to 100ms) set on every thread of the gateway, the simulated nodes' process and this tool at the start of the dispatch phase, so that a woken thread preempts a running one sooner; part of the measurement, not a setting the gateway needs (0: the kernel's default slice)")
	flag.BoolVar(&o.perNodeHeartbeats, "per-node-heartbeats", false, "the simulated nodes' process as before 2026-12-05: a heartbeat goroutine and ticker and a 1 KiB write buffer per node (default: one goroutine sends every node's heartbeats, write buffers pooled)")
	flag.BoolVar(&o.gctrace, "gctrace", false, "run the gateway and the nodes' process with GODEBUG=gctrace=1 and report how many of the slowest 1% of operations overlapped one of their collections")
	flag.BoolVar(&o.caddyMetrics, "caddy-metrics", true, "turn on Caddy's HTTP metrics (the metrics global option) in the gateway's configuration, as the shipped Caddyfile does: every internal API request is then counted in caddy_http_* (before 2026-12-06 the tool's configuration had them off)")
	flag.StringVar(&o.internalAPI, "internal-api", "app", "where the dispatch phase sends its operations: app (the default, as the shipped configuration serves them: the sandgate app's own listener of the internal node API, the nodes block's api on a free loopback port, outside Caddy's HTTP server; the site keeps its handler for the tool's other calls) or site (the sandbox_node_api handler on the gateway's Caddy site)")
	flag.StringVar(&o.gatewayOutput, "gateway-output", "", "file for the gateway's standard output and error (e.g. with GODEBUG=gctrace=1); default discarded")
	var vs variants
	flag.Var(&vs, "variant", "name:binary[:VAR=value,…]: one gateway set-up of an A/B series (repeat the flag; with none, -rounds runs -caddy and -gateway-env alone); each run is this tool with the other flags, the variant's binary as -caddy and its environment as -gateway-env")
	rounds := flag.Int("rounds", 1, "rounds of an A/B series: every variant once per round, the order rotating each round; then the median and range of each variant's figures")
	flag.Parse()
	if o.pacing != "handoff" && o.pacing != "workers" {
		fmt.Fprintf(os.Stderr, "nodeload: -pacing %q: handoff or workers\n", o.pacing)
		os.Exit(2)
	}
	if o.internalAPI != "site" && o.internalAPI != "app" {
		fmt.Fprintf(os.Stderr, "nodeload: -internal-api %q: site or app\n", o.internalAPI)
		os.Exit(2)
	}
	if o.workers < 1 {
		fmt.Fprintf(os.Stderr, "nodeload: -workers %d: at least 1\n", o.workers)
		os.Exit(2)
	}
	if o.role == "" {
		handleSignals()
	}
	if o.role == "" && (len(vs) > 0 || *rounds > 1) {
		if len(vs) == 0 {
			vs = variants{{name: "gateway", caddy: o.caddy, env: o.gatewayEnv}}
		}
		if *rounds < 1 {
			fmt.Fprintln(os.Stderr, "nodeload: -rounds must be at least 1")
			os.Exit(2)
		}
		if err := runAB(vs, *rounds, abArgs(os.Args[1:]), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "nodeload:", err)
			os.Exit(1)
		}
		return
	}
	if o.settle == 0 {
		o.settle = 2 * o.heartbeat
	}
	// The online window is a gateway duration, at most 1h.
	if _, online := gatewayTimers(o.heartbeat); o.heartbeat <= 0 || online > time.Hour {
		fmt.Fprintln(os.Stderr, "nodeload: -heartbeat must be positive and at most 13m20s (the gateway's online window, 4.5 intervals, is at most 1h)")
		os.Exit(2)
	}
	if o.role == "nodes" {
		if err := runNodes(o); err != nil {
			fmt.Fprintln(os.Stderr, "nodeload nodes:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "nodeload:", err)
		os.Exit(1)
	}
}

type options struct {
	caddy           string
	nodes           int
	heartbeat       time.Duration
	settle          time.Duration
	rate            int
	duration        time.Duration
	dialConcurrency int
	gatewayOutput   string
	gctrace         bool
	// caddyMetrics: the metrics global option in the gateway's
	// Caddyfile, as shipped.
	caddyMetrics bool
	// perNodeHeartbeats: sim's own heartbeat goroutine per node.
	perNodeHeartbeats bool
	gatewayEnv        string
	pinGateway        int
	schedSlice        time.Duration
	profile           string
	trace             string
	loadTrace         string
	toolGOGC          int
	loadGCInPhase     bool
	// pacing is how the dispatch phase waits for each operation's due
	// time (pacer.Until): "handoff" (one schedule goroutine starts a
	// goroutine per operation) or "workers" (workers goroutines, each
	// waiting and sending itself).
	pacing    string
	workers   int
	nodesGOGC int
	// internalAPI is where the dispatch phase sends its operations:
	// "site" (the Caddy site's sandbox_node_api) or "app" (the sandgate
	// app's own listener, the nodes block's api, at appAPIAddr).
	internalAPI string
	// appAPIAddr is the loopback host:port of the app's listener with
	// internalAPI "app" (chosen by run), else "".
	appAPIAddr      string
	role, nodesFile string
	url             string
}

// simNode is one enrolled simulated node.
type simNode struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

var (
	installation = "11111111-2222-4333-8444-555555555555"
	fingerprint  = strings.Repeat("f", 64)
	specDigest   = strings.Repeat("5a", 32)
)

func run(o options) error {
	debug.SetGCPercent(o.toolGOGC)

	// One socket per node in each process, plus the API client and the
	// rest: up to 4,096 more when the hard limit allows, at least 200.
	limit, err := raiseNoFile(o.nodes+200, o.nodes+4096)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nodeload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	onSignal(func() { _ = os.RemoveAll(dir) })

	nodes := make([]simNode, o.nodes)
	var rec strings.Builder
	rec.WriteString("nodes:\n")
	for i := range nodes {
		nodes[i] = simNode{ID: uuid.NewString(), Secret: randomHex(24)}
		fmt.Fprintf(&rec, "  - {node_id: %q, enabled: true, credential_sha256: %q, installation_id: %q, provider: docker, backend_fingerprint: %q, deployment_generation: 1, specification_digest: %q}\n",
			nodes[i].ID, sum(nodes[i].Secret), installation, fingerprint, specDigest)
	}
	apiToken := randomHex(24)
	port, err := freeport.Port()
	if err != nil {
		return err
	}
	files := map[string]string{
		"nodes.yaml":       rec.String(),
		"hmac.key":         randomHex(32),
		"credentials.yaml": "credentials:\n  - {id: c, enabled: true, projectNamespace: p, clusterId: c}\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	// Caddy's admin endpoint, on loopback: its /metrics gives the hub's
	// own time (hubMetric), the profiles and the trace.
	adminPort, err := freeport.Port()
	if err != nil {
		return err
	}
	admin := "127.0.0.1:" + adminPort
	if o.internalAPI == "app" {
		apiPort, err := freeport.Port()
		if err != nil {
			return err
		}
		o.appAPIAddr = "127.0.0.1:" + apiPort
	}
	caddyfile := gatewayCaddyfile(o, admin, dir, port, apiToken)
	var output io.Writer
	if o.gatewayOutput != "" {
		out, err := os.Create(o.gatewayOutput)
		if err != nil {
			return err
		}
		defer out.Close()
		output = out
	}
	var genv []string
	if o.gatewayEnv != "" {
		genv = strings.Split(o.gatewayEnv, ",")
	}
	var gwGC, nodesGC *gctrace.Watch
	if o.gctrace {
		genv = withGODEBUG(genv, "gctrace=1")
		gwGC = &gctrace.Watch{Next: output, KeepGC: true}
		output = gwGC
		nodesGC = &gctrace.Watch{Next: os.Stderr}
	}
	gw, err := gatewayproc.Start(o.caddy, dir, caddyfile, output, genv...)
	if err != nil {
		return err
	}
	defer gw.Stop()
	onSignal(gw.Stop)
	pid := gw.Pid
	base := "http://127.0.0.1:" + port
	// Provisioning tens of thousands of enrolled nodes takes seconds.
	if err := gw.WaitListeningFor("127.0.0.1:"+port, startLimit); err != nil {
		return err
	}
	if err := gw.WaitListeningFor(admin, startLimit); err != nil { // /metrics, profiles, trace
		return err
	}
	if o.appAPIAddr != "" {
		if err := gw.WaitListeningFor(o.appAPIAddr, startLimit); err != nil {
			return err
		}
	}
	// The listener can be up before a large node file is loaded; connect
	// only once the API lists every node (polling, with a deadline).
	for deadline := time.Now().Add(startLimit); ; {
		st, err := apiStatus(base, apiToken)
		if err == nil && st.total == o.nodes {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway did not list the %d enrolled nodes within %s (last: %d, %v)", o.nodes, startLimit, st.total, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the API
	}
	// Pinned once the gateway has loaded its nodes, when its runtime has
	// started the threads it keeps; later ones inherit the affinity.
	if o.pinGateway >= 0 {
		threads, err := pinProcess(pid, o.pinGateway)
		if err != nil {
			return err
		}
		fmt.Printf("gateway pinned to CPU %d (%d threads)\n", o.pinGateway, threads)
	}
	toolCPUs, err := cpusOf(0)
	if err != nil {
		return err
	}
	fmt.Printf("this tool and the simulated nodes run on CPUs %s\n", toolCPUs)
	fmt.Printf("nodeload: %s (pid %d) on %s; %d nodes, heartbeat %s; RLIMIT_NOFILE %d; %d CPUs; gateway environment %q (GOGC=%q), load tool GOGC=%d; load average %s\n",
		o.caddy, pid, base, o.nodes, o.heartbeat, limit, runtime.NumCPU(), o.gatewayEnv, os.Getenv("GOGC"), o.toolGOGC, loadAverage())
	rssIdle, _, err := gw.Memory()
	if err != nil {
		return err
	}

	// Connect: the nodes live in a child process (runNodes).
	nodesFile := filepath.Join(dir, "sims.json")
	data, err := json.Marshal(nodes)
	if err != nil {
		return err
	}
	if err := os.WriteFile(nodesFile, data, 0o600); err != nil {
		return err
	}
	sims, err := startNodes(o, nodesFile, base, nodesGC)
	if err != nil {
		return err
	}
	defer sims.stop()
	onSignal(func() { _ = sims.cmd.Process.Kill() })
	connected, err := sims.call("connect")
	if err != nil {
		return err
	}
	fmt.Printf("nodes' process (pid %d, GOGC=%d): %s\n", sims.cmd.Process.Pid, o.nodesGOGC, connected)

	// Steady state with heartbeats: after one interval every node has
	// started its heartbeats, then a window of whole intervals.
	time.Sleep(o.heartbeat) // warm-up before the measurement window
	acks0, err := sims.acks()
	if err != nil {
		return err
	}
	cpu0, t0, err := gatewayproc.CPUTicks(pid)
	if err != nil {
		return err
	}
	time.Sleep(o.settle) // the measurement window itself, not synchronisation
	cpu1, t1, err := gatewayproc.CPUTicks(pid)
	if err != nil {
		return err
	}
	acks1, err := sims.acks()
	if err != nil {
		return err
	}
	rss, _, err := gw.Memory()
	if err != nil {
		return err
	}
	hbRate := float64(acks1-acks0) / t1.Sub(t0).Seconds()
	hbCPU := gatewayproc.CPUPercent(cpu1-cpu0, t1.Sub(t0))
	fmt.Printf("steady state over %s: %.0f heartbeats/s acknowledged, gateway CPU %.1f%% of one core (%.0f µs per heartbeat)\n",
		o.settle, hbRate, hbCPU, hbCPU/100*1e6/max(hbRate, 1))
	fmt.Printf("gateway VmRSS: %.1f MiB idle, %.1f MiB with %d nodes: %.1f KiB per connection\n",
		float64(rssIdle)/1024, float64(rss)/1024, o.nodes, float64(rss-rssIdle)/float64(o.nodes))
	nodesRSS, _, err := gatewayproc.Memory(sims.cmd.Process.Pid)
	if err != nil {
		return err
	}
	fmt.Printf("simulated nodes' process VmRSS: %.1f MiB (%.1f KiB per node)\n", float64(nodesRSS)/1024, float64(nodesRSS)/float64(o.nodes))
	if st, err := apiStatus(base, apiToken); err == nil {
		fmt.Printf("API list: %d nodes, %d online\n", st.total, st.online)
	} else {
		return err
	}
	if o.profile != "" {
		stack, heap, err := runtimeMemory("http://" + admin)
		if err != nil {
			return err
		}
		fmt.Printf("gateway runtime: goroutine stacks %.1f MiB (%.1f KiB per connection), heap in use %.1f MiB (/debug/pprof/heap?debug=1)\n",
			float64(stack)/(1<<20), float64(stack)/1024/float64(o.nodes), float64(heap)/(1<<20))
		if err := gatewayproc.Save("http://"+admin+"/debug/pprof/heap", o.profile+".heap", 0); err != nil {
			return err
		}
		if err := gatewayproc.Save("http://"+admin+"/debug/pprof/goroutine", o.profile+".goroutine", 0); err != nil {
			return err
		}
	}

	// Dispatch at a fixed rate.
	if o.rate > 0 && o.duration > 0 {
		var profiled, traced chan error
		if o.profile != "" {
			profiled = make(chan error, 1)
			go func() { profiled <- gatewayproc.SaveCPUProfile("http://"+admin, o.duration, o.profile) }()
		}
		if o.trace != "" {
			traced = make(chan error, 1)
			go func() {
				traced <- gatewayproc.SaveTrace("http://"+admin, o.duration+2*time.Second, o.trace) // past the phase's last answers
			}()
		}
		// The run's figures, one result: line at its end, even when it
		// fails (the A/B series reads it).
		res := result{"rss_nodes_mib": float64(rss) / 1024, "nodes_rss_mib": float64(nodesRSS) / 1024}
		defer printResult(os.Stdout, res)
		timings := func() (phases, error) {
			path := filepath.Join(dir, "answers.json")
			if _, err := sims.call("timings " + path); err != nil {
				return phases{}, err
			}
			times, err := loadAnswerLog(path)
			p := phases{answers: times}
			if gwGC != nil {
				p.gateway, p.nodes = gwGC.Snapshot(), nodesGC.Snapshot()
			}
			return p, err
		}
		timeline, err := dispatch(o, base, "http://"+admin, apiToken, nodes, pid, sims, res, timings)
		if rssEnd, _, merr := gw.Memory(); merr == nil {
			res["rss_end_mib"] = float64(rssEnd) / 1024
		}
		if profiled != nil {
			err = errors.Join(err, <-profiled,
				gatewayproc.Save("http://"+admin+"/debug/pprof/heap", o.profile+".heap-after", 0))
		}
		if traced != nil {
			terr := <-traced
			if terr == nil && timeline != nil {
				terr = gatewayActivityReport(os.Stdout, o.trace, timeline, res)
			}
			if terr == nil && timeline != nil {
				terr = syscallReport(os.Stdout, o.trace, timeline, res)
			}
			err = errors.Join(err, terr)
		}
		if err != nil {
			return err
		}
	}

	dropped, err := sims.call("dropped")
	if err != nil {
		return err
	}
	rssEnd, _, _ := gw.Memory()
	nodesEnd, _, _ := gatewayproc.Memory(sims.cmd.Process.Pid)
	fmt.Printf("end: %s; gateway VmRSS %.1f MiB, simulated nodes' process %.1f MiB; load average %s\n", dropped, float64(rssEnd)/1024, float64(nodesEnd)/1024, loadAverage())
	if !strings.HasPrefix(dropped, "0 of ") {
		return errors.New("connections dropped")
	}
	return sims.stop()
}

// gatewayCaddyfile is the gateway's Caddyfile: its admin endpoint at
// admin, its files (gateway.log, hmac.key, credentials.yaml, nodes.yaml)
// in dir, the node connect and node API routes on 127.0.0.1:port, the API
// token apiToken (only its SHA-256 is written), the node timers of
// o.heartbeat (gatewayTimers), with o.caddyMetrics the metrics global
// option, and with o.appAPIAddr the nodes block's api there (the sandgate
// app's own listener of the internal node API, the same token).
func gatewayCaddyfile(o options, admin, dir, port, apiToken string) string {
	idle, online := gatewayTimers(o.heartbeat)
	// Off, no line at all: a blank one is a Caddyfile Caddy warns is not
	// formatted.
	metrics := ""
	if o.caddyMetrics {
		metrics = "\n\tmetrics"
	}
	appAPI := ""
	if o.appAPIAddr != "" {
		appAPI = fmt.Sprintf("\n\t\t\tapi %s {\n\t\t\t\ttoken_sha256 %s\n\t\t\t}", o.appAPIAddr, sum(apiToken))
	}
	return fmt.Sprintf(`{
	admin %s%s
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	log {
		output file %s
		level WARN
	}
	sandgate {
		token_key k1 HS256 %s
		credentials file %s
		nodes {
			credentials file %s
			heartbeat_interval %s
			idle_timeout %s
			online_window %s%s
		}
	}
}

http://127.0.0.1:%s {
	sandbox_node_connect
	sandbox_node_api {
		token_sha256 %s
	}
}
`, admin, metrics, filepath.Join(dir, "gateway.log"), filepath.Join(dir, "hmac.key"), filepath.Join(dir, "credentials.yaml"),
		filepath.Join(dir, "nodes.yaml"), o.heartbeat, idle, online, appAPI, port, sum(apiToken))
}

// dispatch sends operations at o.rate for o.duration, open loop: each
// operation starts on its schedule on its own goroutine, whatever the
// previous ones do.
//
// It returns every operation's timeline once the operations ran (nil
// before), also with an error about the run.
func dispatch(o options, base, admin, token string, nodes []simNode, pid int, sims *nodesProc, r result, timings func() (phases, error)) (_ []opTiming, err error) {
	nodesPid := sims.cmd.Process.Pid
	client := &apiClient{addr: strings.TrimPrefix(base, "http://"), idle: make(chan *apiConn, 1024)}
	if o.appAPIAddr != "" {
		client.addr = o.appAPIAddr
		fmt.Printf("operations go to the sandgate app's own internal node API listener on %s, outside Caddy's HTTP server (-internal-api app)\n", client.addr)
	} else {
		fmt.Printf("operations go to the Caddy site's sandbox_node_api on %s (-internal-api site)\n", client.addr)
	}
	defer client.close()
	body := func(i int) string {
		return fmt.Sprintf(`{"operation":"info","deployment_generation":1,"timeout_ms":10000,"reference":{"tenant_id":"t","environment_id":"e","allocation_id":"a%d"}}`, i)
	}
	// Every node's request, written out once before the phase (the
	// allocation id is the node's index), so that a send costs the tool
	// one write and the answer's parse, not building a request.
	host := client.addr
	raw := make([][]byte, len(nodes))
	for i, n := range nodes {
		b := body(i)
		raw[i] = fmt.Appendf(nil, "POST %s/%s/operations HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			api.Prefix, n.ID, host, token, len(b), b)
	}
	// one sends operation i and returns its latency measured from due,
	// the time the schedule meant it to be sent (not when its goroutine
	// got to run), and the delay from due to the actual send.
	one := func(op, i int, due time.Time, tl *opTiming) (lat, delay time.Duration, outcome string, err error) {
		sent := time.Now()
		delay = sent.Sub(due)
		status, data, ex, err := client.do(raw[i%len(raw)])
		done := time.Now()
		if op >= 0 {
			logOp(func() string { return strconv.Itoa(op) })
		}
		lat = done.Sub(due)
		if tl != nil {
			tl.due, tl.sent, tl.done = due.UnixNano(), sent.UnixNano(), done.UnixNano()
			tl.written, tl.answerIn = ex.written, ex.answerIn
		}
		if err != nil {
			return 0, delay, "", err
		}
		if status != http.StatusOK {
			return lat, delay, "http_" + strconv.Itoa(status), nil
		}
		if !strings.Contains(string(data), `"outcome":"success"`) {
			return lat, delay, "not_success", nil
		}
		return lat, delay, "success", nil
	}
	// Warm the client's connection pool: one operation to each of the
	// first nodes.
	const warmup = 50
	for i := range warmup {
		if _, _, _, err := one(-1, i, time.Now(), nil); err != nil {
			return nil, err
		}
	}

	hub0, err := scrapeHub(admin)
	if err != nil {
		return nil, err
	}

	total := o.rate * int(o.duration/time.Second)
	// The load side's collections held off for the phase (see
	// -load-gc-in-phase): each process collects now, then not until the
	// phase has ended.
	if !o.loadGCInPhase {
		if _, err := sims.call("gc-hold"); err != nil {
			return nil, err
		}
		runtime.GC()
		toolGC := debug.SetGCPercent(-1)
		defer func() {
			debug.SetGCPercent(toolGC)
			if _, rerr := sims.call("gc-release"); rerr != nil && err == nil {
				err = rerr
			}
		}()
		fmt.Println("the simulated nodes' process and this tool collected just before the dispatch phase and hold their collections until it ends (-load-gc-in-phase to let them run)")
	}
	lat := make([]time.Duration, total)
	sendDelay := make([]time.Duration, total)
	outcome := make([]string, total)
	timeline := make([]opTiming, total)
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(o.rate)
	perm := mrand.New(mrand.NewPCG(3, 4)).Perm(len(nodes))
	cpu0, t0, err := gatewayproc.CPUTicks(pid)
	if err != nil {
		return nil, err
	}
	self0, _, err := gatewayproc.CPUTicks(os.Getpid())
	if err != nil {
		return nil, err
	}
	nodes0, _, err := gatewayproc.CPUTicks(nodesPid)
	if err != nil {
		return nil, err
	}
	if o.schedSlice > 0 {
		var set []string
		for _, p := range []struct {
			name string
			pid  int
		}{{"gateway", pid}, {"simulated nodes", nodesPid}, {"this tool", os.Getpid()}} {
			n, err := sliceProcess(p.pid, o.schedSlice)
			if err != nil {
				return nil, err
			}
			set = append(set, fmt.Sprintf("%s %d threads", p.name, n))
		}
		fmt.Printf("EEVDF time slice %s set for the dispatch phase: %s\n", o.schedSlice, strings.Join(set, ", "))
	}
	waits0, err := runDelays(pid, os.Getpid(), nodesPid)
	if err != nil {
		return nil, err
	}
	var faults0 [3][2]int64
	for k, p := range []int{pid, nodesPid, os.Getpid()} {
		if faults0[k][0], faults0[k][1], err = pageFaults(p); err != nil {
			return nil, err
		}
	}
	threads0, err := threadStats(pid)
	if err != nil {
		return nil, err
	}
	stopTraces := func() error { return nil }
	if o.loadTrace != "" {
		if stopTraces, err = startLoadTraces(sims, o.loadTrace); err != nil {
			return nil, err
		}
	}
	// The schedule waits for each due time with pacer.Until, its OS
	// thread sleeping in clock_nanosleep with a timer slack of 1 ns: the Go
	// runtime's timers wait in epoll with a millisecond timeout and so
	// fire up to 1 ms late, which the tool would count against the
	// gateway. free[i] is when operation i's sender was free to send it
	// (pacer.Split): due with -pacing handoff (a goroutine per operation,
	// never waited for), the worker's last answer read with -pacing
	// workers; woke[i] (handoff only) is when the schedule's thread woke
	// for it, before handing it to its goroutine.
	free := make([]int64, total)
	woke := make([]int64, total)
	// With -pacing workers, a P for each worker sleeping in pacer.Until,
	// so that the sleepers leave the operations and the network poller
	// theirs (pacer.Procs). The schedule of -pacing handoff sleeps on the
	// process's one P (make nodeload's taskset gives the tool one CPU): a
	// second P there put two threads on that CPU, which the kernel then
	// time-sliced, and the quiet runs' slowest sends waited 16–22 ms for
	// it (docs/benchmarks.md "sixth run"); the handed-off goroutines run
	// when sysmon takes the sleeping thread's P, as before the pacer.
	if o.pacing == "workers" {
		defer pacer.Procs(o.workers)()
	}
	start := time.Now()
	run := func(i int, due time.Time) {
		d, delay, out, err := one(i, perm[i%len(perm)], due, &timeline[i])
		if err != nil {
			out = "error"
		}
		lat[i], sendDelay[i], outcome[i] = d, delay, out
	}
	if o.pacing == "workers" {
		var next atomic.Int64
		for range o.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					f := time.Now().UnixNano()
					i := int(next.Add(1) - 1)
					if i >= total {
						return
					}
					due := start.Add(time.Duration(i) * interval)
					free[i] = f
					pacer.Until(due)
					run(i, due)
				}
			}()
		}
	} else {
		for i := range total {
			due := start.Add(time.Duration(i) * interval)
			pacer.Until(due)
			free[i], woke[i] = due.UnixNano(), time.Now().UnixNano()
			wg.Add(1)
			go func() {
				defer wg.Done()
				run(i, due)
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := stopTraces(); err != nil {
		return nil, fmt.Errorf("load-side traces: %w", err)
	}
	cpu1, t1, err := gatewayproc.CPUTicks(pid)
	if err != nil {
		return nil, err
	}
	self1, _, err := gatewayproc.CPUTicks(os.Getpid())
	if err != nil {
		return nil, err
	}
	nodes1, _, err := gatewayproc.CPUTicks(nodesPid)
	if err != nil {
		return nil, err
	}
	waits1, err := runDelays(pid, os.Getpid(), nodesPid)
	if err != nil {
		return nil, err
	}
	var faults [3][2]int64
	for k, p := range []int{pid, nodesPid, os.Getpid()} {
		minor, major, err := pageFaults(p)
		if err != nil {
			return nil, err
		}
		faults[k] = [2]int64{minor - faults0[k][0], major - faults0[k][1]}
	}
	threads1, err := threadStats(pid)
	if err != nil {
		return nil, err
	}
	hub1, err := scrapeHub(admin)
	if err != nil {
		return nil, err
	}
	hubTime, err := hub1.since(hub0)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	var ok, fromSend []time.Duration
	late := 0
	for i := range total {
		counts[outcome[i]]++
		if outcome[i] == "success" {
			ok = append(ok, lat[i])
			fromSend = append(fromSend, lat[i]-sendDelay[i])
		}
		if sendDelay[i] > time.Millisecond {
			late++
		}
	}
	slices.Sort(ok)
	slices.Sort(fromSend)
	// The send delay split (pacer.Split) before sendDelay is sorted.
	toolLate, workerWait, wake, handoff := make([]time.Duration, 0, total), make([]time.Duration, 0, total), make([]time.Duration, 0, total), make([]time.Duration, 0, total)
	waited := 0
	for i := range total {
		sent := timeline[i].sent
		l, w := pacer.Split(timeline[i].due, free[i], sent)
		toolLate, workerWait = append(toolLate, l), append(workerWait, w)
		if w > 0 {
			waited++
		}
		if woke[i] != 0 {
			wake, handoff = append(wake, time.Duration(woke[i]-timeline[i].due)), append(handoff, time.Duration(sent-woke[i]))
		}
	}
	slices.Sort(sendDelay)
	fmt.Printf("dispatch: %d operations in %s (%.0f ops/s achieved, %d sent more than 1 ms after their scheduled time, send delay p99 %s); outcomes %v\n",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), late, pct(sendDelay, 99), counts)
	for _, v := range [][]time.Duration{toolLate, workerWait, wake, handoff} {
		slices.Sort(v)
	}
	if len(toolLate) > 0 {
		fmt.Printf("  the send delay split (-pacing %s): the tool's lateness p50 %s, p99 %s, p99.9 %s; waiting for a free worker (each still reading an earlier answer at the due time: the gateway's, kept in the round trip from the scheduled send) p50 %s, p99 %s, p99.9 %s, %d operations waited\n",
			o.pacing, pct(toolLate, 50), pct(toolLate, 99), pct(toolLate, 99.9), pct(workerWait, 50), pct(workerWait, 99), pct(workerWait, 99.9), waited)
		r["tool_late_p50_ms"], r["tool_late_p99_ms"], r["worker_wait_p99_ms"] = ms(pct(toolLate, 50)), ms(pct(toolLate, 99)), ms(pct(workerWait, 99))
	}
	if len(wake) > 0 {
		fmt.Printf("    of the lateness: the schedule's wake-up (due → its thread running) p50 %s, p99 %s, p99.9 %s; the hand-off to the operation's goroutine (→ the send) p50 %s, p99 %s, p99.9 %s\n",
			pct(wake, 50), pct(wake, 99), pct(wake, 99.9), pct(handoff, 50), pct(handoff, 99), pct(handoff, 99.9))
	}
	if len(ok) > 0 {
		fmt.Printf("dispatch round trip from the scheduled send time: p50 %s, p90 %s, p99 %s, p99.9 %s, max %s\n",
			pct(ok, 50), pct(ok, 90), pct(ok, 99), pct(ok, 99.9), ok[len(ok)-1].Round(time.Microsecond))
		fmt.Printf("  (from the actual send, for comparison: p50 %s, p99 %s)\n", pct(fromSend, 50), pct(fromSend, 99))
	}
	fmt.Printf("hub's own time (%s over the dispatch phase, %.0f operations, within its buckets): p50 %s, p99 %s, p99.9 %s; the gateway's garbage collections in the phase: %.0f\n",
		hubMetric, hubTime.count(), hubTime.describe(0.5), hubTime.describe(0.99), hubTime.describe(0.999), hubTime.gcs)
	gwCPU, nodesCPU, toolCPU := gatewayproc.CPUPercent(cpu1-cpu0, t1.Sub(t0)), gatewayproc.CPUPercent(nodes1-nodes0, t1.Sub(t0)),
		gatewayproc.CPUPercent(self1-self0, t1.Sub(t0))
	fmt.Printf("CPU during dispatch: gateway %.1f%%, simulated nodes %.1f%%, this tool (API client) %.1f%% of one core; load average %s\n",
		gwCPU, nodesCPU, toolCPU, loadAverage())
	// CPU per message: the operations and the heartbeats the nodes sent in
	// the phase (o.nodes per interval), a figure the machine's load
	// disturbs less than times do (a phase that took longer has more
	// heartbeats, so this is not per operation).
	window := t1.Sub(t0).Seconds()
	messages := float64(total) + window*float64(o.nodes)/o.heartbeat.Seconds()
	perMsg := func(pct float64) float64 { return pct / 100 * window / messages * 1e6 }
	gwWait, toolWait, nodesWait := waits1[0]-waits0[0], waits1[1]-waits0[1], waits1[2]-waits0[2]
	fmt.Printf("waiting for a CPU while runnable during dispatch (schedstat run-queue time, all threads): gateway %s (%.0f µs per operation), simulated nodes %s, this tool %s\n",
		gwWait.Round(time.Millisecond), float64(gwWait.Microseconds())/float64(total), nodesWait.Round(time.Millisecond), toolWait.Round(time.Millisecond))
	fmt.Printf("CPU per message (%.0f operations and heartbeats): gateway %.1f µs, simulated nodes %.1f µs, this tool %.1f µs\n",
		messages, perMsg(gwCPU), perMsg(nodesCPU), perMsg(toolCPU))
	fmt.Printf("page faults during dispatch (a major one waits for the disk): gateway %d major, %d minor; simulated nodes %d major, %d minor; this tool %d major, %d minor\n",
		faults[0][1], faults[0][0], faults[1][1], faults[1][0], faults[2][1], faults[2][0])
	r["gateway_major_faults"] = float64(faults[0][1])
	threads, sysmonShare := threadReport(pid, threads0, threads1, t1.Sub(t0))
	fmt.Printf("the gateway's threads during dispatch (schedstat): %s; sysmon %.1f%% of the gateway's CPU\n", threads, sysmonShare)
	r["gateway_sysmon_pct"] = sysmonShare
	r["gateway_wakeups_per_s"] = float64(sumSlices(threads1)-sumSlices(threads0)) / t1.Sub(t0).Seconds()
	maps.Copy(r, result{"ops_per_s": float64(total) / elapsed.Seconds(), "ok": float64(len(ok)), "total": float64(total),
		"send_delay_p99_ms": ms(pct(sendDelay, 99)), "hub_p50_ms": hubMS(hubTime, 0.5), "hub_p99_ms": hubMS(hubTime, 0.99),
		"hub_p999_ms": hubMS(hubTime, 0.999), "gateway_gcs": hubTime.gcs, "gateway_cpu": gwCPU, "nodes_cpu": nodesCPU, "tool_cpu": toolCPU,
		"gateway_wait_ms": ms(gwWait), "nodes_wait_ms": ms(nodesWait), "tool_wait_ms": ms(toolWait),
		"gateway_us_per_msg": perMsg(gwCPU), "nodes_us_per_msg": perMsg(nodesCPU), "tool_us_per_msg": perMsg(toolCPU)})
	if len(ok) > 0 {
		r["rtt_p50_ms"], r["rtt_p90_ms"], r["rtt_p99_ms"] = ms(pct(ok, 50)), ms(pct(ok, 90)), ms(pct(ok, 99))
		r["rtt_p999_ms"], r["rtt_max_ms"] = ms(pct(ok, 99.9)), ms(ok[len(ok)-1])
	}
	// Where the time went: the nodes' records matched to the operations
	// (answerLog), after the warm-up's one operation to each of the
	// first nodes. A failed operation may have no record and shift the
	// pairing of its node's later ones; the report comes before the
	// run's failure all the same.
	ph, err := timings()
	if err != nil {
		return nil, err
	}
	if len(ph.answers) != len(nodes) {
		return timeline, fmt.Errorf("the nodes' process recorded %d nodes, not %d", len(ph.answers), len(nodes))
	}
	// Operation i went to node n as that node's j-th request (the
	// warm-up sent one to each of the first nodes).
	nodeOf := func(i int) (n, j int) {
		n, j = perm[i%len(perm)], i/len(perm)
		if n < warmup {
			j++
		}
		return n, j
	}
	for i := range timeline {
		n, j := nodeOf(i)
		if recs := ph.answers[n]; j < len(recs) && outcome[i] == "success" {
			timeline[i].frameIn, timeline[i].received, timeline[i].answered = recs[j][0], recs[j][1], recs[j][2]
		}
	}
	maps.Copy(r, phaseReport(os.Stdout, timeline, ph.gateway, ph.nodes))
	if o.loadTrace != "" {
		wn, wt, an, at, err := loadWakeups(o.loadTrace)
		if err != nil {
			return nil, err
		}
		maps.Copy(r, wakeupReport(os.Stdout, timeline, nodeOf, wn, wt, an, at))
	}
	if counts["success"] != total {
		return timeline, errors.New("not every operation succeeded")
	}
	return timeline, nil
}

// apiClient sends the operations over persistent HTTP/1.1 connections
// that it keeps itself: each request is written and its answer read on
// the goroutine that sends it. (net/http's client hands every request to
// two more goroutines per connection; on 2 shared cores that cost the
// measurement about a third of a core, taken from the gateway.)
type apiClient struct {
	addr string
	idle chan *apiConn // at most cap(idle) kept; more are closed
}

type apiConn struct {
	c  *stampConn
	br *bufio.Reader
}

// exchangeTimes are the times of one exchange that the tool cannot take
// around it, in Unix nanoseconds: when the request's write returned (on
// loopback the bytes are on the gateway's socket by then) and the kernel's
// receive stamp of the answer's last bytes (when the gateway wrote them;
// stampConn).
type exchangeTimes struct{ written, answerIn int64 }

// do sends req, one whole HTTP/1.1 request with a Content-Length, and
// returns the answer's status and body and the exchange's times; a
// connection is reused unless the answer closes it or an error occurred.
// Each exchange has 30 s.
func (a *apiClient) do(req []byte) (int, []byte, exchangeTimes, error) {
	var c *apiConn
	select {
	case c = <-a.idle:
	default:
		nc, err := net.DialTimeout("tcp", a.addr, 30*time.Second)
		if err != nil {
			return 0, nil, exchangeTimes{}, err
		}
		sc, err := newStampConn(nc)
		if err != nil {
			_ = nc.Close()
			return 0, nil, exchangeTimes{}, err
		}
		c = &apiConn{c: sc, br: bufio.NewReader(sc)}
	}
	status, data, written, keep, err := c.exchange(req)
	ex := exchangeTimes{written: written, answerIn: c.c.Stamp()}
	if err != nil || !keep {
		_ = c.c.Close()
		return status, data, ex, err
	}
	select {
	case a.idle <- c:
	default:
		_ = c.c.Close()
	}
	return status, data, ex, nil
}

// exchange writes req and reads its answer; written is when the write
// returned, Unix nanoseconds.
func (c *apiConn) exchange(req []byte) (status int, data []byte, written int64, keep bool, err error) {
	_ = c.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.c.Write(req); err != nil {
		return 0, nil, 0, false, err
	}
	written = time.Now().UnixNano()
	status, data, keep, err = readAnswer(c.br)
	return status, data, written, keep, err
}

// close closes the idle connections.
func (a *apiClient) close() {
	for {
		select {
		case c := <-a.idle:
			_ = c.c.Close()
		default:
			return
		}
	}
}

func pct(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i].Round(time.Microsecond)
}

type listStatus struct{ total, online int }

// statusClient reads the gateway's node list and the admin endpoint's
// heap figures. Its limit only keeps an endpoint that accepts but never
// answers from holding the tool: a heap profile of tens of thousands of
// goroutines takes seconds on an emulated CPU (hack/vm).
var statusClient = &http.Client{Timeout: 2 * time.Minute}

// startLimit is how long the tool waits for the gateway to listen, and
// then to list every enrolled node: parsing tens of thousands of node
// records takes seconds, minutes on an emulated CPU.
const startLimit = 10 * time.Minute

// gatewayTimers returns the gateway's idle timeout and online window for
// nodes that heartbeat every hb: the defaults' ratios to the default
// interval (hub.DefaultIdleTimeout and hub.DefaultOnlineWindow, 35 s and
// 45 s to 10 s; TestGatewayTimersKeepTheDefaultRatios), so that a longer
// -heartbeat, which the gateway refuses unless shorter than its idle
// timeout, still holds every node online.
func gatewayTimers(hb time.Duration) (idle, online time.Duration) {
	return hb * 7 / 2, hb * 9 / 2
}

func apiStatus(base, token string) (listStatus, error) {
	req, _ := http.NewRequest(http.MethodGet, base+api.Prefix, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := statusClient.Do(req)
	if err != nil {
		return listStatus{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return listStatus{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return listStatus{}, fmt.Errorf("API list: %d", resp.StatusCode)
	}
	return listStatus{total: strings.Count(string(data), `"node_id"`), online: strings.Count(string(data), `"online":true`)}, nil
}

// raiseNoFile raises RLIMIT_NOFILE to want, or as far as the hard limit
// allows (raising the hard limit too, when permitted), but to at least
// need; the gateway started afterwards inherits it.
func raiseNoFile(need, want int) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= uint64(want) {
		// Set it explicitly all the same: children then inherit it rather
		// than the limit the process started with.
		return lim.Cur, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	next := syscall.Rlimit{Cur: uint64(want), Max: max(lim.Max, uint64(want))}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err == nil {
		return next.Cur, nil
	}
	if lim.Max < uint64(need) {
		return 0, fmt.Errorf("RLIMIT_NOFILE hard limit %d is below the %d needed (one socket per node in each process), and raising it was not permitted: run with fewer -nodes, or where the hard limit is at least %d (as root with CAP_SYS_RESOURCE `ulimit -Hn %d`, or a container started with --ulimit nofile=%d:%d)", lim.Max, need, need, roundUp4096(need), roundUp4096(need), roundUp4096(need))
	}
	next = syscall.Rlimit{Cur: min(uint64(want), lim.Max), Max: lim.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		return 0, err
	}
	return next.Cur, nil
}

// roundUp4096 is need rounded up to a multiple of 4,096, for the advice of
// raiseNoFile's error.
func roundUp4096(need int) int { return (need + 4095) / 4096 * 4096 }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sum(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// nodesProc is the child process holding the simulated nodes. It answers
// one line per command line on its standard input: "connect" (dial every
// node; "<n> nodes connected in <duration> (<rate> connections/s)"),
// "acks" (heartbeat acknowledgements so far), "dropped" ("<k> of <n>
// connections dropped[ (the first: <error>)]"), "timings <file>" (writes
// the answerLog to file; "saved"), "trace-start <file>" and "trace-stop"
// (a runtime execution trace of the process, -load-trace; "tracing",
// "stopped"), "gc-hold" (collect now, then not until "gc-release":
// "held") and "gc-release" (GOGC as before; "released"); a failure is
// one line
// "error: <reason>". It closes every node and exits at end of input.
type nodesProc struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	done bool
}

// startNodes starts this binary with -role nodes and the nodes' GOGC;
// with gc (-gctrace) also with GODEBUG=gctrace=1, its standard error
// read through gc.
func startNodes(o options, nodesFile, base string, gc *gctrace.Watch) (*nodesProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-role", "nodes", "-nodes-file", nodesFile, "-url", base,
		"-heartbeat", o.heartbeat.String(), "-dial-concurrency", strconv.Itoa(o.dialConcurrency),
		"-per-node-heartbeats="+strconv.FormatBool(o.perNodeHeartbeats))
	gogc := strconv.Itoa(o.nodesGOGC)
	if o.nodesGOGC < 0 {
		gogc = "off"
	}
	cmd.Env = append(os.Environ(), "GOGC="+gogc) // the last GOGC wins

	cmd.Stderr = os.Stderr
	if gc != nil {
		cmd.Env = append(cmd.Env, "GODEBUG=gctrace=1")
		cmd.Stderr = gc
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &nodesProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// call sends one command and returns its answer line.
func (p *nodesProc) call(command string) (string, error) {
	if _, err := io.WriteString(p.in, command+"\n"); err != nil {
		return "", fmt.Errorf("nodes' process: %w", err)
	}
	if !p.out.Scan() {
		return "", fmt.Errorf("nodes' process ended (%v)", p.out.Err())
	}
	line := p.out.Text()
	if reason, ok := strings.CutPrefix(line, "error: "); ok {
		return "", errors.New(reason)
	}
	return line, nil
}

// acks returns the heartbeat acknowledgements the nodes received so far.
func (p *nodesProc) acks() (uint64, error) {
	line, err := p.call("acks")
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(line, 10, 64)
}

// stop ends the nodes' process (closing its input) and waits for it.
func (p *nodesProc) stop() error {
	if p.done {
		return nil
	}
	p.done = true
	_ = p.in.Close()
	return p.cmd.Wait()
}

// runNodes is the nodes' process (see nodesProc).
func runNodes(o options) error {
	data, err := os.ReadFile(o.nodesFile)
	if err != nil {
		return err
	}
	var nodes []simNode
	if err := json.Unmarshal(data, &nodes); err != nil {
		return err
	}
	var sims []*sim.Node
	answers := newAnswerLog(len(nodes))
	defer func() {
		for _, s := range sims {
			if s != nil {
				_ = s.Close()
			}
		}
	}()
	var traceFile *os.File
	heldGOGC := o.nodesGOGC
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "connect":
			start := time.Now()
			var err error
			sims, err = connectNodes(o, nodes, answers)
			if err != nil {
				fmt.Printf("error: %v\n", err)
				continue
			}
			if !o.perNodeHeartbeats {
				stopBeats := make(chan struct{})
				defer close(stopBeats)
				go heartbeatAll(sims, o.heartbeat, stopBeats)
			}
			d := time.Since(start)
			fmt.Printf("%d nodes connected in %s (%.0f connections/s)\n", len(sims), d.Round(time.Millisecond), float64(len(sims))/d.Seconds())
		case "acks":
			var n uint64
			for _, s := range sims {
				n += s.Acks()
			}
			fmt.Println(n)
		case "dropped":
			dropped := 0
			var first error
			for _, s := range sims {
				if err := s.Err(); err != nil {
					dropped++
					if first == nil {
						first = err
					}
				}
			}
			if first != nil {
				fmt.Printf("%d of %d connections dropped (the first: %v)\n", dropped, len(sims), first)
			} else {
				fmt.Printf("0 of %d connections dropped\n", len(sims))
			}
		case "gc-hold":
			runtime.GC()
			heldGOGC = debug.SetGCPercent(-1)
			fmt.Println("held")
		case "gc-release":
			debug.SetGCPercent(heldGOGC)
			fmt.Println("released")
		case "trace-stop":
			trace.Stop()
			if traceFile == nil {
				fmt.Println("error: no trace running")
				continue
			}
			if err := traceFile.Close(); err != nil {
				fmt.Printf("error: %v\n", err)
				continue
			}
			traceFile = nil
			fmt.Println("stopped")
		default:
			if path, ok := strings.CutPrefix(in.Text(), "trace-start "); ok {
				f, err := startTrace(path)
				if err != nil {
					fmt.Printf("error: %v\n", err)
					continue
				}
				traceFile = f
				fmt.Println("tracing")
				continue
			}
			if path, ok := strings.CutPrefix(in.Text(), "timings "); ok {
				if err := answers.save(path); err != nil {
					fmt.Printf("error: %v\n", err)
				} else {
					fmt.Println("saved")
				}
				continue
			}
			fmt.Printf("error: unknown command %q\n", in.Text())
		}
	}
	return in.Err()
}

// connectNodes dials every node, o.dialConcurrency at a time, and returns
// them connected or the first failure (closing those that connected).
// Each node answers every request with sim.Success and records it in
// answers.
func connectNodes(o options, nodes []simNode, answers *answerLog) ([]*sim.Node, error) {
	// One loopback source address per nodesPerSource connections: a
	// source address has about 28,000 ephemeral ports towards one port.
	const nodesPerSource = 20000
	pool, interval := nodeWriteBuffers, time.Duration(-1) // heartbeatAll sends them
	if o.perNodeHeartbeats {
		pool, interval = nil, o.heartbeat
	}
	var netDialers []*net.Dialer
	for i := 0; i*nodesPerSource < max(len(nodes), 1); i++ {
		netDialers = append(netDialers, &net.Dialer{Timeout: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i))}})
	}
	// Each node's connection takes the kernel's receive stamps
	// (stampConn), so its answerLog record says when the gateway wrote
	// the request frame as well as when the node had read it.
	conns := make([]*stampConn, len(nodes))
	dialer := func(i int) *websocket.Dialer {
		nd := netDialers[i/nodesPerSource]
		d := &websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 1024,
			NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := nd.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				sc, err := newStampConn(c)
				if err != nil {
					_ = c.Close()
					return nil, err
				}
				conns[i] = sc
				return sc, nil
			}}
		if pool != nil {
			d.WriteBufferPool = pool
		}
		return d
	}
	sims := make([]*sim.Node, len(nodes))
	var (
		wg      sync.WaitGroup
		dialErr atomic.Pointer[error]
		sem     = make(chan struct{}, o.dialConcurrency)
	)
	for i, n := range nodes {
		if dialErr.Load() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h := proto.Hello{NodeID: n.ID, InstallationID: installation, Provider: proto.ProviderDocker,
				BackendFingerprint: fingerprint, DeploymentGeneration: 1, SpecificationDigest: specDigest, MaxActive: 8,
				Health: proto.Health{ProviderReady: true, Host: proto.HostMeasurements{CPUCount: 8,
					CPUPercent: 10, MemoryTotalBytes: 32 << 30, MemoryUsedBytes: 8 << 30, DiskTotalBytes: 1 << 40, DiskUsedBytes: 1 << 38}}}
			s, err := sim.Dial(ctx, sim.Config{URL: o.url, Credential: n.Secret, Hello: h,
				HeartbeatInterval: interval, Dialer: dialer(i),
				Answer: func(req *proto.Request) *proto.Response {
					received := time.Now().UnixNano()
					resp := sim.Success(req)
					j := answers.add(i, conns[i].Stamp(), received, time.Now().UnixNano())
					logOp(func() string { return strconv.Itoa(i) + " " + strconv.Itoa(j) })
					return resp
				}})
			if err != nil {
				err = fmt.Errorf("node %d: %w", i, err)
				dialErr.CompareAndSwap(nil, &err)
				return
			}
			sims[i] = s
		}()
	}
	wg.Wait()
	if p := dialErr.Load(); p != nil {
		for _, s := range sims {
			if s != nil {
				_ = s.Close()
			}
		}
		return nil, *p
	}
	return sims, nil
}

// runtimeMemory reads the gateway's goroutine stack and in-use heap bytes
// (runtime.MemStats StackInuse and HeapInuse) from the "# Stack = " and
// "# HeapInuse = " lines of the Caddy admin endpoint's
// /debug/pprof/heap?debug=1 at admin (a base URL). runtime/pprof writes
// those lines after the profile's records; the answer is read up to
// maxHeapDebugAnswer bytes, a line up to 1 MiB. It fails when the request
// fails, the status is not 200, a line is missing or its value is not a
// number, or the answer runs over the read limit before both lines; the
// error says which.
func runtimeMemory(admin string) (stack, heap uint64, err error) {
	resp, err := statusClient.Get(admin + "/debug/pprof/heap?debug=1")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("heap?debug=1: %s", resp.Status)
	}
	const stackPrefix, heapPrefix = "# Stack = ", "# HeapInuse = "
	var gotStack, gotHeap bool
	body := &io.LimitedReader{R: resp.Body, N: maxHeapDebugAnswer + 1}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for !(gotStack && gotHeap) && sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, stackPrefix); ok {
			// "# Stack = <StackInuse> / <StackSys>"
			inuse, _, _ := strings.Cut(v, " / ")
			if stack, err = strconv.ParseUint(inuse, 10, 64); err != nil {
				return 0, 0, fmt.Errorf("heap?debug=1: malformed %q line: %.80q", stackPrefix, line)
			}
			gotStack = true
		} else if v, ok := strings.CutPrefix(line, heapPrefix); ok {
			if heap, err = strconv.ParseUint(v, 10, 64); err != nil {
				return 0, 0, fmt.Errorf("heap?debug=1: malformed %q line: %.80q", heapPrefix, line)
			}
			gotHeap = true
		}
	}
	if gotStack && gotHeap {
		return stack, heap, nil
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("heap?debug=1: %w", err)
	}
	if body.N <= 0 {
		return 0, 0, fmt.Errorf("heap?debug=1: the answer is over %d MiB before its runtime.MemStats lines", maxHeapDebugAnswer>>20)
	}
	var missing []string
	if !gotStack {
		missing = append(missing, fmt.Sprintf("no %q line", stackPrefix))
	}
	if !gotHeap {
		missing = append(missing, fmt.Sprintf("no %q line", heapPrefix))
	}
	return 0, 0, errors.New("heap?debug=1: " + strings.Join(missing, ", "))
}

// maxHeapDebugAnswer is how much of /debug/pprof/heap?debug=1
// runtimeMemory reads, in bytes.
const maxHeapDebugAnswer = 4 << 20

// nodeWriteBuffers are the simulated nodes' WebSocket write buffers, taken
// only while a frame is written (as the gateway does), instead of 1 KiB
// held by each of the nodes.
var nodeWriteBuffers = &sync.Pool{}

// heartbeatTick is how often heartbeatAll sends the heartbeats that fell
// due.
const heartbeatTick = 10 * time.Millisecond

// heartbeatAll sends every node's heartbeat once per interval every, the
// nodes' slots spread evenly over the interval (node i at i·every/n),
// from this one goroutine until stop is closed: the simulated nodes'
// process then holds one goroutine per node (sim's reader) instead of
// two, and no timer per node. A node whose write failed has ended (sim
// ends the connection) and is skipped; the "dropped" command reports it.
// A write waits at most sim's 10 s write deadline, holding up the
// heartbeats behind it.
func heartbeatAll(sims []*sim.Node, every time.Duration, stop <-chan struct{}) {
	if len(sims) == 0 {
		return
	}
	t := time.NewTicker(heartbeatTick)
	defer t.Stop()
	start := time.Now()
	sent := 0
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			due := int(int64(now.Sub(start)) * int64(len(sims)) / int64(every))
			for ; sent < due; sent++ {
				if s := sims[sent%len(sims)]; s.Err() == nil {
					_ = s.SendHeartbeat() // a failure ended the node's connection
				}
			}
		}
	}
}

// sumSlices is the timeslices of every thread of a threadStats snapshot.
func sumSlices(m map[int]schedstat) int64 {
	var n int64
	for _, st := range m {
		n += st.slices
	}
	return n
}

// runDelays is runDelay of each process, in order.
func runDelays(pids ...int) ([]time.Duration, error) {
	out := make([]time.Duration, len(pids))
	for i, p := range pids {
		d, err := runDelay(p)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// startTrace starts a runtime execution trace of this process into a new
// file at path.
func startTrace(path string) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// startLoadTraces starts the runtime execution traces of the load side
// (-load-trace): the simulated nodes' process into prefix.nodes, this
// tool into prefix.tool. The function it returns stops both.
func startLoadTraces(sims *nodesProc, prefix string) (func() error, error) {
	if _, err := sims.call("trace-start " + prefix + ".nodes"); err != nil {
		return nil, err
	}
	f, err := startTrace(prefix + ".tool")
	if err != nil {
		_, _ = sims.call("trace-stop")
		return nil, err
	}
	return func() error {
		trace.Stop()
		_, err := sims.call("trace-stop")
		return errors.Join(err, f.Close())
	}, nil
}

// withGODEBUG adds setting (e.g. "gctrace=1") to env's GODEBUG: to the
// value of its last GODEBUG entry when it has one, so that a variant's own
// GODEBUG settings (-variant name:binary:GODEBUG=…) are kept, or as a new
// entry. (Until 2026-12-06 -gctrace appended a second GODEBUG entry, which
// replaced the variant's: its "schedtrace" variant ran with the defaults.)
func withGODEBUG(env []string, setting string) []string {
	out := slices.Clone(env)
	for i := len(out) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(out[i], "GODEBUG="); ok {
			if v == "" {
				out[i] = "GODEBUG=" + setting
			} else {
				out[i] = "GODEBUG=" + v + "," + setting
			}
			return out
		}
	}
	return append(out, "GODEBUG="+setting)
}
