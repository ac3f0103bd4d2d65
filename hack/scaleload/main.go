// Command scaleload measures the gateway as several replicas against one:
// it starts bin/caddy N times (package integration/replicas; with N > 1
// they share node presence through Leases in a kube-apiserver started
// with envtest, internal/kubeenv), connects simulated nodes spread over
// the replicas, and then sends info operations through the internal node
// API of a random replica for a fixed time, closed loop with a fixed
// number of callers (so two thirds of them are forwarded with three
// replicas). It reports the connect time, the operations per second held,
// their latency, each replica's RSS and CPU, and the apiserver's CPU.
//
// Usage:
//
//	go run ./hack/scaleload [-caddy bin/caddy] [-replicas 3] [-nodes 3000]
//		[-heartbeat 10s] [-callers 64] [-duration 30s] [-logs dir]
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
	"net/http"
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
	n := flag.Int("replicas", 3, "gateway replicas (1: no presence, as a single gateway runs)")
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
	if err := run(*caddy, *n, *nodes, *heartbeat, *callers, *duration, *logs, *profile); err != nil {
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

func run(caddy string, n, nodeCount int, heartbeat time.Duration, callers int, duration time.Duration, logs string, profile bool) error {
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
	if n > 1 {
		ke, err := kubeenv.Start(nil, nil)
		if err != nil {
			return err
		}
		defer ke.Stop()
		kube, err := kubernetes.NewForConfig(ke.Config)
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
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("scaleload: %d replica(s) of %s, %d nodes (heartbeat %s), %d callers for %s; presence: %v; load average %s\n",
		n, caddy, nodeCount, heartbeat, callers, duration, n > 1, strings.Join(strings.Fields(string(load))[:3], " "))

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
	time.Sleep(heartbeat + 2*time.Second) // one heartbeat round (and its renewals) before measuring

	measureFrom := time.Now()
	ticks := map[int]int64{}
	for _, r := range c.Replicas {
		ticks[r.PID], _, _ = gatewayproc.CPUTicks(r.PID)
	}
	for _, pid := range kubePIDs {
		ticks[pid], _, _ = gatewayproc.CPUTicks(pid)
	}
	profiled := make(chan error, 1)
	if profile {
		go func() {
			profiled <- fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", c.Replicas[0].Admin, max(1, int(duration.Seconds()))),
				filepath.Join(logs, "replica-0.cpu"))
		}()
	}
	var lat []time.Duration
	var lmu sync.Mutex
	var ok, errs atomic.Int64
	var refusals sync.Map // refusal code → count
	deadline := time.Now().Add(duration)
	var seq atomic.Int64
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
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
					mine = append(mine, d)
				case a.Status == 200:
					count(&refusals, a.Result.Outcome+"/"+string(a.Result.ErrorCode))
				default:
					count(&refusals, a.Refusal.Error.Code)
				}
			}
			lmu.Lock()
			lat = append(lat, mine...)
			lmu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(measureFrom)
	if profile {
		if err := errors.Join(<-profiled, fetch("http://"+c.Replicas[0].Admin+"/debug/pprof/goroutine?debug=1",
			filepath.Join(logs, "replica-0.goroutine"))); err != nil {
			return fmt.Errorf("profiles: %w", err)
		}
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	fmt.Printf("  operations: %d ok (%.0f/s), refused: %s, %d transport errors; latency p50 %s p90 %s p99 %s max %s\n",
		ok.Load(), float64(ok.Load())/elapsed.Seconds(), classes(&refusals), errs.Load(),
		pct(0.5).Round(10*time.Microsecond), pct(0.9).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), pct(1).Round(10*time.Microsecond))
	var gwTicks int64
	for _, r := range c.Replicas {
		rss, _, _ := gatewayproc.Memory(r.PID)
		t, _, _ := gatewayproc.CPUTicks(r.PID)
		gwTicks += t - ticks[r.PID]
		fmt.Printf("  %s: RSS %d MiB, CPU %.0f%%\n", r.ID, rss>>10, gatewayproc.CPUPercent(t-ticks[r.PID], elapsed))
	}
	if ok.Load() > 0 {
		// CPU time of all replicas together per 1000 successful
		// operations (the heartbeats and renewals of the period
		// included): what a replica costs, whatever else ran beside it.
		fmt.Printf("  gateway CPU per 1000 operations: %.0f ms\n",
			float64(gwTicks)/gatewayproc.ClockTicks*1000/float64(ok.Load())*1000)
	}
	for _, pid := range kubePIDs {
		t, _, _ := gatewayproc.CPUTicks(pid)
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		fmt.Printf("  %s: CPU %.0f%%\n", strings.TrimSpace(string(comm)), gatewayproc.CPUPercent(t-ticks[pid], elapsed))
	}
	if ok.Load() == 0 {
		return errors.New("no operation succeeded")
	}
	return nil
}

// fetch saves url's body in file.
func fetch(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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
