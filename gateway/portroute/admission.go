package portroute

import (
	"errors"
	"sync"
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

// Admission bounds the port requests in progress: per sandbox and over
// all sandboxes. A sandbox's server decides how long each request to it
// lasts (it can answer slowly or never, or hold a WebSocket open), and
// each request held costs the gateway its goroutines, buffers and two
// connections (about 55 KiB idle; docs/dataplane.md "Bounded cost per
// request and per tenant"), so without a bound one sandbox could hold the
// gateway's memory without end. A request past a bound is refused at once,
// not queued: E2B's own proxy answers a sandbox's excess incoming
// connections the same way (429). Build it with NewAdmission; safe for
// concurrent use.
type Admission struct {
	perSandbox, total int

	mu     sync.Mutex
	n      int
	counts map[string]int
}

// NewAdmission returns an Admission of at most perSandbox requests per
// sandbox and total over all; 0 takes the default of each. It is an error
// for either to be negative, or for perSandbox to exceed total.
func NewAdmission(perSandbox, total int) (*Admission, error) {
	if perSandbox == 0 {
		perSandbox = DefaultMaxRequestsPerSandbox
	}
	if total == 0 {
		total = max(DefaultMaxRequests, perSandbox)
	}
	if perSandbox < 0 || total < 0 || perSandbox > total {
		return nil, errors.New("portroute: the port request bounds must be positive, the per-sandbox one at most the total")
	}
	return &Admission{perSandbox: perSandbox, total: total, counts: map[string]int{}}, nil
}

// Admit takes a place for a request to sandbox id. It returns the function
// that gives the place back (call it once, when the request has ended), or
// the refusal: CodeTooManyRequests when the sandbox has perSandbox
// requests in progress, CodeGatewayBusy when the gateway has total.
func (a *Admission) Admit(id string) (release func(), r *Refusal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.counts[id] >= a.perSandbox:
		return nil, refuse(CodeTooManyRequests, "the sandbox has too many port requests in progress")
	case a.n >= a.total:
		return nil, refuse(CodeGatewayBusy, "the gateway has too many port requests in progress")
	}
	a.counts[id]++
	a.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.n--
			if a.counts[id]--; a.counts[id] == 0 {
				delete(a.counts, id)
			}
		})
	}, nil
}

// InProgress returns the requests in progress for sandbox id and in all.
func (a *Admission) InProgress(id string) (sandbox, total int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.counts[id], a.n
}
