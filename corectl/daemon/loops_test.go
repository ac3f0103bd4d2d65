package daemon

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/metrics"
)

// TestLeaderLoops: a job with now runs at once and the others not before
// their period; a wake during a run gives exactly one more run, right
// after it, never two at once; a job whose first wait fails never runs;
// Start marks the leader's loops started, and on the end of its context
// waits for the run in progress.
func TestLeaderLoops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	entered := make(chan int, 10)
	release := make(chan struct{})
	var inRun, overlap, runs, later, never atomic.Int32
	hour := time.Hour
	cr := &clusterRun{}
	l := &leaderLoops{c: cr, loops: []periodic{
		{every: hour, now: true, wake: wake, run: func(ctx context.Context) {
			if inRun.Add(1) > 1 {
				overlap.Add(1)
			}
			n := runs.Add(1)
			entered <- int(n)
			select {
			case <-release:
			case <-ctx.Done():
			}
			inRun.Add(-1)
		}},
		{every: hour, run: func(context.Context) { later.Add(1) }},
		{every: hour, now: true, first: func(context.Context) bool { return false }, run: func(context.Context) { never.Add(1) }},
	}}
	stopped := make(chan error, 1)
	go func() { stopped <- l.Start(ctx) }()
	if n := <-entered; n != 1 {
		t.Fatalf("first run = %d", n)
	}
	if !cr.leading.Load() {
		t.Fatal("the leader's loops are not marked started")
	}
	// Two wakes taken during the run: exactly one more run, after it.
	taken := func() {
		deadline := time.Now().Add(10 * time.Second)
		for len(wake) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the wake was not taken")
			}
			time.Sleep(time.Millisecond) // polling the channel's length
		}
	}
	wake <- struct{}{}
	taken()
	wake <- struct{}{}
	taken()
	release <- struct{}{}
	if n := <-entered; n != 2 {
		t.Fatalf("run after the wakes = %d", n)
	}
	release <- struct{}{}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if inRun.Load() != 0 {
		t.Fatal("Start returned with a run in progress")
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("runs = %d, want 2 (the first, one for both wakes)", n)
	}
	if overlap.Load() != 0 {
		t.Fatal("two runs of one job at once")
	}
	if later.Load() != 0 {
		t.Fatal("a job without now ran before its period")
	}
	if never.Load() != 0 {
		t.Fatal("a job whose first wait failed ran")
	}
	if cr.leading.Load() {
		t.Fatal("the leader's loops still marked started after Start returned")
	}
}

// TestLeaderLoopsPanic: a run that panics ends that run only: the other
// jobs go on, the job runs again its period after the panic, and Start
// still returns at the end of its context.
func TestLeaderLoopsPanic(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	panics := make(chan struct{}, 10)
	others := make(chan struct{}, 10)
	l := &leaderLoops{c: &clusterRun{}, loops: []periodic{
		{every: time.Millisecond, now: true, run: func(context.Context) {
			panics <- struct{}{}
			panic("a job's bug")
		}},
		{every: time.Millisecond, now: true, run: func(context.Context) { others <- struct{}{} }},
	}}
	stopped := make(chan error, 1)
	go func() { stopped <- l.Start(ctx) }()
	deadline := time.After(30 * time.Second)
	for range 3 {
		select {
		case <-panics:
		case <-deadline:
			t.Fatal("the panicking job did not run again")
		}
		select {
		case <-others:
		case <-deadline:
			t.Fatal("the other job stopped after a panic")
		}
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// TestLeaderLoopsHungJob: a run that does not end (a call waiting on a
// hung apiserver until its context ends) holds its own job only: the
// other jobs run again and again meanwhile, and the end of the context
// ends it and Start.
func TestLeaderLoopsHungJob(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hung := make(chan struct{}, 1)
	others := make(chan struct{}, 10)
	l := &leaderLoops{c: &clusterRun{}, loops: []periodic{
		{every: time.Millisecond, now: true, run: func(ctx context.Context) {
			hung <- struct{}{}
			<-ctx.Done()
		}},
		{every: time.Millisecond, now: true, run: func(context.Context) { others <- struct{}{} }},
	}}
	stopped := make(chan error, 1)
	go func() { stopped <- l.Start(ctx) }()
	deadline := time.After(30 * time.Second)
	select {
	case <-hung:
	case <-deadline:
		t.Fatal("the hanging job did not start")
	}
	for range 5 {
		select {
		case <-others:
		case <-deadline:
			t.Fatal("the other job stopped while one run hangs")
		}
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if len(hung) != 0 {
		t.Fatal("the hanging job ran twice at once")
	}
}

// TestOrphanScanPanicCounted: an orphan scan that panics (here on an
// orchestrator that is not there) is counted as failed
// (corectl_orphan_scans_total, which CorectlOrphanScanFailing watches)
// before the leader's loops recover the panic: recovered and uncounted,
// a scan failing every time would be seen in the log only.
func TestOrphanScanPanicCounted(t *testing.T) {
	m := metrics.New()
	s := &orphanScanner{cluster: "c-panic", metrics: m}
	func() {
		defer func() { _ = recover() }()
		s.scanOnce(context.Background())
	}()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if want := `corectl_orphan_scans_total{cluster="c-panic",outcome="failed"} 1`; !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("metrics lack %s", want)
	}
}
