package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/placement"
)

// maxCloseReason is the longest close reason a close frame carries (125
// bytes of payload minus the 2-byte code).
const maxCloseReason = 123

// placementSyncTimeout bounds the read of a node's placements from a
// shared store before its first retention answer (it runs on the
// connection's reader).
const placementSyncTimeout = 2 * time.Second

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
	// wconn is ws's socket (nil: its write deadline is never disarmed).
	wconn *deadlineConn

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
	// placementsSynced: the node's placements were read from a shared
	// store (placement.Syncer) on this connection; reader goroutine only.
	placementsSynced bool
	// beats, retentions, pings and pongs are the heartbeat, retention,
	// ping and pong budgets; reader goroutine only.
	beats, retentions, pings, pongs budget

	closeOnce   sync.Once
	closing     chan struct{} // closed when the connection starts closing
	closeCode   int           // set in closeOnce
	closeReason string

	// claim is the cluster-wide claim (Config.Presence), nil without
	// one; set before the upgrade. renewing is set while a Renew runs.
	claim    Claim
	renewing atomic.Bool

	// retiring: the node's credential was replaced (re-authentication at a
	// heartbeat failed with credential.ErrMismatch). No request is written
	// on the connection any more (set and checked under wmu); it is closed
	// with CloseCredentialRejected once no request is pending on it, at
	// the latest at the node's next heartbeat.
	retiring atomic.Bool
}

// call is one request waiting for its response.
type call struct {
	done chan *proto.Response // buffered: the reader never blocks
	// read is when the response's frame began to arrive (the reader's
	// NextReader returned); set before the send on done.
	read time.Time
	// timer bounds the wait (timeout_ms plus the response grace); nil
	// until the call's first use, then reset on each reuse.
	timer *time.Timer
}

// calls holds calls for reuse, so that a dispatch costs no channel and
// no timer of its own. A call goes back only once its response was
// received from done: the reader removed it from the connection's
// pending requests before sending, so nothing else holds it. A call
// whose wait ended otherwise (timeout, cancel, disconnect) stays pending,
// since a late response may still be sent on its channel, and is left to
// the collector.
var calls = sync.Pool{New: func() any { return &call{done: make(chan *proto.Response, 1)} }}

// wait starts the call's timer for d (reusing it when the call has
// one) and returns its channel; the caller stops it when the wait ends.
func (cl *call) wait(d time.Duration) <-chan time.Time {
	if cl.timer == nil {
		cl.timer = time.NewTimer(d)
	} else {
		// Since Go 1.23 a stopped or fired timer's channel holds no
		// stale value after Reset.
		cl.timer.Reset(d)
	}
	return cl.timer.C
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
		c.releaseClaim()
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
	// read enforces the exact limits; gorilla's limit is a backstop that
	// refuses a frame header declaring far more at once.
	ws.SetReadLimit(proto.MaxRequestFrame + 1<<20)
	ws.SetPingHandler(c.ping)
	ws.SetPongHandler(c.pong)
	ws.SetCloseHandler(c.closeReply)
	_ = ws.SetReadDeadline(start.Add(cfg.Timers.Hello))
	msg, ok := c.read()
	if !ok {
		return
	}
	if !c.isClosing() {
		c.hello(msg)
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
		msg, ok := c.read()
		if !ok {
			return
		}
		if c.isClosing() {
			continue // draining until the node's close frame
		}
		c.handle(msg)
	}
}

// decoded is one message as proto.Decode read it: the frame, or the
// error (with the frame too for a request whose envelope is valid).
type decoded struct {
	f   proto.Frame
	err error
	// at is when the message began to arrive (NextReader returned): the
	// start of the hub's own part of a response (Observer.HubTime).
	at time.Time
}

