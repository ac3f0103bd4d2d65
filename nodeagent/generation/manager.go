// Package generation is the generation management of a node (spec
// node-protocol.md "Generation control", "Local retention and helper
// lifecycle", "Restart recovery"): it knows every deployment generation the
// node holds on disk (package genstate), follows the deployment Core
// advertises (target generation, specification digest, serving
// generation), prepares and repairs generations one at a time with
// backoff, reports at most eight observations per message, counts the
// references that keep a generation (queued and running provider calls,
// preparations, the target and serving pins), proposes retention entries
// and runs the reclamations Core authorises.
//
// The Manager never deletes a Docker image and never acts on a
// generation before the connection has supplied the deployment. Provider
// operations and probes run in native helpers (package helper);
// preparation, repair and reclamation run in the private preparer
// (package preparer), both behind the interfaces Runner and Preparer so
// that a second provider plugs in.
package generation

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/helper"
	"github.com/sandgate/sandgate/nodeagent/lease"
)

// JobKind is what a preparer job does.
type JobKind string

// Job kinds.
const (
	// JobPrepare prepares a generation, or resumes its plan.
	JobPrepare JobKind = "prepare"
	// JobRepair restores a prepared generation's missing bytes.
	JobRepair JobKind = "repair"
	// JobReclaim reclaims a generation Core authorised to drop.
	JobReclaim JobKind = "reclaim"
)

// Job is one preparer run.
type Job struct {
	// Kind is prepare, repair or reclaim.
	Kind JobKind
	// Binding is the generation and its specification digest.
	Binding genstate.Binding
}

// Outcome is how a preparer job ended (the preparer's exit class).
type Outcome struct {
	// OK: the job completed.
	OK bool
	// Busy: another helper, reclaimer or repair held the lease or the
	// installation lock; nothing was done; try again later (not a
	// failure).
	Busy bool
	// Refused: the job refused for good (a conflict, a dropped
	// generation, a missing configuration without a plan, a lease whose
	// identity cannot be verified); it is not retried automatically.
	Refused bool
	// Diagnostic is the fixed diagnostic code of a failure or refusal.
	Diagnostic string
}

// Preparer runs preparer jobs. ls is the exclusive lease the node took
// for a reclamation (it checked the references while holding it); the
// preparer inherits it and the node closes its copy after the preparer
// exited. Preparations and repairs get nil: the preparer takes the
// lease itself, after the installation lock.
type Preparer interface {
	// Run runs job in a preparer process and returns its outcome.
	Run(ctx context.Context, job Job, ls *lease.Lease) Outcome
}

// Runner runs provider calls and probes of a generation in native
// helpers (helper.Launcher). onExit runs once the helper has exited.
type Runner interface {
	// Run sends one provider request to a helper of generation b and
	// returns its response; deadline is the request's.
	Run(ctx context.Context, b genstate.Binding, req *proto.Request, deadline time.Time, onExit func()) (*proto.Response, error)
	// Probe runs the provider's health probe of generation b in a helper.
	Probe(ctx context.Context, b genstate.Binding, onExit func()) (helper.Probe, error)
}

// Config configures a Manager. Every field is required unless it says
// otherwise.
type Config struct {
	// InstallationID is this installation's UUID.
	InstallationID string
	// Generations is the node's generations directory.
	Generations *genstate.Dir
	// Preparer runs preparation, repair and reclamation jobs.
	Preparer Preparer
	// Runner runs provider calls and probes in helpers.
	Runner Runner
	// Clock is the time source; nil means the system clock.
	Clock Clock
	// ProbeTimeout bounds one probe; default 5 s.
	ProbeTimeout time.Duration
	// Log receives the manager's log; nil discards.
	Log *slog.Logger
}

// phase is what a generation's files say.
type phase int

const (
	// absent: nothing on disk (a target or serving generation not yet
	// prepared).
	absent phase = iota
	// planned: a preparation plan exists (an interrupted or failed
	// preparation; with a final configuration too, one interrupted
	// between publishing and clearing the plan).
	planned
	// prepared: the final configuration is published and no journal
	// exists: the generation has a provider.
	prepared
	// collecting: an unfinished reclamation journal; only a candidate for
	// the retention exchange.
	collecting
	// dropped: reclaimed; never prepared or used again.
	dropped
	// broken: a record or the lease cannot be verified (identity record
	// missing, lease replaced, unsafe or malformed files, or installed
	// without configuration or plan); kept for inspection, never taken
	// over.
	broken
)

