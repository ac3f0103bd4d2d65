package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/node/proto"
)

// session is one WebSocket connection to Core.
type session struct {
	a    *Agent
	conn *websocket.Conn

	writeMu sync.Mutex

	// Set from welcome, before any request is admitted.
	connectionID string
	ownerEpoch   int64
	// lastSequence is the sequence of the last request (reader only).
	lastSequence uint64
	// retention is the pending retention request, and retentionSeq the
	// sequence of the last one (reader only; generation-managing nodes).
	retention    *proto.Retention
	retentionSeq uint64

	// slots holds one token per request of this connection that is
	// queued or running (cap QueueCapacity; spec: the bound Core keeps per
	// connection). A running operation keeps its token after the
	// connection closed, but a new connection has slots of its own.
	slots chan struct{}

	done      chan struct{} // closed when the connection is finished
	closeOnce sync.Once
	wg        sync.WaitGroup // the heartbeat goroutine

	// drainMu guards inFlight, draining, idle and welcomed: inFlight
	// counts this connection's admitted requests that are being checked,
	// queued or running and whose response was not yet sent (or dropped);
	// once draining, no request is admitted and idle is closed when
	// inFlight reaches 0. welcomed is set once Core's welcome was
	// accepted: only then does the session drain instead of closing.
	drainMu  sync.Mutex
	inFlight int
	draining bool
	idle     chan struct{}
	welcomed bool
}

func newSession(a *Agent, conn *websocket.Conn) *session {
	return &session{a: a, conn: conn, slots: make(chan struct{}, QueueCapacity), done: make(chan struct{}), idle: make(chan struct{})}
}

// errGoingAway closes a drained connection (or one whose drain grace ran
// out) with 1001: the node is shutting down.
var errGoingAway = &protocolError{code: websocket.CloseGoingAway, reason: "node shutting down"}

// stop is called when Run's context ends: before welcome the connection
// closes at once; after it, the session drains (see Timers.ShutdownGrace).
func (s *session) stop(cause error) {
	select {
	case <-s.done:
		return
	default:
	}
	s.drainMu.Lock()
	if !s.welcomed {
		s.drainMu.Unlock()
		s.shutdown(cause)
		return
	}
	s.draining = true
	n := s.inFlight
	if n == 0 {
		close(s.idle)
	}
	s.drainMu.Unlock()
	s.a.log.Info("draining", "in_flight", n, "grace", s.a.cfg.Timers.ShutdownGrace)
	// Not in wg: the goroutine ends with the connection (done).
	go func() {
		t := time.NewTimer(s.a.cfg.Timers.ShutdownGrace)
		defer t.Stop()
		select {
		case <-s.idle:
			s.a.log.Info("drained")
		case <-t.C:
			s.drainMu.Lock()
			n := s.inFlight
			s.drainMu.Unlock()
			s.a.log.Info("drain grace expired", "in_flight", n)
		case <-s.done:
			return
		}
		s.shutdown(errGoingAway)
	}()
}

// admit counts a request into the connection's in-flight requests; it
// returns false, counting nothing, while the session drains.
func (s *session) admit() bool {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	if s.draining {
		return false
	}
	s.inFlight++
	return true
}

// finished counts an admitted request out, after its response was sent
// or dropped.
func (s *session) finished() {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	s.inFlight--
	if s.draining && s.inFlight == 0 {
		close(s.idle)
	}
}

// protocolError is a reason to close the connection; its text is fixed and
// may be sent to Core in the close frame.
type protocolError struct {
	code   int
	reason string
}

// Error returns the fixed reason.
func (e *protocolError) Error() string { return "agent: closing the connection: " + e.reason }

func violation(reason string) error {
	return &protocolError{code: websocket.ClosePolicyViolation, reason: reason}
}