// read returns the next text message, decoded. It returns false when the
// connection is over: a read error (closing it with the right code where
// one can still be sent) or the node's close frame.
//
// A message of up to 32 KiB is decoded straight from the pooled buffer
// it was read into (proto.Decode keeps no reference to its input), so a
// heartbeat or a small response costs no copy of its bytes.
//
// Memory is bounded before anything is parsed: a message is read into
// memory only up to its limit (readLimit), and a message over it closes
// the connection with CloseMessageTooBig after at most limit+1 bytes were
// buffered; the rest is discarded as it arrives. While the connection is
// closing, messages are discarded unread until the node's close frame.
func (c *conn) read() (decoded, bool) {
	typ, r, err := c.ws.NextReader()
	if err != nil {
		c.readFailed(err)
		return decoded{}, false
	}
	at := time.Now()
	if c.isClosing() {
		return decoded{}, true // the next NextReader discards the message
	}
	if typ != websocket.TextMessage {
		c.fail(CloseUnsupportedData, "binary message: frames are JSON text")
		return decoded{}, true
	}
	data, buf, err := readMessage(r, c.readLimit())
	switch {
	case errors.Is(err, errOverControlLimit):
		c.fail(CloseMessageTooBig, "message over the 32 KiB control frame limit with no request pending")
		return decoded{}, true
	case errors.Is(err, errNotResponse):
		c.fail(CloseMessageTooBig, "message over the 32 KiB control frame limit whose first 32 KiB name no response type")
		return decoded{}, true
	case errors.Is(err, errOverResponseLimit):
		c.fail(CloseMessageTooBig, "message over the 72 MiB response frame limit")
		return decoded{}, true
	case err != nil:
		c.readFailed(err)
		return decoded{}, false
	}
	f, err := proto.Decode(data)
	if buf != nil {
		controlBufs.Put(buf)
	}
	return decoded{f, err, at}, true
}

var (
	errNotResponse       = errors.New("hub: message over the control frame limit that is not a response")
	errOverControlLimit  = errors.New("hub: message over the control frame limit")
	errOverResponseLimit = errors.New("hub: message over the response frame limit")
)

// controlBufs holds buffers of proto.MaxControlFrame+1 bytes: every
// message is first read into one, so that a control frame costs one
// allocation of its exact size.
var controlBufs = sync.Pool{New: func() any { b := make([]byte, proto.MaxControlFrame+1); return &b }}

// readMessage reads one message from r, which ends with io.EOF, and
// returns a slice of exactly its bytes. A message of at most
// proto.MaxControlFrame bytes is returned in a buffer of controlBufs,
// also returned as buf, which the caller puts back once it no longer
// uses data; buf is nil for a longer message and on an error. limit is
// proto.MaxControlFrame or proto.MaxRequestFrame; a longer message gives
// errOverControlLimit or errOverResponseLimit after at most limit+1 bytes
// were read, and one over 32 KiB whose first 32 KiB do not name the
// response type (proto.PeekType) gives errNotResponse before more is
// read. A message of n bytes over 32 KiB is gathered in blocks and copied
// once, so it costs at most 2n while read.
func readMessage(r io.Reader, limit int) (data []byte, buf *[]byte, err error) {
	bp := controlBufs.Get().(*[]byte)
	first := *bp
	n, err := io.ReadFull(r, first)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return first[:n], bp, nil
	}
	defer controlBufs.Put(bp)
	switch {
	case err != nil:
		return nil, nil, err
	case limit <= proto.MaxControlFrame:
		return nil, nil, errOverControlLimit
	}
	// Only a response may be larger than a control frame, and it must say
	// so within its first 32 KiB (proto.Encode writes "type" second).
	if typ, ok := proto.PeekType(first); !ok || typ != proto.TypeResponse {
		return nil, nil, errNotResponse
	}
	blocks := [][]byte{bytes.Clone(first)}
	total := len(first)
	size := 64 << 10
	for {
		b := make([]byte, min(size, limit+1-total))
		n, err := io.ReadFull(r, b)
		total += n
		blocks = append(blocks, b[:n])
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if total > limit {
			return nil, nil, errOverResponseLimit
		}
		size = min(2*size, 8<<20)
	}
	data = make([]byte, 0, total)
	for _, b := range blocks {
		data = append(data, b...)
	}
	return data, nil, nil
}