// gen is the manager's view of one generation.
type gen struct {
	b     genstate.Binding
	known bool // b is known (from disk or from the deployment)
	phase phase
	// configured: the final configuration exists, so helpers may have
	// run under the generation's lease.
	configured bool
	// brokenDiag is the diagnostic of a broken generation.
	brokenDiag string

	refs       int  // queued and running provider calls (until their helper exits)
	probing    int  // running probes (until their helper exits)
	working    bool // a preparer job runs for it
	reclaiming bool

	needRepair bool
	// attempts counts the jobs run since the generation was last proven
	// ready by a probe; each one pushes next by Backoff(attempts), so a
	// repair that "succeeds" while the probe still finds bytes missing
	// does not spin.
	attempts int
	failed   bool      // the last job failed (diag says why)
	next     time.Time // earliest next attempt
	refused  bool      // the last job refused; not retried automatically
	diag     string    // diagnostic of the last failure or refusal

	probed     bool // a probe answered since the last job
	probeReady bool
	probeDiag  string
}

// drop is a reclamation Core authorised on a connection.
type drop struct {
	b    genstate.Binding
	live <-chan struct{} // closed when the authorising connection ends
	// tries counts the attempts that found the lease busy although no
	// helper of this node holds it (a process in the instant between
	// fork and exec still holds a copy of the descriptor).
	tries int
}

// Busy retries of a drop whose lease no known helper holds: at most
// dropRetries, dropRetryWait apart, then the authorisation is dropped.
const (
	dropRetries   = 10
	dropRetryWait = 100 * time.Millisecond
)

// Manager manages the node's generations. Create it with New, call Load,
// then Run it; the other methods are safe for concurrent use.
type Manager struct {
	cfg   Config
	clock Clock
	log   *slog.Logger

	mu         sync.Mutex
	gens       map[int64]*gen
	deployment *proto.Deployment // nil until a connection supplied it
	obsCursor  int
	retCursor  int
	repCursor  int
	drops      []drop
	wake       chan struct{}
	// pokes counts wake-ups asked for (atomic).
	pokes atomic.Uint64
	// idle, when set (tests), is called each time the worker goes to
	// sleep, with the timed wait (0: until woken) and the number of
	// wake-ups asked for before it last looked for work.
	idle func(wait time.Duration, pokes uint64)
}

