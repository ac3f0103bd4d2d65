// Package fairshare bounds the apiserver requests corectl makes for each
// credential's API calls. Every credential has a share, a token bucket of
// Config.Burst apiserver requests refilled at Config.Rate a second, of its
// cluster's apiserver requests: the cluster client's own limits
// (cluster.DefaultClientQPS for each resource type) are one for every
// tenant of the cluster and corectl's reconcilers, so without shares one API key reading its own
// sandboxes in a loop (a GET /sandboxes/{id} is about a dozen requests, a
// GET /sandboxes/metrics two per sandbox named) could spend all of it and
// hold up every other tenant's creates and deletes.
//
// How a share is spent: the API tags each request's context (Tag) and,
// once the caller is authenticated, admits the call for its credential
// (Shares.Admit: the share must hold a request, which the call takes). Every apiserver request made with that context, or one
// derived from it, then takes one more from the share as it is sent
// (Transport, which wraps the cluster's client transport). A call once
// admitted is never cut off half-way (a delete or a network write is not
// left half-done): its requests may take the share below zero, and the
// credential's next calls are refused (429 rate_limited) until the refill
// has paid the debt back. A credential also has at most
// Config.InProgress calls in progress (a call past it is refused the same
// way): the share alone would admit as many calls at once as it holds
// requests, each then making its own. What one credential makes corectl
// send is so at most Burst, plus Rate a second, plus the requests of
// InProgress calls.
package fairshare

import (
	"context"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/admission"
	"golang.org/x/time/rate"
)

// Defaults of Config: a credential's apiserver requests a second and its
// burst. 300 a second is the cluster client's default rate for one
// resource type (cluster.DefaultClientQPS): one tenant can never take more
// than one type's whole client rate for long, and an honest client
// looping over its sandboxes at full speed (about 25 `GET /sandboxes/{id}`
// a second, E2B's own API allowing a team about 670 requests a second) is
// not refused. 100 a second (a third of it) refused the key-rotation
// test's API clients, one credential's list, getInfo, create and kill at a
// busy SDK user's pace: too tight for what an SDK user does. (A client
// calling list in a tight loop, about 1,000 times a second, is refused
// at 300: each admitted call takes one request from the share.) 1,200 is twice the client's
// default burst (cluster.DefaultClientBurst), about 50 creates or 100
// sandbox reads at once.
//
// DefaultInProgress, 64 calls of one credential in progress, is a create
// apiece for 64 sandboxes created at once (a create is in progress for
// its readiness wait, seconds), and at most 64 reads of a dozen requests
// past a spent share.
const (
	DefaultRate       = 300
	DefaultBurst      = 1200
	DefaultInProgress = 64
)

// Config is each credential's share. The zero value is the defaults.
type Config struct {
	// Rate is the share's refill in apiserver requests a second (default
	// DefaultRate); negative turns the shares off.
	Rate float64
	// Burst is the share's size in apiserver requests (default
	// DefaultBurst).
	Burst int
	// InProgress bounds each credential's calls in progress (default
	// DefaultInProgress).
	InProgress int
}

// Shares are the credentials' shares, made on a credential's first call.
// A nil *Shares admits every call and charges nothing. Safe for
// concurrent use.
type Shares struct {
	rate       rate.Limit
	burst      int
	inProgress *admission.Limiter

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// New returns the shares of c, or nil when c.Rate is negative (off).
func New(c Config) *Shares {
	if c.Rate < 0 {
		return nil
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Burst <= 0 {
		c.Burst = DefaultBurst
	}
	if c.InProgress <= 0 {
		c.InProgress = DefaultInProgress
	}
	return &Shares{rate: rate.Limit(c.Rate), burst: c.Burst, m: map[string]*rate.Limiter{},
		inProgress: admission.New(math.MaxInt32, c.InProgress)}
}

// share returns credential id's bucket. The map holds one per
// credential that has made a call: the credentials are the operator's
// (an ID is only known here once its API key authenticated), so it grows
// with that list, not with what callers send.
func (s *Shares) share(id string) *rate.Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.m[id]
	if !ok {
		l = rate.NewLimiter(s.rate, s.burst)
		s.m[id] = l
	}
	return l
}

// Admit reports whether credential id may make an API call now, the call
// of ctx (a context from Tag): the credential has fewer than
// Config.InProgress calls in progress, and its share holds at least one
// request, which the call takes. Admitted, the call counts as in progress
// until Tag's done is called, and the apiserver requests made with ctx, or
// a context derived from it, are charged to id's share (Transport). False
// leaves nothing taken. A nil Shares admits every call and charges
// nothing; without a tag the call is admitted by the share alone.
func (s *Shares) Admit(ctx context.Context, id string) bool {
	if s == nil {
		return true
	}
	t, tagged := ctx.Value(tagKey{}).(*tag)
	var release func()
	if tagged {
		var why admission.Reason
		if release, why = s.inProgress.TryAcquire(id); why != admission.Admitted {
			return false
		}
	}
	l := s.share(id)
	if !l.Allow() {
		if release != nil {
			release()
		}
		return false
	}
	if tagged {
		t.mu.Lock()
		t.release = append(t.release, release)
		t.mu.Unlock()
		t.share.Store(l)
	}
	return true
}

// tag is what Tag puts in a context: the share its apiserver requests are
// charged to, once Admit has named it, and the in-progress slots to give
// back when the call ends.
type tag struct {
	share   atomic.Pointer[rate.Limiter]
	mu      sync.Mutex
	release []func()
}

type tagKey struct{}

// Tag returns ctx with an empty tag, for one API call: the apiserver
// requests made with it, or with a context derived from it, are charged
// (Transport) to the credential that Admit admits, from then on. done
// ends the call: it gives back what Admit took for it (call it once, when
// the call's handler returns).
func Tag(ctx context.Context) (tagged context.Context, done func()) {
	t := &tag{}
	return context.WithValue(ctx, tagKey{}, t), func() {
		t.mu.Lock()
		rs := t.release
		t.release = nil
		t.mu.Unlock()
		for _, r := range rs {
			r()
		}
	}
}

// Tagged reports whether ctx is (or derives from) the context of an API
// call (Tag): its apiserver requests are the call's own, charged to the
// caller's share once Admit has named it. The reconcilers' and the
// caches' contexts are not tagged. Tests count a call's requests with it.
func Tagged(ctx context.Context) bool {
	_, ok := ctx.Value(tagKey{}).(*tag)
	return ok
}

// Transport returns rt that takes one request from the share named in
// each request's context (Admit) as it sends it; never waiting and never
// refusing, so a share may go below zero (see the package documentation).
// Requests without a named share (the reconcilers', the caches' lists and
// watches) pass untouched.
func Transport(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{rt}
}

type roundTripper struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if t, ok := req.Context().Value(tagKey{}).(*tag); ok {
		if l := t.share.Load(); l != nil {
			l.ReserveN(time.Now(), 1)
		}
	}
	return r.next.RoundTrip(req)
}

// WrappedRoundTripper returns the transport r wraps (client-go's
// utilnet.RoundTripperWrapper).
func (r roundTripper) WrappedRoundTripper() http.RoundTripper { return r.next }
