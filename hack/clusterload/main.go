// Command clusterload measures corectl serving many compute clusters: it
// starts N kube-apiservers (with etcd, envtest, package corectl/kubetest),
// seeds each with sandboxes as corectl writes them (a BatchSandbox, its
// egress NetworkPolicy and its managed Ingress, so corectl's informers hold
// them), and runs bin/corectl: once with cluster 1 alone configured
// and once with all N. Each run waits for /readyz and every cluster's
// start-up orphan scan, and reports corectl's RSS and goroutines (see
// figures) and the p50 of creates sent one after the other
// (POST /v2/sandboxes with an ingress allowlist and an egress list, the
// create benchmark's body), round robin over the clusters. Then, in the
// N-cluster run, the hung comparison (hangSeries): phases of -hang each,
// normal, hung, normal, hung, …, normal (-pairs hung phases), each sending
// -creates creates evenly spread over the phase to the clusters other than
// the last; in a hung phase the last cluster's kube-apiserver is stopped
// (SIGSTOP) while callers keep sending creates to it, and after it
// (SIGCONT) the stopped cluster must create again before the next phase.
// corectl's process must run throughout. Each hung phase's p50 is divided
// by the mean of the p50s of the normal phases either side (a drift of the
// machine's load over the run cancels), and the ratios' median and range
// are printed with a row per pair.
//
// A measured create whose answer says nothing was left behind (a 429
// rate_limited, a 503 before any step, a failed step whose compensation
// confirmed every undo: retryable) is sent again, at most 3 times; the
// retries are counted in the output, and the latency kept is the attempt
// answered 201.
//
// "The one-cluster figures" have two readings, and both are measured: cluster
// 1 alone with its own sandboxes (the same cluster, a tenth of the objects),
// and, once the N-cluster run is over, cluster 1 seeded up to N × sandboxes
// and run alone again (the same objects as the N-cluster run, in one
// cluster), so the per-cluster cost and the per-sandbox cost show apart.
// -total=false skips the second baseline (and its seeding).
//
// With -profiles dir, corectl runs with -probe-pprof and each run leaves in
// dir its goroutine dump grouped by stack (goroutine?debug=1), each with
// its creator (debug=2), and a heap
// profile (heap?gc=1: the live heap by allocation site, for go tool pprof
// -sample_index=inuse_space), taken with the RSS, and each hung phase leaves
// the same, taken after its creates with the apiserver still stopped
// (<run>-hung<pair>).
//
// Usage:
//
//	go run ./hack/clusterload [-corectl bin/corectl] [-clusters 10] [-sandboxes 300]
//		[-creates 30] [-hang 30s] [-pairs 5] [-total=true] [-logs dir] [-profiles dir]
//
// The fixed entry is a stand-in that answers every readiness ping 200 (and
// the probe-source discovery's echo path with the caller's address), so
// a create's latency is corectl's orchestration and its apiserver round
// trips (the readiness step is one ping). Everything runs on the same
// machine: corectl, the apiservers and etcds share its CPUs, so the load
// average (printed before and after) decides the absolute figures; the
// ratios between runs are what the goal compares (docs/benchmarks.md,
// "Many clusters").
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/internal/freeport"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"
)

// body is the create each measured request sends (the create benchmark's
// restricted sandbox: a carrier, a policy, a desired state).
const body = `{"templateID":"base","timeout":3600,"network":{"ingress":[{"cidr":"203.0.113.0/24"}],"allowOut":["198.51.100.7"]}}`

