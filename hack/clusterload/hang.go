package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/corectl/kubetest"
)

// hangSeries is the hung comparison of the run serving ids (the last of
// them the cluster whose apiserver is stopped): the phases of
// schedule(pairs), each hang long, each sending creates creates to the
// other clusters, evenly spread over the phase (sendAt), round robin. In a
// hung phase the last cluster's kube-apiserver is stopped (SIGSTOP) at the
// phase's start and four callers keep sending creates to it, as its users
// would; at the phase's end it is resumed (SIGCONT), and the next normal
// phase starts once that cluster answers a create 201 again and, when its
// manager was replaced meanwhile, the new manager's start-up orphan scan
// (which reads every sandbox of the cluster) has run: a normal phase is
// the steady state of every cluster running. corectl must run throughout.
// With profiles, each hung phase leaves its goroutine dumps and heap
// profile in profiles (name-hung<pair>), taken after its creates.
func (w *world) hangSeries(res *result, hc *http.Client, api, probe string, pid int, ids []string, creates int,
	hang time.Duration, pairs int, exited <-chan error, profiles, name string) error {
	k := len(ids)
	hung := w.clusters[k-1]
	res.hungID = hung.id
	apid, err := apiserverPID(hung.env)
	if err != nil {
		return err
	}
	others := ids[:k-1]
	sched := schedule(pairs)
	codes := map[string]int{}
	var pooled [2][]time.Duration
	stoppedFor := time.Duration(0)
	fmt.Printf("  the hung comparison: %d pairs of phases (normal, hung, …, normal), %s and %d creates on the other %d clusters each\n",
		pairs, hang, creates, len(others))
	for i, kind := range sched {
		ph := phaseResult{kind: kind}
		var (
			resume                 func()
			restartsBefore, scans0 float64
			callers                sync.WaitGroup
			cancelCallers          context.CancelFunc
			mu                     sync.Mutex
			waiting                int
			stoppedAt              time.Time
		)
		if kind == hungPhase {
			restartsBefore, _ = sumMetric(probe, `corectl_cluster_manager_restarts_total{cluster="`+hung.id+`"`)
			scans0, _ = sumMetric(probe, `corectl_orphan_scans_total{cluster="`+hung.id+`"`)
			if err := syscall.Kill(apid, syscall.SIGSTOP); err != nil {
				return fmt.Errorf("stop apiserver %d: %w", apid, err)
			}
			stoppedAt = time.Now()
			resumed := false
			resume = func() {
				if !resumed {
					resumed = true
					_ = syscall.Kill(apid, syscall.SIGCONT)
					stoppedFor += time.Since(stoppedAt)
				}
			}
			defer resume()
			var cctx context.Context
			cctx, cancelCallers = context.WithCancel(context.Background())
			defer cancelCallers()
			for range 4 {
				callers.Go(func() {
					for cctx.Err() == nil {
						mu.Lock()
						waiting++
						mu.Unlock()
						code, _, _, err := createCtx(cctx, hc, api, hung.id)
						mu.Lock()
						waiting--
						if err == nil || code != 0 {
							res.hungAnswered++
							codes[strconv.Itoa(code)]++
						}
						mu.Unlock()
						if err != nil && code == 0 {
							return
						}
					}
				})
			}
		}
		start := time.Now()
		cpu0, apiCPU0 := processCPU(pid), processCPU(apid)
		lat, retries, err := paced(hc, api, others, creates, start, hang, exited)
		ph.corectlCPU = perSecond(processCPU(pid)-cpu0, time.Since(start))
		ph.apiserverCPU = perSecond(processCPU(apid)-apiCPU0, time.Since(start))
		ph.retries = retries
		if err != nil {
			return fmt.Errorf("phase %d (%s): %w", i+1, kind, err)
		}
		ph.n = len(lat)
		ph.p50, ph.halves = summarise(lat)
		pooled[kind] = append(pooled[kind], lat...)
		if kind == hungPhase {
			pair := (i + 1) / 2
			if pair == pairs {
				if res.hungRSS, res.hungGoroutines, err = figures(probe, pid); err != nil {
					return err
				}
			}
			if profiles != "" {
				if err := saveProfiles(probe, profiles, fmt.Sprintf("%s-hung%d", name, pair)); err != nil {
					return err
				}
			}
			select {
			case err := <-exited:
				return fmt.Errorf("corectl exited while cluster %s was stopped: %v", hung.id, err)
			default:
			}
			mu.Lock()
			res.hungWaiting += waiting
			mu.Unlock()
			resume()
			cancelCallers()
			callers.Wait()
			// Once resumed, the cluster serves creates again (its
			// manager was replaced if the stop outlasted the lease's
			// renew deadline).
			resumedAt := time.Now()
			if err := poll(2*time.Minute, time.Second, exited, func() error {
				_, _, _, err := createCtx(context.Background(), hc, api, hung.id)
				return err
			}); err != nil {
				return fmt.Errorf("cluster %s after SIGCONT: %w", hung.id, err)
			}
			res.recovered = append(res.recovered, time.Since(resumedAt))
			if r, _ := sumMetric(probe, `corectl_cluster_manager_restarts_total{cluster="`+hung.id+`"`); r > restartsBefore {
				if err := poll(2*time.Minute, 250*time.Millisecond, exited, func() error {
					if n, err := sumMetric(probe, `corectl_orphan_scans_total{cluster="`+hung.id+`"`); err != nil || n <= scans0 {
						return fmt.Errorf("no orphan scan of %s's new manager yet (%v)", hung.id, err)
					}
					return nil
				}); err != nil {
					return err
				}
			}
		}
		ph.load = loadavg()
		res.phases = append(res.phases, ph)
		fmt.Printf("  phase %d, %s: create p50 on the other clusters %.1f ms (halves %s, %d creates, %d retries); CPU ms/s: corectl %.0f, %s's kube-apiserver %.0f; load average %s\n",
			i+1, kind, ph.p50, ph.halves, ph.n, ph.retries, ph.corectlCPU, hung.id, ph.apiserverCPU, ph.load)
	}
	res.normalP50, _ = summarise(pooled[normalPhase])
	res.hungP50, _ = summarise(pooled[hungPhase])
	var cs []string
	for c, v := range codes {
		cs = append(cs, fmt.Sprintf("%s×%d", c, v))
	}
	slices.Sort(cs)
	res.hungCodes = strings.Join(cs, ", ")
	res.survived = fmt.Sprintf("kept running through %s with the apiserver stopped", stoppedFor.Round(time.Second))
	res.restarts = metric(probe, `corectl_cluster_manager_restarts_total{cluster="`+hung.id+`"}`)
	return nil
}

