package dataplane

import (
	"context"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/gateway/admission"
)

// The bounds on concurrent work (docs/dataplane.md "Bounded cost per
// request and per tenant"): the requests in progress per credential and
// over the gateway, the upstream slots per sandbox and over the gateway,
// the process-record calls per credential, and the large output lines.

// NewRequestCounts returns an empty count of requests in progress for
// Deps.Requests; its own bounds are never used (each Handler checks its
// Config's), and nothing waits on it.
func NewRequestCounts() *admission.Limiter { return admission.NewCounts() }

// Shared is the state of the data plane that lasts beyond the request that
// made it, for Deps.Shared: the registry of the PTY WebSockets the streams
// of this gateway process hold (by cluster, sandbox and pid: ptyKey), and
// the bounds of work that outlives its request or lasts as long as a stream,
// whose limits are constants, not configuration: the deferred process
// cleanups (maxDeferredCleanups, maxDeferredCleanupsPerCredential;
// deferCleanup), the PTY kills waiting for their Start's deadline
// (maxPTYDeadlineKills, maxPTYDeadlineKillsPerCredential; ptyDeadlineKill),
// the PTY streams (maxPTYStreams, maxPTYStreamsPerSandbox), the directory
// watches (maxWatchStreams, maxWatchStreamsPerSandbox,
// maxWatchStreamsPerCredential), the stdin writes (maxStdinWrites,
// maxStdinWritesPerSandbox, maxStdinWritesPerCredential) and the large output lines
// (maxLargeLines, maxLargeLinesPerSandbox). A Handler built
// without one has its own, so a reload that replaced it would give every
// tenant a second full bound and hide the held terminals from the new
// configuration. Create it with NewShared; it is safe for concurrent use.
type Shared struct {
	cleanups, largeLines, ptyStreams, ptyKills *admission.Limiter
	watchStreams, stdinWrites                  *admission.Limiter
	// watchCreds and stdinCreds count the same watches and writes by
	// credential.
	watchCreds, stdinCreds *admission.Limiter
	ptyHolds               *ptyHolds
	ptyHeld                *ptyHeld
}

// NewShared returns an empty Shared.
func NewShared() *Shared {
	return &Shared{
		cleanups:     admission.New(maxDeferredCleanups, maxDeferredCleanupsPerCredential),
		largeLines:   admission.New(maxLargeLines, maxLargeLinesPerSandbox),
		ptyStreams:   admission.New(maxPTYStreams, maxPTYStreamsPerSandbox),
		ptyKills:     admission.New(maxPTYDeadlineKills, maxPTYDeadlineKillsPerCredential),
		watchStreams: admission.New(maxWatchStreams, maxWatchStreamsPerSandbox),
		stdinWrites:  admission.New(maxStdinWrites, maxStdinWritesPerSandbox),
		watchCreds:   admission.New(maxWatchStreams, maxWatchStreamsPerCredential),
		stdinCreds:   admission.New(maxStdinWrites, maxStdinWritesPerCredential),
		ptyHolds:     &ptyHolds{},
		ptyHeld:      &ptyHeld{},
	}
}

// admitRequest takes a place for rq among the requests in progress (its
// credential's and the gateway's, Config.MaxRequestsPerCredential and
// MaxRequests), or returns GATEWAY_BUSY naming the bound that is full. A
// refused request takes nothing and waits for nothing.
func (h *Handler) admitRequest(rq *request) (func(), *Error) {
	release, why := h.deps.Requests.TryAcquireWithin(rq.cred.ID, h.cfg.MaxRequests, h.cfg.MaxRequestsPerCredential)
	switch why {
	case admission.KeyFull:
		return nil, busy(BoundRequestsPerCredential, "this credential has "+strconv.Itoa(h.cfg.MaxRequestsPerCredential)+
			" requests in progress at the gateway (max_requests_per_credential: command streams and file transfers count while they last); retry when some have ended")
	case admission.GlobalFull:
		return nil, busy(BoundRequests, "the gateway has "+strconv.Itoa(h.cfg.MaxRequests)+" requests in progress (max_requests); retry shortly")
	}
	return release, nil
}

// RequestsInProgress returns the requests in progress counted in
// Deps.Requests (every Handler's sharing it): in all, and of credential
// id.
func (h *Handler) RequestsInProgress(id string) (all, credential int) {
	return h.deps.Requests.Held(id)
}

