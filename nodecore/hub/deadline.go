package hub

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// deadlineConn is a node's socket as gorilla writes to it, with the write
// deadline set last recorded, so that a writer can take off the deadline
// its own frame was written under without clearing one a later frame set
// (disarm).
//
// A deadline left in place keeps the connection's runtime timer armed:
// unless another write moves it first, it fires Timers.Write after the
// last write and does nothing but mark the deadline passed (the next
// write sets a new one), and on an idle gateway that firing is a wake-up
// of its thread from the network poller for nothing (docs/node-connect.md
// "Wake-ups per message"). Cleared, the timer is removed and never fires.
//
// Clearing whatever deadline the socket has is not enough: gorilla writes
// some close frames itself, from the read goroutine, outside the
// connection's write lock (a frame over the read limit, a protocol error
// such as a bad close code), and such a frame can take the socket between
// a data frame's write and its writer's disarming. Cleared then, that
// close frame writes without a deadline, and a node that stops reading
// holds the read goroutine in it for ever, so that no read deadline
// (heartbeats) is enforced either. disarm clears only the deadline the
// caller set, and only while it is still the socket's.
type deadlineConn struct {
	net.Conn
	mu   sync.Mutex
	last time.Time // the write deadline set last; zero: none
}

// SetWriteDeadline sets the socket's write deadline and records it.
func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = t
	return d.Conn.SetWriteDeadline(t)
}

// SetDeadline sets the socket's read and write deadlines and records the
// latter.
func (d *deadlineConn) SetDeadline(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = t
	return d.Conn.SetDeadline(t)
}

// disarm clears the socket's write deadline if the deadline set last is
// ours, the one the caller's frame was written under (the caller's
// frame has been written); a deadline another frame set since is left
// to that frame.
func (d *deadlineConn) disarm(ours time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last.IsZero() || !d.last.Equal(ours) {
		return
	}
	d.last = time.Time{}
	_ = d.Conn.SetWriteDeadline(time.Time{})
}

// deadlineHijacker is the http.ResponseWriter handed to gorilla's
// Upgrader: its Hijack wraps the hijacked connection in a deadlineConn.
type deadlineHijacker struct {
	http.ResponseWriter
	conn *deadlineConn // set by Hijack
}

// Hijack hijacks the underlying ResponseWriter's connection
// (http.ResponseController) and returns it wrapped in a deadlineConn.
func (h *deadlineHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = &deadlineConn{Conn: nc}
	return h.conn, brw, nil
}

// Unwrap returns the underlying ResponseWriter (http.ResponseController).
func (h *deadlineHijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }
