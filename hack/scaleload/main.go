// Command scaleload measures the gateway as several replicas against one:
// it starts bin/caddy N times (package integration/replicas; with N > 1
// they share node presence through Leases in a kube-apiserver started
// with envtest, internal/kubeenv), connects simulated nodes spread over
// the replicas, and then sends info operations through the internal node
// API of a random replica for a fixed time, closed loop with a fixed
// number of callers (so two thirds of them are forwarded with three
// replicas). It reports the connect time; the CPU of each replica and of
// the apiserver while they only hold the nodes (heartbeats and Lease
// renewals); the operations per second held, their latency (all, and apart
// for the operations sent to the node's own replica and those forwarded),
// each replica's RSS, CPU and CPU per 1000 operations, and the apiserver's
// CPU.
//
// Usage:
//
//	go run ./hack/scaleload [-caddy bin/caddy] [-replicas 3] [-presence] [-nodes 3000]
//		[-heartbeat 10s] [-callers 64] [-duration 30s] [-logs dir] [-profile]
//
// -presence runs one replica with node presence in the apiserver as each
// of several does (more than one replica always has it), so that 1 and 3
// replicas are compared with the same Lease work per node.
//
// The figures of docs/scale-out.md come from it. Everything runs on the
// same machine: the replicas, kube-apiserver and etcd, the simulated nodes
// and the callers share its CPUs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/replicas"
	"github.com/sandgate/sandgate/internal/kubeenv"
	"github.com/sandgate/sandgate/node/sim"
)

func main() {
	caddy := flag.String("caddy", "bin/caddy", "the gateway binary")
	n := flag.Int("replicas", 3, "gateway replicas (1: no presence, as a single gateway runs, unless -presence)")
	withPresence := flag.Bool("presence", false, "with -replicas 1: node presence through Leases in the kube-apiserver, as with several replicas")
	nodes := flag.Int("nodes", 3000, "simulated nodes")
	heartbeat := flag.Duration("heartbeat", 10*time.Second, "the nodes' heartbeat period")
	callers := flag.Int("callers", 64, "concurrent API callers (closed loop)")
	duration := flag.Duration("duration", 30*time.Second, "how long operations are sent")
	logs := flag.String("logs", "", "a directory for each replica's output (replica-<i>.log) and, with -profile, replica-0's profiles; default: discarded")
	profile := flag.Bool("profile", false, "with -logs: a CPU profile of replica-0 during the operations (replica-0.cpu) and its goroutines after them (replica-0.goroutine)")
	flag.Parse()
	if *profile && *logs == "" {
		fmt.Fprintln(os.Stderr, "scaleload: -profile needs -logs")
		os.Exit(2)
	}
	if err := run(*caddy, *n, *n > 1 || *withPresence, *nodes, *heartbeat, *callers, *duration, *logs, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "scaleload:", err)
		os.Exit(1)
	}
}

func raiseNoFile(want uint64) {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < want {
		l.Cur = min(want, l.Max)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// apiserverPIDs finds the envtest kube-apiserver and etcd started by this
// process (its children).
func apiserverPIDs() []int {
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(os.Getpid())).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		comm, _ := os.ReadFile("/proc/" + f + "/comm")
		if c := strings.TrimSpace(string(comm)); c == "kube-apiserver" || c == "etcd" {
			pids = append(pids, pid)
		}
	}
	return pids
}

