package portroute

import (
	"errors"

	"github.com/sandgate/sandgate/gateway/admission"
)

// The default bounds of an Admission.
const (
	// DefaultMaxRequestsPerSandbox is how many port requests of one
	// sandbox are in progress at once by default: 1024.
	DefaultMaxRequestsPerSandbox = 1024
	// DefaultMaxRequests is how many port requests are in progress at
	// once over all sandboxes by default: 4096.
	DefaultMaxRequests = 4096
)

// Counts are the port requests in progress, per sandbox and in all, that
// Admissions share: a gateway process keeps one across `caddy reload`, so
// the requests and WebSockets a replaced configuration still runs count
// against the new configuration's bounds too, and a reload does not give
// a sandbox a second full bound. Build it with NewCounts; safe for
// concurrent use.
type Counts struct{ slots *admission.Limiter }

// NewCounts returns empty Counts.
func NewCounts() *Counts {
	// The Limiter's own bounds are never used: every Admission checks its
	// own (TryAcquireWithin), and nothing waits.
	return &Counts{slots: admission.NewCounts()}
}

// InProgress returns how many port requests the Counts hold a place for,
// over all sandboxes.
func (c *Counts) InProgress() int {
	all, _ := c.slots.Held("")
	return all
}

// Admission bounds the port requests in progress: per sandbox and over
// all sandboxes. A sandbox's server decides how long each request to it
// lasts (it can answer slowly or never, or hold a WebSocket open), and
// each request held costs the gateway its goroutines, buffers and two
// connections (about 55 KiB idle; docs/dataplane.md "Bounded cost per
// request and per tenant"), so without a bound one sandbox could hold the
// gateway's memory without end. A request past a bound is refused at once,
// not queued: E2B's own proxy answers a sandbox's excess incoming
// connections the same way (429). The counting is the data plane's
// admission.Limiter (TryAcquireWithin), keyed by sandbox ID, in Counts
// that several Admissions may share. Build it with NewAdmission; safe for
// concurrent use.
type Admission struct {
	perSandbox, total int // the bounds, defaults applied
	slots             *admission.Limiter
}

// NewAdmission returns an Admission of at most perSandbox requests per
// sandbox and total over all, counted in counts (nil: Counts of its own);
// 0 takes the default of each bound. It is an error for either to be
// negative, or for perSandbox to exceed total.
func NewAdmission(perSandbox, total int, counts *Counts) (*Admission, error) {
	if perSandbox == 0 {
		perSandbox = DefaultMaxRequestsPerSandbox
	}
	if total == 0 {
		total = max(DefaultMaxRequests, perSandbox)
	}
	if perSandbox < 0 || total < 0 || perSandbox > total {
		return nil, errors.New("portroute: the port request bounds must be positive, the per-sandbox one at most the total")
	}
	if counts == nil {
		counts = NewCounts()
	}
	return &Admission{perSandbox: perSandbox, total: total, slots: counts.slots}, nil
}

// Admit takes a place for a request to sandbox id. It returns the function
// that gives the place back (call it once, when the request has ended), or
// the refusal: CodeTooManyRequests when the sandbox has perSandbox
// requests in progress, CodeGatewayBusy when the gateway has total.
func (a *Admission) Admit(id string) (release func(), r *Refusal) {
	release, why := a.slots.TryAcquireWithin(id, a.total, a.perSandbox)
	switch why {
	case admission.KeyFull:
		return nil, refuse(CodeTooManyRequests, "the sandbox has too many port requests in progress")
	case admission.GlobalFull:
		return nil, refuse(CodeGatewayBusy, "the gateway has too many port requests in progress")
	}
	return release, nil
}

// InProgress returns the requests in progress for sandbox id and in all,
// in the Admission's Counts (those of every Admission sharing them).
func (a *Admission) InProgress(id string) (sandbox, total int) {
	all, under := a.slots.Held(id)
	return under, all
}
