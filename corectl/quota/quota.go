// Package quota enforces the per-credential create limits of the
// credential record (credential.Limits: concurrent sandboxes, creates per
// minute, longest timeout), as E2B enforces its team limits: a create over
// a count limit is refused with 429 and E2B's kind of message, and a
// timeout over the limit (of a create, setTimeout, connect or refresh:
// CheckTimeout) with 400. One Gate serves one corectl process; its
// counts of creates in flight and of recent creates are that process's
// (a create on another replica is seen once its BatchSandbox exists, so
// concurrent creates on several replicas may together exceed a limit by
// the number of replicas).
package quota

import (
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/credential"
)

// Reasons of a Refusal (the metric label corectl_create_refusals_total
// {reason} uses them too).
const (
	// ReasonConcurrent: the credential has its limit of live sandboxes.
	ReasonConcurrent = "concurrent_sandboxes"
	// ReasonRate: the credential started its limit of creates in the last
	// minute.
	ReasonRate = "creates_per_minute"
	// ReasonTimeout: the create asks for a longer timeout than allowed.
	ReasonTimeout = "max_timeout"
)

// Refusal is a create refused by a limit.
type Refusal struct {
	// Reason is one of the Reason* constants.
	Reason string
	// RateLimited is true for the count limits (answered 429), false for
	// the timeout (answered 400, as E2B answers a timeout over the
	// team's maximum).
	RateLimited bool
	// Message is the text the client sees.
	Message string
}

// Error implements error: Message.
func (r *Refusal) Error() string { return r.Message }

// CheckTimeout refuses a timeout (of a create, setTimeout, connect or
// refresh) longer than lim.MaxTimeoutSeconds with a *Refusal of
// ReasonTimeout; nil limits or 0 allow any (the caller's own maximum still
// applies).
func CheckTimeout(lim *credential.Limits, timeout time.Duration) error {
	if lim == nil {
		return nil
	}
	if max := time.Duration(lim.MaxTimeoutSeconds) * time.Second; max > 0 && timeout > max {
		return &Refusal{Reason: ReasonTimeout,
			Message: fmt.Sprintf("timeout cannot be greater than %d seconds for this credential", lim.MaxTimeoutSeconds)}
	}
	return nil
}

// Window is the span of CreatesPerMinute.
const Window = time.Minute

// Gate admits creates. The zero value is ready to use; it is safe for
// concurrent use.
type Gate struct {
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu       sync.Mutex
	inflight map[string]int         // credential ID → admitted creates not yet released
	starts   map[string][]time.Time // credential ID → admission times within Window, oldest first
}

// Admit decides a create of credential id with limits lim (nil: none) and
// timeout (0: the default, which callers keep within their own maximum),
// given running, the credential's live sandboxes as the apiserver lists
// them. On admission it returns release, which the caller must call once
// the create has ended (its BatchSandbox is then written or removed, so
// running counts it or it is gone); until then the create counts as
// running. Errors: *Refusal. Memory: per credential with limits, at most
// its CreatesPerMinute admission times.
func (g *Gate) Admit(id string, lim *credential.Limits, running int, timeout time.Duration) (release func(), err error) {
	if lim == nil {
		return func() {}, nil
	}
	if err := CheckTimeout(lim, timeout); err != nil {
		return nil, err
	}
	now := time.Now()
	if g.Now != nil {
		now = g.Now()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight == nil {
		g.inflight, g.starts = map[string]int{}, map[string][]time.Time{}
	}
	if n := lim.ConcurrentSandboxes; n > 0 && running+g.inflight[id] >= n {
		return nil, &Refusal{Reason: ReasonConcurrent, RateLimited: true,
			Message: fmt.Sprintf("you have reached the maximum number of concurrent sandboxes (%d) for this credential", n)}
	}
	recent := g.starts[id]
	for len(recent) > 0 && now.Sub(recent[0]) >= Window {
		recent = recent[1:]
	}
	if n := lim.CreatesPerMinute; n > 0 && len(recent) >= n {
		g.starts[id] = recent
		return nil, &Refusal{Reason: ReasonRate, RateLimited: true,
			Message: fmt.Sprintf("rate limit exceeded: at most %d sandbox creates per minute for this credential", n)}
	}
	if lim.CreatesPerMinute > 0 {
		recent = append(recent, now)
	}
	if len(recent) == 0 {
		delete(g.starts, id)
	} else {
		g.starts[id] = recent
	}
	g.inflight[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.inflight[id]--; g.inflight[id] <= 0 {
				delete(g.inflight, id)
			}
		})
	}, nil
}