func main() {
	bin := flag.String("corectl", "bin/corectl", "the corectl binary")
	n := flag.Int("clusters", 10, "compute clusters (kube-apiservers)")
	seed := flag.Int("sandboxes", 300, "sandboxes seeded in each cluster")
	creates := flag.Int("creates", 30, "measured creates per phase (one at a time, round robin over the clusters)")
	hang := flag.Duration("hang", 30*time.Second, "how long each phase of the hung comparison lasts, and so each stop of the last cluster's apiserver (longer than corectl's leader election renew deadline, 7 s by default, so its leader election for that cluster is lost); 0: no hung comparison")
	pairs := flag.Int("pairs", 5, "pairs of phases of the hung comparison (normal, hung, …, normal: 2 × pairs + 1 phases)")
	logs := flag.String("logs", "", "a directory for corectl's output of each run (default: discarded)")
	total := flag.Bool("total", true, "also run one cluster holding clusters × sandboxes (cluster 1 seeded up to that after the N-cluster run)")
	profiles := flag.String("profiles", "", "a directory for each run's goroutine dump and heap profile (corectl runs with -probe-pprof; default: none)")
	flag.Parse()
	crlog.SetLogger(logr.Discard()) // envtest's own logs
	if *n < 2 || *creates < 1 || (*hang > 0 && *pairs < 1) {
		fmt.Fprintln(os.Stderr, "clusterload: -clusters must be at least 2, -creates and -pairs (with -hang) at least 1")
		os.Exit(2)
	}
	if err := run(*bin, *n, *seed, *creates, *hang, *pairs, *total, *logs, *profiles); err != nil {
		fmt.Fprintln(os.Stderr, "clusterload:", err)
		os.Exit(1)
	}
}

// world is the clusters and the files corectl reads.
type world struct {
	dir      string
	clusters []*kcluster
	entry    *httptest.Server
}

// kcluster is one compute cluster.
type kcluster struct {
	id         string
	env        *kubetest.Env
	kubeconfig string
	projectNS  string
	ingressNS  string
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func run(bin string, n, seed, creates int, hang time.Duration, pairs int, total bool, logs, profiles string) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w (build it with `make bin/corectl`)", err)
	}
	fmt.Printf("clusterload: %d clusters, %d sandboxes seeded in each, %d creates per phase; commit %s; load average %s\n",
		n, seed, creates, commit(), loadavg())
	dir, err := os.MkdirTemp("", "clusterload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	w := &world{dir: dir}
	// The fixed entry: every readiness ping is answered 200, and a
	// probe-source echo path with the caller's address (as the echo
	// Ingress's nginx snippet does).
	w.entry = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, probesource.EchoPathPrefix) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			_, _ = io.WriteString(rw, host)
			return
		}
		rw.WriteHeader(http.StatusOK)
	}))
	defer w.entry.Close()
	defer func() {
		for _, c := range w.clusters {
			if c.env != nil {
				_ = c.env.Stop()
			}
		}
	}()
	start := time.Now()
	if err := w.startClusters(n); err != nil {
		return err
	}
	fmt.Printf("started %d apiservers in %s\n", n, time.Since(start).Round(time.Second))
	start = time.Now()
	if err := w.seed(seed); err != nil {
		return err
	}
	fmt.Printf("seeded %d sandboxes in each cluster in %s\n", seed, time.Since(start).Round(time.Second))

	if profiles != "" {
		if err := os.MkdirAll(profiles, 0o755); err != nil {
			return err
		}
	}
	one, err := w.measure(bin, 1, creates, 0, 0, logs, profiles, "1")
	if err != nil {
		return fmt.Errorf("one cluster: %w", err)
	}
	all, err := w.measure(bin, n, creates, hang, pairs, logs, profiles, strconv.Itoa(n))
	if err != nil {
		return fmt.Errorf("%d clusters: %w", n, err)
	}
	var big *result
	if total && n*seed > seed {
		start = time.Now()
		if err := w.clusters[0].seedParallel(n*seed-seed, 8*n); err != nil {
			return err
		}
		fmt.Printf("\nseeded cluster %s up to %d sandboxes in %s\n", w.clusters[0].id, n*seed, time.Since(start).Round(time.Second))
		if big, err = w.measure(bin, 1, creates, 0, 0, logs, profiles, "1-total"); err != nil {
			return fmt.Errorf("one cluster with %d sandboxes: %w", n*seed, err)
		}
	}
	ratio := func(a, b float64) string { return fmt.Sprintf("%.2f×", a/b) }
	fmt.Printf("\n| run | RSS MiB | goroutines | create p50 ms (range of halves) |\n|---|---:|---:|---|\n")
	fmt.Printf("| 1 cluster, %d sandboxes | %.1f | %d | %.1f (%s) |\n", seed, one.rss, one.goroutines, one.p50, one.halves)
	if big != nil {
		fmt.Printf("| 1 cluster, %d sandboxes | %.1f | %d | %.1f (%s) |\n", n*seed, big.rss, big.goroutines, big.p50, big.halves)
	}
	fmt.Printf("| %d clusters, %d sandboxes each | %.1f | %d | %.1f (%s) |\n", n, seed, all.rss, all.goroutines, all.p50, all.halves)
	if hang > 0 {
		fmt.Printf("| %d clusters, cluster %s stopped (%d hung phases) | %.1f | %d | %.1f on the other clusters |\n", n, all.hungID, pairs, all.hungRSS, all.hungGoroutines, all.hungP50)
		fmt.Printf("| %d clusters, every apiserver running (%d normal phases) | | | %.1f on the same clusters |\n", n, pairs+1, all.normalP50)
	}
	fmt.Printf("\n%d clusters ÷ 1: RSS %s (%.1f MiB per added cluster), goroutines %s (%.0f per added cluster), create p50 %s\n",
		n, ratio(all.rss, one.rss), (all.rss-one.rss)/float64(n-1), ratio(float64(all.goroutines), float64(one.goroutines)),
		float64(all.goroutines-one.goroutines)/float64(n-1), ratio(all.p50, one.p50))
	if big != nil {
		fmt.Printf("%d clusters ÷ 1 cluster holding the same %d sandboxes: RSS %s (%.1f MiB per added cluster), goroutines %s (%.0f per added cluster), create p50 %s\n",
			n, n*seed, ratio(all.rss, big.rss), (all.rss-big.rss)/float64(n-1), ratio(float64(all.goroutines), float64(big.goroutines)),
			float64(all.goroutines-big.goroutines)/float64(n-1), ratio(all.p50, big.p50))
	}
	if hang > 0 {
		if err := printHung(all, pairs); err != nil {
			return err
		}
	}
	retries := one.retries + all.retries
	for _, p := range all.phases {
		retries += p.retries
	}
	if big != nil {
		retries += big.retries
	}
	fmt.Printf("measured creates retried (the answer said nothing was left behind): %d\n", retries)
	fmt.Printf("load average %s\n", loadavg())
	return nil
}