func run(caddy string, n int, withPresence bool, nodeCount int, heartbeat time.Duration, callers int, duration time.Duration, logs string, profile bool) error {
	raiseNoFile(uint64(nodeCount*2 + 4096))
	ctx := context.Background()
	cfg := replicas.Config{Caddy: caddy, Replicas: n, HeartbeatInterval: heartbeat, LogLevel: "WARN", LeaseDuration: 30 * time.Second, Admin: profile}
	if logs != "" {
		if err := os.MkdirAll(logs, 0o755); err != nil {
			return err
		}
		cfg.LogLevel = "INFO"
		cfg.Output = func(i int) io.Writer {
			f, err := os.Create(filepath.Join(logs, fmt.Sprintf("replica-%d.log", i)))
			if err != nil {
				return nil
			}
			return f
		}
	}
	var kubePIDs []int
	var kube kubernetes.Interface // nil without presence
	if withPresence {
		ke, err := kubeenv.Start(nil, nil)
		if err != nil {
			return err
		}
		defer ke.Stop()
		kube, err = kubernetes.NewForConfig(ke.Config)
		if err != nil {
			return err
		}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandgate"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		cfg.Kubeconfig, cfg.Namespace = ke.KubeConfig, "sandgate"
		kubePIDs = apiserverPIDs()
	}
	ids := make([]sim.Identity, nodeCount)
	for i := range ids {
		ids[i] = sim.NewIdentity()
	}
	cfg.Nodes = ids
	c, err := replicas.Start(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	urls := c.URLs()
	fmt.Printf("scaleload: %d replica(s) of %s, %d nodes (heartbeat %s), %d callers for %s; presence: %v; load average %s\n",
		n, caddy, nodeCount, heartbeat, callers, duration, withPresence, loadAverage())

	start := time.Now()
	conns := make([]*sim.Node, nodeCount)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 100)
	var failed atomic.Int64
	var retries sync.Map // dial error class → count
	count := func(m *sync.Map, k string) {
		v, _ := m.LoadOrStore(k, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// As a node retries: a connect refused (409 while its first
			// attempt is still being claimed, 503) is tried again with
			// backoff, for up to a minute.
			backoff := 200 * time.Millisecond
			for deadline := time.Now().Add(time.Minute); ; {
				nd, err := sim.Dial(ctx, sim.Config{URL: urls[i%n], Credential: id.Credential, Hello: id.Hello(), HeartbeatInterval: heartbeat})
				if err == nil {
					conns[i] = nd
					return
				}
				var de *sim.DialError
				if errors.As(err, &de) {
					count(&retries, strconv.Itoa(de.Status))
				} else {
					count(&retries, "transport")
				}
				if time.Now().After(deadline) {
					failed.Add(1)
					return
				}
				time.Sleep(backoff)
				backoff = min(2*backoff, 5*time.Second)
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d nodes could not connect within a minute (attempts refused: %s)", f, classes(&retries))
	}
	defer func() {
		for _, nd := range conns {
			_ = nd.Close()
		}
	}()
	fmt.Printf("  connect %d nodes: %s (attempts refused and retried: %s)\n", nodeCount, time.Since(start).Round(time.Millisecond), classes(&retries))
	// One heartbeat round (and its renewals) to settle, then two
	// more measured: the cost of holding the nodes.
	time.Sleep(heartbeat + 2*time.Second)
	pids := append([]int{}, kubePIDs...)
	for _, r := range c.Replicas {
		pids = append(pids, r.PID)
	}
	ticks, reqs := cpuTicks(pids), leaseRequests(ctx, kube)
	holdFrom := time.Now()
	time.Sleep(2 * heartbeat)
	held, heldReqs := cpuTicks(pids), leaseRequests(ctx, kube)
	holdFor := time.Since(holdFrom)
	fmt.Printf("  holding the nodes %s (heartbeats, renewals): CPU", holdFor.Round(time.Millisecond))
	var holdTicks int64 // of the replicas together
	for _, pid := range pids {
		fmt.Printf(" %s %.1f%%", name(c, pid), gatewayproc.CPUPercent(held[pid]-ticks[pid], holdFor))
		if !slices.Contains(kubePIDs, pid) {
			holdTicks += held[pid] - ticks[pid]
		}
	}
	fmt.Println()
	if kube != nil {
		fmt.Printf("    apiserver Lease requests/s: %s\n", rates(reqs, heldReqs, holdFor))
	}

	measureFrom := time.Now()
	ticks, reqs = cpuTicks(pids), leaseRequests(ctx, kube)
	profiled := make(chan error, 1)
	if profile {
		go func() {
			profiled <- gatewayproc.SaveCPUProfile("http://"+c.Replicas[0].Admin, duration, filepath.Join(logs, "replica-0.cpu"))
		}()
	}
	// Latencies of the operations sent to the replica the node dialled
	// (served there) and of those sent to another one (forwarded).
	var local, forwarded []time.Duration
	var lmu sync.Mutex
	var ok, errs atomic.Int64
	entered := make([]atomic.Int64, n) // successful operations sent through each replica
	var refusals sync.Map              // refusal code → count
	deadline := time.Now().Add(duration)
	var seq atomic.Int64
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var myLocal, myForwarded []time.Duration
			for time.Now().Before(deadline) {
				i := rand.IntN(nodeCount)
				via := rand.IntN(n)
				body := []byte(fmt.Sprintf(`{"operation":"info","deployment_generation":1,"timeout_ms":5000,"reference":{"tenant_id":"t","environment_id":"e","allocation_id":"c%d-%d"}}`, w, seq.Add(1)))
				t0 := time.Now()
				a, err := c.Dispatch(ctx, via, ids[i].NodeID, body)
				d := time.Since(t0)
				switch {
				case err != nil:
					errs.Add(1)
				case a.Status == 200 && a.Result.Outcome == "success":
					ok.Add(1)
					entered[via].Add(1)
					if via == i%n {
						myLocal = append(myLocal, d)
					} else {
						myForwarded = append(myForwarded, d)
					}
				case a.Status == 200:
					count(&refusals, a.Result.Outcome+"/"+string(a.Result.ErrorCode))
				default:
					count(&refusals, a.Refusal.Error.Code)
				}
			}
			lmu.Lock()
			local = append(local, myLocal...)
			forwarded = append(forwarded, myForwarded...)
			lmu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(measureFrom)
	opsReqs := leaseRequests(ctx, kube)
	if profile {
		if err := errors.Join(<-profiled, gatewayproc.Save("http://"+c.Replicas[0].Admin+"/debug/pprof/goroutine?debug=1",
			filepath.Join(logs, "replica-0.goroutine"), 0)); err != nil {
			return fmt.Errorf("profiles: %w", err)
		}
	}
	fmt.Printf("  operations: %d ok (%.0f/s), refused: %s, %d transport errors\n",
		ok.Load(), float64(ok.Load())/elapsed.Seconds(), classes(&refusals), errs.Load())
	fmt.Printf("    latency all %s\n", quantiles(append(slices.Clone(local), forwarded...)))
	if n > 1 {
		fmt.Printf("    served where sent (%d) %s\n", len(local), quantiles(local))
		fmt.Printf("    forwarded (%d) %s\n", len(forwarded), quantiles(forwarded))
	}
	// CPU time per 1000 successful operations (the heartbeats and
	// renewals of the period included): of all replicas together, and of
	// each replica per 1000 of the operations sent through it (it also
	// serves the ones forwarded to it, about as many as it forwards).
	perK := func(t, ops int64) float64 {
		if ops == 0 {
			return 0
		}
		return float64(t) / gatewayproc.ClockTicks * 1000 / float64(ops) * 1000
	}
	var gwTicks int64
	for i, r := range c.Replicas {
		rss, _, _ := gatewayproc.Memory(r.PID)
		t, _, _ := gatewayproc.CPUTicks(r.PID)
		gwTicks += t - ticks[r.PID]
		fmt.Printf("  %s: RSS %d MiB, CPU %.0f%%, %d operations sent through it, CPU per 1000 of them %.0f ms\n",
			r.ID, rss>>10, gatewayproc.CPUPercent(t-ticks[r.PID], elapsed), entered[i].Load(), perK(t-ticks[r.PID], entered[i].Load()))
	}
	// Less what holding the nodes cost at the rate measured before.
	net := gwTicks - int64(float64(holdTicks)*elapsed.Seconds()/holdFor.Seconds())
	fmt.Printf("  gateway CPU per 1000 operations, replicas together: %.0f ms (%.0f ms less the cost of holding the nodes)\n",
		perK(gwTicks, ok.Load()), perK(net, ok.Load()))
	if kube != nil {
		fmt.Printf("  apiserver Lease requests/s: %s\n", rates(reqs, opsReqs, elapsed))
	}
	for _, pid := range kubePIDs {
		t, _, _ := gatewayproc.CPUTicks(pid)
		fmt.Printf("  %s: CPU %.0f%%\n", name(c, pid), gatewayproc.CPUPercent(t-ticks[pid], elapsed))
	}
	fmt.Printf("  load average after: %s\n", loadAverage())
	if ok.Load() == 0 {
		return errors.New("no operation succeeded")
	}
	return nil
}

// loadAverage is the machine's 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// leaseRequests reads the apiserver's count of requests on Leases by verb
// (apiserver_request_total of its /metrics); nil without kube or on an
// error.
func leaseRequests(ctx context.Context, kube kubernetes.Interface) map[string]float64 {
	if kube == nil {
		return nil
	}
	b, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="leases"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `verb="`)
		verb, _, _ := strings.Cut(rest, `"`)
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			out[verb] += v
		}
	}
	return out
}

