package generation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/helper"
	"github.com/sandgate/sandgate/nodeagent/lease"
)

// wait bounds every wait of these tests on the worker: a safety net, not
// a measurement.
const wait = 10 * time.Second

const inst = "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60"

func digest(g int64) string { return strings.Repeat(fmt.Sprintf("%x", g%16), 64) }

func bind(g int64) genstate.Binding {
	return genstate.Binding{InstallationID: inst, Generation: g, SpecificationDigest: digest(g)}
}

// fakeClock is a manual clock: After registers a waiter that fires when
// Advance passes its time, and reports the requested duration on waits.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func newClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// fakePreparer records jobs and plays them out on the real generations
// directory: a prepare creates the lease and publishes a configuration, a
// reclaim writes the dropped marker. outcome decides each job's end.
type fakePreparer struct {
	t       *testing.T
	dir     *genstate.Dir
	mu      sync.Mutex
	running int
	maxRun  int
	jobs    chan Job
	held    chan lease.Mode // the mode of the lease the node passed, per job
	outcome func(Job) Outcome
	block   chan struct{} // when not nil, each job waits for a value
}

func newPreparer(t *testing.T, dir *genstate.Dir) *fakePreparer {
	return &fakePreparer{t: t, dir: dir, jobs: make(chan Job, 64), held: make(chan lease.Mode, 64),
		outcome: func(Job) Outcome { return Outcome{OK: true} }}
}

func (p *fakePreparer) Run(ctx context.Context, job Job, ls *lease.Lease) Outcome {
	p.mu.Lock()
	p.running++
	p.maxRun = max(p.maxRun, p.running)
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.running--; p.mu.Unlock() }()
	var mode lease.Mode
	if ls != nil {
		mode = ls.Mode()
	}
	p.held <- mode
	p.jobs <- job
	if p.block != nil {
		<-p.block
	}
	if job.Kind != JobReclaim {
		// As the preparer does: the exclusive lease, when there is one.
		if _, err := os.Lstat(lease.Path(p.dir.Path(), job.Binding.Generation)); err == nil {
			ls, err := lease.Acquire(p.dir.Path(), job.Binding.Want(), lease.Exclusive)
			if errors.Is(err, lease.ErrBusy) {
				return Outcome{Busy: true}
			}
			if err != nil {
				return Outcome{Refused: true, Diagnostic: proto.DiagProviderUnavailable}
			}
			defer ls.Close()
		}
	}
	p.mu.Lock()
	out := p.outcome(job)
	p.mu.Unlock()
	if !out.OK {
		return out
	}
	switch job.Kind {
	case JobPrepare:
		if _, err := os.Lstat(lease.Path(p.dir.Path(), job.Binding.Generation)); err != nil {
			if _, err := lease.Create(p.dir.Path(), job.Binding.Want()); err != nil {
				p.t.Errorf("fake prepare: %v", err)
			}
		}
		publish(p.t, p.dir, job.Binding)
		p.dir.Remove(job.Binding.Generation, genstate.RecordPlan)
	case JobReclaim:
		if err := p.dir.WriteDropped(&genstate.Dropped{Binding: job.Binding}); err != nil {
			p.t.Errorf("fake reclaim: %v", err)
		}
		p.dir.Remove(job.Binding.Generation, genstate.RecordJournal)
	}
	return out
}

func (p *fakePreparer) next(t *testing.T) Job {
	t.Helper()
	select {
	case j := <-p.jobs:
		return j
	case <-time.After(wait):
		t.Fatal("no preparer job started")
	}
	return Job{}
}

func (p *fakePreparer) none(t *testing.T) {
	t.Helper()
	select {
	case j := <-p.jobs:
		t.Fatalf("unexpected job %+v", j)
	default:
	}
}

func publish(t *testing.T, dir *genstate.Dir, b genstate.Binding) {
	t.Helper()
	c := &genstate.Config{Binding: b, Source: "rel", Path: genstate.FilesName(b.Generation), Provider: "docker",
		ImageRef: "app:1", ImageID: "sha256:" + digest(b.Generation),
		Files: []genstate.File{{Name: "manifest.json", Kind: "manifest", SHA256: b.SpecificationDigest, Size: 1}}}
	if err := dir.PublishConfig(c); err != nil {
		t.Fatal(err)
	}
}

