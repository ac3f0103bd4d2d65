package hub

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// deadlineLog is a socket's SetWriteDeadline, recorded.
type deadlineLog struct {
	net.Conn // nil: only SetWriteDeadline is called
	set      []time.Time
}

func (d *deadlineLog) SetWriteDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

// TestDisarmWriteDeadline: after a frame's write the socket is left with
// no write deadline (so no runtime timer stays armed to fire later).
func TestDisarmWriteDeadline(t *testing.T) {
	var log deadlineLog
	dc := &deadlineConn{Conn: &log}
	data := time.Now().Add(time.Second)
	_ = dc.SetWriteDeadline(data) // gorilla, for the frame
	dc.disarm(data)
	if len(log.set) != 2 || !log.set[1].IsZero() {
		t.Fatalf("deadlines set %v; want the frame's, then the zero time (disarmed)", log.set)
	}
	dc.disarm(data) // already disarmed: nothing set again
	if len(log.set) != 2 {
		t.Fatalf("deadlines set %v after a second disarm; want nothing more", log.set)
	}
}

// TestDisarmKeepsAControlFramesDeadline: gorilla writes some close frames
// itself, from the read goroutine, outside the write lock and without
// marking the connection closing (a frame over the read limit, a protocol
// error such as a bad close code); Core's own close frame (conn.fail) is
// written outside the lock too. When such a frame takes the socket right
// after a data frame, whose writer then disarms, the close frame's
// deadline must stay: cleared, a node that stops reading holds the
// writing goroutine in that write for ever (for gorilla's frames the read
// goroutine, so that no heartbeat timeout is read either).
func TestDisarmKeepsAControlFramesDeadline(t *testing.T) {
	var log deadlineLog
	dc := &deadlineConn{Conn: &log}
	data := time.Now().Add(time.Second)
	_ = dc.SetWriteDeadline(data) // the data frame, written under gorilla's lock
	ctl := time.Now().Add(2 * time.Second)
	_ = dc.SetWriteDeadline(ctl) // gorilla's close frame takes the lock next
	dc.disarm(data)
	if last := log.set[len(log.set)-1]; !last.Equal(ctl) {
		t.Fatalf("deadlines set %v; want the close frame's %v left in place", log.set, ctl)
	}
}

// TestCloseReply: a node that closes its connection gets Core's close
// frame back with the node's code, as gorilla's default close handler
// sends it (now written under the connection's write lock).
func TestCloseReply(t *testing.T) {
	e := newEnv(t)
	ws, _, err := e.dial(nodeA, secretA)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "bye"),
		time.Now().Add(timeout)); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(timeout))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue // frames Core sent before it read the close
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Fatalf("read after closing: %v; want Core's close frame with code %d", err, websocket.CloseGoingAway)
		}
		return
	}
}

// TestWelcomeLeavesNoWriteDeadline: the hub writes a node's frames to the
// hijacked socket through a deadlineConn, so the welcome's write deadline
// is taken off once it is written.
func TestWelcomeLeavesNoWriteDeadline(t *testing.T) {
	e := newEnv(t)
	e.join(nodeA)
	e.hub.mu.Lock()
	p := e.hub.nodes[nodeA]
	var dc *deadlineConn
	if p != nil && p.conn != nil {
		dc = p.conn.wconn
	}
	e.hub.mu.Unlock()
	if dc == nil {
		t.Fatal("the live connection has no deadlineConn: its write deadline is never disarmed")
	}
	// The writer disarms after its write returns, which may be after the
	// node has read the welcome: poll.
	for end := time.Now().Add(timeout); ; {
		dc.mu.Lock()
		last := dc.last
		dc.mu.Unlock()
		if last.IsZero() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("write deadline %v still set %v after the welcome", last, timeout)
		}
		time.Sleep(time.Millisecond) // the poll's interval
	}
}