// admitUpstream takes a slot of the upstream bound for rq's sandbox,
// waiting up to wait (0: not at all) while ctx lasts, or returns
// GATEWAY_BUSY naming the bound that stayed full.
func (h *Handler) admitUpstream(ctx context.Context, rq *request, wait time.Duration) (func(), *Error) {
	release, why := h.upstream.Acquire(ctx, rq.sandboxID, wait)
	switch why {
	case admission.KeyFull:
		return nil, busy(BoundUpstreamCallsPerSandbox, "this sandbox had "+strconv.Itoa(h.cfg.MaxUpstreamCallsPerSandbox)+
			" calls reading execd's answers at the gateway for "+wait.String()+"; retry when one has finished")
	case admission.GlobalFull:
		return nil, busy(BoundUpstreamCalls, "the gateway had "+strconv.Itoa(h.cfg.MaxUpstreamCalls)+
			" calls reading sandboxes' answers for "+wait.String()+"; retry shortly")
	}
	return release, nil
}

// Bounds of the command output lines over execd.LargeLineBytes (64 KiB)
// read and relayed at once: over the gateway and per sandbox. Such a line
// costs up to about 80 MiB while it is read, decoded and relayed (a 16 MiB
// line, its text, its bytes and their base64 in the Connect message; peak
// resident memory, TestHostileExecdCommandLinesBoundedMemory), and the
// foreground command streams that carry them take no upstream slot: without
// these bounds one sandbox's 40 streams took the gateway to 3.2 GiB.
const (
	maxLargeLines           = 2
	maxLargeLinesPerSandbox = 1
)

// admitLargeLine takes a large-line slot for rq's sandbox, waiting up to
// upstream_wait while ctx lasts, or returns GATEWAY_BUSY. It is held while
// an output line over 64 KiB is read and relayed, while more than 64 KiB
// of output that came before a command's init event waits for it, and
// while a line over 64 KiB of a background start's stream (runBackground)
// is read.
func (h *Handler) admitLargeLine(ctx context.Context, rq *request) (func(), error) {
	release, why := h.shared.largeLines.Acquire(ctx, rq.sandboxID, h.cfg.UpstreamWait)
	switch why {
	case admission.Admitted:
		return release, nil
	case admission.KeyFull:
		return nil, busy(BoundLargeLinesPerSandbox, "this sandbox's commands had output over 64 KiB (one line, or output before a command's start) in progress at the gateway for "+
			h.cfg.UpstreamWait.String()+"; retry when it has been relayed")
	}
	return nil, busy(BoundLargeLines, "the gateway had "+strconv.Itoa(maxLargeLines)+
		" commands' output over 64 KiB (one line, or output before a command's start) in progress for "+h.cfg.UpstreamWait.String()+"; retry shortly")
}

// admitProcessCall takes a slot of the process-record bound for rq's
// credential (held while a call reads every process record: List, a
// selection by tag), or returns GATEWAY_BUSY.
func (h *Handler) admitProcessCall(ctx context.Context, rq *request) (func(), *Error) {
	release, why := h.processCalls.Acquire(ctx, rq.cred.ID, h.cfg.UpstreamWait)
	if why != admission.Admitted {
		return nil, busy(BoundProcessCallsPerCredential, "this credential had "+strconv.Itoa(h.cfg.MaxProcessCallsPerCredential)+
			" process lists (or selections by tag) in progress for "+h.cfg.UpstreamWait.String()+"; retry when one has finished")
	}
	return release, nil
}

// Bounds of the process cleanups that wait out cleanupGrace (a Start
// stream's process's files, removed 10 s after its end): per credential
// and over the gateway. Each holds a timer and the files' names, then for
// up to 5 s a goroutine and a request to the sandbox; nothing else bounds
// them once the stream has ended, and a tenant can end hundreds of
// processes a second. Past a bound the files are removed at once, as
// before the grace (a Connect stream following the same process then
// ends with PROCESS_NOT_FOUND if output came after its last poll).
const (
	maxDeferredCleanups              = 4096
	maxDeferredCleanupsPerCredential = 256
)

// deferCleanup takes a place for one of rq's credential's deferred
// process cleanups (h.shared.cleanups), and reports false, taking nothing, when
// the cleanup must run at once: no grace (h.cleanupGrace 0), or a bound
// full. release gives the place back once the cleanup has run.
func (h *Handler) deferCleanup(rq *request) (release func(), ok bool) {
	if h.cleanupGrace <= 0 {
		return nil, false
	}
	release, why := h.shared.cleanups.TryAcquire(rq.cred.ID)
	return release, why == admission.Admitted
}