// readLimit is the size limit of the next message from the node: only a
// response may be larger than a control frame, and a node has something
// to respond to only while a request is pending on the connection. So
// until the welcome and whenever nothing is pending the limit is
// proto.MaxControlFrame (32 KiB); with at least one request pending it is
// proto.MaxRequestFrame (72 MiB) for a message whose first 32 KiB say
// "type":"response" (readMessage refuses any other before reading on);
// c.response then refuses one that answers no pending request. Messages
// are read one at a time, so a connection buffers at most one large
// message, and only while Core waits for it.
func (c *conn) readLimit() int {
	if c.pendingCount() > 0 {
		return proto.MaxRequestFrame
	}
	return proto.MaxControlFrame
}

func (c *conn) readFailed(err error) {
	hello := c.id == "" // set before the welcome is written
	if c.isClosing() {
		return // the node's close answer, or the close grace ran out
	}
	var ce *websocket.CloseError
	var ne net.Error
	switch {
	case errors.As(err, &ce):
		c.fail(0, fmt.Sprintf("closed by the node with code %d", ce.Code))
	case errors.Is(err, errPingFlood):
		c.fail(CloseFlood, "WebSocket pings faster than one per second")
	case errors.Is(err, errPongFlood):
		c.fail(CloseFlood, "WebSocket pongs faster than one per second")
	case errors.Is(err, websocket.ErrReadLimit):
		c.fail(CloseMessageTooBig, "message over the 72 MiB response frame limit")
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
		if class := refusedClass(code); class != "" {
			observerOf(c.config()).FrameRefused(class)
		}
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
		reason = cutUTF8(reason, maxCloseReason)
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
		CloseCredentialRejected, CloseEpochMismatch, CloseInternalError, CloseFlood:
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
	return cutUTF8(s, n) + "…"
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// end inside a multi-byte character: a close frame's reason must be valid
// UTF-8 (RFC 6455 section 5.5.1), and a member name in a JSON pointer may
// be any UTF-8.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// write encodes f and writes it as one text message; the caller holds
// c.wmu. An encoding failure is Core's bug and closes the connection with
// CloseInternalError; a write failure closes it without a close frame.
func (c *conn) write(f proto.Frame) bool {
	bp, err := encodeFrame(f)
	if err != nil {
		c.config().Logger.Error("encoding a frame for a node failed", zap.String("node_id", c.nodeID),
			zap.String("type", f.FrameType()), zap.Error(err))
		c.fail(CloseInternalError, "Core could not encode a "+f.FrameType()+" frame")
		return false
	}
	defer putFrameBuf(bp)
	return c.writeBytes(*bp)
}

// frameBufs hold frames between their encoding and their write (gorilla
// copies a message out during WriteMessage), so that a request or an ack
// costs no allocation of its bytes.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledFrame is the largest buffer frameBufs keeps, in bytes.
const maxPooledFrame = 64 << 10

// encodeFrame encodes f (proto.AppendEncode) into a buffer of frameBufs;
// the caller writes *bp and hands it back with putFrameBuf. On error
// nothing needs handing back.
func encodeFrame(f proto.Frame) (*[]byte, error) {
	bp := frameBufs.Get().(*[]byte)
	b, err := proto.AppendEncode((*bp)[:0], f)
	*bp = b
	if err != nil {
		putFrameBuf(bp)
		return nil, err
	}
	return bp, nil
}

// putFrameBuf returns an encodeFrame buffer to the pool unless it grew
// past maxPooledFrame.
func putFrameBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledFrame {
		*bp = (*bp)[:0]
		frameBufs.Put(bp)
	}
}

// writeBytes writes one text message within Timers.Write, then disarms
// the socket's write deadline (deadlineConn.disarm); the caller holds
// c.wmu.
func (c *conn) writeBytes(b []byte) bool {
	deadline := time.Now().Add(c.config().Timers.Write)
	_ = c.ws.SetWriteDeadline(deadline)
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		c.fail(0, "write failed")
		_ = c.ws.Close()
		return false
	}
	if c.wconn != nil {
		// gorilla sets exactly this deadline on the socket for the frame.
		c.wconn.disarm(deadline)
	}
	return true
}

