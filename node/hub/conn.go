package hub

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sandgate/sandgate/node/credential"
	"github.com/sandgate/sandgate/node/proto"
)

// maxCloseReason is the longest close reason a close frame carries (125
// bytes of payload minus the 2-byte code).
const maxCloseReason = 123

// conn is one node connection.
type conn struct {
	hub    *Hub
	nodeID string
	digest credential.Digest // of the presented credential, for re-authentication
	node   credential.Node   // the enrolment at connect

	// ws and state are guarded by hub.mu until run starts; ws is then
	// read-only.
	ws    *websocket.Conn
	state string

	// Set before the welcome is written, read-only afterwards.
	id    string
	epoch int64
	gm    bool

	// wmu serialises writes; it also guards seq, so that the order of
	// sequence numbers is the order on the wire.
	wmu sync.Mutex
	seq uint64

	pmu     sync.Mutex
	pending map[string]*call

	// retentionSeq is the last retention sequence; reader goroutine only.
	retentionSeq uint64

	closeOnce   sync.Once
	closing     chan struct{} // closed when the connection starts closing
	closeCode   int           // set in closeOnce
	closeReason string
}

// call is one request waiting for its response.
type call struct {
	req  *proto.Request
	done chan *proto.Response // buffered: the reader never blocks
}

func newConn(h *Hub, nodeID string, digest credential.Digest, node credential.Node) *conn {
	return &conn{hub: h, nodeID: nodeID, digest: digest, node: node, state: StateConnecting,
		pending: map[string]*call{}, closing: make(chan struct{})}
}

func (c *conn) pendingCount() int {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return len(c.pending)
}

func (c *conn) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// config returns the hub's current settings (never nil once a connection
// exists: Configure cannot be undone).
func (c *conn) config() *Config { return c.hub.config() }

// run is the connection's reader goroutine: hello, then frames until the
// connection ends.
func (c *conn) run() {
	ws := c.ws
	start := time.Now()
	defer func() {
		_ = ws.Close()
		c.fail(0, "connection ended") // a safety net: every exit path has failed already
		c.hub.release(c, c.hub.now())
		c.logClosed(start)
	}()
	cfg := c.config()
	if c.isClosing() {
		// The hub closed while the upgrade was under way.
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(c.closeCode, c.closeReason),
			time.Now().Add(cfg.Timers.Write))
		return
	}
	ws.SetReadLimit(proto.MaxRequestFrame)
	_ = ws.SetReadDeadline(start.Add(cfg.Timers.Hello))
	data, ok := c.read(true)
	if !ok {
		return
	}
	if !c.isClosing() {
		c.hello(data)
	}
	for {
		if !c.isClosing() {
			_ = ws.SetReadDeadline(time.Now().Add(c.config().Timers.Idle))
			if c.isClosing() {
				// fail ran between the check and the deadline: restore
				// its close grace.
				_ = ws.SetReadDeadline(time.Now().Add(c.config().Timers.CloseGrace))
			}
		}
		data, ok := c.read(false)
		if !ok {
			return
		}
		if c.isClosing() {
			continue // draining until the node's close frame
		}
		c.handle(data)
	}
}

// read returns the next text message. It returns false when the connection
// is over: a read error (closing it with the right code where one can
// still be sent) or the node's close frame.
func (c *conn) read(hello bool) ([]byte, bool) {
	for {
		typ, data, err := c.ws.ReadMessage()
		if err != nil {
			c.readFailed(err, hello)
			return nil, false
		}
		if c.isClosing() {
			return nil, true
		}
		if typ != websocket.TextMessage {
			c.fail(CloseUnsupportedData, "binary message: frames are JSON text")
			return nil, true
		}
		return data, true
	}
}

func (c *conn) readFailed(err error, hello bool) {
	if c.isClosing() {
		return // the node's close answer, or the close grace ran out
	}
	var ce *websocket.CloseError
	var ne net.Error
	switch {
	case errors.As(err, &ce):
		c.fail(0, fmt.Sprintf("closed by the node with code %d", ce.Code))
	case errors.Is(err, websocket.ErrReadLimit):
		c.fail(CloseMessageTooBig, "message larger than the 72 MiB frame limit")
	case errors.As(err, &ne) && ne.Timeout() && hello:
		c.fail(CloseHelloTimeout, "no hello within the hello timeout")
	case errors.As(err, &ne) && ne.Timeout():
		c.fail(CloseIdleTimeout, "no frame within the idle timeout")
	default:
		c.fail(0, "connection lost")
	}
}