// installed makes generation b prepared on disk.
func installed(t *testing.T, dir *genstate.Dir, b genstate.Binding) {
	t.Helper()
	if _, err := lease.Create(dir.Path(), b.Want()); err != nil {
		t.Fatal(err)
	}
	publish(t, dir, b)
}

// fakeRunner answers probes from a table (ready unless diag names a
// code) and provider calls with a success, holding each call until
// release is closed when set.
type fakeRunner struct {
	mu      sync.Mutex
	diag    map[int64]string
	probes  []int64
	release chan struct{}
	exits   chan int64
}

func (r *fakeRunner) Probe(ctx context.Context, b genstate.Binding, onExit func()) (helper.Probe, error) {
	defer onExit()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.probes = append(r.probes, b.Generation)
	if d := r.diag[b.Generation]; d != "" {
		return helper.Probe{Diagnostic: d}, nil
	}
	return helper.Probe{Ready: true}, nil
}

func (r *fakeRunner) Run(ctx context.Context, b genstate.Binding, req *proto.Request, deadline time.Time, onExit func()) (*proto.Response, error) {
	go func() {
		if r.release != nil {
			<-r.release
		}
		onExit()
		if r.exits != nil {
			r.exits <- b.Generation
		}
	}()
	return &proto.Response{ID: req.ID, ConnectionID: req.ConnectionID}, nil
}

type rig struct {
	dir   *genstate.Dir
	clock *fakeClock
	prep  *fakePreparer
	run   *fakeRunner
	m     *Manager
	idles chan idle
}

type idle struct {
	wait  time.Duration
	pokes uint64
}

// nextWait returns the wait of the worker's next sleep (0: until woken);
// every job it started before has been recorded by then.
func (r *rig) nextWait(t *testing.T) time.Duration {
	t.Helper()
	select {
	case i := <-r.idles:
		return i.wait
	case <-time.After(wait):
		t.Fatal("the worker did not go to sleep")
	}
	return 0
}

// settle wakes the worker and waits until it has looked for work after
// everything the test did so far, run what it found and gone to sleep;
// it returns that sleep's wait.
func (r *rig) settle(t *testing.T) time.Duration {
	t.Helper()
	r.m.poke()
	want := r.m.pokes.Load()
	for {
		select {
		case i := <-r.idles:
			if i.pokes >= want {
				return i.wait
			}
		case <-time.After(wait):
			t.Fatal("the worker did not go to sleep")
		}
	}
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir, err := genstate.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{dir: dir, clock: newClock(), run: &fakeRunner{diag: map[int64]string{}}}
	r.prep = newPreparer(t, dir)
	return r
}

