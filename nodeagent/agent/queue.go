package agent

import (
	"context"
	"errors"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/generation"
	"github.com/sandgate/sandgate/nodeagent/helper"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// request checks a request frame in the order of the spec and either
// answers it at once or queues it (spec "Provider requests"):
//
//  1. connection_id, owner_epoch and sequence (exactly the last + 1) must
//     match, or the connection closes;
//  2. an operation the provider declared unsupported is answered
//     unsupported with the declaration's evidence, before any parsing of
//     its parameters or provider I/O;
//  3. a malformed request (decodeErr set) is answered invalid;
//  4. a deployment generation other than the enrolled one is answered
//     invalid (the node does not manage generations);
//  5. otherwise the request takes one of its connection's queue slots —
//     when all QueueCapacity slots of the connection are taken the
//     connection closes — and its budget starts: the
//     deadline is arrived + timeout_ms on the node's clock, and it runs
//     while the request waits for one of MaxActive workers.
//
// While the session drains (Run's context ended), a request that passes
// check 1 is answered unconfirmed without running.
func (s *session) request(r *proto.Request, decodeErr error, arrived time.Time) error {
	switch {
	case r.ConnectionID != s.connectionID:
		return violation("request for another connection")
	case r.OwnerEpoch != s.ownerEpoch:
		return violation("request under another owner epoch")
	case r.Sequence != s.lastSequence+1:
		return violation("request sequence is not the previous one plus 1")
	}
	s.lastSequence = r.Sequence
	if !s.admit() {
		// Draining: the request is not run; its outcome is unknown to
		// Core, which never replays it.
		return s.respond(failure(r, proto.ErrUnconfirmed), r.Operation)
	}
	admitted := true
	defer func() {
		if admitted {
			s.finished()
		}
	}()

	if u, ok := s.a.cfg.Provider.Declaration().Unsupported(r.Operation); ok {
		return s.respond(&proto.Response{ID: r.ID, ConnectionID: r.ConnectionID, ErrorCode: proto.ErrUnsupported, Unsupported: &u}, r.Operation)
	}
	if decodeErr != nil {
		s.a.log.Debug("malformed request", "id", r.ID, "error", decodeErr)
		return s.respond(failure(r, proto.ErrInvalid), r.Operation)
	}
	var call *generation.Call
	if m := s.a.cfg.Generations; m != nil {
		// The request runs on the provider of the generation it names, or
		// is answered unconfirmed when that generation has none here.
		var ok bool
		if call, ok = m.Begin(r.DeploymentGeneration); !ok {
			return s.respond(failure(r, proto.ErrUnconfirmed), r.Operation)
		}
	} else if r.DeploymentGeneration != s.a.cfg.DeploymentGeneration {
		return s.respond(failure(r, proto.ErrInvalid), r.Operation)
	}

	select {
	case s.slots <- struct{}{}:
		s.a.active.Add(1)
	default:
		if call != nil {
			call.Release()
		}
		return &protocolError{code: websocket.ClosePolicyViolation, reason: "request queue full"}
	}
	deadline := arrived.Add(time.Duration(r.TimeoutMS) * time.Millisecond)
	admitted = false // run counts it out
	go s.a.run(s, r, deadline, call)
	return nil
}

// failure is a failure response to r without a result.
func failure(r *proto.Request, code proto.ErrorCode) *proto.Response {
	return &proto.Response{ID: r.ID, ConnectionID: r.ConnectionID, ErrorCode: code}
}

// run waits for a worker and runs one queued request under its budget,
// then releases its connection's queue slot. The budget, not the connection, bounds the
// operation: once the provider has it, a disconnect does not cancel it
// (cancelling a mutation halfway would only make its outcome unknown);
// its response is then discarded. A request still waiting when its
// connection closes is dropped without running; one whose budget runs out
// while it waits is answered unconfirmed without running.
func (a *Agent) run(s *session, r *proto.Request, deadline time.Time, call *generation.Call) {
	defer func() {
		<-s.slots
		a.active.Add(-1) // after the slot: a count of 0 means every slot is free
	}()
	defer s.finished() // after the response was sent, before the slot is freed
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	release := func() {
		if call != nil {
			call.Release()
		}
	}

	select {
	case a.workers <- struct{}{}:
	case <-ctx.Done():
		release()
		s.respond(failure(r, proto.ErrUnconfirmed), r.Operation)
		return
	case <-s.done:
		release()
		return
	}
	defer func() { <-a.workers }()
	select {
	case <-s.done:
		release()
		return
	default:
	}
	if ctx.Err() != nil {
		release()
		s.respond(failure(r, proto.ErrUnconfirmed), r.Operation)
		return
	}

	if call != nil {
		s.respond(a.runInHelper(ctx, call, r, deadline), r.Operation)
		return
	}
	resp, err := provider.Execute(ctx, a.cfg.Provider, r)
	if err != nil {
		// Provider causes may hold backend text and host paths: Debug only.
		a.log.Debug("operation failed", "id", r.ID, "operation", r.Operation, "error_code", resp.ErrorCode, "error", err)
	}
	s.respond(resp, r.Operation)
}

// runInHelper runs r in a native helper of its generation. A helper that
// ends without an answer, or a budget that runs out first, leaves the
// outcome unknown: command_unconfirmed for the command operations once a
// helper may have started them, unconfirmed otherwise. A helper still
// running when the budget ends keeps its lease and its reference until it
// exits.
func (a *Agent) runInHelper(ctx context.Context, call *generation.Call, r *proto.Request, deadline time.Time) *proto.Response {
	resp, err := call.Run(ctx, r, deadline)
	if err == nil {
		return resp
	}
	a.log.Debug("helper gave no answer", "id", r.ID, "operation", r.Operation, "error", err)
	started := errors.Is(err, helper.ErrNoAnswer) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	if started && (r.Operation == proto.OpCommand || r.Operation == proto.OpCommandCompute) {
		return failure(r, proto.ErrCommandUnconfirmed)
	}
	return failure(r, proto.ErrUnconfirmed)
}

// respond sends a response. A response the codec refuses (a result over
// the frame limit, or a provider result that breaks a field rule) is
// replaced by a failure whose outcome is unknown: command_unconfirmed for
// the command operations, unconfirmed otherwise. A write failure closes
// the connection.
func (s *session) respond(resp *proto.Response, op proto.Operation) error {
	err := s.send(resp)
	var ne *proto.Error
	if errors.As(err, &ne) {
		s.a.log.Warn("response refused by the codec; answering with an unknown outcome", "id", resp.ID, "rule", ne.Rule.Error(), "pointer", ne.Pointer)
		code := proto.ErrUnconfirmed
		if op == proto.OpCommand || op == proto.OpCommandCompute {
			code = proto.ErrCommandUnconfirmed
		}
		err = s.send(&proto.Response{ID: resp.ID, ConnectionID: resp.ConnectionID, ErrorCode: code})
	}
	if err != nil && !errors.Is(err, errClosed) {
		s.shutdown(err)
	}
	return err
}