// serve sends hello, waits for welcome, then reads frames until the
// connection ends. It reports whether Core welcomed the node.
func (s *session) serve(ctx context.Context, fingerprint string) (welcomed bool, err error) {
	defer func() { s.close(err) }()
	stopAfter := context.AfterFunc(ctx, func() { s.stop(ctx.Err()) })
	defer stopAfter()

	s.conn.SetReadLimit(proto.MaxRequestFrame)
	cfg := &s.a.cfg
	hello := &proto.Hello{
		NodeID:               cfg.NodeID,
		InstallationID:       cfg.InstallationID,
		Provider:             cfg.Provider.Kind(),
		BackendFingerprint:   fingerprint,
		DeploymentGeneration: cfg.DeploymentGeneration,
		SpecificationDigest:  cfg.SpecificationDigest,
		MaxActive:            cfg.MaxActive,
		// A node without generation management retains exactly its
		// enrolled generation.
		MaxRetained: 1,
		Health:      s.a.reporter.Report(ctx),
	}
	if m := cfg.Generations; m != nil {
		hello.GenerationManagement, hello.MaxRetained = true, cfg.MaxRetained
		hello.Generations = m.Observations(ctx)
	}
	if err := s.send(hello); err != nil {
		return false, err
	}

	// The first frame must be welcome.
	f, _, err := s.read()
	if err != nil {
		return false, err
	}
	w, ok := f.(*proto.Welcome)
	if !ok {
		return false, violation("expected welcome")
	}
	switch {
	case cfg.Generations == nil && w.Deployment != nil:
		return false, violation("deployment sent to a node without generation management")
	case cfg.Generations != nil && w.Deployment == nil:
		return false, violation("no deployment for a generation-managing node")
	}
	accepted, err := cfg.State.AcceptOwnerEpoch(w.OwnerEpoch)
	if err != nil {
		return false, err
	}
	if !accepted {
		return false, violation("owner epoch lower than one already accepted")
	}
	s.connectionID, s.ownerEpoch = w.ConnectionID, w.OwnerEpoch
	s.drainMu.Lock()
	s.welcomed = true
	s.drainMu.Unlock()
	s.a.log.Info("connected", "connection_id", s.connectionID, "owner_epoch", s.ownerEpoch)
	if w.Deployment != nil {
		// Only now, with the connection's deployment, may the node
		// prepare, repair or reclaim anything.
		cfg.Generations.SetDeployment(*w.Deployment)
	}

	s.wg.Add(1)
	// Heartbeats continue while the session drains after ctx ends.
	go s.heartbeats(context.WithoutCancel(ctx))
	for {
		f, arrived, err := s.read()
		if err != nil {
			return true, err
		}
		switch f := f.(type) {
		case *proto.HeartbeatAck:
			if err := s.heartbeatAck(f); err != nil {
				return true, err
			}
		case *proto.RetentionAck:
			if s.a.cfg.Generations == nil {
				return true, violation("retention_ack sent to a node without generation management")
			}
			s.retentionAck(f)
		case *proto.Request:
			if err := s.request(f, nil, arrived); err != nil {
				return true, err
			}
		case *malformed:
			if err := s.request(f.Request, f.err, arrived); err != nil {
				return true, err
			}
		default:
			return true, violation("unexpected " + f.FrameType() + " frame")
		}
	}
}

// read reads and decodes one frame, within the idle timeout, and returns
// when it arrived. A request that the codec refuses only for a field or
// parameter rule is returned as a *malformed.
func (s *session) read() (proto.Frame, time.Time, error) {
	if err := s.conn.SetReadDeadline(time.Now().Add(s.a.cfg.Timers.Idle)); err != nil {
		return nil, time.Time{}, err
	}
	mt, data, err := s.conn.ReadMessage()
	arrived := time.Now()
	if err != nil {
		return nil, arrived, fmt.Errorf("agent: read: %w", err)
	}
	if mt != websocket.TextMessage {
		return nil, arrived, &protocolError{code: websocket.CloseUnsupportedData, reason: "frames are text messages"}
	}
	f, err := proto.Decode(data)
	if err != nil {
		if r, ok := f.(*proto.Request); ok && r != nil {
			return &malformed{Request: r, err: err}, arrived, nil
		}
		return nil, arrived, &protocolError{code: websocket.ClosePolicyViolation, reason: "invalid frame"}
	}
	return f, arrived, nil
}

// malformed is a request frame whose envelope is valid but which breaks a
// field or parameter rule: it is answered invalid after the connection,
// epoch and sequence checks.
type malformed struct {
	*proto.Request
	err error
}