// New returns a Manager for cfg.
func New(cfg Config) (*Manager, error) {
	if !proto.IsUUID(cfg.InstallationID) || cfg.Generations == nil || cfg.Preparer == nil || cfg.Runner == nil {
		return nil, errors.New("generation: InstallationID, Generations, Preparer and Runner are required")
	}
	m := &Manager{cfg: cfg, clock: cfg.Clock, log: cfg.Log, gens: map[int64]*gen{}, wake: make(chan struct{}, 1)}
	if m.clock == nil {
		m.clock = systemClock{}
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.cfg.ProbeTimeout <= 0 {
		m.cfg.ProbeTimeout = 5 * time.Second
	}
	return m, nil
}

// Load reads what every generation has on disk (restart recovery). It
// writes nothing and starts nothing: work waits for the deployment.
func (m *Manager) Load() error {
	gs, err := m.cfg.Generations.Generations()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range gs {
		m.inspectLocked(g)
	}
	return nil
}

// inspectLocked re-reads generation g's files and sets its phase.
func (m *Manager) inspectLocked(g int64) *gen {
	l := m.cfg.Generations.Inspect(g)
	x := m.gens[g]
	if x == nil {
		x = &gen{}
		m.gens[g] = x
	}
	if b, ok := l.Binding(); ok {
		x.b, x.known = b, true
	}
	x.configured = l.Config != nil
	x.brokenDiag = ""
	switch {
	case l.Dropped != nil && l.DroppedErr == nil && l.Journal == nil:
		x.phase = dropped
	case l.IdentityErr != nil, l.PlanErr != nil, l.ConfigErr != nil, l.JournalErr != nil, l.DroppedErr != nil:
		x.phase, x.brokenDiag = broken, proto.DiagProviderUnavailable
	case l.Lease && l.Identity == nil:
		// Interrupted before the identity record was persisted, or the
		// record was removed: never taken over.
		x.phase, x.brokenDiag = broken, proto.DiagProviderUnavailable
	case l.Journal != nil:
		// An unfinished reclamation (its dropped marker maybe written
		// already): only a retention candidate; a fresh authorisation
		// finishes it.
		x.phase = collecting
	case l.Plan != nil:
		x.phase = planned
	case l.Config != nil:
		x.phase = prepared
	case l.Identity != nil:
		// Installed, but neither a configuration nor an exact plan:
		// repair is refused rather than rebuilding a configuration.
		x.phase, x.brokenDiag = broken, proto.DiagProviderConfigMissing
	default:
		x.phase = absent
	}
	if x.known && x.b.InstallationID != m.cfg.InstallationID && x.phase != broken {
		x.phase, x.brokenDiag = broken, proto.DiagProviderUnavailable
	}
	if x.phase == absent && !x.known {
		delete(m.gens, g)
		return nil
	}
	return x
}

// SetDeployment records the deployment a connection advertised (welcome
// and every heartbeat_ack) and wakes the worker. Until the first call
// nothing is prepared, repaired or reclaimed.
func (m *Manager) SetDeployment(d proto.Deployment) {
	m.mu.Lock()
	changed := m.deployment == nil || m.deployment.Generation != d.Generation ||
		m.deployment.SpecificationDigest != d.SpecificationDigest || !eqServing(m.deployment.ServingGeneration, d.ServingGeneration)
	dc := d
	if d.ServingGeneration != nil {
		s := *d.ServingGeneration
		dc.ServingGeneration = &s
	}
	m.deployment = &dc
	m.mu.Unlock()
	if changed {
		m.log.Info("deployment", "target", d.Generation, "serving", servingString(d.ServingGeneration))
		m.poke()
	}
}

func eqServing(a, b *int64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func servingString(s *int64) any {
	if s == nil {
		return "none"
	}
	return *s
}

func (m *Manager) poke() {
	m.pokes.Add(1)
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// pinned reports whether generation g is the target or the serving
// generation (under mu).
func (m *Manager) pinnedLocked(g int64) bool {
	d := m.deployment
	return d != nil && (d.Generation == g || (d.ServingGeneration != nil && *d.ServingGeneration == g))
}

// wantLocked returns the binding the deployment wants for generation g
// (the target's digest for the target; the local binding for the serving
// generation, whose digest Core does not restate) and whether g is pinned.
func (m *Manager) wantLocked(g int64) (genstate.Binding, bool) {
	d := m.deployment
	if d == nil {
		return genstate.Binding{}, false
	}
	if d.Generation == g {
		return genstate.Binding{InstallationID: m.cfg.InstallationID, Generation: g, SpecificationDigest: d.SpecificationDigest}, true
	}
	if d.ServingGeneration != nil && *d.ServingGeneration == g {
		if x := m.gens[g]; x != nil && x.known {
			return x.b, true
		}
		return genstate.Binding{}, true
	}
	return genstate.Binding{}, false
}

// observationLocked returns generation g's observation and whether it may
// be advertised.
func (m *Manager) observationLocked(g int64) (proto.GenerationObservation, bool) {
	x := m.gens[g]
	want, pinned := m.wantLocked(g)
	if x == nil || !x.known {
		// A target not prepared here yet.
		if !pinned || want.SpecificationDigest == "" {
			return proto.GenerationObservation{}, false
		}
		o := proto.GenerationObservation{Generation: g, SpecificationDigest: want.SpecificationDigest, State: proto.GenerationPreparing}
		if x != nil && x.failed {
			o.State, o.Diagnostic = proto.GenerationFailed, x.diag
		}
		return o, true
	}
	digest := x.b.SpecificationDigest
	if pinned && want.SpecificationDigest != "" {
		digest = want.SpecificationDigest
	}
	o := proto.GenerationObservation{Generation: g, SpecificationDigest: digest}
	switch {
	case x.phase == collecting, x.reclaiming && !pinned:
		// An unfinished reclamation is never advertised.
		return o, false
	case x.phase == dropped && !pinned:
		return o, false
	case x.phase == dropped, x.phase == broken, digest != x.b.SpecificationDigest:
		// The target is a dropped generation, a broken one, or conflicts
		// with the specification this node retains for that number.
		o.State, o.Diagnostic = proto.GenerationFailed, x.brokenDiag
		if o.Diagnostic == "" {
			o.Diagnostic = proto.DiagProviderUnavailable
		}
	case x.refused || x.failed:
		o.State, o.Diagnostic = proto.GenerationFailed, x.diag
	case x.phase == planned && !pinned:
		// A cancelled or failed preparation: visible, never serving.
		o.State, o.Diagnostic = proto.GenerationFailed, proto.DiagProviderUnavailable
	case x.phase == planned, x.phase == absent, x.working && !x.needRepair:
		o.State = proto.GenerationPreparing
	case x.needRepair:
		o.State, o.Diagnostic = proto.GenerationPreparing, x.probeDiag
	case x.probed && x.probeReady:
		o.State = proto.GenerationReady
	case x.probed:
		o.State, o.Diagnostic = proto.GenerationFailed, x.probeDiag
	default:
		// Prepared, not probed yet: readiness comes only from a probe.
		o.State = proto.GenerationPreparing
	}
	if o.Diagnostic != "" {
		o.Diagnostic = proto.NormalizeDiagnostic(o.Diagnostic)
	}
	return o, true
}

// reportOrderLocked returns the generations of the next message: the
// target and the serving generation first, then the others in a fair
// rotation, at most proto.MaxGenerations.
func (m *Manager) reportOrderLocked() []int64 {
	var out []int64
	if d := m.deployment; d != nil {
		out = append(out, d.Generation)
		if s := d.ServingGeneration; s != nil && *s != d.Generation {
			out = append(out, *s)
		}
	}
	var rest []int64
	for g := range m.gens {
		if !slices.Contains(out, g) {
			if _, ok := m.observationLocked(g); ok {
				rest = append(rest, g)
			}
		}
	}
	slices.Sort(rest)
	room := proto.MaxGenerations - len(out)
	if len(rest) > room {
		start := m.obsCursor % len(rest)
		rest = append(rest[start:], rest[:start]...)[:room]
		m.obsCursor = start + room
	}
	return append(out, rest...)
}

// Observations returns the generation observations of the next hello or
// heartbeat (at most proto.MaxGenerations; target and serving first, the
// rest rotating fairly from one message to the next). It first probes the
// prepared generations it reports (in helpers, in parallel, each bounded
// by the probe timeout). Omitting a generation never means it is gone.
func (m *Manager) Observations(ctx context.Context) []proto.GenerationObservation {
	m.mu.Lock()
	order := m.reportOrderLocked()
	var probe []genstate.Binding
	for _, g := range order {
		if x := m.gens[g]; x != nil && x.phase == prepared && !x.working && !x.reclaiming && !m.dropQueuedLocked(x.b) {
			if want, pinned := m.wantLocked(g); !pinned || want.SpecificationDigest == "" || want.SpecificationDigest == x.b.SpecificationDigest {
				probe = append(probe, x.b)
				x.probing++
			}
		}
	}
	m.mu.Unlock()
	m.probe(ctx, probe)

	m.mu.Lock()
	defer m.mu.Unlock()
	var out []proto.GenerationObservation
	for _, g := range order {
		if o, ok := m.observationLocked(g); ok {
			out = append(out, o)
		}
	}
	return out
}

// probe runs the readiness probes of bs in parallel; each holds a
// reference (taken by the caller) until its helper exits.
func (m *Manager) probe(ctx context.Context, bs []genstate.Binding) {
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, m.cfg.ProbeTimeout)
			defer cancel()
			p, err := m.cfg.Runner.Probe(pctx, b, func() { m.probed(b.Generation) })
			m.mu.Lock()
			defer m.mu.Unlock()
			x := m.gens[b.Generation]
			if x == nil || x.b != b || x.working {
				return
			}
			if err != nil {
				// Busy (a repair or reclaimer holds the lease), timed out or
				// no answer: readiness is not proven.
				if !errors.Is(err, lease.ErrBusy) {
					x.probed, x.probeReady, x.probeDiag = true, false, proto.DiagProviderUnavailable
				}
				return
			}
			x.probed, x.probeReady, x.probeDiag = true, p.Ready, p.Diagnostic
			if p.Ready {
				x.attempts, x.next, x.needRepair = 0, time.Time{}, false
			}
			if !p.Ready && (p.Diagnostic == proto.DiagImageMissing || p.Diagnostic == proto.DiagSeccompProfileMissing) && !x.needRepair {
				// Missing bytes: queue a repair; never advertise ready.
				x.needRepair = true
				m.poke()
			}
		}()
	}
	wg.Wait()
}

