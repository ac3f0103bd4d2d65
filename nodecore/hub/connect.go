package hub

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/internal/bearer"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/credential"
)

// Connect serves one connect request, GET ConnectPath?node_id=<uuid> with
// "Authorization: Bearer <node credential>" (spec "Connection"). The path
// is not checked here; routing is the caller's.
//
// Before the upgrade it returns an *HTTPError and writes nothing (except
// the Allow and WWW-Authenticate headers): 405 for another method, 400 for
// a missing or malformed node_id, 401 when the credential is missing or
// does not authenticate the node, 409 when a connection for the node is
// already connecting, live or closing, 503 when the hub is closed or not
// configured. With a Presence, 409 also answers a node whose connection
// another replica holds, and 503 a claim that could not be made. It then
// upgrades to a WebSocket (a failed handshake is answered by the upgrader,
// and Connect returns nil) and hands the connection to a goroutine of the
// hub, returning nil at once; the connection then lives until it closes,
// independently of r's context and of the config that routed the request.
func (h *Hub) Connect(w http.ResponseWriter, r *http.Request) error {
	err := h.connect(w, r)
	var he *HTTPError
	if errors.As(err, &he) {
		observerOf(h.config()).ConnectRefused(he.Status)
	}
	return err
}

func (h *Hub) connect(w http.ResponseWriter, r *http.Request) error {
	cfg := h.config()
	if cfg == nil {
		return httpErr(http.StatusServiceUnavailable, ErrClosed)
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		return httpErr(http.StatusMethodNotAllowed, ErrMethod)
	}
	ids := r.URL.Query()["node_id"]
	if len(ids) != 1 || !proto.IsUUID(ids[0]) {
		return httpErr(http.StatusBadRequest, ErrBadNodeID)
	}
	nodeID := ids[0]
	secret, ok := bearer.FromRequest(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-node"`)
		return httpErr(http.StatusUnauthorized, ErrNoCredential)
	}
	digest := credential.Sum(secret)
	node, err := cfg.Credentials.Authenticate(nodeID, digest)
	if err != nil {
		// err names the node and the reason (unknown, mismatch, disabled),
		// never the credential.
		cfg.Logger.Info("node connect refused", zap.String("node_id", nodeID), zap.Error(err))
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-node", error="invalid_token"`)
		return httpErr(http.StatusUnauthorized, ErrRejected)
	}
	c, err := h.reserve(nodeID, digest, node)
	if err != nil {
		var flood *connectFloodError
		if errors.As(err, &flood) {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(flood.wait)))
			cfg.Logger.Info("node connect refused: connects faster than the node's budget", zap.String("node_id", nodeID))
			return httpErr(http.StatusTooManyRequests, ErrConnectFlood)
		}
		return err
	}
	if cfg.Presence != nil {
		ctx, cancel := context.WithTimeout(r.Context(), presenceTimeout)
		claim, err := cfg.Presence.Acquire(ctx, nodeID, cfg.OwnerEpoch)
		cancel()
		if err != nil {
			h.unreserve(c)
			if errors.Is(err, ErrHeld) {
				var held *HeldError
				if errors.As(err, &held) && held.Remaining > 0 {
					w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(held.Remaining)))
				}
				return httpErr(http.StatusConflict, ErrBusy)
			}
			cfg.Logger.Warn("node connect: claiming the node failed", zap.String("node_id", nodeID), zap.Error(err))
			return httpErr(http.StatusServiceUnavailable, ErrClosed)
		}
		c.claim = claim
	}
	up := websocket.Upgrader{
		HandshakeTimeout: cfg.Timers.Write,
		// Memory per idle connection: a 1 KiB read buffer (heartbeats are
		// a few hundred bytes; larger frames are read through it), and a
		// write buffer taken from a pool only while a frame is written,
		// instead of the 4 KiB buffers of the hijacked HTTP connection.
		ReadBufferSize:  1024,
		WriteBufferPool: writeBuffers,
		// Nodes are not browsers, and a browser cannot set the
		// Authorization header of a WebSocket, so the Origin check of
		// the upgrader protects nothing here.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, _ *http.Request, status int, reason error) {
			cfg.Logger.Info("node connect handshake failed", zap.String("node_id", nodeID),
				zap.Int("status", status), zap.Error(reason))
			http.Error(w, http.StatusText(status), status)
		},
	}
	hj := &deadlineHijacker{ResponseWriter: w}
	ws, err := up.Upgrade(hj, r, nil)
	if err != nil {
		c.releaseClaim()
		h.release(c, h.now())
		return nil
	}
	h.mu.Lock()
	c.ws, c.wconn = ws, hj.conn
	h.mu.Unlock()
	go c.run()
	return nil
}

