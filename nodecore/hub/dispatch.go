package hub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sandgate/sandgate/node/operation"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/placement"
)

// Reasons of an OutcomeUnknown Result (Result.Reason).
const (
	// ReasonUnconfirmed: the node answered, but the response proves
	// nothing (error_code unconfirmed or unknown, missing or mismatched
	// unsupported evidence, a result that does not fit the operation).
	ReasonUnconfirmed = "unconfirmed"
	// ReasonTimeout: no response within timeout_ms plus the response
	// grace.
	ReasonTimeout = "timeout"
	// ReasonDisconnected: the connection closed before the response.
	ReasonDisconnected = "disconnected"
	// ReasonCancelled: the caller's context ended before the response.
	ReasonCancelled = "cancelled"
	// ReasonWriteFailed: writing the request failed; part of it may have
	// reached the node.
	ReasonWriteFailed = "write_failed"
)

// Result is the outcome of one provider operation sent with Dispatch.
type Result struct {
	// Outcome is what the response proves (proto.Classify), or
	// OutcomeUnknown when there is no response. Unknown never proves that
	// a resource does not exist or that a mutation did not happen; Core
	// never replays the operation but observes the original one
	// (ObserveOutcome).
	Outcome proto.Outcome
	// ErrorCode is the classified code: "" on success, the definite code
	// of a failure, "unsupported", or "unconfirmed" for unknown.
	ErrorCode proto.ErrorCode
	// Reason says why the outcome is unknown (Reason* constants); "" for
	// the other outcomes.
	Reason string
	// Request is the request as sent: id, sequence, connection_id,
	// owner_epoch filled in.
	Request proto.Request
	// Response is the node's response, nil when none arrived.
	Response *proto.Response
	// Receipt is the info receipt of a failed create that proves a settled
	// create attempt (proto.CreateReceipt), nil otherwise.
	Receipt *proto.Info
	// Unsupported is the evidence of an OutcomeUnsupported: the
	// registered declaration's, and NotSent is true. A node's unsupported
	// response to an operation Core sent is checked against the same
	// declaration, which supports it, so it is OutcomeUnknown.
	Unsupported *proto.Unsupported
	// NotSent: Core refused the operation before sending it because the
	// node's provider declares it unsupported (package node/operation);
	// Request then has no id, sequence or connection.
	NotSent bool

	// sent is when the request frame's write returned and read when the
	// response frame began to arrive (zero without a response): the
	// node's turn, which Observer.HubTime leaves out.
	sent, read time.Time
}

// needsReady reports whether req may only go to a generation the node
// reports ready (spec: "Core sends create and non-observe-only resume only
// to generations that are ready on the node").
func needsReady(req *proto.Request) bool {
	switch req.Operation {
	case proto.OpCreate:
		return true
	case proto.OpResume:
		return req.Resume != nil && !req.Resume.ObserveOnly
	}
	return false
}

// ready reports whether generation gen is ready on the node of p; hub.mu
// is held. A node with generation management reports readiness per
// generation (the latest observation of gen must be "ready"); one without
// serves only its enrolled generation, ready while its provider is.
func (p *presence) ready(gen int64, gm bool) bool {
	if gm {
		o, ok := p.generations[gen]
		return ok && o.obs.State == proto.GenerationReady
	}
	return p.hello != nil && p.health != nil && gen == p.hello.DeploymentGeneration && p.health.ProviderReady
}

// declaredUnsupported returns the registered declaration's evidence when
// provider declares op unsupported.
func declaredUnsupported(provider proto.Provider, op proto.Operation) (proto.Unsupported, bool) {
	d, ok := operation.For(provider)
	if !ok {
		return proto.Unsupported{}, false
	}
	return d.Unsupported(op)
}

