package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/quota"
	"github.com/sandgate/sandgate/corectl/wire"
)

// MaxLifetimeRequestSize bounds the timeout, refresh and connect bodies.
const MaxLifetimeRequestSize = 64 << 10

// lifetimeError writes the answer of a lifetime failure: 400 for a
// timeout out of range or a sandbox at its maximum lifetime (E2B answers
// both with 400), else lifecycleError's.
func (s *Server) lifetimeError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, lifecycle.ErrTimeoutInvalid), errors.Is(err, lifecycle.ErrMaxLifetime):
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
	default:
		s.lifecycleError(w, r, err)
	}
}

// setTimeout is POST /sandboxes/{sandboxID}/timeout: body
// {"timeout": <seconds>} (required, E2B's SandboxTimeoutRequest); the
// sandbox now ends timeout seconds from now, earlier or later than before,
// capped at its start + the maximum lifetime (as E2B). 0 ends it now: the
// expiry reconciler deletes it. 204.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	s.moveEnd(w, r, "timeout", func(d time.Duration, ok bool, err error) (time.Duration, lifecycle.TimeoutMode, error) {
		if err == nil && !ok {
			err = errors.New("timeout is required")
		}
		return d, lifecycle.SetEnd, err
	})
}

// refresh is POST /sandboxes/{sandboxID}/refreshes: body
// {"duration": <seconds>} (optional, at most 3600; absent or shorter than
// 15 s counts as 15 s, as E2B); the end time moves to now + duration when
// that is later. 204.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	s.moveEnd(w, r, "duration", func(d time.Duration, ok bool, err error) (time.Duration, lifecycle.TimeoutMode, error) {
		switch {
		case err != nil:
		case d > lifecycle.MaxRefresh:
			err = fmt.Errorf("duration cannot be greater than %d seconds", int64(lifecycle.MaxRefresh/time.Second))
		case !ok || d < lifecycle.DefaultRefresh:
			d = lifecycle.DefaultRefresh
		}
		return d, lifecycle.ExtendEnd, err
	})
}

// moveEnd runs a timeout or refresh route: ownership, body (its member
// name read by wire.Seconds), parse (which gets wire.Seconds' answer), the
// credential's longest timeout (quota.CheckTimeout), SetTimeout.
func (s *Server) moveEnd(w http.ResponseWriter, r *http.Request, name string, parse func(d time.Duration, given bool, err error) (time.Duration, lifecycle.TimeoutMode, error)) {
	ch, cred, id, u, ok := s.sandboxRead(w, r, true)
	if !ok {
		return
	}
	body, err := readBody(r, MaxLifetimeRequestSize)
	var d time.Duration
	var mode lifecycle.TimeoutMode
	if err == nil {
		d, mode, err = parse(wire.Seconds(body, name))
	}
	if err == nil {
		err = quota.CheckTimeout(cred.Limits, d)
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	if _, err := ch.Lifecycle.SetTimeout(ctx, cred.ProjectNamespace, id, u, d, mode); err != nil {
		s.lifetimeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sandboxMetrics is GET /sandboxes/{sandboxID}/metrics: E2B's
// SandboxMetric list from the cluster's resource metrics API
// (lifecycle.Orchestrator.Usage), an empty list when the cluster has
// none; 404 only for a sandbox that does not exist for the caller. The
// start and end query parameters are accepted and ignored (one current
// sample per pod is all the resource metrics API keeps).
func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, read, ok := s.sandboxRead(w, r, true)
	if !ok {
		return
	}
	for _, p := range []string{"start", "end"} {
		if v := r.URL.Query().Get(p); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				s.fail(w, r, http.StatusBadRequest, CodeBadRequest, p+" must be a Unix time in seconds")
				return
			}
		}
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	m, err := ch.Lifecycle.Usage(ctx, cred.ProjectNamespace, id, read)
	if err != nil {
		s.lifecycleError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// CodeNotSupported is the error code of pause, resume and every route of
// UnsupportedRoutes (501).
const CodeNotSupported = "not_supported"

// pauseSandbox is POST /sandboxes/{sandboxID}/pause and resumeSandbox
// POST /sandboxes/{sandboxID}/resume: OpenSandbox cannot keep a sandbox's
// process state, so neither exists. After the ownership check (another
// credential's or a missing sandbox is 404, so the SDK's
// SandboxNotFoundError stays right), the answer is 501 not_supported in
// E2B's error shape: the JS SDK raises SandboxError("501: …"), Python
// SandboxException, both with the message below (not 409, which the JS
// SDK's pause() reads as "already paused" and answers false).
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) {
	s.notSupported(w, r, "pause"+noProcessState)
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) {
	s.notSupported(w, r, "resume"+noProcessState)
}

const noProcessState = " is not supported: OpenSandbox sandboxes cannot keep their process state; extend the sandbox's life with setTimeout instead"

// notSupported answers a route on the sandbox {sandboxID} that sandgate
// does not serve: the ownership check and the sandbox's existence first
// (404 as on every sandbox route, also for a sandbox being deleted), then
// 501 not_supported with msg.
func (s *Server) notSupported(w http.ResponseWriter, r *http.Request, msg string) {
	ch, cred, id, u, ok := s.sandboxRead(w, r, true)
	if !ok {
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	info, err := ch.Lifecycle.Status(ctx, cred.ProjectNamespace, id, u)
	if err != nil {
		s.lifecycleError(w, r, err)
		return
	}
	if lifecycle.Gone(info.LifecycleState) {
		s.goneSandbox(w, r, info.LifecycleState)
		return
	}
	s.fail(w, r, http.StatusNotImplemented, CodeNotSupported, msg)
}