// hello handles the first frame.
func (c *conn) hello(msg decoded) {
	if msg.err != nil {
		c.invalid(msg.err)
		return
	}
	f := msg.f
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
	deployment := deploymentFor(cfg, c.node.Pool)
	if h.GenerationManagement && deployment == nil {
		c.fail(CloseNoDeployment, "no deployment to advertise to a generation-managing node")
		return
	}
	now := c.hub.now() // the presence clock, as for every heartbeat
	c.id = uuid.NewString()
	c.epoch = cfg.OwnerEpoch
	if c.claim != nil {
		c.epoch = c.claim.Epoch()
	}
	c.gm = h.GenerationManagement
	summary := &HelloSummary{InstallationID: h.InstallationID, Provider: h.Provider,
		BackendFingerprint: h.BackendFingerprint, DeploymentGeneration: h.DeploymentGeneration,
		SpecificationDigest: h.SpecificationDigest, MaxActive: h.MaxActive, MaxRetained: h.MaxRetained,
		GenerationManagement: h.GenerationManagement}
	health := normalizeHealth(h.Health)

	hub := c.hub
	hub.mu.Lock()
	p := hub.nodes[c.nodeID]
	p.handoverUntil = time.Time{}
	p.connectionID, p.epoch = c.id, c.epoch
	p.connectedAt, p.lastHeartbeat = now, now
	p.disconnected, p.closeCode, p.closeReason = time.Time{}, 0, ""
	p.hello, p.health = summary, health
	p.generations = nil
	mergeObservations(p, h.Generations, now)
	hub.mu.Unlock()

	w := &proto.Welcome{ConnectionID: c.id, OwnerEpoch: c.epoch}
	if c.gm {
		w.Deployment = deployment
	}
	// The connection turns live with the welcome: holding the writer from
	// before the state change until the welcome is written, no request can
	// precede it on the wire.
	c.wmu.Lock()
	hub.mu.Lock()
	if c.state == StateConnecting {
		c.state = StateLive
		hub.wakeLocked() // operations waiting for this node take the writer after the welcome
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

// renew renews the connection's claim in the background, one renewal at
// a time (a heartbeat that arrives while one runs skips its own). A claim
// another replica took over closes the connection with
// CloseEpochSuperseded; other failures are logged and the next heartbeat
// tries again.
func (c *conn) renew() {
	if c.claim == nil || !c.renewing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.renewing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), presenceTimeout)
		defer cancel()
		err := c.claim.Renew(ctx)
		switch {
		case err == nil:
		case errors.Is(err, ErrLost):
			c.fail(CloseEpochSuperseded, "another gateway replica holds the node now; reconnect")
		default:
			c.config().Logger.Warn("renewing the node's claim failed", zap.String("node_id", c.nodeID), zap.Error(err))
		}
	}()
}