// paced sends count creates round robin over ids, the i-th at
// sendAt(start, length, count, i) or as soon as the one before it is
// answered, then returns at start + length: a phase of the hung
// comparison. It fails when corectl exits.
func paced(hc *http.Client, api string, ids []string, count int, start time.Time, length time.Duration, exited <-chan error) ([]time.Duration, int, error) {
	lat := make([]time.Duration, 0, count)
	retries := 0
	wait := func(until time.Time) error {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		select {
		case err := <-exited:
			return fmt.Errorf("corectl exited: %v", err)
		case <-t.C: // the phase's schedule
			return nil
		}
	}
	for i := range count {
		if err := wait(sendAt(start, length, count, i)); err != nil {
			return nil, retries, err
		}
		d, r, err := create(hc, api, ids[i%len(ids)])
		retries += r
		if err != nil {
			return nil, retries, err
		}
		lat = append(lat, d)
	}
	if err := wait(start.Add(length)); err != nil {
		return nil, retries, err
	}
	return lat, retries, nil
}

// processCPU is process pid's CPU time so far (kubetest.ProcessCPU), 0
// when it cannot be read.
func processCPU(pid int) time.Duration {
	d, err := kubetest.ProcessCPU(pid)
	if err != nil {
		return 0
	}
	return d
}

// perSecond is cpu spent over wall, in ms per second.
func perSecond(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return float64(cpu.Milliseconds()) / wall.Seconds()
}

// poll calls f every interval until it returns nil, for at most limit;
// it fails with f's last error after that, or when corectl exits.
func poll(limit, interval time.Duration, exited <-chan error, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %w", limit, err)
		}
		select {
		case e := <-exited:
			return fmt.Errorf("corectl exited: %v", e)
		case <-time.After(interval): // polling a condition
		}
	}
}

// sumMetric sums the samples on corectl's /metrics whose line starts with
// prefix (a metric name and the start of its labels).
func sumMetric(probe, prefix string) (float64, error) {
	resp, err := http.Get(probe + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	m, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	var sum float64
	found := false
	for _, line := range strings.Split(string(m), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, errors.New("no sample " + prefix + "…")
	}
	return sum, nil
}

// printHung prints the hung comparison of res: a row per pair, the hung
// phase's p50 ÷ the mean of its neighbours' (and ÷ the one before it), and
// their median and range.
func printHung(res *result, pairs int) error {
	p50s := make([]float64, len(res.phases))
	for i, p := range res.phases {
		p50s[i] = p.p50
	}
	prs, err := pairRatios(p50s)
	if err != nil {
		return err
	}
	fmt.Printf("\n| pair | create p50 ms, normal before / hung / normal after | hung ÷ mean of both | hung ÷ before | retries | CPU ms/s corectl, normal before / hung / after | CPU ms/s %s's kube-apiserver, same | load average at the hung phase's end |\n|---:|---|---:|---:|---:|---|---|---|\n", res.hungID)
	ratios, before := make([]float64, len(prs)), make([]float64, len(prs))
	for i, p := range prs {
		ratios[i], before[i] = p.ratio(), p.ratioBefore()
		bp, hp, ap := res.phases[2*i], res.phases[2*i+1], res.phases[2*i+2]
		fmt.Printf("| %d | %.1f / %.1f / %.1f | %.2f× | %.2f× | %d | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | %s |\n", i+1, p.before, p.hung, p.after, ratios[i], before[i],
			bp.retries+hp.retries+ap.retries, bp.corectlCPU, hp.corectlCPU, ap.corectlCPU, bp.apiserverCPU, hp.apiserverCPU, ap.apiserverCPU, hp.load)
	}
	med, lo, hi, _ := spread(ratios)
	bmed, blo, bhi, _ := spread(before)
	first, last := res.phases[0].p50, res.phases[len(res.phases)-1].p50
	fmt.Printf("one apiserver stopped ÷ all running, create p50 on the other clusters: median %.2f× (%.2f–%.2f×) over %d pairs against the normal phases either side, %.2f× (%.2f–%.2f×) against the one before; the normal phases drifted %.2f× (last ÷ first)\n",
		med, lo, hi, pairs, bmed, blo, bhi, last/first)
	var rec []string
	for _, d := range res.recovered {
		rec = append(rec, d.Round(100*time.Millisecond).String())
	}
	fmt.Printf("creates sent to the stopped cluster: %d answered (%s), %d unanswered at a SIGCONT; corectl %s; after each SIGCONT cluster %s created again within %s (manager replaced %s time(s))\n",
		res.hungAnswered, res.hungCodes, res.hungWaiting, res.survived, res.hungID, strings.Join(rec, ", "), res.restarts)
	return nil
}