// probed ends one probe of generation g.
func (m *Manager) probed(g int64) {
	m.mu.Lock()
	if x := m.gens[g]; x != nil && x.probing > 0 {
		x.probing--
	}
	m.mu.Unlock()
	m.poke()
}

// dropQueuedLocked reports whether a drop of b waits in the queue.
func (m *Manager) dropQueuedLocked(b genstate.Binding) bool {
	for _, d := range m.drops {
		if d.b == b {
			return true
		}
	}
	return false
}

// release drops one reference of generation g.
func (m *Manager) release(g int64) {
	m.mu.Lock()
	if x := m.gens[g]; x != nil && x.refs > 0 {
		x.refs--
	}
	m.mu.Unlock()
	m.poke()
}

// Call is an admitted provider call on a generation: it holds a
// reference from admission until its helper exits (or until Release, for
// a call that never ran).
type Call struct {
	m    *Manager
	b    genstate.Binding
	once sync.Once
}

// Begin admits a request for generation g: it returns a Call holding a
// reference when the generation has a usable provider (a published
// configuration, no journal, not dropped, broken or being reclaimed), and
// false otherwise (the request is answered unconfirmed).
func (m *Manager) Begin(g int64) (*Call, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.gens[g]
	if x == nil || x.phase != prepared || x.reclaiming || !x.known {
		return nil, false
	}
	x.refs++
	return &Call{m: m, b: x.b}, true
}