// writeBuffers are the WebSocket write buffers shared by all connections.
var writeBuffers = &sync.Pool{}

// ServeHTTP serves Connect as a plain net/http handler: an *HTTPError
// becomes its status with the status text as body.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.Connect(w, r); err != nil {
		status := http.StatusInternalServerError
		var he *HTTPError
		if errors.As(err, &he) {
			status = he.Status
		}
		http.Error(w, http.StatusText(status), status)
	}
}

// Connect limits: every connect that passes authentication and finds the
// node's slot free costs shared resources before the node has sent a
// byte of hello (with Config.Presence, a read and writes of the node's
// claim and of the owner epoch counter on the apiserver that all nodes'
// claims share, through one client rate limit per replica; then a
// goroutine and the WebSocket). A node that reconnects in a loop would
// otherwise spend them as fast as its round trips allow. nodeagent
// reconnects after a growing backoff (0.5 s doubling to its maximum), so
// ConnectBurst connects at once and one per ConnectEvery afterwards (on
// the presence clock) are plenty for a node that behaves.
const (
	// ConnectBurst is how many connects a node may make at once.
	ConnectBurst = 20
	// ConnectEvery is the average interval allowed between a node's
	// connects once its burst is spent.
	ConnectEvery = 3 * time.Second
)

// connectFloodError is reserve's refusal of a connect beyond the node's
// budget; wait is the time until the budget holds the next connect.
type connectFloodError struct{ wait time.Duration }

func (e *connectFloodError) Error() string { return ErrConnectFlood.Error() }

func (e *connectFloodError) Unwrap() error { return ErrConnectFlood }

// reserve claims the node's connection slot: it fails with 409 while
// another connection of the node is connecting, live or closing, with a
// *connectFloodError when the node's connect budget is spent (ConnectBurst,
// ConnectEvery), and with 503 once the hub is closed.
func (h *Hub) reserve(nodeID string, digest credential.Digest, node credential.Node) (*conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, httpErr(http.StatusServiceUnavailable, ErrClosed)
	}
	p := h.nodes[nodeID]
	if p == nil {
		p = &presence{nodeID: nodeID}
		h.nodes[nodeID] = p
	}
	if p.conn != nil {
		return nil, httpErr(http.StatusConflict, ErrBusy)
	}
	if now := h.now(); !p.connects.take(now, ConnectBurst, ConnectEvery) {
		return nil, &connectFloodError{wait: p.connects.wait(ConnectEvery)}
	}
	c := newConn(h, nodeID, digest, node)
	p.conn = c
	h.conns.Add(1)
	return c, nil
}

// unreserve frees the slot reserve took for c, which never connected.
func (h *Hub) unreserve(c *conn) {
	h.mu.Lock()
	if p := h.nodes[c.nodeID]; p != nil && p.conn == c {
		p.conn = nil
	}
	c.state = StateDisconnected
	h.mu.Unlock()
	h.conns.Done()
}

// release frees the node's slot after c has ended.
func (h *Hub) release(c *conn, now time.Time) {
	h.mu.Lock()
	if p := h.nodes[c.nodeID]; p != nil && p.conn == c {
		p.conn = nil
		p.disconnected = now
		p.closeCode, p.closeReason = c.closeCode, c.closeReason
		if c.retiring.Load() {
			if cfg := h.config(); cfg != nil {
				p.handoverUntil = now.Add(cfg.Timers.Reconnect)
			}
		}
	}
	c.state = StateDisconnected
	h.mu.Unlock()
	h.conns.Done()
}

// retryAfterSeconds is d in whole seconds for Retry-After, rounded up so
// that a node never comes back before the claim has lapsed, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
