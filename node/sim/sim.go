// Package sim is a simulated sandbox node: the node's end of the
// sandbox-node protocol (spec node-protocol.md) without a provider behind
// it. It dials Core's connect URL with a node credential, sends hello,
// heartbeats on a fixed interval and answers every request with a
// configurable response. Tests of the gateway and the load tool
// (hack/nodeload) use it; it is not the node agent.
package sim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/node/proto"
)

// Config describes one simulated node.
type Config struct {
	// URL is Core's origin, "ws://host:port" or "wss://host:port" (an http
	// or https URL is converted); the connect path and node_id are added.
	URL string
	// Credential is the node credential sent as a bearer token.
	Credential string
	// Hello is the node's hello; Version and Type are set by the codec.
	// Its Health.ObservedAt is refreshed when zero.
	Hello proto.Hello
	// HeartbeatInterval is the heartbeat period; 0 means 10 s, negative
	// means no automatic heartbeats (call Heartbeat).
	HeartbeatInterval time.Duration
	// Answer builds the response to a request; nil answers every request
	// with Success. Returning nil sends nothing (the request stays pending
	// on Core's side).
	Answer func(*proto.Request) *proto.Response
	// Dialer dials the WebSocket; nil means a dialer with a 10 s handshake
	// timeout and small buffers.
	Dialer *websocket.Dialer
	// Header is added to the connect request.
	Header http.Header
}

// Node is one connected simulated node.
type Node struct {
	cfg     Config
	ws      *websocket.Conn
	welcome proto.Welcome

	wmu sync.Mutex

	acks     atomic.Uint64
	requests atomic.Uint64
	lastAck  atomic.Pointer[proto.HeartbeatAck]

	waitingMu sync.Mutex
	waiting   []chan struct{}

	genMu       sync.Mutex
	generations []proto.GenerationObservation // sent with each heartbeat

	retMu      sync.Mutex // one retention exchange at a time
	retSeq     uint64
	retAnswers chan *proto.RetentionAck

	done      chan struct{}
	err       error
	closeOnce sync.Once
}

// DialError is a refused connect: the HTTP status before the upgrade.
type DialError struct {
	// Status is the HTTP status (401, 409, …), 0 when there was no answer.
	Status int
	// RetryAfter is a 409's Retry-After in seconds (another replica's
	// claim on the node lasts that long), 0 when it had none.
	RetryAfter time.Duration
	// Err is the dialer's error.
	Err error
}

// Error returns the status and the dialer's error.
func (e *DialError) Error() string {
	return fmt.Sprintf("sim: connect refused (%d): %v", e.Status, e.Err)
}

// Unwrap returns Err.
func (e *DialError) Unwrap() error { return e.Err }

var defaultDialer = &websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 1024}

// ConnectURL returns the connect URL of base for nodeID.
func ConnectURL(base, nodeID string) string {
	base = strings.TrimSuffix(base, "/")
	switch {
	case strings.HasPrefix(base, "http://"):
		base = "ws://" + strings.TrimPrefix(base, "http://")
	case strings.HasPrefix(base, "https://"):
		base = "wss://" + strings.TrimPrefix(base, "https://")
	}
	return base + "/api/v1/sandbox-node/connect?node_id=" + url.QueryEscape(nodeID)
}

// Dial connects, sends hello, waits for welcome and starts the reader and
// the heartbeats. Errors: a *DialError for a refused upgrade, the close
// error when Core closes instead of welcoming, or a read error.
func Dial(ctx context.Context, cfg Config) (*Node, error) {
	d := cfg.Dialer
	if d == nil {
		d = defaultDialer
	}
	h := http.Header{}
	for k, v := range cfg.Header {
		h[k] = v
	}
	h.Set("Authorization", "Bearer "+cfg.Credential)
	ws, resp, err := d.DialContext(ctx, ConnectURL(cfg.URL, cfg.Hello.NodeID), h)
	if err != nil {
		de := &DialError{Err: err}
		if resp != nil {
			de.Status = resp.StatusCode
			if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && resp.StatusCode == http.StatusConflict && n > 0 && n <= 3600 {
				de.RetryAfter = time.Duration(n) * time.Second
			}
			_ = resp.Body.Close()
		}
		return nil, de
	}
	n := &Node{cfg: cfg, ws: ws, done: make(chan struct{}), generations: cfg.Hello.Generations,
		retAnswers: make(chan *proto.RetentionAck, 1)}
	hello := cfg.Hello
	if hello.Health.ObservedAt.IsZero() {
		hello.Health.ObservedAt = time.Now().UTC()
	}
	if err := n.send(&hello); err != nil {
		_ = ws.Close()
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = ws.SetReadDeadline(dl)
	}
	f, err := n.read()
	if err != nil {
		_ = ws.Close()
		return nil, err
	}
	w, ok := f.(*proto.Welcome)
	if !ok {
		_ = ws.Close()
		return nil, fmt.Errorf("sim: first frame from Core is %s, not welcome", f.FrameType())
	}
	_ = ws.SetReadDeadline(time.Time{})
	n.welcome = *w
	go n.readLoop()
	if iv := cfg.HeartbeatInterval; iv >= 0 {
		if iv == 0 {
			iv = 10 * time.Second
		}
		go n.heartbeats(iv)
	}
	return n, nil
}