// releaseClaim releases the connection's claim, if any (bounded by
// presenceTimeout); called once the connection is over.
func (c *conn) releaseClaim() {
	if c.claim == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), presenceTimeout)
	defer cancel()
	if err := c.claim.Release(ctx); err != nil {
		c.config().Logger.Warn("releasing the node's claim failed; it expires by itself", zap.String("node_id", c.nodeID), zap.Error(err))
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
func (c *conn) handle(msg decoded) {
	if msg.err != nil {
		c.invalid(msg.err)
		return
	}
	switch f := msg.f.(type) {
	case *proto.Heartbeat:
		c.heartbeat(f)
	case *proto.Response:
		c.response(f, msg.at)
	case *proto.Retention:
		if c.retiring.Load() {
			// A retired connection's credential is no longer valid: it
			// authorises no drop (only the responses of requests already
			// pending on it are taken).
			c.fail(CloseCredentialRejected, "node credential replaced")
			return
		}
		c.retention(f)
	default:
		c.fail(CloseProtocolError, "unexpected "+f.FrameType()+" frame from a node")
	}
}

// heartbeat re-authenticates, checks the owner epoch, records the health
// and answers heartbeat_ack.
func (c *conn) heartbeat(hb *proto.Heartbeat) {
	cfg := c.config()
	if !c.takeHeartbeat(time.Now(), cfg.Timers) {
		c.fail(CloseFlood, "heartbeats faster than the heartbeat interval")
		return
	}
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
	if c.retiring.Load() {
		// Retired at an earlier heartbeat: whatever is still pending ends
		// with the connection (outcome unknown, disconnected).
		c.fail(CloseCredentialRejected, "node credential replaced")
		return
	}
	node, err := cfg.Credentials.Authenticate(c.nodeID, c.digest)
	if errors.Is(err, credential.ErrMismatch) && enrolledEnabled(cfg.Credentials, c.nodeID) {
		// The node's credential was replaced (a rotation, docs/runbook.md
		// "Node credentials"): retire the connection; the node reconnects
		// with its new credential and the operations sent meanwhile wait
		// for it (Timers.Reconnect).
		cfg.Logger.Info("node credential replaced; retiring the connection", zap.String("node_id", c.nodeID),
			zap.String("connection_id", c.id), zap.Int("pending", c.pendingCount()))
		c.retire()
		return
	}
	if err != nil {
		cfg.Logger.Info("node credential rejected at heartbeat", zap.String("node_id", c.nodeID), zap.Error(err))
		c.fail(CloseCredentialRejected, "node credential rejected")
		return
	}
	if enrolmentChanged(node, c.node) {
		c.fail(CloseIdentityMismatch, "the node's enrolment changed")
		return
	}
	if c.epoch < cfg.OwnerEpoch {
		c.fail(CloseEpochSuperseded, "owner epoch superseded; reconnect")
		return
	}
	deployment := deploymentFor(cfg, c.node.Pool)
	if c.gm && deployment == nil {
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
		ack.Deployment = deployment
	}
	c.wmu.Lock()
	c.write(ack)
	c.wmu.Unlock()
	c.renew()
	if ce := cfg.Logger.Check(zapcore.DebugLevel, "node heartbeat"); ce != nil {
		ce.Write(zap.String("node_id", c.nodeID), zap.String("connection_id", c.id),
			zap.Bool("provider_ready", health.ProviderReady), zap.String("diagnostic", health.Diagnostic),
			zap.Int("active_operations", health.ActiveOperations))
	}
}

// budget is a token bucket: it holds at most burst tokens, starts full,
// and gains one every every.
type budget struct {
	tokens float64
	at     time.Time // of the last take; zero before the first
}

// take spends one token at now and reports whether one was left.
func (b *budget) take(now time.Time, burst float64, every time.Duration) bool {
	if b.at.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+float64(max(now.Sub(b.at), 0))/float64(every))
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// wait is how long after the last take the budget holds a token again,
// gaining one every every.
func (b *budget) wait(every time.Duration) time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(every))
}

// takeHeartbeat spends one heartbeat of the connection's budget: at most
// Idle/Heartbeat + 2 heartbeats (5 with the spec's 35 s and 10 s) at
// once, then one every Heartbeat/2. A node that sends one heartbeat per
// period keeps it full whatever its jitter, and the heartbeats a network
// stall shorter than the idle timeout queued up arrive together within
// it; a node sending faster than twice the protocol's rate empties it.
func (c *conn) takeHeartbeat(now time.Time, t Timers) bool {
	return c.beats.take(now, heartbeatBurst(t), t.Heartbeat/2)
}

