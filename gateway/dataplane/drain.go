package dataplane

import (
	"context"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/gateway/drain"
)

// drainKinds are the operations a shutdown drains (Deps.Drain): the
// command streams and the file transfers, which may run for minutes.
// Everything else is a short call that Caddy's grace_period covers.
var drainKinds = map[*operation]drain.Kind{
	opStart: drain.KindCommand, opConnect: drain.KindCommand,
	opRead: drain.KindTransfer, opWrite: drain.KindTransfer,
}

// drainWriteGrace is how long a transfer's writes to its client may
// still take once the drain grace is over: long enough for the
// GATEWAY_DRAINING answer of an upload (a few hundred bytes) to reach a
// client that reads it, then a write that has not finished (a download to
// a client that reads nothing) fails, and the request ends.
const drainWriteGrace = 2 * time.Second

// endingKey carries, in a tracked request's context, the channel that is
// closed when its drain grace is over.
type endingKey struct{}

// ending returns the channel that is closed when the request of ctx must
// end because the gateway shuts down; nil (never ready in a select) when
// the request is not tracked.
func ending(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(endingKey{}).(<-chan struct{})
	return ch
}

// drainEnded reports whether the request of ctx was told to end by the
// drain.
func drainEnded(ctx context.Context) bool {
	select {
	case <-ending(ctx):
		return true
	default:
		return false
	}
}

// drainingError is GATEWAY_DRAINING for an operation the drain ended; the
// SDK's retry reaches another replica.
func drainingError(what string) *Error {
	return fail(CodeGatewayDraining, "this gateway replica is shutting down and "+what+
		"; retry: a new call reaches another replica")
}

// drainingRefusal is GATEWAY_DRAINING for a new operation of kind that
// the drain no longer takes.
func drainingRefusal(kind drain.Kind) *Error {
	return drainingError("takes no new " + string(kind) + "s")
}

// track admits a long operation (drainKinds) to Deps.Drain. Once the
// gateway shuts down it is refused with GATEWAY_DRAINING; otherwise the
// returned request's context carries the drain's ending channel, which
// the command streams select on. When it closes, the write deadline of
// the client's connection is set drainWriteGrace later, which ends a
// write to a client that reads nothing more (a command stream's as a
// download's; TestDrainEndsStalledCommandStream); a transfer's context is
// also cancelled, which stops the copy, and the read deadline of the
// client's connection set to now (http.ResponseController), which ends a
// read of the client's body in progress: an upload whose client sends
// nothing more would otherwise hold the copy, since Go's transport waits
// for its read of the body to return before the cancelled round trip
// does. Without the write deadline a stream blocked in a write would hold
// the request until Caddy's grace_period let the process exit. done must
// be called when the operation has ended, before ServeHTTP returns.
func (h *Handler) track(w http.ResponseWriter, r *http.Request, op *operation) (_ *http.Request, done func(), _ *Error) {
	kind, ok := drainKinds[op]
	if !ok || h.deps.Drain == nil {
		return r, func() {}, nil
	}
	end, untrack, err := h.deps.Drain.Track(kind)
	if err != nil {
		return r, func() {}, drainingRefusal(kind)
	}
	ctx := context.WithValue(r.Context(), endingKey{}, end)
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-end:
			// Every server of Caddy's supports both deadlines (HTTP/1:
			// the client's connection; HTTP/2 and HTTP/3: the request's
			// stream alone); an error leaves the cancelled context (a
			// transfer) or the stream's own select on the ending channel
			// (a command) to end it at the client's next bytes.
			rc := http.NewResponseController(w)
			now := time.Now()
			if kind == drain.KindTransfer {
				cancel()
				_ = rc.SetReadDeadline(now)
			}
			// A command stream ends itself (it selects on the ending
			// channel and writes its draining end-stream message), but
			// only between writes: one blocked in a write to a client
			// that reads nothing would hold the request until Caddy's
			// grace_period let the process exit.
			_ = rc.SetWriteDeadline(now.Add(drainWriteGrace))
		case <-ctx.Done():
		}
	}()
	return r.WithContext(ctx), func() {
		cancel()
		<-watched // w is not used after the handler returns
		untrack()
	}, nil
}