// Welcome returns the welcome Core sent.
func (n *Node) Welcome() proto.Welcome { return n.welcome }

// Acks returns how many heartbeat_acks have arrived.
func (n *Node) Acks() uint64 { return n.acks.Load() }

// LastAck returns the last heartbeat_ack, nil before the first.
func (n *Node) LastAck() *proto.HeartbeatAck { return n.lastAck.Load() }

// Requests returns how many requests have arrived.
func (n *Node) Requests() uint64 { return n.requests.Load() }

// Done is closed when the connection has ended.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err returns why the connection ended (a *websocket.CloseError when Core
// closed it), nil while it is open.
func (n *Node) Err() error {
	select {
	case <-n.done:
		return n.err
	default:
		return nil
	}
}

// Heartbeat sends one heartbeat with a fresh health report and waits for
// the next heartbeat_ack (Core answers heartbeats in order), the end of
// the connection, or ctx.
func (n *Node) Heartbeat(ctx context.Context) error {
	ch := make(chan struct{}, 1)
	n.waitingMu.Lock()
	n.waiting = append(n.waiting, ch)
	n.waitingMu.Unlock()
	if err := n.sendHeartbeat(); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-n.done:
		return n.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes the connection with a normal close frame and waits for the
// reader to end.
func (n *Node) Close() error {
	n.wmu.Lock()
	_ = n.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
	n.wmu.Unlock()
	select {
	case <-n.done:
	case <-time.After(2 * time.Second):
		_ = n.ws.Close()
		<-n.done
	}
	return nil
}

func (n *Node) finish(err error) {
	n.closeOnce.Do(func() {
		n.err = err
		_ = n.ws.Close()
		close(n.done)
	})
}

func (n *Node) send(f proto.Frame) error {
	b, err := proto.Encode(f)
	if err != nil {
		return err
	}
	n.wmu.Lock()
	defer n.wmu.Unlock()
	_ = n.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := n.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		return err
	}
	// Disarm the deadline, as the gateway's hub does: left in place, its
	// timer fires 10 s after the node's last write for nothing, a wake-up
	// for a process that holds thousands of nodes. Every write of the
	// node's data frames and its Close hold n.wmu (gorilla's default
	// replies to a ping or a close frame from Core do not; Core sends no
	// pings, and a close reply is the connection's last write).
	_ = n.ws.NetConn().SetWriteDeadline(time.Time{})
	return nil
}

func (n *Node) read() (proto.Frame, error) {
	typ, data, err := n.ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	if typ != websocket.TextMessage {
		return nil, errors.New("sim: binary message from Core")
	}
	return proto.Decode(data)
}

func (n *Node) health() proto.Health {
	h := n.cfg.Hello.Health
	h.ObservedAt = time.Now().UTC()
	return h
}

func (n *Node) sendHeartbeat() error {
	n.genMu.Lock()
	obs := n.generations
	n.genMu.Unlock()
	return n.send(&proto.Heartbeat{ConnectionID: n.welcome.ConnectionID, OwnerEpoch: n.welcome.OwnerEpoch,
		Health: n.health(), Generations: obs})
}