func (r *rig) start(t *testing.T) {
	t.Helper()
	m, err := New(Config{InstallationID: inst, Generations: r.dir, Preparer: r.prep, Runner: r.run, Clock: r.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(); err != nil {
		t.Fatal(err)
	}
	r.idles = make(chan idle, 1024)
	m.idle = func(d time.Duration, p uint64) { r.idles <- idle{d, p} }
	r.m = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	r.nextWait(t) // the worker's first sleep
}

func dep(target int64, serving ...int64) proto.Deployment {
	d := proto.Deployment{Generation: target, SpecificationDigest: digest(target)}
	if len(serving) > 0 {
		d.ServingGeneration = &serving[0]
	}
	return d
}

func TestNothingIsPreparedBeforeTheDeployment(t *testing.T) {
	r := newRig(t)
	// A plan left by an interrupted preparation of generation 5.
	if _, err := lease.Create(r.dir.Path(), bind(5).Want()); err != nil {
		t.Fatal(err)
	}
	if err := r.dir.WritePlan(&genstate.Plan{Binding: bind(5), Source: "rel", Path: genstate.FilesName(5)}); err != nil {
		t.Fatal(err)
	}
	r.start(t)
	// The worker goes to sleep with nothing to wait for and no job: the
	// plan waits for the connection.
	if d := r.settle(t); d != 0 {
		t.Fatalf("timed wait %v before the deployment", d)
	}
	r.prep.none(t)
	if got := r.m.Retention(); got != nil {
		t.Fatalf("retention before the deployment: %v", got)
	}
	r.m.SetDeployment(dep(5))
	if j := r.prep.next(t); j.Kind != JobPrepare || j.Binding != bind(5) {
		t.Fatalf("job %+v, want prepare of generation 5", j)
	}
	if mode := <-r.prep.held; mode != 0 {
		t.Fatalf("the node passed a lease (mode %v) to a preparation; the preparer takes it", mode)
	}
}

func TestTargetThenServingThenOthersOneAtATime(t *testing.T) {
	r := newRig(t)
	for _, g := range []int64{2, 3, 4} {
		installed(t, r.dir, bind(g))
		r.run.diag[g] = proto.DiagImageMissing
	}
	r.prep.block = make(chan struct{})
	r.start(t)
	// Probes find the images of 2 (serving), 3 and 4 missing.
	r.m.SetDeployment(dep(7, 2))
	if j := r.prep.next(t); j.Kind != JobPrepare || j.Binding.Generation != 7 {
		t.Fatalf("first job %+v, want prepare of the target 7", j)
	}
	r.m.Observations(context.Background()) // probes queue the repairs
	r.prep.block <- struct{}{}
	var order []int64
	for range 3 {
		j := r.prep.next(t)
		if j.Kind != JobRepair {
			t.Fatalf("job %+v, want a repair", j)
		}
		order = append(order, j.Binding.Generation)
		r.mu(func() { delete(r.run.diag, j.Binding.Generation) })
		r.prep.block <- struct{}{}
	}
	if !slices.Equal(order, []int64{2, 3, 4}) {
		t.Fatalf("repair order %v, want the serving generation 2 first, then 3 and 4", order)
	}
	if r.prep.maxRun != 1 {
		t.Fatalf("%d jobs ran at once, want 1", r.prep.maxRun)
	}
}

func (r *rig) mu(f func()) {
	r.run.mu.Lock()
	defer r.run.mu.Unlock()
	f()
}

func TestBackoffAfterFailures(t *testing.T) {
	r := newRig(t)
	r.prep.outcome = func(Job) Outcome { return Outcome{Diagnostic: proto.DiagRuntimeDownloadFailed} }
	r.start(t)
	r.m.SetDeployment(dep(9))
	want := []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i, w := range want {
		r.prep.next(t)
		got := r.settle(t)
		if got != w {
			t.Fatalf("wait after failure %d = %v, want %v", i+1, got, w)
		}
		obs := r.m.Observations(context.Background())
		if len(obs) != 1 || obs[0].State != proto.GenerationFailed || obs[0].Diagnostic != proto.DiagRuntimeDownloadFailed {
			t.Fatalf("observation after failure %d: %+v", i+1, obs)
		}
		r.prep.none(t)
		r.clock.Advance(w - time.Second)
		r.prep.none(t)
		r.clock.Advance(time.Second)
	}
	r.prep.next(t)
}

func TestObservationsTargetAndServingFirstOthersRotate(t *testing.T) {
	r := newRig(t)
	for g := int64(1); g <= 20; g++ {
		installed(t, r.dir, bind(g))
	}
	r.start(t)
	r.m.SetDeployment(dep(20, 10))
	r.prep.none(t)
	seen := map[int64]int{}
	for range 9 { // 9 messages × 6 free places = 54 ≥ 3 × 18
		obs := r.m.Observations(context.Background())
		if len(obs) != proto.MaxGenerations {
			t.Fatalf("%d observations, want %d", len(obs), proto.MaxGenerations)
		}
		if obs[0].Generation != 20 || obs[1].Generation != 10 {
			t.Fatalf("first two observations %d, %d; want target 20 and serving 10", obs[0].Generation, obs[1].Generation)
		}
		for _, o := range obs[2:] {
			seen[o.Generation]++
			if o.State != proto.GenerationReady || o.SpecificationDigest != digest(o.Generation) {
				t.Fatalf("observation %+v", o)
			}
		}
	}
	for g := int64(1); g <= 19; g++ {
		if g == 10 {
			continue
		}
		if seen[g] != 3 {
			t.Fatalf("generation %d reported %d times in 9 messages, want 3 (fair rotation): %v", g, seen[g], seen)
		}
	}
}

func TestReadinessOnlyFromTheProbe(t *testing.T) {
	r := newRig(t)
	r.run.diag[3] = proto.DiagDockerUnreachable
	r.start(t)
	r.m.SetDeployment(dep(3))
	r.prep.next(t)
	r.settle(t)
	// After the preparation the worker probed at once: the engine is
	// down, so the generation is not ready whatever its files say.
	obs := r.m.Observations(context.Background())
	if obs[0].State != proto.GenerationFailed || obs[0].Diagnostic != proto.DiagDockerUnreachable {
		t.Fatalf("observation %+v, want failed docker_unreachable", obs[0])
	}
	r.mu(func() { delete(r.run.diag, 3) })
	if obs := r.m.Observations(context.Background()); obs[0].State != proto.GenerationReady {
		t.Fatalf("observation %+v, want ready", obs[0])
	}
}

func TestRetentionCandidatesAndReferences(t *testing.T) {
	r := newRig(t)
	for g := int64(1); g <= 12; g++ {
		installed(t, r.dir, bind(g))
	}
	r.run.release = make(chan struct{})
	r.start(t)
	if got := r.m.Retention(); got != nil {
		t.Fatalf("retention before the deployment: %v", got)
	}
	r.m.SetDeployment(dep(12, 11))
	// A call on generation 5 holds a reference until its helper exits.
	call, ok := r.m.Begin(5)
	if !ok {
		t.Fatal("Begin(5) refused a prepared generation")
	}
	if _, err := call.Run(context.Background(), &proto.Request{ID: "x", ConnectionID: "y"}, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	all := map[int64]bool{}
	for range 3 {
		es := r.m.Retention()
		if len(es) > proto.MaxRetentionEntries {
			t.Fatalf("%d entries", len(es))
		}
		for _, e := range es {
			all[e.Generation] = true
			if e.SpecificationDigest != digest(e.Generation) {
				t.Fatalf("entry %+v", e)
			}
		}
	}
	for _, g := range []int64{5, 11, 12} {
		if all[g] {
			t.Fatalf("generation %d (referenced or pinned) was proposed for retention: %v", g, all)
		}
	}
	if len(all) != 9 {
		t.Fatalf("candidates %v, want the 9 unreferenced, unpinned generations", all)
	}
	close(r.run.release)
}

func TestDropIsNecessaryNotSufficient(t *testing.T) {
	r := newRig(t)
	for _, g := range []int64{1, 2, 3, 4} {
		installed(t, r.dir, bind(g))
	}
	r.run.release = make(chan struct{})
	r.run.exits = make(chan int64, 4)
	r.start(t)
	r.m.SetDeployment(dep(4, 3))
	r.prep.none(t)
	live := make(chan struct{})

	// Pinned: the serving generation is never reclaimed.
	r.m.Drop(proto.RetentionEntry{Generation: 3, SpecificationDigest: digest(3)}, live)
	// A digest other than the local one: nothing.
	r.m.Drop(proto.RetentionEntry{Generation: 2, SpecificationDigest: digest(9)}, live)
	// Authorised on a connection that has ended: nothing.
	closed := make(chan struct{})
	close(closed)
	r.m.Drop(proto.RetentionEntry{Generation: 2, SpecificationDigest: digest(2)}, closed)
	// A running call on generation 1 holds a reference.
	call, _ := r.m.Begin(1)
	call.Run(context.Background(), &proto.Request{ID: "x", ConnectionID: "y"}, time.Now().Add(time.Minute))
	r.m.Drop(proto.RetentionEntry{Generation: 1, SpecificationDigest: digest(1)}, live)
	// A helper of another process (or one whose caller was cancelled)
	// holds the shared lease of generation 2.
	other, err := lease.Acquire(r.dir.Path(), bind(2).Want(), lease.Shared)
	if err != nil {
		t.Fatal(err)
	}
	r.m.Drop(proto.RetentionEntry{Generation: 2, SpecificationDigest: digest(2)}, live)
	r.settle(t) // every drop was refused
	r.prep.none(t)

	// Once the helper exited and the call ended, a fresh authorisation
	// reclaims, with the exclusive lease held by the node.
	other.Close()
	close(r.run.release)
	<-r.run.exits
	r.m.Drop(proto.RetentionEntry{Generation: 2, SpecificationDigest: digest(2)}, live)
	if j := r.prep.next(t); j.Kind != JobReclaim || j.Binding != bind(2) {
		t.Fatalf("job %+v, want reclaim of 2", j)
	}
	if mode := <-r.prep.held; mode != lease.Exclusive {
		t.Fatalf("reclamation lease mode %v, want exclusive", mode)
	}
	r.m.Drop(proto.RetentionEntry{Generation: 1, SpecificationDigest: digest(1)}, live)
	if j := r.prep.next(t); j.Binding != bind(1) {
		t.Fatalf("job %+v, want reclaim of 1", j)
	}
	<-r.prep.held
	r.settle(t)
	// Dropped generations are never used, proposed or advertised again.
	if _, ok := r.m.Begin(2); ok {
		t.Fatal("Begin admitted a call on a dropped generation")
	}
	for _, e := range r.m.Retention() {
		if e.Generation == 1 || e.Generation == 2 {
			t.Fatalf("dropped generation proposed again: %+v", e)
		}
	}
	for _, o := range r.m.Observations(context.Background()) {
		if o.Generation == 1 || o.Generation == 2 {
			t.Fatalf("dropped generation advertised: %+v", o)
		}
	}
}

func TestRestartRecoveryStates(t *testing.T) {
	r := newRig(t)
	// 1: prepared. 2: interrupted between the lease and its identity
	// record. 3: an unfinished reclamation. 4: dropped. 5: installed
	// without configuration or plan. 6: the lease replaced.
	installed(t, r.dir, bind(1))
	lease.Create(r.dir.Path(), bind(2).Want())
	removeFile(t, lease.IdentityPath(r.dir.Path(), 2))
	installed(t, r.dir, bind(3))
	r.dir.WriteJournal(&genstate.Journal{Binding: bind(3)})
	installed(t, r.dir, bind(4))
	r.dir.WriteDropped(&genstate.Dropped{Binding: bind(4)})
	lease.Create(r.dir.Path(), bind(5).Want())
	installed(t, r.dir, bind(6))
	replace(t, lease.Path(r.dir.Path(), 6))
	r.start(t)

	for g := int64(1); g <= 6; g++ {
		c, ok := r.m.Begin(g)
		if ok != (g == 1) {
			t.Fatalf("Begin(%d) = %v", g, ok)
		}
		if ok {
			c.Release()
		}
	}
	// The broken target and serving generations get one look from the
	// preparer (a snapshot may have caught a preparer of a dead node
	// mid-way), which refuses; then nothing more.
	r.prep.outcome = func(j Job) Outcome {
		if j.Binding.Generation == 5 {
			return Outcome{Refused: true, Diagnostic: proto.DiagProviderConfigMissing}
		}
		return Outcome{Refused: true, Diagnostic: proto.DiagProviderUnavailable}
	}
	r.m.SetDeployment(dep(6, 5))
	for _, g := range []int64{6, 5} {
		if j := r.prep.next(t); j.Kind != JobPrepare || j.Binding.Generation != g {
			t.Fatalf("job %+v, want the preparer's look at %d", j, g)
		}
	}
	r.settle(t)
	r.prep.none(t) // nothing is taken over, re-prepared or repaired
	obs := map[int64]proto.GenerationObservation{}
	for _, o := range r.m.Observations(context.Background()) {
		obs[o.Generation] = o
	}
	if o := obs[5]; o.State != proto.GenerationFailed || o.Diagnostic != proto.DiagProviderConfigMissing {
		t.Fatalf("serving generation without configuration or plan: %+v", o)
	}
	if o := obs[6]; o.State != proto.GenerationFailed {
		t.Fatalf("target with a replaced lease: %+v", o)
	}
	if _, ok := obs[3]; ok {
		t.Fatal("an unfinished reclamation was advertised")
	}
	if _, ok := obs[4]; ok {
		t.Fatal("a dropped generation was advertised")
	}
	var ret []int64
	for _, e := range r.m.Retention() {
		ret = append(ret, e.Generation)
	}
	if !slices.Equal(ret, []int64{1, 3}) {
		t.Fatalf("retention entries %v, want [1 3] (the prepared and the unfinished reclamation)", ret)
	}
	// Only a fresh authorisation continues the reclamation.
	r.m.Drop(proto.RetentionEntry{Generation: 3, SpecificationDigest: digest(3)}, make(chan struct{}))
	if j := r.prep.next(t); j.Kind != JobReclaim || j.Binding != bind(3) {
		t.Fatalf("job %+v", j)
	}
}

func TestConflictingTargetSpecificationIsRefused(t *testing.T) {
	r := newRig(t)
	other := bind(5)
	other.SpecificationDigest = digest(9)
	installed(t, r.dir, other)
	r.start(t)
	r.m.SetDeployment(dep(5))
	r.settle(t)
	r.prep.none(t)
	obs := r.m.Observations(context.Background())
	if obs[0].Generation != 5 || obs[0].SpecificationDigest != digest(5) || obs[0].State != proto.GenerationFailed {
		t.Fatalf("observation %+v, want the target failed", obs[0])
	}
}

func TestMissingImageQueuesRepairAndNeverReportsReady(t *testing.T) {
	r := newRig(t)
	installed(t, r.dir, bind(4))
	r.run.diag[4] = proto.DiagImageMissing
	r.prep.outcome = func(Job) Outcome { return Outcome{Diagnostic: proto.DiagRuntimeDownloadFailed} }
	r.prep.block = make(chan struct{})
	r.start(t)
	r.m.SetDeployment(dep(4))
	obs := r.m.Observations(context.Background())
	if obs[0].State != proto.GenerationPreparing || obs[0].Diagnostic != proto.DiagImageMissing {
		t.Fatalf("observation %+v, want preparing image_missing", obs[0])
	}
	if j := r.prep.next(t); j.Kind != JobRepair {
		t.Fatalf("job %+v, want repair", j)
	}
	close(r.prep.block)
	if d := r.settle(t); d != time.Minute {
		t.Fatalf("backoff after a failed repair %v", d)
	}
	obs = r.m.Observations(context.Background())
	if obs[0].State == proto.GenerationReady {
		t.Fatalf("ready with its image missing: %+v", obs[0])
	}
	r.prep.mu.Lock()
	r.prep.outcome = func(Job) Outcome { return Outcome{OK: true} }
	r.prep.mu.Unlock()
	r.mu(func() { delete(r.run.diag, 4) })
	r.clock.Advance(time.Minute)
	if j := r.prep.next(t); j.Kind != JobRepair {
		t.Fatalf("job %+v", j)
	}
	r.settle(t)
	if obs := r.m.Observations(context.Background()); obs[0].State != proto.GenerationReady {
		t.Fatalf("after the repair: %+v", obs[0])
	}
}

func TestBusyLeasePostponesWithoutBackoff(t *testing.T) {
	r := newRig(t)
	installed(t, r.dir, bind(4))
	r.run.diag[4] = proto.DiagImageMissing
	r.start(t)
	r.m.SetDeployment(dep(4))
	holder, err := lease.Acquire(r.dir.Path(), bind(4).Want(), lease.Shared)
	if err != nil {
		t.Fatal(err)
	}
	r.m.Observations(context.Background()) // the probe's helper was busy? no: shared + shared is fine
	if j := r.prep.next(t); j.Kind != JobRepair {
		t.Fatalf("job %+v, want the repair (which finds the lease busy)", j)
	}
	if d := r.settle(t); d != BusyRetry {
		t.Fatalf("wait %v, want BusyRetry", d)
	}
	r.prep.none(t)
	holder.Close()
	r.clock.Advance(BusyRetry)
	if j := r.prep.next(t); j.Kind != JobRepair {
		t.Fatalf("job %+v", j)
	}
}

func removeFile(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

// replace puts a new file in place of p (same name, other inode).
func replace(t *testing.T, p string) {
	t.Helper()
	tmp := p + ".new"
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}