// fail starts closing the connection once: it records why, wakes the
// requests waiting on it, sends a close frame with code and reason (code
// 0: none, the connection is already gone or the node closed it) and gives
// the node CloseGrace to answer before the reader stops.
func (c *conn) fail(code int, reason string) {
	c.closeOnce.Do(func() {
		c.closeCode, c.closeReason = code, reason
		c.hub.mu.Lock()
		if c.state == StateConnecting || c.state == StateLive {
			c.state = StateClosing
		}
		ws := c.ws
		c.hub.mu.Unlock()
		close(c.closing)
		if code == 0 || ws == nil {
			return
		}
		cfg := c.config()
		if len(reason) > maxCloseReason {
			reason = reason[:maxCloseReason]
		}
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason),
			time.Now().Add(cfg.Timers.Write))
		_ = ws.SetReadDeadline(time.Now().Add(cfg.Timers.CloseGrace))
	})
}

// logClosed logs the end of the connection: protocol violations at warn,
// the rest at info. Only fixed reasons, codes and IDs are logged.
func (c *conn) logClosed(start time.Time) {
	log := c.config().Logger
	level := zapcore.InfoLevel
	switch c.closeCode {
	case CloseProtocolError, CloseUnsupportedData, CloseMessageTooBig, CloseIdentityMismatch,
		CloseCredentialRejected, CloseEpochMismatch, CloseInternalError:
		level = zapcore.WarnLevel
	}
	if ce := log.Check(level, "node connection closed"); ce != nil {
		ce.Write(zap.String("node_id", c.nodeID), zap.String("connection_id", c.id),
			zap.Int("close_code", c.closeCode), zap.String("reason", c.closeReason),
			zap.Duration("duration", time.Since(start)))
	}
}

// invalid closes the connection for a frame node/proto refused. The reason
// holds the rule and the JSON pointer, never a value.
func (c *conn) invalid(err error) {
	reason := "invalid frame"
	var pe *proto.Error
	if errors.As(err, &pe) {
		reason = "invalid frame: " + pe.Rule.Error() + " at " + truncate(pe.Pointer, 48)
		if pe.Detail != "" {
			reason += ": " + pe.Detail
		}
	}
	c.fail(CloseProtocolError, reason)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// write encodes f and writes it as one text message; the caller holds
// c.wmu. An encoding failure is Core's bug and closes the connection with
// CloseInternalError; a write failure closes it without a close frame.
func (c *conn) write(f proto.Frame) bool {
	b, err := proto.Encode(f)
	if err != nil {
		c.config().Logger.Error("encoding a frame for a node failed", zap.String("node_id", c.nodeID),
			zap.String("type", f.FrameType()), zap.Error(err))
		c.fail(CloseInternalError, "Core could not encode a "+f.FrameType()+" frame")
		return false
	}
	return c.writeBytes(b)
}

// writeBytes writes one text message; the caller holds c.wmu.
func (c *conn) writeBytes(b []byte) bool {
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.config().Timers.Write))
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		c.fail(0, "write failed")
		_ = c.ws.Close()
		return false
	}
	return true
}