// heartbeatAck checks Core's answer to a heartbeat.
func (s *session) heartbeatAck(a *proto.HeartbeatAck) error {
	switch {
	case a.ConnectionID != s.connectionID:
		return violation("heartbeat_ack for another connection")
	case s.a.cfg.Generations == nil && a.Deployment != nil:
		return violation("deployment sent to a node without generation management")
	case s.a.cfg.Generations != nil && a.Deployment == nil:
		return violation("no deployment for a generation-managing node")
	case a.OwnerEpoch < s.ownerEpoch:
		return violation("owner epoch lower than the connection's")
	case a.OwnerEpoch > s.ownerEpoch:
		// Keep the higher epoch, but this connection's requests carry the
		// old one: start again under the new owner.
		if _, err := s.a.cfg.State.AcceptOwnerEpoch(a.OwnerEpoch); err != nil {
			return err
		}
		return violation("owner epoch changed")
	}
	if m := s.a.cfg.Generations; m != nil {
		m.SetDeployment(*a.Deployment)
		return s.proposeRetention()
	}
	return nil
}

// proposeRetention sends a retention request when none is pending and the
// generation manager has entries to ask about (spec "Generation control":
// one exchange per connection at a time, at most 8 entries, sequence +1
// each time). Retention never uses the request queue.
func (s *session) proposeRetention() error {
	if s.retention != nil {
		return nil
	}
	entries := s.a.cfg.Generations.Retention()
	if len(entries) == 0 {
		return nil
	}
	r := &proto.Retention{ID: uuid.NewString(), Sequence: s.retentionSeq + 1, ConnectionID: s.connectionID,
		OwnerEpoch: s.ownerEpoch, Entries: entries}
	if err := s.send(r); err != nil {
		return err
	}
	s.retentionSeq, s.retention = r.Sequence, r
	return nil
}

// retentionAck applies Core's answer to the pending retention request.
// Only an acknowledgment that matches the pending request exactly (id,
// connection, every entry in order) authorises anything: an unsolicited,
// replayed, stale, incomplete or mixed one deletes nothing. Each entry
// with keep false is a drop authorisation bound to this connection; the
// reclamation re-checks every reference before it runs.
func (s *session) retentionAck(a *proto.RetentionAck) {
	switch {
	case s.retention == nil:
		s.a.log.Warn("retention_ack without a pending retention request ignored; nothing deleted")
		return
	case a.ID != s.retention.ID:
		s.a.log.Warn("retention_ack for another retention request ignored; nothing deleted")
		return
	case !a.Answers(s.retention):
		s.a.log.Warn("retention_ack does not match its request; nothing deleted")
		s.retention = nil
		return
	}
	s.retention = nil
	for _, e := range a.Entries {
		if !e.Keep {
			s.a.cfg.Generations.Drop(proto.RetentionEntry{Generation: e.Generation, SpecificationDigest: e.SpecificationDigest}, s.done)
		}
	}
}

// heartbeats sends a heartbeat with a fresh health report every
// Timers.Heartbeat until the connection ends.
func (s *session) heartbeats(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.a.cfg.Timers.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		hb := &proto.Heartbeat{ConnectionID: s.connectionID, OwnerEpoch: s.ownerEpoch, Health: s.a.reporter.Report(ctx)}
		if m := s.a.cfg.Generations; m != nil {
			hb.Generations = m.Observations(ctx)
		}
		if err := s.send(hb); err != nil {
			s.shutdown(err)
			return
		}
	}
}

// send encodes f and writes it as one text message within Timers.Write.
func (s *session) send(f proto.Frame) error {
	data, err := proto.Encode(f)
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	select {
	case <-s.done:
		return errClosed
	default:
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(s.a.cfg.Timers.Write)); err != nil {
		return err
	}
	return s.conn.WriteMessage(websocket.TextMessage, data)
}

var errClosed = errors.New("agent: connection closed")

// close ends the connection and waits for the heartbeat goroutine.
func (s *session) close(cause error) {
	s.shutdown(cause)
	s.wg.Wait()
}

// shutdown ends the connection once: a protocol error is announced to Core
// in a close frame with its fixed reason (1001 after a drain). Queued
// operations of the connection are dropped; running ones finish and their
// responses are discarded.
func (s *session) shutdown(cause error) {
	s.closeOnce.Do(func() {
		var pe *protocolError
		if errors.As(cause, &pe) {
			if pe != errGoingAway {
				s.a.log.Warn("closing the connection", "reason", pe.reason)
			}
			s.writeMu.Lock()
			msg := websocket.FormatCloseMessage(pe.code, pe.reason)
			s.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(s.a.cfg.Timers.Write))
			s.writeMu.Unlock()
		}
		close(s.done)
		s.conn.Close()
	})
}