// Dispatch sends one provider operation to the node and waits for its
// outcome (spec "Provider requests"). req carries the operation, its
// parameters, deployment_generation, timeout_ms (1..120000) and the exact
// reference; Dispatch sets version, type, a new UUID id, the next sequence
// of the connection, and the connection's connection_id and owner_epoch.
//
// An operation the node's provider declares unsupported (the registered
// declaration of package node/operation, for the provider of the node's
// last hello) is answered at once, before any other check, with a Result
// of OutcomeUnsupported, the declaration's evidence and NotSent; nothing
// is written.
//
// Refusals before anything is written leave the connection untouched:
// ErrUnknownNode, ErrOffline (not online), ErrNotReady (create or a
// non-observe-only resume for a generation the node does not report
// ready), ErrTooManyPending (proto.MaxPendingRequests requests already
// wait on the connection), ErrInvalidRequest (with the *proto.Error),
// ErrClosed, and ctx's error when ctx ended before the request was written.
// Otherwise the error is nil and the Result says what happened.
// Core waits at most timeout_ms plus the response grace; a timeout, a
// cancelled ctx, a disconnect or a failed write give OutcomeUnknown, and
// the request is never sent again. A request whose wait ended stays
// counted as pending until its late response arrives (and is dropped) or
// the connection ends, because the node still holds it.
func (h *Hub) Dispatch(ctx context.Context, nodeID string, req proto.Request) (*Result, error) {
	start := time.Now()
	res, err := h.dispatch(ctx, nodeID, req)
	outcome := ""
	if err != nil {
		outcome = RefusalCode(err)
	} else {
		outcome = res.Outcome.String()
	}
	end := time.Now()
	obs := observerOf(h.config())
	obs.Dispatched(req.Operation, outcome, end.Sub(start))
	if err == nil && !res.read.IsZero() {
		// The response's first byte can be read before the write call
		// returns (a fast node on loopback): the node's turn is then
		// nothing, and the hub's time is the whole dispatch, never more.
		read := res.read
		if read.Before(res.sent) {
			read = res.sent
		}
		obs.HubTime(req.Operation, res.sent.Sub(start)+end.Sub(read))
	}
	return res, err
}

