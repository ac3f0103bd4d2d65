// Package fakecore is a minimal stand-in for Core's end of the
// sandbox-node protocol, for nodeagent's tests: an HTTP server on loopback
// that answers the connect request with scripted HTTP statuses or upgrades
// it to a WebSocket, and lets a test read the node's frames (decoded with
// the strict codec) and send Core's frames, including malformed ones.
package fakecore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/node/proto"
)

// Wait bounds every wait of a test on the node: a safety net that turns a
// hang into a failure, never a measurement.
const Wait = 60 * time.Second

// Core is the stand-in. Its fields are read-only after New.
type Core struct {
	t   testing.TB
	srv *httptest.Server
	// Origin is the origin the node is configured with (http or https).
	Origin *url.URL
	// Credential is the Bearer credential Core accepts; any other gets 401.
	Credential string
	// Machine, when set before the node starts, serves the machine API
	// (configuration, release downloads, enrolment).
	Machine *Machine

	mu       sync.Mutex
	statuses []int
	// retryAfter is the Retry-After of the refusals in statuses ("": none).
	retryAfter []string
	attempts   int
	conns      chan *Conn
	stop       chan struct{} // closed at clean-up: unaccepted connections are dropped
}

// New starts a stand-in on 127.0.0.1, over TLS when tls is true.
func New(t testing.TB, credential string, useTLS bool) *Core {
	c := &Core{t: t, Credential: credential, conns: make(chan *Conn, 16), stop: make(chan struct{})}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(c.serve))
	if useTLS {
		c.srv.StartTLS()
	} else {
		c.srv.Start()
	}
	t.Cleanup(c.srv.Close)
	t.Cleanup(func() { close(c.stop) }) // runs before srv.Close
	u, err := url.Parse(c.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c.Origin = u
	return c
}

// TLS returns a client TLS configuration that trusts the stand-in's
// certificate.
func (c *Core) TLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(c.srv.Certificate())
	return &tls.Config{RootCAs: pool}
}

// Refuse makes the next len(statuses) connect attempts fail with these
// HTTP statuses, in order (after the credential check).
func (c *Core) Refuse(statuses ...int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statuses = append(c.statuses, statuses...)
	c.retryAfter = append(c.retryAfter, make([]string, len(statuses))...)
}

// RefuseRetryAfter makes the next connect attempt fail with status and
// the Retry-After header retryAfter, as a gateway replica answers while
// another replica's claim on the node lasts (409, the claim's remaining
// seconds).
func (c *Core) RefuseRetryAfter(status int, retryAfter string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statuses = append(c.statuses, status)
	c.retryAfter = append(c.retryAfter, retryAfter)
}

// Attempts returns how many connect requests arrived.
func (c *Core) Attempts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts
}

var upgrader = websocket.Upgrader{}