// Run runs req in a helper under its budget (deadline). When ctx ends
// first it returns ctx's error, and the reference stays held until the
// helper exits.
func (c *Call) Run(ctx context.Context, req *proto.Request, deadline time.Time) (*proto.Response, error) {
	done := false
	c.once.Do(func() { done = true })
	if !done {
		return nil, errors.New("generation: call already used")
	}
	return c.m.cfg.Runner.Run(ctx, c.b, req, deadline, func() { c.m.release(c.b.Generation) })
}

// Release drops the reference of a call that will not run.
func (c *Call) Release() {
	c.once.Do(func() { c.m.release(c.b.Generation) })
}

// Retention returns the next retention request's entries: local
// generations that are neither the target nor the serving generation and
// hold no reference (no queued or running call, no preparation), at most
// proto.MaxRetentionEntries, rotating fairly. Unfinished reclamations
// are included: they continue only with a fresh drop authorisation. It
// returns nothing before the deployment is known.
func (m *Manager) Retention() []proto.RetentionEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deployment == nil {
		return nil
	}
	var cands []int64
	for g, x := range m.gens {
		if !x.known || m.pinnedLocked(g) || x.refs > 0 || x.working || x.reclaiming {
			continue
		}
		if x.phase == planned || x.phase == prepared || x.phase == collecting {
			cands = append(cands, g)
		}
	}
	slices.Sort(cands)
	if len(cands) > proto.MaxRetentionEntries {
		start := m.retCursor % len(cands)
		cands = append(cands[start:], cands[:start]...)[:proto.MaxRetentionEntries]
		m.retCursor = start + proto.MaxRetentionEntries
	}
	out := make([]proto.RetentionEntry, 0, len(cands))
	for _, g := range cands {
		out = append(out, proto.RetentionEntry{Generation: g, SpecificationDigest: m.gens[g].b.SpecificationDigest})
	}
	return out
}

// Drop records Core's authorisation to drop e, given on a connection that
// is live until live is closed. It is necessary, not sufficient: the
// reclamation re-checks every reference under the exclusive lease and
// does not run once the connection has ended.
func (m *Manager) Drop(e proto.RetentionEntry, live <-chan struct{}) {
	m.mu.Lock()
	x := m.gens[e.Generation]
	if x == nil || !x.known || x.b.SpecificationDigest != e.SpecificationDigest {
		m.mu.Unlock()
		return
	}
	for _, d := range m.drops {
		if d.b == x.b && d.live == live {
			m.mu.Unlock()
			return // already queued on this connection
		}
	}
	m.drops = append(m.drops, drop{b: x.b, live: live})
	m.mu.Unlock()
	m.poke()
}