// SendHeartbeat sends one heartbeat with a fresh health report and
// returns without waiting for its heartbeat_ack (Acks counts it when it
// arrives): for a caller that schedules the heartbeats of many nodes
// itself (HeartbeatInterval negative) rather than a goroutine and a
// ticker per node. A failed write ends the connection, as it does for the
// automatic heartbeats, and is returned.
func (n *Node) SendHeartbeat() error {
	if err := n.sendHeartbeat(); err != nil {
		n.finish(err)
		return err
	}
	return nil
}

// SetGenerations replaces the generation observations the following
// heartbeats carry (a generation-managing node; at most 8, target and
// serving first).
func (n *Node) SetGenerations(obs []proto.GenerationObservation) {
	n.genMu.Lock()
	n.generations = append([]proto.GenerationObservation(nil), obs...)
	n.genMu.Unlock()
}

// Retention sends one retention request for entries (1..8) with the next
// sequence and a new UUID, and waits for Core's retention_ack, the end of
// the connection or ctx. It returns the ack and whether it answers the
// request exactly (proto.RetentionAck.Answers). One exchange at a time.
func (n *Node) Retention(ctx context.Context, entries []proto.RetentionEntry) (*proto.RetentionAck, bool, error) {
	n.retMu.Lock()
	defer n.retMu.Unlock()
	n.retSeq++
	r := &proto.Retention{ID: uuid.NewString(), Sequence: n.retSeq, ConnectionID: n.welcome.ConnectionID,
		OwnerEpoch: n.welcome.OwnerEpoch, Entries: entries}
	if err := n.send(r); err != nil {
		return nil, false, err
	}
	select {
	case ack := <-n.retAnswers:
		return ack, ack.Answers(r), nil
	case <-n.done:
		return nil, false, n.err
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

func (n *Node) heartbeats(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
			if err := n.sendHeartbeat(); err != nil {
				n.finish(err)
				return
			}
		}
	}
}

func (n *Node) readLoop() {
	for {
		f, err := n.read()
		if err != nil {
			n.finish(err)
			return
		}
		switch f := f.(type) {
		case *proto.HeartbeatAck:
			n.lastAck.Store(f)
			n.acks.Add(1)
			n.waitingMu.Lock()
			if len(n.waiting) > 0 {
				n.waiting[0] <- struct{}{}
				n.waiting = n.waiting[1:]
			}
			n.waitingMu.Unlock()
		case *proto.RetentionAck:
			select {
			case n.retAnswers <- f:
			default:
				n.finish(errors.New("sim: unsolicited retention_ack from Core"))
				return
			}
		case *proto.Request:
			n.requests.Add(1)
			answer := n.cfg.Answer
			if answer == nil {
				answer = Success
			}
			if resp := answer(f); resp != nil {
				if err := n.send(resp); err != nil {
					n.finish(err)
					return
				}
			}
		default:
			n.finish(fmt.Errorf("sim: unexpected %s frame from Core", f.FrameType()))
			return
		}
	}
}

// Success answers req with a success carrying the result its operation
// names (spec operation table), with plausible values.
func Success(req *proto.Request) *proto.Response {
	resp := &proto.Response{ID: req.ID, ConnectionID: req.ConnectionID}
	now := time.Now().UTC().Truncate(time.Millisecond)
	switch req.Operation {
	case proto.OpCreate, proto.OpInfo, proto.OpRenew:
		image := "sandbox:latest"
		if req.Bootstrap != nil {
			image = req.Bootstrap.Image
		}
		resp.Info = &proto.Info{Reference: req.Reference, DeploymentGeneration: req.DeploymentGeneration,
			State: proto.StateRunning, Image: image, CreatedAt: now, RenewedAt: now}
	case proto.OpCommand, proto.OpCommandCompute:
		resp.Command = &proto.CommandResult{ExitCode: 0, Stdout: []byte{}, Stderr: []byte{}}
	case proto.OpObserve:
		resp.Sample = &proto.Sample{ObservedAt: now, MemoryLimitBytes: 1 << 30, PIDs: 1}
	case proto.OpInitial:
		resp.Compute = &proto.Compute{Generation: 1, State: proto.StateRunning}
	case proto.OpNewCompute:
		g := int64(1)
		if req.Generation != nil {
			g = *req.Generation
		}
		resp.Compute = &proto.Compute{Generation: g, State: proto.StateRunning}
	case proto.OpCompute, proto.OpResumeCompute, proto.OpSuspend, proto.OpResume:
		resp.State = &proto.State{State: proto.StateRunning, Compute: 1}
	}
	return resp
}