func (c *Core) serve(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.attempts++
	var status int
	var retryAfter string
	if len(c.statuses) > 0 {
		status, c.statuses = c.statuses[0], c.statuses[1:]
		retryAfter, c.retryAfter = c.retryAfter[0], c.retryAfter[1:]
	}
	c.mu.Unlock()
	if r.URL.Path != "/api/v1/sandbox-node/connect" {
		if c.Machine != nil {
			c.Machine.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+c.Credential {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if status != 0 {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		http.Error(w, http.StatusText(status), status)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(proto.MaxRequestFrame)
	conn := &Conn{t: c.t, ws: ws, Request: r, frames: make(chan proto.Frame, 256), closed: make(chan struct{})}
	go conn.readLoop()
	select {
	case c.conns <- conn:
	case <-c.stop:
		ws.Close()
	}
}

// Accept returns the next connection the node opens.
func (c *Core) Accept() *Conn {
	c.t.Helper()
	select {
	case conn := <-c.conns:
		c.t.Cleanup(conn.Close)
		return conn
	case <-time.After(Wait):
		c.t.Fatalf("the node did not connect within %v", Wait)
		return nil
	}
}

// Conn is one node connection.
type Conn struct {
	t  testing.TB
	ws *websocket.Conn
	// Request is the node's upgrade request.
	Request *http.Request

	writeMu sync.Mutex
	frames  chan proto.Frame
	closed  chan struct{}
	// CloseCode is the close code the node sent (0: none); read it after
	// Closed.
	CloseCode int
	// ReadErr is the error that ended the connection; read it after
	// Closed.
	ReadErr error
	// ConnectionID is the connection ID Welcome sent.
	ConnectionID string
	// OwnerEpoch is the owner epoch Welcome sent.
	OwnerEpoch int64
	sequence   uint64
}

func (c *Conn) readLoop() {
	defer close(c.closed)
	for {
		mt, data, err := c.ws.ReadMessage()
		if err != nil {
			c.ReadErr = err
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				c.CloseCode = ce.Code
			}
			return
		}
		if mt != websocket.TextMessage {
			c.ReadErr = errors.New("fakecore: the node sent a binary message")
			return
		}
		f, err := proto.Decode(data)
		if err != nil {
			c.ReadErr = errors.New("fakecore: the node sent an invalid frame: " + err.Error())
			return
		}
		c.frames <- f
	}
}

// Next returns the node's next frame, failing the test if the connection
// ends first.
func (c *Conn) Next() proto.Frame {
	c.t.Helper()
	select {
	case f := <-c.frames:
		return f
	case <-c.closed:
		select {
		case f := <-c.frames:
			return f
		default:
		}
		c.t.Fatalf("the connection ended while waiting for a frame: %v (close code %d)", c.ReadErr, c.CloseCode)
	case <-time.After(Wait):
		c.t.Fatalf("no frame from the node within %v", Wait)
	}
	return nil
}

// Hello reads the node's hello.
func (c *Conn) Hello() *proto.Hello {
	c.t.Helper()
	f := c.Next()
	h, ok := f.(*proto.Hello)
	if !ok {
		c.t.Fatalf("first frame is %s, want hello", f.FrameType())
	}
	return h
}

// Welcome sends welcome with a new connection ID and epoch.
func (c *Conn) Welcome(epoch int64) {
	c.t.Helper()
	c.ConnectionID, c.OwnerEpoch = uuid.NewString(), epoch
	c.Send(&proto.Welcome{ConnectionID: c.ConnectionID, OwnerEpoch: epoch})
}

// Open reads hello and sends welcome.
func (c *Conn) Open(epoch int64) *proto.Hello {
	c.t.Helper()
	h := c.Hello()
	c.Welcome(epoch)
	return h
}

// Send encodes and sends a frame.
func (c *Conn) Send(f proto.Frame) {
	c.t.Helper()
	data, err := proto.Encode(f)
	if err != nil {
		c.t.Fatalf("encode %s: %v", f.FrameType(), err)
	}
	c.SendRaw(data)
}

// SendRaw sends data as one text message, as it is.
func (c *Conn) SendRaw(data []byte) {
	c.t.Helper()
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := c.ws.WriteMessage(websocket.TextMessage, data); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// NewRequest returns a request of this connection with the next sequence
// number, a new ID, the given operation, budget and reference; the caller
// adds the parameters and sends it.
func (c *Conn) NewRequest(op proto.Operation, generation int64, timeoutMS int, ref proto.Reference) *proto.Request {
	c.sequence++
	return &proto.Request{
		ID: uuid.NewString(), Sequence: c.sequence, ConnectionID: c.ConnectionID, OwnerEpoch: c.OwnerEpoch,
		DeploymentGeneration: generation, Operation: op, TimeoutMS: timeoutMS, Reference: ref,
	}
}

// Response returns the node's next response, skipping heartbeats.
func (c *Conn) Response() *proto.Response {
	c.t.Helper()
	for {
		switch f := c.Next().(type) {
		case *proto.Response:
			return f
		case *proto.Heartbeat:
		default:
			c.t.Fatalf("unexpected %s frame while waiting for a response", f.FrameType())
		}
	}
}

// Heartbeat returns the node's next heartbeat, failing on any other frame.
func (c *Conn) Heartbeat() *proto.Heartbeat {
	c.t.Helper()
	f := c.Next()
	hb, ok := f.(*proto.Heartbeat)
	if !ok {
		c.t.Fatalf("got %s, want heartbeat", f.FrameType())
	}
	return hb
}

// Closed waits until the node closes the connection and returns the close
// code it sent (0 when it closed without a close frame). Frames that arrive
// before the close are discarded.
func (c *Conn) Closed() int {
	c.t.Helper()
	for {
		select {
		case <-c.frames:
		case <-c.closed:
			return c.CloseCode
		case <-time.After(Wait):
			c.t.Fatalf("the node did not close the connection within %v", Wait)
			return 0
		}
	}
}

// Rest waits until the node closes the connection and returns the frames
// that arrived before the close, in order, and the close code it sent (0
// when it closed without a close frame).
func (c *Conn) Rest() ([]proto.Frame, int) {
	c.t.Helper()
	var rest []proto.Frame
	for {
		select {
		case f := <-c.frames:
			rest = append(rest, f)
		case <-c.closed:
			for {
				select {
				case f := <-c.frames:
					rest = append(rest, f)
				default:
					return rest, c.CloseCode
				}
			}
		case <-time.After(Wait):
			c.t.Fatalf("the node did not close the connection within %v", Wait)
			return rest, 0
		}
	}
}

// Close closes the connection from Core's side.
func (c *Conn) Close() { c.ws.Close() }

// CloseWith sends a close frame with code and reason, as Core does (1001
// when a gateway replica shuts down), then closes the connection.
func (c *Conn) CloseWith(code int, reason string) {
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(Wait))
	c.ws.Close()
}