func (h *Hub) dispatch(ctx context.Context, nodeID string, req proto.Request) (*Result, error) {
	cfg := h.config()
	if cfg == nil {
		return nil, ErrClosed
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	h.inflight.Add(1)
	h.mu.Unlock()
	defer h.inflight.Done()
	// An operation for a node whose connection is being retired for a
	// replaced credential waits for the node's new connection, at most
	// Timers.Reconnect from here (real time, like the sockets' deadlines).
	deadline := time.Now().Add(cfg.Timers.Reconnect)
	waiting := false
	defer func() {
		if waiting {
			h.waiters.Add(-1)
		}
	}()
	for {
		res, err := h.dispatchOnce(ctx, cfg, nodeID, req)
		var aw *awaitNode
		if !errors.As(err, &aw) {
			return res, err
		}
		if !waiting {
			// Bounded: at most maxWaiters operations wait at once, over
			// all nodes; the next is refused at once.
			if h.waiters.Add(1) > h.maxWaiters {
				h.waiters.Add(-1)
				return nil, fmt.Errorf("%w: %s (%d operations already wait for retired connections' successors)", ErrOffline, nodeID, h.maxWaiters)
			}
			waiting = true
		}
		wait := time.Until(deadline)
		if !aw.until.IsZero() {
			wait = min(wait, aw.until.Sub(h.now()))
		}
		if wait <= 0 {
			return nil, fmt.Errorf("%w: %s", ErrOffline, nodeID)
		}
		t := time.NewTimer(wait)
		select {
		case <-aw.wake:
			t.Stop()
		case <-t.C:
			return nil, fmt.Errorf("%w: %s (its new connection did not come within the reconnect wait)", ErrOffline, nodeID)
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("hub: the caller went away before the request was sent: %w", ctx.Err())
		}
	}
}

// awaitNode is dispatchOnce's answer for a node whose connection is being
// retired or was retired a moment ago: wait on wake (Hub.welcomed, taken
// under Hub.mu with the node's state) and try again, until at most until
// (presence clock; zero: only the dispatch's own deadline applies).
type awaitNode struct {
	wake  <-chan struct{}
	until time.Time
}

func (*awaitNode) Error() string { return "hub: waiting for the node's new connection" }

// errRetiring: the connection was retired between the presence check and
// the write; dispatchOnce looks again.
var errRetiring = errors.New("hub: the connection is retiring")

// dispatchOnce is one attempt of dispatch: the checks, then the write and
// the wait on the node's current connection. It answers *awaitNode when
// the node's connection is being retired or was retired within
// Timers.Reconnect.
func (h *Hub) dispatchOnce(ctx context.Context, cfg *Config, nodeID string, req proto.Request) (*Result, error) {
	for {
		res, err := h.dispatchConn(ctx, cfg, nodeID, req)
		if !errors.Is(err, errRetiring) {
			return res, err
		}
	}
}

func (h *Hub) dispatchConn(ctx context.Context, cfg *Config, nodeID string, req proto.Request) (*Result, error) {
	now := h.now()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	p := h.nodes[nodeID]
	if p == nil {
		h.mu.Unlock()
		if _, enrolled := h.Node(nodeID); enrolled {
			return nil, fmt.Errorf("%w: %s", ErrOffline, nodeID)
		}
		return nil, fmt.Errorf("%w: %s", ErrUnknownNode, nodeID)
	}
	// The provider's registered declaration is applied before anything
	// else is checked or sent (spec "Provider requests": "the Core proxy
	// uses the same registered declaration, so unsupported operations are
	// rejected before node parsing or native I/O"). The provider is the
	// one the node's last hello stated (it matched the enrolment).
	if p.hello != nil {
		if u, ok := declaredUnsupported(p.hello.Provider, req.Operation); ok {
			h.mu.Unlock()
			return &Result{Outcome: proto.OutcomeUnsupported, ErrorCode: proto.ErrUnsupported, Request: req,
				Unsupported: &u, NotSent: true}, nil
		}
	}
	if !p.online(now, cfg) {
		aw := p.awaited(now)
		wake, until := h.welcomed, p.handoverUntil
		h.mu.Unlock()
		if aw {
			return nil, &awaitNode{wake: wake, until: until}
		}
		return nil, fmt.Errorf("%w: %s", ErrOffline, nodeID)
	}
	c := p.conn
	if needsReady(&req) && !p.ready(req.DeploymentGeneration, c.gm) {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: node %s, generation %d", ErrNotReady, nodeID, req.DeploymentGeneration)
	}
	h.mu.Unlock()
	var placed *placement.Placement
	if c.gm && cfg.Placements != nil {
		// The allocation is placed on the generation before anything is
		// sent, so no retention answer can authorise dropping it.
		pl := placement.Placement{NodeID: nodeID, Generation: req.DeploymentGeneration, Reference: req.Reference}
		if err := cfg.Placements.Place(pl); err != nil {
			cfg.Logger.Error("recording a placement failed; the operation is not sent", zap.String("node_id", nodeID), zap.Error(err))
			return nil, fmt.Errorf("%w: %w", ErrPlacementUnrecorded, err)
		}
		placed = &pl
	}
	res, err := c.dispatch(ctx, cfg, req)
	if err == nil && placed != nil && req.Operation == proto.OpKill && res.Outcome == proto.OutcomeSuccess {
		// A successful kill ends the allocation and everything it holds.
		if _, rerr := cfg.Placements.Release(*placed); rerr != nil {
			cfg.Logger.Warn("releasing a placement after a kill failed; the generation stays in use", zap.String("node_id", nodeID), zap.Error(rerr))
		}
	}
	return res, err
}

// dispatch writes req on c and waits for the outcome.
func (c *conn) dispatch(ctx context.Context, cfg *Config, req proto.Request) (*Result, error) {
	// A quick refusal without waiting for the writer.
	if c.pendingCount() >= proto.MaxPendingRequests {
		return nil, fmt.Errorf("%w: node %s", ErrTooManyPending, c.nodeID)
	}
	// The request lives in its Result from here on: one allocation for
	// both, and the frame is encoded from it.
	res := &Result{Request: req}
	r := &res.Request
	r.ID = uuid.NewString()
	r.ConnectionID = c.id
	r.OwnerEpoch = c.epoch
	cl := calls.Get().(*call)

	c.wmu.Lock()
	if c.retiring.Load() {
		c.wmu.Unlock()
		calls.Put(cl)
		return nil, errRetiring
	}
	if c.isClosing() {
		c.wmu.Unlock()
		calls.Put(cl)
		return nil, fmt.Errorf("%w: %s", ErrOffline, c.nodeID)
	}
	// A caller that is already gone (e.g. the API client hung up while the
	// writer was busy) gets nothing sent: the node would perform an
	// operation nobody waits for.
	if err := ctx.Err(); err != nil {
		c.wmu.Unlock()
		calls.Put(cl)
		return nil, fmt.Errorf("hub: the caller went away before the request was sent: %w", err)
	}
	c.pmu.Lock()
	if len(c.pending) >= proto.MaxPendingRequests {
		c.pmu.Unlock()
		c.wmu.Unlock()
		calls.Put(cl)
		return nil, fmt.Errorf("%w: node %s", ErrTooManyPending, c.nodeID)
	}
	c.pending[r.ID] = cl
	c.pmu.Unlock()
	r.Sequence = c.seq + 1
	bp, err := encodeFrame(r)
	if err != nil {
		c.pmu.Lock()
		delete(c.pending, r.ID)
		c.pmu.Unlock()
		c.wmu.Unlock()
		calls.Put(cl)
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	c.seq = r.Sequence
	written := c.writeBytes(*bp)
	c.wmu.Unlock()
	putFrameBuf(bp)

	res.sent = time.Now()
	if !written {
		// The call stays pending: a response may still arrive for the
		// part of the request that reached the node.
		res.Outcome, res.ErrorCode, res.Reason = proto.OutcomeUnknown, proto.ErrUnconfirmed, ReasonWriteFailed
		c.logDispatch(cfg, res)
		return res, nil
	}
	timeout := cl.wait(time.Duration(r.TimeoutMS)*time.Millisecond + cfg.Timers.ResponseGrace)
	var resp *proto.Response
	select {
	case resp = <-cl.done:
	case <-c.closing:
		res.Reason = ReasonDisconnected
	case <-timeout:
		res.Reason = ReasonTimeout
	case <-ctx.Done():
		res.Reason = ReasonCancelled
	}
	if resp == nil {
		// A response that raced with the other cases still counts.
		select {
		case resp = <-cl.done:
			res.Reason = ""
		default:
		}
	}
	cl.timer.Stop()
	if resp == nil {
		res.Outcome, res.ErrorCode = proto.OutcomeUnknown, proto.ErrUnconfirmed
		c.logDispatch(cfg, res)
		return res, nil
	}
	res.Response, res.read = resp, cl.read
	calls.Put(cl) // its response was received: nothing else holds it
	// Every operation sent is one the registered declaration supports (a
	// declared-unsupported one is answered before sending) or one of a
	// provider with no registered declaration: either way there is no
	// declared evidence, so an unsupported response is mismatched evidence
	// and unconfirmed (spec "Provider requests"), never a proven refusal.
	res.Outcome, res.ErrorCode = proto.Classify(r, resp, nil)
	if res.Outcome == proto.OutcomeUnknown {
		res.Reason = ReasonUnconfirmed
	}
	if info, ok := proto.CreateReceipt(r, resp); ok {
		res.Receipt = info
	}
	c.logDispatch(cfg, res)
	return res, nil
}

// logDispatch logs one operation at debug level (unknown outcomes at
// info): IDs, operation and outcome, never parameters or results.
func (c *conn) logDispatch(cfg *Config, res *Result) {
	level := zapcore.DebugLevel
	if res.Outcome == proto.OutcomeUnknown {
		level = zapcore.InfoLevel
	}
	if ce := cfg.Logger.Check(level, "node operation"); ce != nil {
		ce.Write(zap.String("node_id", c.nodeID), zap.String("connection_id", c.id),
			zap.String("request_id", res.Request.ID), zap.Uint64("sequence", res.Request.Sequence),
			zap.String("operation", string(res.Request.Operation)), zap.String("outcome", res.Outcome.String()),
			zap.String("error_code", string(res.ErrorCode)), zap.String("reason", res.Reason))
	}
}