// Run is the serial worker: it prepares, repairs and reclaims one
// generation at a time until ctx ends — the target generation first, then
// the serving generation, then the reclamations Core authorised, then
// repairs of the other generations in turn — each attempt bounded by
// AttemptDeadline, failed attempts retried after Backoff. Nothing runs
// before SetDeployment. A job under way when ctx ends is left to finish
// in its own process.
func (m *Manager) Run(ctx context.Context) error {
	for {
		seen := m.pokes.Load()
		job, ls, wait := m.next()
		if job != nil {
			m.run(ctx, *job, ls)
			continue
		}
		var timer <-chan time.Time
		if wait > 0 {
			timer = m.clock.After(wait)
		}
		if m.idle != nil {
			m.idle(wait, seen)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.wake:
		case <-timer:
		}
	}
}

// next picks the next job and takes its lease, or returns how long to
// wait for the earliest one that is not due yet (0: nothing to wait for).
func (m *Manager) next() (*Job, *lease.Lease, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.deployment
	if d == nil {
		return nil, nil, 0
	}
	now := m.clock.Now()
	var wait time.Duration
	due := func(x *gen) bool {
		if x == nil || x.next.IsZero() || !now.Before(x.next) {
			return true
		}
		if w := x.next.Sub(now); wait == 0 || w < wait {
			wait = w
		}
		return false
	}
	// 1, 2: the target, then the serving generation.
	pins := []int64{d.Generation}
	if s := d.ServingGeneration; s != nil && *s != d.Generation {
		pins = append(pins, *s)
	}
	for _, g := range pins {
		want, _ := m.wantLocked(g)
		if want.SpecificationDigest == "" {
			continue // a serving generation this node never held
		}
		x := m.gens[g]
		kind, ok := m.pinnedJobLocked(x, want)
		if !ok || !due(x) {
			continue
		}
		j, ls := m.takeLocked(g, want, kind)
		return j, ls, 0
	}
	// 3: authorised reclamations.
	for len(m.drops) > 0 {
		dr := m.drops[0]
		if x := m.gens[dr.b.Generation]; x != nil && x.probing > 0 {
			// The node's own probe (read-only, bounded by the probe
			// timeout) holds the lease: wait for it rather than lose Core's
			// authorisation; no new probe starts while a drop is queued.
			break
		}
		m.drops = m.drops[1:]
		j, ls, retry := m.reclaimLocked(dr)
		if j != nil {
			return j, ls, 0
		}
		if retry {
			dr.tries++
			m.drops = append(m.drops, dr)
			return nil, nil, dropRetryWait
		}
	}
	// 4: repairs of the other generations, in turn.
	var others []int64
	for g, x := range m.gens {
		if !m.pinnedLocked(g) && x.phase == prepared && x.needRepair && !x.refused && !x.working && !x.reclaiming {
			others = append(others, g)
		}
	}
	slices.Sort(others)
	for i := range others {
		g := others[(m.repCursor+i)%len(others)]
		x := m.gens[g]
		if !due(x) {
			continue
		}
		m.repCursor += i + 1
		j, ls := m.takeLocked(g, x.b, JobRepair)
		return j, ls, 0
	}
	return nil, nil, wait
}

// pinnedJobLocked returns the job a pinned generation needs, if any.
func (m *Manager) pinnedJobLocked(x *gen, want genstate.Binding) (JobKind, bool) {
	switch {
	case x == nil || x.phase == absent:
		return JobPrepare, x == nil || !x.refused
	case x.working || x.reclaiming || x.refused:
		return "", false
	case x.phase == broken:
		// What looked broken may be a snapshot of a preparer that a dead
		// node left running: the preparer, under the installation lock,
		// looks again and finishes or refuses for good.
		return JobPrepare, true
	case x.known && x.b != want:
		// A different retained specification for this number: refused.
		return "", false
	case x.phase == planned:
		return JobPrepare, true
	case x.phase == prepared && x.needRepair:
		return JobRepair, true
	}
	return "", false
}

