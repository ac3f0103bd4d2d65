package hub

import (
	"errors"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// deadlineLog is a socket's SetWriteDeadline, recorded.
type deadlineLog struct{ set []time.Time }

func (d *deadlineLog) SetWriteDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

// TestDisarmWriteDeadline: after a write the socket is left with no write
// deadline (so no runtime timer stays armed to fire later), unless the
// connection is closing, when a close frame may be writing concurrently:
// then a deadline Timers.Write from now is set again.
func TestDisarmWriteDeadline(t *testing.T) {
	var open deadlineLog
	disarmWriteDeadline(&open, func() bool { return false }, time.Second)
	if len(open.set) != 1 || !open.set[0].IsZero() {
		t.Fatalf("open connection: deadlines set %v; want one zero time (disarmed)", open.set)
	}

	var closing deadlineLog
	before := time.Now()
	disarmWriteDeadline(&closing, func() bool { return true }, time.Second)
	if len(closing.set) != 2 || !closing.set[0].IsZero() {
		t.Fatalf("closing connection: deadlines set %v; want the zero time, then a deadline", closing.set)
	}
	if last := closing.set[1]; last.Before(before.Add(time.Second)) || last.After(time.Now().Add(time.Second)) {
		t.Fatalf("closing connection: deadline set again to %v; want Timers.Write (1s) from the call", last)
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
