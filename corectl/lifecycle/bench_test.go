package lifecycle_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
)

// BenchmarkCreate measures corectl's create orchestration through its API
// (POST /v2/sandboxes with a restricted network: managed Ingress,
// NetworkPolicy, BatchSandbox, owner references, desired ingress state,
// readiness through the fixed entry, token) against the real apiserver,
// with the production readiness interval. The OpenSandbox controller is
// the stand-in that marks a BatchSandbox ready as soon as it sees it, so
// the pod start costs only its watch-and-patch reaction: the latency is
// the orchestration's own, plus that reaction.
//
// It runs b.N creates with `clients` concurrent callers, each starting its
// next create when the previous one answered, and reports creates/s,
// the latency p50/p99, the orchestration's own overhead p50/p99 (each
// create's latency less its readiness step, the wait for the pod start)
// and the CPU per create of this process (corectl
// and the stand-ins), kube-apiserver and etcd. The client limits are
// client-go's own defaults (QPS 5, burst 10: what corectl had before it
// set them) and corectl's defaults (cluster.DefaultClientQPS/Burst).
func BenchmarkCreate(b *testing.B) {
	for _, lim := range []struct {
		name   string
		limits cluster.ClientLimits
	}{
		{"limits=client-go-5qps", cluster.ClientLimits{QPS: 5, Burst: 10}},
		{"limits=corectl-default", cluster.ClientLimits{}},
	} {
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/clients=%d", lim.name, clients), func(b *testing.B) {
				steps := newStepClock()
				w := startWorld(b, env.Config, worldOptions{limits: lim.limits, productionTimers: true, onStep: steps.mark})
				create := func() (string, error) {
					req, err := http.NewRequest(http.MethodPost, w.url+"/v2/sandboxes", strings.NewReader(restricted))
					if err != nil {
						return "", err
					}
					req.Header.Set("X-API-Key", "key-a")
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						return "", err
					}
					defer resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						return "", fmt.Errorf("create: HTTP %d", resp.StatusCode)
					}
					var created struct {
						SandboxID string `json:"sandboxID"`
					}
					if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&created); err != nil {
						return "", fmt.Errorf("create: decode the answer: %w", err)
					}
					return created.SandboxID, nil
				}
				// One create outside the measurement warms the clients'
				// connections and discovery.
				if _, err := create(); err != nil {
					b.Fatal(err)
				}
				var (
					next  atomic.Int64
					mu    sync.Mutex
					lat   []time.Duration
					ids   []string
					first error
					wg    sync.WaitGroup
				)
				cpu0, err := kubetest.ReadCPU()
				if err != nil {
					b.Fatal(err)
				}
				steps.reset()
				load0 := loadAverage()
				b.ResetTimer()
				start := time.Now()
				for range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(b.N) {
							t0 := time.Now()
							id, err := create()
							d := time.Since(t0)
							mu.Lock()
							if err != nil && first == nil {
								first = err
							}
							lat = append(lat, d)
							ids = append(ids, id)
							mu.Unlock()
							if err != nil {
								return
							}
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if first != nil {
					b.Fatal(first)
				}
				cpu1, err := kubetest.ReadCPU()
				if err != nil {
					b.Fatal(err)
				}
				// The orchestration's own overhead: each create's latency
				// less its readiness step (the wait for the pod start).
				var own []time.Duration
				for i, id := range ids {
					r, ok := steps.of(id, lifecycle.StepReadiness)
					if !ok {
						b.Fatalf("sandbox %s: no readiness step recorded", id)
					}
					own = append(own, lat[i]-r)
				}
				slices.Sort(lat)
				slices.Sort(own)
				quantile := func(d []time.Duration, p float64) float64 {
					i := max(0, min(len(d)-1, int(math.Ceil(p*float64(len(d))))-1))
					return float64(d[i].Microseconds()) / 1000
				}
				q := func(p float64) float64 { return quantile(lat, p) }
				used := cpu1.Sub(cpu0)
				per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
				b.Logf("load average %s before, %s after", load0, loadAverage())
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
				b.ReportMetric(q(0.5), "p50-ms")
				b.ReportMetric(q(0.99), "p99-ms")
				b.ReportMetric(quantile(own, 0.5), "overhead-p50-ms")
				b.ReportMetric(quantile(own, 0.99), "overhead-p99-ms")
				b.ReportMetric(per(used.Self), "corectl-cpu-ms/create")
				b.ReportMetric(per(used.APIServer), "apiserver-cpu-ms/create")
				b.ReportMetric(per(used.Etcd), "etcd-cpu-ms/create")
				if clients == 1 {
					for _, st := range lifecycle.CreateSteps {
						if p50, ok := steps.p50(st); ok {
							b.ReportMetric(p50, "step-"+string(st)+"-p50-ms")
						}
					}
				}
			})
		}
	}
}

// loadAverage is /proc/loadavg's one-, five- and fifteen-minute load
// averages ("?" when unreadable): the benchmark prints it beside its
// figures (the machine is shared; docs/benchmarks.md).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// stepClock records when each create step of each sandbox began, and
// derives each step's duration as the time to the next step (the last
// step, token, lasts until the next mark of any kind is not known and is
// left out).
type stepClock struct {
	mu   sync.Mutex
	last map[string]stepMark
	dur  map[lifecycle.Step][]time.Duration
	byID map[string]map[lifecycle.Step]time.Duration
}

type stepMark struct {
	step lifecycle.Step
	at   time.Time
}

func newStepClock() *stepClock { c := &stepClock{}; c.reset(); return c }

func (c *stepClock) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last, c.dur = map[string]stepMark{}, map[lifecycle.Step][]time.Duration{}
	c.byID = map[string]map[lifecycle.Step]time.Duration{}
}

func (c *stepClock) mark(id string, s lifecycle.Step) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.last[id]; ok {
		c.dur[prev.step] = append(c.dur[prev.step], now.Sub(prev.at))
		if c.byID[id] == nil {
			c.byID[id] = map[lifecycle.Step]time.Duration{}
		}
		c.byID[id][prev.step] = now.Sub(prev.at)
	}
	c.last[id] = stepMark{s, now}
}

// of returns how long step s of sandbox id lasted.
func (c *stepClock) of(id string, s lifecycle.Step) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.byID[id][s]
	return d, ok
}

// p50 returns the median duration of step s in ms.
func (c *stepClock) p50(s lifecycle.Step) (float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := slices.Clone(c.dur[s])
	if len(d) == 0 {
		return 0, false
	}
	slices.Sort(d)
	return float64(d[(len(d)-1)/2].Microseconds()) / 1000, true
}