// takeLocked starts job kind on generation g bound to b and marks the
// generation as worked on. The preparer takes the installation lock
// (waiting while another preparer, one a dead node left running
// included, holds it) and then the generation's exclusive lease (a busy
// lease — a running helper — postpones the job by BusyRetry).
func (m *Manager) takeLocked(g int64, b genstate.Binding, kind JobKind) (*Job, *lease.Lease) {
	x := m.gens[g]
	if x == nil {
		x = &gen{}
		m.gens[g] = x
	}
	if x.phase == absent {
		x.b, x.known = b, true
	}
	x.working = true
	return &Job{Kind: kind, Binding: b}, nil
}

// reclaimLocked starts an authorised reclamation if it still may run: the
// authorising connection is live, the exclusive lease is free, and —
// checked while holding it — the generation is not pinned, has no
// reference and no job.
func (m *Manager) reclaimLocked(dr drop) (job *Job, ls *lease.Lease, retry bool) {
	select {
	case <-dr.live:
		m.log.Info("drop authorisation of a closed connection ignored", "generation", dr.b.Generation)
		return nil, nil, false
	default:
	}
	g := dr.b.Generation
	x := m.gens[g]
	if x == nil || x.b != dr.b || (x.phase != planned && x.phase != prepared && x.phase != collecting) || x.working || x.reclaiming {
		return nil, nil, false
	}
	ls, err := lease.Acquire(m.cfg.Generations.Path(), dr.b.Want(), lease.Exclusive)
	switch {
	case errors.Is(err, lease.ErrNotFound) && !x.configured && (x.phase == planned || x.phase == collecting):
		// A plan written before its preparation created the lease (or the
		// reclamation of one, interrupted after its journal): never
		// configured, so no helper can have run; the installation lock
		// serialises the rest.
	case errors.Is(err, lease.ErrBusy) && x.refs == 0 && x.probing == 0 && dr.tries < dropRetries:
		return nil, nil, true
	case err != nil:
		m.log.Info("reclamation not started: lease", "generation", g, "error", err)
		return nil, nil, false
	}
	if m.pinnedLocked(g) || x.refs > 0 {
		if ls != nil {
			ls.Close()
		}
		m.log.Info("reclamation not started: the generation is referenced", "generation", g, "refs", x.refs)
		return nil, nil, false
	}
	x.reclaiming = true
	return &Job{Kind: JobReclaim, Binding: dr.b}, ls, false
}

// run runs one job, then records its outcome and, after a successful
// preparation or repair, probes the generation at once.
func (m *Manager) run(ctx context.Context, job Job, ls *lease.Lease) {
	m.log.Info("preparer job", "kind", job.Kind, "generation", job.Binding.Generation)
	// The attempt ends at AttemptDeadline on the manager's clock (the
	// preparer is killed then); the context's own deadline is the same
	// instant on the system clock, passed on to the preparer process.
	jctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), AttemptDeadline)
	expired, finished := m.clock.After(AttemptDeadline), make(chan struct{})
	go func() {
		select {
		case <-expired:
			cancel()
		case <-finished:
		}
	}()
	out := m.cfg.Preparer.Run(jctx, job, ls)
	close(finished)
	cancel()
	if ls != nil {
		ls.Close() // the preparer has exited: it no longer holds it
	}
	m.log.Info("preparer job ended", "kind", job.Kind, "generation", job.Binding.Generation,
		"ok", out.OK, "busy", out.Busy, "refused", out.Refused, "diagnostic", out.Diagnostic)

	m.mu.Lock()
	g := job.Binding.Generation
	x := m.inspectLocked(g)
	if x == nil {
		x = &gen{b: job.Binding, known: true}
		m.gens[g] = x
	}
	x.working, x.reclaiming = false, false
	now := m.clock.Now()
	var probe []genstate.Binding
	switch {
	case job.Kind == JobReclaim:
		// A reclamation's end changes nothing of the generation's
		// preparation state; what it left on disk is re-read above.
	case out.Busy:
		x.next = now.Add(BusyRetry)
	default:
		x.attempts++
		x.next = now.Add(Backoff(x.attempts))
		switch {
		case out.OK:
			x.failed, x.refused, x.diag, x.needRepair, x.probed = false, false, "", false, false
			if x.phase == prepared {
				x.probing++
				probe = append(probe, x.b)
			}
		case out.Refused:
			x.refused, x.diag = true, out.Diagnostic
		default:
			x.failed, x.diag = true, out.Diagnostic
		}
	}
	m.mu.Unlock()
	m.probe(ctx, probe)
}