// hello handles the first frame.
func (c *conn) hello(data []byte) {
	f, err := proto.Decode(data)
	if err != nil {
		c.invalid(err)
		return
	}
	h, ok := f.(*proto.Hello)
	if !ok {
		c.fail(CloseProtocolError, "the first frame must be hello, not "+f.FrameType())
		return
	}
	if member := identityMismatch(c.nodeID, c.node, h); member != "" {
		c.fail(CloseIdentityMismatch, "hello does not match the authenticated node: "+member)
		return
	}
	cfg := c.config()
	if h.GenerationManagement && cfg.Deployment == nil {
		c.fail(CloseNoDeployment, "no deployment to advertise to a generation-managing node")
		return
	}
	now := time.Now()
	c.id = uuid.NewString()
	c.epoch = cfg.OwnerEpoch
	c.gm = h.GenerationManagement
	summary := &HelloSummary{InstallationID: h.InstallationID, Provider: h.Provider,
		BackendFingerprint: h.BackendFingerprint, DeploymentGeneration: h.DeploymentGeneration,
		SpecificationDigest: h.SpecificationDigest, MaxActive: h.MaxActive, MaxRetained: h.MaxRetained,
		GenerationManagement: h.GenerationManagement}
	health := normalizeHealth(h.Health)

	hub := c.hub
	hub.mu.Lock()
	p := hub.nodes[c.nodeID]
	p.connectionID, p.epoch = c.id, c.epoch
	p.connectedAt, p.lastHeartbeat = now, now
	p.disconnected, p.closeCode, p.closeReason = time.Time{}, 0, ""
	p.hello, p.health = summary, health
	p.generations = nil
	mergeObservations(p, h.Generations, now)
	hub.mu.Unlock()

	w := &proto.Welcome{ConnectionID: c.id, OwnerEpoch: c.epoch}
	if c.gm {
		w.Deployment = cfg.Deployment
	}
	// The connection turns live with the welcome: holding the writer from
	// before the state change until the welcome is written, no request can
	// precede it on the wire.
	c.wmu.Lock()
	hub.mu.Lock()
	if c.state == StateConnecting {
		c.state = StateLive
	}
	hub.mu.Unlock()
	ok = c.write(w)
	c.wmu.Unlock()
	if !ok {
		return
	}
	if ce := cfg.Logger.Check(zapcore.InfoLevel, "node connected"); ce != nil {
		ce.Write(zap.String("node_id", c.nodeID), zap.String("connection_id", c.id),
			zap.Int64("owner_epoch", c.epoch), zap.Bool("generation_management", c.gm),
			zap.Bool("provider_ready", health.ProviderReady))
	}
}

// identityMismatch returns the first hello member that differs from the
// enrolment of the authenticated node, or "".
func identityMismatch(nodeID string, n credential.Node, h *proto.Hello) string {
	switch {
	case h.NodeID != nodeID || n.NodeID != nodeID:
		return "node_id"
	case h.InstallationID != n.InstallationID:
		return "installation_id"
	case string(h.Provider) != n.Provider:
		return "provider"
	case h.BackendFingerprint != n.BackendFingerprint:
		return "backend_fingerprint"
	case h.DeploymentGeneration != n.DeploymentGeneration:
		return "deployment_generation"
	case h.SpecificationDigest != n.SpecificationDigest:
		return "specification_digest"
	case h.GenerationManagement != n.GenerationManagement:
		return "generation_management"
	}
	return ""
}

// enrolmentChanged reports whether the node's current enrolment no longer
// matches what its hello stated.
func enrolmentChanged(now credential.Node, at credential.Node) bool {
	now.Enabled, at.Enabled = true, true
	return now != at
}

// normalizeHealth copies h with an unknown diagnostic code replaced by
// provider_unavailable (spec "Connection").
func normalizeHealth(h proto.Health) *proto.Health {
	if h.Diagnostic != "" {
		h.Diagnostic = proto.NormalizeDiagnostic(h.Diagnostic)
	}
	return &h
}

// mergeObservations records the latest observation of each generation in
// obs; hub.mu is held. The map is bounded: past maxObservedGenerations the
// least recently observed generation is forgotten (omitting a record
// never implies absence, so this only loses knowledge).
func mergeObservations(p *presence, obs []proto.GenerationObservation, now time.Time) {
	if len(obs) == 0 {
		return
	}
	if p.generations == nil {
		p.generations = make(map[int64]observed, len(obs))
	}
	for _, o := range obs {
		if o.Diagnostic != "" {
			o.Diagnostic = proto.NormalizeDiagnostic(o.Diagnostic)
		}
		p.generations[o.Generation] = observed{obs: o, at: now}
	}
	for len(p.generations) > maxObservedGenerations {
		var oldest int64
		var at time.Time
		first := true
		for g, o := range p.generations {
			if first || o.at.Before(at) {
				oldest, at, first = g, o.at, false
			}
		}
		delete(p.generations, oldest)
	}
}

// handle dispatches one frame after hello.
func (c *conn) handle(data []byte) {
	f, err := proto.Decode(data)
	if err != nil {
		c.invalid(err)
		return
	}
	switch f := f.(type) {
	case *proto.Heartbeat:
		c.heartbeat(f)
	case *proto.Response:
		c.response(f)
	case *proto.Retention:
		c.retention(f)
	default:
		c.fail(CloseProtocolError, "unexpected "+f.FrameType()+" frame from a node")
	}
}