// heartbeatBurst is how many heartbeats (or retention requests) a node
// may send at once: Idle/Heartbeat + 2.
func heartbeatBurst(t Timers) float64 { return float64(t.Idle/t.Heartbeat) + 2 }

// Ping and pong limits: Core answers a WebSocket ping with a pong; nodes
// need not ping at all (nodeagent never does), so PingBurst pings at once
// and one per second on average are plenty. Core never pings, so every
// pong a node sends is unsolicited (RFC 6455 allows one as a
// unidirectional heartbeat); pongs have the same budget, PongBurst at once
// and one per second on average.
const (
	// PingBurst is how many pings a node may send at once.
	PingBurst = 10
	// PongBurst is how many (unsolicited) pongs a node may send at once.
	PongBurst = 10
	// pingEvery is the average interval allowed between pings, and
	// between pongs.
	pingEvery = time.Second
)

var (
	errPingFlood = errors.New("hub: WebSocket pings faster than allowed")
	errPongFlood = errors.New("hub: WebSocket pongs faster than allowed")
)

// pong takes a node's pong from its budget (gorilla calls it on the
// reader goroutine); past the budget it fails the read with
// errPongFlood. A pong changes nothing else: it does not reset the idle
// timer.
func (c *conn) pong(string) error {
	if !c.pongs.take(time.Now(), PongBurst, pingEvery) {
		return errPongFlood
	}
	return nil
}

// ping answers a node's WebSocket ping with a pong within its budget
// (gorilla calls it on the reader goroutine); past the budget it fails
// the read with errPingFlood.
func (c *conn) ping(data string) error {
	if !c.pings.take(time.Now(), PingBurst, pingEvery) {
		return errPingFlood
	}
	// Under the write lock, as every data frame's write and disarming
	// (deadlineConn.disarm).
	c.wmu.Lock()
	err := c.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.config().Timers.Write))
	c.wmu.Unlock()
	var ne net.Error
	if errors.Is(err, websocket.ErrCloseSent) || errors.As(err, &ne) {
		return nil // as gorilla's default ping handler
	}
	return err
}

// closeReplyWait bounds the write of the close frame that answers a
// node's, as gorilla's default close handler does.
const closeReplyWait = time.Second

// closeReply answers a node's close frame as gorilla's default close
// handler does (the node's code echoed, within closeReplyWait), but under
// the write lock, as every data frame's write and disarming
// (deadlineConn.disarm).
func (c *conn) closeReply(code int, _ string) error {
	c.wmu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(closeReplyWait))
	c.wmu.Unlock()
	return nil
}

// enrolledEnabled reports whether store enrols nodeID and enables it: a
// heartbeat whose credential no longer matches retires the connection
// only then (a rotation); a node disabled in the same change is closed at
// once (credential.Authenticate reports the mismatch before the disabled
// state, so that it tells nothing about a node to a wrong credential).
// It scans store.Nodes: it runs only on a mismatch.
func enrolledEnabled(store credential.Store, nodeID string) bool {
	for _, n := range store.Nodes() {
		if n.NodeID == nodeID {
			return n.Enabled
		}
	}
	return false
}

// retire stops writing requests on the connection and closes it with
// CloseCredentialRejected once no request is pending (here, or when the
// last pending response arrives, or at the next heartbeat).
func (c *conn) retire() {
	c.wmu.Lock()
	c.retiring.Store(true)
	c.wmu.Unlock()
	if c.pendingCount() == 0 {
		c.fail(CloseCredentialRejected, "node credential replaced")
	}
}

