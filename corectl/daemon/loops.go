package daemon

import (
	"context"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// periodic is one job of a cluster leader's loops.
type periodic struct {
	// name names the job in the log.
	name string
	// every is the pause between the end of a run and the next.
	every time.Duration
	// now runs the job at once when the loops start (else after every).
	now bool
	// wake, when set, runs the job again at once when it fires (right
	// after the run in progress, if one is).
	wake <-chan struct{}
	// first, when set, is waited on before the first run; false (ctx
	// ended) means the job never runs.
	first func(ctx context.Context) bool
	// run runs the job once; it returns when ctx ends.
	run func(ctx context.Context)
}

// leaderLoops is the leader-only runnable of one cluster's periodic work:
// one goroutine schedules every job and starts a goroutine for each run
// (at most one run of a job at a time), so an idle cluster costs one
// goroutine for all of them instead of one each, and a long run of one
// job (an orphan scan of many sandboxes) delays no other. While it runs,
// the cluster's leader loops count as started (clusterRun.leading, for
// /readyz; the reconcilers start in the same group). A run that panics
// ends that run alone: the panic is logged with its stack and the job
// runs again its period later, as controller-runtime recovers a
// reconciler's panic, instead of the panic ending the process with every
// cluster's work and the API.
type leaderLoops struct {
	c     *clusterRun
	log   logr.Logger
	loops []periodic
}

// NeedLeaderElection is true: the jobs are the leader's.
func (l *leaderLoops) NeedLeaderElection() bool { return true }

// Start runs the jobs until ctx ends, then waits for the runs in
// progress.
func (l *leaderLoops) Start(ctx context.Context) error {
	l.c.leading.Store(true)
	defer l.c.leading.Store(false)
	type state struct {
		due              time.Time
		started, running bool
		again            bool // woken while running
	}
	st := make([]state, len(l.loops))
	done := make(chan int, len(l.loops))
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(i int) {
		st[i].running = true
		first := !st[i].started && l.loops[i].first != nil
		st[i].started = true
		p := l.loops[i]
		wg.Go(func() {
			defer func() { done <- i }()
			defer func() {
				if v := recover(); v != nil {
					l.log.Error(fmt.Errorf("panic: %v", v), "leader job panicked; it runs again after its period", "job", p.name, "stack", string(debug.Stack()))
				}
			}()
			if first && !p.first(ctx) {
				return
			}
			p.run(ctx)
		})
	}
	now := time.Now()
	for i, p := range l.loops {
		st[i].due = now.Add(p.every)
		if p.now {
			start(i)
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// The select's cases: the end, the timer, a run's end, then each
	// job's wake channel (a nil channel never fires).
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)},
	}
	for _, p := range l.loops {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.wake)})
	}
	for {
		var next time.Time
		for i := range st {
			if !st[i].running && (next.IsZero() || st[i].due.Before(next)) {
				next = st[i].due
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		chosen, v, _ := reflect.Select(cases)
		switch chosen {
		case 0:
			return nil
		case 1:
			now := time.Now()
			for i := range st {
				if !st[i].running && !st[i].due.After(now) {
					start(i)
				}
			}
		case 2:
			i := int(v.Int())
			st[i].running = false
			st[i].due = time.Now().Add(l.loops[i].every)
			if st[i].again {
				st[i].again = false
				start(i)
			}
		default:
			i := chosen - 3
			if st[i].running {
				st[i].again = true
			} else {
				start(i)
			}
		}
	}
}