// heartbeat re-authenticates, checks the owner epoch, records the health
// and answers heartbeat_ack.
func (c *conn) heartbeat(hb *proto.Heartbeat) {
	cfg := c.config()
	switch {
	case hb.ConnectionID != c.id:
		c.fail(CloseProtocolError, "heartbeat for another connection")
		return
	case hb.OwnerEpoch != c.epoch:
		c.fail(CloseEpochMismatch, "heartbeat owner epoch differs from the welcome's")
		return
	case len(hb.Generations) > 0 && !c.gm:
		c.fail(CloseProtocolError, "generation observations from a node without generation management")
		return
	}
	node, err := cfg.Credentials.Authenticate(c.nodeID, c.digest)
	if err != nil {
		cfg.Logger.Info("node credential rejected at heartbeat", zap.String("node_id", c.nodeID), zap.Error(err))
		c.fail(CloseCredentialRejected, "node credential rejected")
		return
	}
	if enrolmentChanged(node, c.node) {
		c.fail(CloseIdentityMismatch, "the node's enrolment changed")
		return
	}
	if c.epoch != cfg.OwnerEpoch {
		c.fail(CloseEpochSuperseded, "owner epoch superseded; reconnect")
		return
	}
	if c.gm && cfg.Deployment == nil {
		c.fail(CloseNoDeployment, "no deployment to advertise to a generation-managing node")
		return
	}
	now := c.hub.now()
	health := normalizeHealth(hb.Health)
	hub := c.hub
	hub.mu.Lock()
	if p := hub.nodes[c.nodeID]; p != nil && p.conn == c {
		p.lastHeartbeat = now
		p.health = health
		mergeObservations(p, hb.Generations, now)
	}
	hub.mu.Unlock()
	ack := &proto.HeartbeatAck{ConnectionID: c.id, OwnerEpoch: c.epoch}
	if c.gm {
		ack.Deployment = cfg.Deployment
	}
	c.wmu.Lock()
	c.write(ack)
	c.wmu.Unlock()
	if ce := cfg.Logger.Check(zapcore.DebugLevel, "node heartbeat"); ce != nil {
		ce.Write(zap.String("node_id", c.nodeID), zap.String("connection_id", c.id),
			zap.Bool("provider_ready", health.ProviderReady), zap.String("diagnostic", health.Diagnostic),
			zap.Int("active_operations", health.ActiveOperations))
	}
}

// response matches a response to its pending request.
func (c *conn) response(r *proto.Response) {
	if r.ConnectionID != c.id {
		c.fail(CloseProtocolError, "response for another connection")
		return
	}
	c.pmu.Lock()
	cl := c.pending[r.ID]
	delete(c.pending, r.ID)
	c.pmu.Unlock()
	if cl == nil {
		c.fail(CloseProtocolError, "response for no pending request")
		return
	}
	cl.done <- r
}

// retention answers a generation-managing node's retention request:
// keep the target generation (with its digest) and the serving
// generation, and nothing else.
func (c *conn) retention(r *proto.Retention) {
	cfg := c.config()
	switch {
	case !c.gm:
		c.fail(CloseProtocolError, "retention from a node without generation management")
		return
	case r.ConnectionID != c.id:
		c.fail(CloseProtocolError, "retention for another connection")
		return
	case r.OwnerEpoch != c.epoch:
		c.fail(CloseEpochMismatch, "retention owner epoch differs from the welcome's")
		return
	case r.Sequence != c.retentionSeq+1:
		c.fail(CloseProtocolError, "retention sequence is not one more than the last")
		return
	case c.epoch != cfg.OwnerEpoch:
		// No drop is authorised under a superseded epoch.
		c.fail(CloseEpochSuperseded, "owner epoch superseded; reconnect")
		return
	}
	c.retentionSeq = r.Sequence
	ack := &proto.RetentionAck{ID: r.ID, ConnectionID: c.id, Entries: make([]proto.RetentionDecision, len(r.Entries))}
	for i, e := range r.Entries {
		ack.Entries[i] = proto.RetentionDecision{Generation: e.Generation, SpecificationDigest: e.SpecificationDigest,
			Keep: keep(cfg.Deployment, e)}
	}
	c.wmu.Lock()
	c.write(ack)
	c.wmu.Unlock()
}

// keep decides one retention entry: Core authorises dropping everything
// but the target generation (same digest) and the serving generation.
// Without a deployment nothing may be dropped.
func keep(d *proto.Deployment, e proto.RetentionEntry) bool {
	if d == nil {
		return true
	}
	if e.Generation == d.Generation && e.SpecificationDigest == d.SpecificationDigest {
		return true
	}
	return d.ServingGeneration != nil && e.Generation == *d.ServingGeneration
}
