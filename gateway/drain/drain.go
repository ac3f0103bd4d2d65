// Package drain ends the data plane's long requests in an orderly way when
// the gateway process stops (a rollout's SIGTERM): once the server begins
// to shut down, no new stream is admitted, the streams in
// flight run on for a grace period, and those still running when it ends
// are told to finish with a typed error of their own (the data plane's
// GATEWAY_DRAINING, docs/errors.md) rather than being cut by the process
// exit, which the SDKs could only show as a broken connection.
//
// A Drainer knows nothing of HTTP: the data plane tracks each stream with
// Track and selects on the channel it returns; the Caddy adapter calls
// Begin from the server's shutdown hook when the process exits. A reload
// drains nothing: the replaced configuration's drainer is kept in a Group
// while its streams run on, and the exit drains it with the current one.
package drain

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Kind is what a tracked request is, the label of the in-flight gauge.
type Kind string

// The kinds of long requests the data plane tracks.
const (
	// KindCommand is a command's output stream (Process/Start,
	// Process/Connect).
	KindCommand Kind = "command"
	// KindTransfer is a file upload or download (/files).
	KindTransfer Kind = "transfer"
)

// Kinds lists every Kind, for a gauge that shows each at zero.
var Kinds = []Kind{KindCommand, KindTransfer}

// DefaultGrace is the grace a Drainer gives the streams in flight when the
// configuration names none: 25 s, which ends them with their typed error
// before the shipped Caddy grace_period (30 s) closes the connections and
// well within the pod's terminationGracePeriodSeconds (60 s,
// deploy/portal/gateway.yaml).
const DefaultGrace = 25 * time.Second

// ErrDraining is the reason Track gives for not admitting a request: the
// gateway has begun to shut down.
var ErrDraining = errors.New("drain: the gateway is shutting down")

// Drainer tracks the long requests of one data-plane handler and ends them
// when a shutdown's grace runs out. Its methods are safe for concurrent
// use. Create it with New.
type Drainer struct {
	grace   time.Duration
	observe func(Kind, int)

	mu       sync.Mutex
	draining bool
	cut      bool
	ending   chan struct{} // closed when the grace is over (or at Close)
	timer    *time.Timer
	inFlight map[Kind]int
	idle     chan struct{} // closed when draining and nothing is in flight
}

// New returns a Drainer with the given grace (0 or less: DefaultGrace).
// observe, if not nil, is called with +1 when a request of a kind starts
// to be tracked and -1 when it ends (the in-flight gauge); it must not
// call back into the Drainer.
func New(grace time.Duration, observe func(kind Kind, delta int)) *Drainer {
	if grace <= 0 {
		grace = DefaultGrace
	}
	if observe == nil {
		observe = func(Kind, int) {}
	}
	return &Drainer{grace: grace, observe: observe, ending: make(chan struct{}),
		inFlight: map[Kind]int{}, idle: make(chan struct{})}
}

// Grace returns the grace the streams in flight get after Begin.
func (d *Drainer) Grace() time.Duration { return d.grace }

// Track admits one long request of the given kind. It returns a channel
// that is closed when the request must end (the grace after Begin is over,
// or Close was called) and the function to call, once, when the request
// has ended. After Begin it admits nothing and returns ErrDraining.
func (d *Drainer) Track(kind Kind) (ending <-chan struct{}, done func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return nil, nil, ErrDraining
	}
	d.inFlight[kind]++
	d.observe(kind, 1)
	var once sync.Once
	return d.ending, func() { once.Do(func() { d.untrack(kind) }) }, nil
}

func (d *Drainer) untrack(kind Kind) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inFlight[kind]--
	d.observe(kind, -1)
	d.checkIdle()
}

// checkIdle closes idle once draining with nothing in flight; d.mu held.
func (d *Drainer) checkIdle() {
	if !d.draining {
		return
	}
	for _, n := range d.inFlight {
		if n > 0 {
			return
		}
	}
	select {
	case <-d.idle:
	default:
		close(d.idle)
	}
}

// InFlight returns how many requests of kind are tracked now.
func (d *Drainer) InFlight(kind Kind) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inFlight[kind]
}

// Draining reports whether Begin (or Close) has been called.
func (d *Drainer) Draining() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.draining
}

// Begin starts the drain: no request is admitted any more, and the ones in
// flight are told to end when the grace is over. Calling it again changes
// nothing.
func (d *Drainer) Begin() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return
	}
	d.draining = true
	d.timer = time.AfterFunc(d.grace, d.endAll)
	d.checkIdle()
}

// Close ends the drain at once: nothing is admitted and every request still
// in flight is told to end now (the handler is being cleaned up, so its
// server has stopped waiting for them). It is safe to call more than once
// and without Begin.
func (d *Drainer) Close() {
	d.mu.Lock()
	d.draining = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.checkIdle()
	d.mu.Unlock()
	d.endAll()
}

// endAll closes the ending channel once.
func (d *Drainer) endAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.cut {
		d.cut = true
		close(d.ending)
	}
}

// Ended reports whether the requests in flight have been told to end.
func (d *Drainer) Ended() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cut
}

// Wait blocks until the drain has begun and nothing is in flight, or ctx
// ends (returning its error).
func (d *Drainer) Wait(ctx context.Context) error {
	select {
	case <-d.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Idle reports whether nothing is in flight.
func (d *Drainer) Idle() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.inFlight {
		if n > 0 {
			return false
		}
	}
	return true
}

// Group is a process's drainers besides the current configuration's: those
// of configurations a reload replaced while requests still ran on them. A
// reload does not drain (the process stays, so those requests may run to
// their end, as Caddy lets them); the process exit drains them with the
// current one. The zero value is ready; it is safe for concurrent use.
type Group struct {
	mu      sync.Mutex
	retired map[*Drainer]struct{}
}

// Retire records d, whose configuration a reload replaced, until it is
// idle; it forgets the retired drainers that are idle now, so the group
// holds only those with requests in flight at the last reload.
func (g *Group) Retire(d *Drainer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.retired == nil {
		g.retired = map[*Drainer]struct{}{}
	}
	for r := range g.retired {
		if r.Idle() {
			delete(g.retired, r)
		}
	}
	if !d.Idle() {
		g.retired[d] = struct{}{}
	}
}

// BeginAll begins the drain of current and of every retired drainer (the
// process is exiting).
func (g *Group) BeginAll(current *Drainer) {
	current.Begin()
	g.mu.Lock()
	defer g.mu.Unlock()
	for r := range g.retired {
		r.Begin()
	}
}

// Wait blocks until every retired drainer has begun and is idle, or ctx
// ends (returning its error): the process exit waits for the streams of
// replaced configurations, whose servers no longer wait for them.
func (g *Group) Wait(ctx context.Context) error {
	g.mu.Lock()
	retired := make([]*Drainer, 0, len(g.retired))
	for r := range g.retired {
		retired = append(retired, r)
	}
	g.mu.Unlock()
	for _, r := range retired {
		if err := r.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Retired returns how many retired drainers the group holds.
func (g *Group) Retired() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.retired)
}