// commit is the checked-out commit (empty outside a git work tree).
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// startClusters starts n control planes, three at a time.
func (w *world) startClusters(n int) error {
	w.clusters = make([]*kcluster, n)
	sem := make(chan struct{}, 3)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		w.clusters[i] = &kcluster{id: fmt.Sprintf("c%02d", i+1), projectNS: "project", ingressNS: "ingress"}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c := w.clusters[i]
			env, err := kubetest.Start()
			if err != nil {
				errs[i] = err
				return
			}
			c.env = env
			c.kubeconfig = filepath.Join(w.dir, c.id+".kubeconfig")
			if err := os.WriteFile(c.kubeconfig, env.KubeConfig, 0o600); err != nil {
				errs[i] = err
				return
			}
			for _, ns := range []string{c.projectNS, c.ingressNS, "corectl-system", "templates"} {
				if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// seed writes count sandboxes into every cluster as corectl's create
// leaves them (Ready, with their carrier and policy), eight writers per
// cluster, the clusters side by side.
func (w *world) seed(count int) error {
	errs := make([]error, len(w.clusters))
	var wg sync.WaitGroup
	for i, c := range w.clusters {
		wg.Go(func() { errs[i] = c.seed(count) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *kcluster) seed(count int) error { return c.seedParallel(count, 8) }

// seedParallel writes count sandboxes into c with writers writers.
func (c *kcluster) seedParallel(count, writers int) error {
	cc := kubetest.Cluster(c.id, c.ingressNS)
	next := make(chan int)
	go func() {
		for i := range count {
			next <- i
		}
		close(next)
	}()
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range next {
				if err := c.seedOne(cc); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return first
}

func randomID(prefix string) string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func (c *kcluster) seedOne(cc *cluster.Cluster) error {
	ctx := context.Background()
	id, alloc := randomID("sb"), randomID("al")
	u := kubetest.NewBatchSandbox(c.projectNS, id, map[string]string{cc.AllocationLabelKey(): alloc})
	lbl := u.GetLabels()
	if lbl == nil {
		lbl = map[string]string{}
	}
	lbl[v1alpha1.LabelManagedBy], lbl[v1alpha1.LabelClusterID] = v1alpha1.ManagedByValue, c.id
	u.SetLabels(lbl)
	u.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: "Ready",
		v1alpha1.AnnotationEndAt: time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)})
	owner := &sandbox.Sandbox{ID: id, Namespace: c.projectNS, AllocationLabel: cc.AllocationLabelKey(), AllocationID: alloc,
		TemplateLabels: map[string]string{cc.AllocationLabelKey(): alloc}, Owner: "load"}
	owner.MarkOwner(u)
	if err := c.env.Client.Create(ctx, u); err != nil {
		return fmt.Errorf("cluster %s: seed BatchSandbox: %w", c.id, err)
	}
	owner.UID = u.GetUID()
	np, _, err := (&egress.Engine{Client: c.env.Client, Cluster: cc}).CreateVerified(ctx, owner, egress.Allowlist{})
	if err != nil {
		return fmt.Errorf("cluster %s: seed NetworkPolicy: %w", c.id, err)
	}
	_ = np
	ing := ingressallow.Carrier(cc, owner, []string{"203.0.113.0/24"})
	if err := c.env.Client.Create(ctx, ing); err != nil {
		return fmt.Errorf("cluster %s: seed Ingress: %w", c.id, err)
	}
	return nil
}

// result is one corectl run's figures.
type result struct {
	rss        float64 // MiB, after the caches synced and the creates
	goroutines int
	p50        float64 // ms
	halves     string
	retries    int // of the measured creates (create)
	// The hung comparison (hangSeries), with hang > 0 in the N-cluster run.
	hungID         string
	hungRSS        float64 // MiB, at the end of the last hung phase's creates
	hungGoroutines int
	phases         []phaseResult // in schedule order
	hungP50        float64       // ms, every hung phase's creates together
	normalP50      float64       // ms, every normal phase's creates together
	hungAnswered   int           // creates sent to the stopped cluster and answered
	hungCodes      string
	hungWaiting    int // creates sent to the stopped cluster still unanswered at a SIGCONT, all phases together
	survived       string
	recovered      []time.Duration // from each SIGCONT to the stopped cluster's first 201
	restarts       string          // corectl_cluster_manager_restarts_total of the stopped cluster
}

// phaseResult is one phase of the hung comparison: the creates on the
// clusters other than the last.
type phaseResult struct {
	kind    phaseKind
	p50     float64 // ms
	halves  string
	n       int
	retries int
	load    string // the load average at its end
	// CPU over the phase, ms per second: corectl's, and the last
	// cluster's kube-apiserver's (none while it is stopped: on this
	// machine a stopped apiserver leaves its share of the CPUs to the
	// others).
	corectlCPU, apiserverCPU float64
}

// measure runs corectl with the first k clusters, waits for /readyz,
// sends creates and, with hang > 0, stops the last cluster's apiserver and
// measures again. name names the run's files in logs and profiles.
func (w *world) measure(bin string, k, creates int, hang time.Duration, pairs int, logs, profiles, name string) (*result, error) {
	cfg := cluster.Config{Templates: cluster.TemplateStore{ClusterID: w.clusters[0].id, Namespace: "templates"},
		SandboxTemplates: kubetest.SandboxTemplates()}
	var creds []map[string]any
	keys := "keys:\n"
	for _, c := range w.clusters[:k] {
		cc := kubetest.Cluster(c.id, c.ingressNS)
		cc.Kubeconfig = c.kubeconfig
		cc.FixedEntry = w.entry.URL
		cfg.Clusters = append(cfg.Clusters, *cc)
		creds = append(creds, map[string]any{"id": "cred-" + c.id, "enabled": true, "projectNamespace": c.projectNS, "clusterId": c.id})
		keys += fmt.Sprintf("  - {name: key-%s, sha256: %s, credentialId: cred-%s}\n", c.id, apikey.Digest("key-"+c.id), c.id)
	}
	cfgYAML, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	credYAML, err := yaml.Marshal(map[string]any{"credentials": creds})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"config.yaml": cfgYAML, "credentials.yaml": credYAML, "keys.yaml": []byte(keys),
		"token.key": []byte("0123456789abcdef0123456789abcdef-clusterload")}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(w.dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	apiAddr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	probeAddr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	api, probe := "http://"+apiAddr, "http://"+probeAddr
	cmd := exec.Command(bin, "-config", filepath.Join(w.dir, "config.yaml"), "-credentials", filepath.Join(w.dir, "credentials.yaml"),
		"-api-keys", filepath.Join(w.dir, "keys.yaml"), "-listen", apiAddr,
		"-probe-listen", probeAddr, "-token-key-id", "k1", "-token-key-file", filepath.Join(w.dir, "token.key"),
		"-orphan-interval", "1h")
	if profiles != "" {
		cmd.Args = append(cmd.Args, "-probe-pprof")
	}
	var out io.Writer = io.Discard
	if logs != "" {
		if err := os.MkdirAll(logs, 0o755); err != nil {
			return nil, err
		}
		f, err := os.Create(filepath.Join(logs, "corectl-"+name+".log"))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		out = f
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	fmt.Printf("\ncorectl with %d cluster(s), pid %d, load average %s\n", k, cmd.Process.Pid, loadavg())
	if err := waitReady(probe, exited, 2*time.Minute); err != nil {
		return nil, err
	}
	ids := make([]string, k)
	for i, c := range w.clusters[:k] {
		ids[i] = c.id
	}
	// The leader's start-up orphan scan (after the informers' replay)
	// reads every sandbox of its cluster: the creates are measured once
	// every cluster's first scan is over, so they measure the steady
	// state in every run alike.
	if err := waitScans(probe, ids, exited, 2*time.Minute); err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 2 * time.Minute}
	// Warm every cluster's connections and discovery outside the
	// measurement.
	for _, id := range ids {
		if _, _, err := create(hc, api, id); err != nil {
			return nil, fmt.Errorf("warm-up create on %s: %w", id, err)
		}
	}
	res := &result{}
	lat, retries, err := series(hc, api, ids, creates)
	if err != nil {
		return nil, err
	}
	res.retries = retries
	res.p50, res.halves = summarise(lat)
	if res.rss, res.goroutines, err = figures(probe, cmd.Process.Pid); err != nil {
		return nil, err
	}
	fmt.Printf("  RSS %.1f MiB, %d goroutines, create p50 %.1f ms (halves %s, %d retries), load average %s\n", res.rss, res.goroutines, res.p50, res.halves, res.retries, loadavg())
	if profiles != "" {
		if err := saveProfiles(probe, profiles, name); err != nil {
			return nil, err
		}
	}
	if hang <= 0 {
		return res, nil
	}
	if err := w.hangSeries(res, hc, api, probe, cmd.Process.Pid, ids, creates, hang, pairs, exited, profiles, name); err != nil {
		return nil, err
	}
	return res, nil
}

// saveProfiles writes corectl's goroutine dump grouped by stack
// (goroutines-<name>.txt), each goroutine with its creator
// (goroutines-<name>-creators.txt) and its live heap after a collection
// (heap-<name>.pb.gz) into dir.
func saveProfiles(probe, dir, name string) error {
	for file, path := range map[string]string{"goroutines-" + name + ".txt": "/debug/pprof/goroutine?debug=1",
		"goroutines-" + name + "-creators.txt": "/debug/pprof/goroutine?debug=2",
		"heap-" + name + ".pb.gz":              "/debug/pprof/heap?gc=1"} {
		resp, err := http.Get(probe + path)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
		}
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// metric returns the value of the sample line name (with its labels) on
// corectl's /metrics, "0" when absent.
func metric(probe, name string) string {
	resp, err := http.Get(probe + "/metrics")
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	for _, line := range strings.Split(string(m), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "0"
}

// waitScans polls /metrics until every cluster of ids has counted an
// orphan scan (corectl_orphan_scans_total, any outcome).
func waitScans(probe string, ids []string, exited <-chan error, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("corectl exited: %v", err)
		default:
		}
		var missing []string
		resp, err := http.Get(probe + "/metrics")
		if err != nil {
			return err
		}
		m, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			return err
		}
		for _, id := range ids {
			if !bytes.Contains(m, []byte(`corectl_orphan_scans_total{cluster="`+id+`"`)) {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no orphan scan within %s in %s", limit, strings.Join(missing, ", "))
		}
		time.Sleep(250 * time.Millisecond) // polling a counter
	}
}

// waitReady polls /readyz until it answers 200.
func waitReady(probe string, exited <-chan error, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("corectl exited: %v", err)
		default:
		}
		resp, err := http.Get(probe + "/readyz?verbose")
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = string(b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond) // polling a process's readiness
	}
	return fmt.Errorf("corectl not ready within %s: %s", limit, last)
}

// createCtx sends one create with cluster clusterID's key and returns the
// status (0: no answer), the answer's body (at most 64 KiB), the latency
// and an error unless it was 201.
func createCtx(ctx context.Context, hc *http.Client, api, clusterID string) (int, []byte, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v2/sandboxes", strings.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("X-API-Key", "key-"+clusterID)
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	d := time.Since(t0)
	if resp.StatusCode != http.StatusCreated {
		return resp.StatusCode, b, d, fmt.Errorf("create on %s: HTTP %d %s", clusterID, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp.StatusCode, b, d, nil
}

// create sends one create to cluster clusterID and, when its answer says
// nothing was left behind (retryable), sends it again, at most maxRetries
// times, 250 ms after the first failure and twice as long after each
// next. It returns the latency of the attempt answered 201 and the
// retries it took; the error is the last attempt's.
func create(hc *http.Client, api, clusterID string) (time.Duration, int, error) {
	pause := 250 * time.Millisecond
	for retries := 0; ; retries++ {
		code, b, d, err := createCtx(context.Background(), hc, api, clusterID)
		if err == nil {
			return d, retries, nil
		}
		if retries == maxRetries || code == 0 || !retryable(code, b) {
			return 0, retries, err
		}
		time.Sleep(pause) // a retry's back-off, not a wait for a condition
		pause *= 2
	}
}

// series sends creates one at a time, round robin over ids, and returns
// their latencies and the retries they took.
func series(hc *http.Client, api string, ids []string, count int) ([]time.Duration, int, error) {
	lat := make([]time.Duration, 0, count)
	retries := 0
	for i := range count {
		d, r, err := create(hc, api, ids[i%len(ids)])
		retries += r
		if err != nil {
			return nil, retries, err
		}
		lat = append(lat, d)
	}
	return lat, retries, nil
}

// summarise returns the p50 in ms and the p50s of the first and second
// half, "a–b".
func summarise(lat []time.Duration) (float64, string) {
	p50 := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[(len(s)-1)/2].Microseconds()) / 1000
	}
	h := len(lat) / 2
	a, b := p50(lat[:max(h, 1)]), p50(lat[h:])
	return p50(lat), fmt.Sprintf("%.1f–%.1f", min(a, b), max(a, b))
}

// figures reads corectl's RSS (from /proc) and goroutines (go_goroutines
// on its /metrics). A single reading of go_goroutines counts the requests
// in flight at that instant (a Lease renewal, an Event's POST: a few per
// cluster under load), and a controller's workers start only once its
// sources synced, which can follow /readyz; so the goroutines are read
// every 250 ms in windows of one second until a window's least reading is
// no higher than the one before (the workers have started), and that
// least reading is the figure. The RSS is read after it.
func figures(probe string, pid int) (float64, int, error) {
	window := func() (int, error) {
		least := -1
		for range 4 {
			g, err := goroutines(probe)
			if err != nil {
				return 0, err
			}
			if least < 0 || g < least {
				least = g
			}
			time.Sleep(250 * time.Millisecond) // sampling a gauge
		}
		return least, nil
	}
	prev, err := window()
	if err != nil {
		return 0, 0, err
	}
	g := prev
	for range 30 {
		if g, err = window(); err != nil {
			return 0, 0, err
		}
		if g <= prev {
			break
		}
		prev = g
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	var rss float64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			rss = kb / 1024
		}
	}
	return rss, g, nil
}

// goroutines reads go_goroutines on corectl's /metrics.
func goroutines(probe string) (int, error) {
	v, err := sumMetric(probe, "go_goroutines ")
	return int(v), err
}

// apiserverPID finds the kube-apiserver process serving env (its
// --secure-port is the port of env's URL).
func apiserverPID(env *kubetest.Env) (int, error) {
	host := strings.TrimPrefix(strings.TrimPrefix(env.Config.Host, "https://"), "http://")
	_, port, err := net.SplitHostPort(strings.TrimSuffix(host, "/"))
	if err != nil {
		return 0, err
	}
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "kube-apiserver" {
			continue
		}
		if slices.Contains(args, "--secure-port="+port) {
			return strconv.Atoi(strings.Split(p, "/")[2])
		}
	}
	return 0, fmt.Errorf("no kube-apiserver with --secure-port=%s", port)
}