// rates formats the requests per second by verb between two counts.
func rates(from, to map[string]float64, d time.Duration) string {
	var out []string
	for verb, v := range to {
		if r := (v - from[verb]) / d.Seconds(); r >= 0.05 {
			out = append(out, fmt.Sprintf("%s %.1f", verb, r))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// cpuTicks reads each process's CPU ticks (0 for one that is gone).
func cpuTicks(pids []int) map[int]int64 {
	out := make(map[int]int64, len(pids))
	for _, pid := range pids {
		out[pid], _, _ = gatewayproc.CPUTicks(pid)
	}
	return out
}

// name names pid: the replica's ID, else the process's command name.
func name(c *replicas.Cluster, pid int) string {
	for _, r := range c.Replicas {
		if r.PID == pid {
			return r.ID
		}
	}
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(comm))
}

// quantiles formats p50, p90, p99 and max of lat (sorted in place).
func quantiles(lat []time.Duration) string {
	if len(lat) == 0 {
		return "(none)"
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("p50 %s p90 %s p99 %s max %s", q(0.5), q(0.9), q(0.99), lat[len(lat)-1].Round(10*time.Microsecond))
}

// classes formats a count per class, sorted by class; "none" when empty.
func classes(m *sync.Map) string {
	var out []string
	m.Range(func(k, v any) bool {
		out = append(out, fmt.Sprintf("%s×%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	if len(out) == 0 {
		return "none"
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