// response matches a response to its pending request; at is when its
// frame began to arrive.
func (c *conn) response(r *proto.Response, at time.Time) {
	if r.ConnectionID != c.id {
		c.fail(CloseProtocolError, "response for another connection")
		return
	}
	c.pmu.Lock()
	cl := c.pending[r.ID]
	delete(c.pending, r.ID)
	drained := len(c.pending) == 0
	c.pmu.Unlock()
	if cl == nil {
		c.fail(CloseProtocolError, "response for no pending request")
		return
	}
	cl.read = at
	cl.done <- r
	if drained && c.retiring.Load() {
		// The caller takes a response that raced with the close.
		c.fail(CloseCredentialRejected, "node credential replaced")
	}
}

// retention answers a generation-managing node's retention request:
// keep the target generation (with its digest), the serving generation
// and every generation an allocation is placed on (Config.Placements);
// authorise dropping the rest.
func (c *conn) retention(r *proto.Retention) {
	cfg := c.config()
	// A node asks at most once per heartbeat_ack (one exchange pending at
	// a time, answered at once): the heartbeats' budget, of its own.
	if !c.retentions.take(time.Now(), heartbeatBurst(cfg.Timers), cfg.Timers.Heartbeat/2) {
		c.fail(CloseFlood, "retention requests faster than the heartbeat interval")
		return
	}
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
	case c.epoch < cfg.OwnerEpoch:
		// No drop is authorised under a superseded epoch.
		c.fail(CloseEpochSuperseded, "owner epoch superseded; reconnect")
		return
	}
	c.retentionSeq = r.Sequence
	// A store shared by several replicas is read once per connection
	// before the first answer: the replica that held the node before may
	// have placed allocations this one's view has not received yet. Until
	// that read succeeds nothing is dropped.
	keepAll := false
	if s, ok := cfg.Placements.(placement.Syncer); ok && !c.placementsSynced {
		ctx, cancel := context.WithTimeout(context.Background(), placementSyncTimeout)
		err := s.Sync(ctx, c.nodeID)
		cancel()
		if err != nil {
			keepAll = true
			cfg.Logger.Warn("the node's placements could not be read; its retention request keeps every generation",
				zap.String("node_id", c.nodeID), zap.Error(err))
		} else {
			c.placementsSynced = true
		}
	}
	ack := &proto.RetentionAck{ID: r.ID, ConnectionID: c.id, Entries: make([]proto.RetentionDecision, len(r.Entries))}
	d := deploymentFor(cfg, c.node.Pool)
	var kept, dropped []int64
	for i, e := range r.Entries {
		k := keepAll || keep(d, e) || (cfg.Placements != nil && cfg.Placements.InUse(c.nodeID, e.Generation))
		ack.Entries[i] = proto.RetentionDecision{Generation: e.Generation, SpecificationDigest: e.SpecificationDigest, Keep: k}
		if k {
			kept = append(kept, e.Generation)
		} else {
			dropped = append(dropped, e.Generation)
		}
	}
	c.wmu.Lock()
	c.write(ack)
	c.wmu.Unlock()
	// A drop authorisation is worth an operator's attention; a keep-only
	// answer (every heartbeat of a node that retains generations) is not.
	level := zapcore.DebugLevel
	if len(dropped) > 0 {
		level = zapcore.InfoLevel
	}
	if ce := cfg.Logger.Check(level, "node retention answered"); ce != nil {
		ce.Write(zap.String("node_id", c.nodeID), zap.String("connection_id", c.id),
			zap.Int64s("kept", kept), zap.Int64s("dropped", dropped))
	}
}

// keep decides one retention entry by the deployment: the target
// generation (same digest) and the serving generation are kept; without a
// deployment nothing may be dropped. Core also keeps every generation an
// allocation is placed on (Config.Placements, checked by the caller).
func keep(d *proto.Deployment, e proto.RetentionEntry) bool {
	if d == nil {
		return true
	}
	if e.Generation == d.Generation && e.SpecificationDigest == d.SpecificationDigest {
		return true
	}
	return d.ServingGeneration != nil && e.Generation == *d.ServingGeneration
}
