package hub

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/node/proto"

	"github.com/sandgate/sandgate/internal/memtest"
	"github.com/sandgate/sandgate/internal/waittest"
)

// sendLarge streams one text message of n bytes (a JSON object of type
// typ padded with spaces) from a goroutine; the write fails once Core has
// closed, which is expected. It allocates one 1 MiB chunk whatever n is.
// Its write deadline is a safety net of two minutes: 72 MiB under -race
// on a loaded machine takes longer than timeout.
func (n *testNode) sendLarge(size int, typ string) {
	go func() {
		n.wmu.Lock()
		defer n.wmu.Unlock()
		_ = n.ws.SetWriteDeadline(time.Now().Add(2 * time.Minute))
		w, err := n.ws.NextWriter(websocket.TextMessage)
		if err != nil {
			return
		}
		chunk := bytes.Repeat([]byte{' '}, 1<<20)
		if _, err := w.Write([]byte(`{"version":1,"type":"` + typ + `"}`)); err != nil {
			return
		}
		for left := size; left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return
			}
		}
		_ = w.Close()
	}()
}

// TestHelloOverControlLimit: a first message over 32 KiB closes the
// connection with 1009 after at most 32 KiB + 1 bytes were buffered: a
// 16 MiB hello makes the hub allocate far less than the message (it used
// to read every message whole, up to 72 MiB, before any check). Nothing
// of the node is recorded.
func TestHelloOverControlLimit(t *testing.T) {
	e := newEnv(t)
	for _, size := range []int{proto.MaxControlFrame + 1, 16 << 20} {
		a := e.connect(nodeA)
		var reason string
		alloc := memtest.AllocatedDuring(func() {
			a.sendLarge(size, proto.TypeHello)
			reason = a.expectClose(CloseMessageTooBig)
		})
		if !strings.Contains(reason, "32 KiB") {
			t.Fatalf("reason %q", reason)
		}
		if alloc > 4<<20 {
			t.Fatalf("a %d-byte hello made the process allocate %d bytes", size, alloc)
		}
		_ = a.ws.Close()
		waittest.Until(t, timeout, "the connection to end", func() bool { return e.status(nodeA).State == StateDisconnected })
		if s := e.status(nodeA); s.Hello != nil || s.ConnectionID != "" || s.CloseCode != CloseMessageTooBig {
			t.Fatalf("status after a refused hello: %+v", s)
		}
	}
}

// TestControlLimitWhileNothingPending: after the welcome, with no request
// pending, a message over 32 KiB closes with 1009 without being buffered;
// the node stays known and its last health is kept.
func TestControlLimitWhileNothingPending(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	a.beat(health(true, ""))
	var reason string
	alloc := memtest.AllocatedDuring(func() {
		a.sendLarge(16<<20, proto.TypeHeartbeat)
		reason = a.expectClose(CloseMessageTooBig)
	})
	if !strings.Contains(reason, "no request pending") || alloc > 4<<20 {
		t.Fatalf("reason %q, %d bytes allocated", reason, alloc)
	}
	waittest.Until(t, timeout, "the connection to end", func() bool { return e.status(nodeA).State == StateDisconnected })
	if s := e.status(nodeA); s.Health == nil || !s.Health.ProviderReady {
		t.Fatalf("status lost its health: %+v", s)
	}
}

// pad returns the encoded frame f followed by n spaces (valid JSON
// whitespace), to make a frame of a given size.
func pad(t *testing.T, f proto.Frame, n int) []byte {
	t.Helper()
	b, err := proto.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, bytes.Repeat([]byte{' '}, n)...)
}

// TestLargeResponseWhilePending: while a request is pending, its response
// may be larger than a control frame; any other frame over 32 KiB, or one
// that does not say "type":"response" within its first 32 KiB, is refused
// (1009) before the rest is read, and a large response to nothing pending
// closes with 1002.
func TestLargeResponseWhilePending(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	pending := e.dispatchAsync(nodeA, infoReq())
	r := a.request()
	a.sendRaw(pad(t, &proto.Response{ID: r.ID, ConnectionID: r.ConnectionID, Info: info()}, 1<<20))
	if d := e.await(pending); d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("large response: %+v, %v", d.res, d.err)
	}

	// A large heartbeat while a request is pending: refused from its first
	// 32 KiB, before the rest is read (16 MiB here).
	pending = e.dispatchAsync(nodeA, infoReq())
	a.request()
	var reason string
	alloc := memtest.AllocatedDuring(func() {
		a.sendLarge(16<<20, proto.TypeHeartbeat)
		reason = a.expectClose(CloseMessageTooBig)
	})
	if !strings.Contains(reason, "name no response type") || alloc > 4<<20 {
		t.Fatalf("reason %q, %d bytes allocated", reason, alloc)
	}
	if d := e.await(pending); d.err != nil || d.res.Reason != ReasonDisconnected {
		t.Fatalf("pending after the close: %+v, %v", d.res, d.err)
	}

	// A response whose type comes after its first 32 KiB.
	c := e.join(nodeG)
	pending = e.dispatchAsync(nodeG, infoReq())
	r = c.request()
	late := `{"version":1,"id":"` + r.ID + `","connection_id":"` + r.ConnectionID + `","info":{"pad":"` +
		strings.Repeat("x", proto.MaxControlFrame) + `"},"type":"response"}`
	c.sendRaw([]byte(late))
	if reason := c.expectClose(CloseMessageTooBig); !strings.Contains(reason, "name no response type") {
		t.Fatalf("reason %q", reason)
	}
	e.await(pending)

	// A large response to another id while a request is pending.
	b := e.join(nodeB)
	pending = e.dispatchAsync(nodeB, infoReq())
	r = b.request()
	b.sendRaw(pad(t, &proto.Response{ID: "00000000-0000-4000-8000-000000000000", ConnectionID: r.ConnectionID, Info: info()}, 1<<20))
	if reason := b.expectClose(CloseProtocolError); !strings.Contains(reason, "no pending request") {
		t.Fatalf("reason %q", reason)
	}
	e.await(pending)
}

// TestHeartbeatFlood: with the protocol's timers (heartbeat 10 s, idle
// 35 s), a real gorilla client that sends heartbeats back to back gets 5
// acks (the burst) and then close 4007; the close is logged at warn.
func TestHeartbeatFlood(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timers.Heartbeat, c.Timers.Idle = 10*time.Second, 35*time.Second })
	a := e.join(nodeA)
	go func() {
		for range 1000 {
			b, _ := proto.Encode(a.heartbeat(health(true, "")))
			a.wmu.Lock()
			err := a.ws.WriteMessage(websocket.TextMessage, b)
			a.wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	acks := 0
	for {
		f, err := a.next()
		if err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != CloseFlood {
				t.Fatalf("after %d acks: %v", acks, err)
			}
			break
		}
		if _, ok := f.(*proto.HeartbeatAck); !ok {
			t.Fatalf("frame %T", f)
		}
		acks++
	}
	if acks != 5 {
		t.Fatalf("%d acks before the close, want 5 (35s/10s + 2)", acks)
	}
	waittest.Until(t, timeout, "the close to be logged", func() bool {
		return e.logs.FilterMessage("node connection closed").FilterField(zap.Int("close_code", CloseFlood)).Len() == 1
	})
}

// TestHeartbeatBudget: a node heartbeating every 10 s with up to ±4 s of
// jitter, one whose heartbeats a 34 s stall (just under the idle timeout)
// queued up, and one at the configured rate after a reconnect never trip
// the budget; one sending every 4.9 s (just over twice the rate) does.
func TestHeartbeatBudget(t *testing.T) {
	timers := Timers{Idle: 35 * time.Second, Heartbeat: 10 * time.Second}
	t0 := time.Unix(1_000_000, 0)
	var b conn
	at := t0
	jitter := []time.Duration{4, -4, 3, -2, 0, 4, -4, -4, 4, 1}
	for i := range 100_000 {
		at = t0.Add(time.Duration(i)*10*time.Second + jitter[i%len(jitter)]*time.Second)
		if !b.takeHeartbeat(at, timers) {
			t.Fatalf("jittered heartbeat %d refused", i)
		}
	}
	// A 34 s stall: the heartbeats of 34 s arrive together with the next.
	at = at.Add(34 * time.Second)
	for i := range 4 {
		if !b.takeHeartbeat(at, timers) {
			t.Fatalf("queued heartbeat %d refused", i)
		}
	}
	for i := range 1000 {
		if !b.takeHeartbeat(at.Add(time.Duration(i+1)*10*time.Second), timers) {
			t.Fatalf("heartbeat %d after the stall refused", i)
		}
	}
	var fast conn
	tripped := false
	for i := range 1000 {
		if !fast.takeHeartbeat(t0.Add(time.Duration(i)*4900*time.Millisecond), timers) {
			tripped = true
			break
		}
	}
	if !tripped {
		t.Fatal("a node heartbeating every 4.9 s was never stopped")
	}
}

// TestDeletedCredentialFileRevokes: deleting the node credential file
// revokes every node once it has been missing for the grace
// (filewatch.DefaultMissingGrace): the live connection is closed with
// 4003 at its next heartbeat, and a new connect is refused with 401.
func TestDeletedCredentialFileRevokes(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timers.Idle = time.Minute }) // longer than the grace
	a := e.join(nodeA)
	a.beat(health(true, ""))
	if err := os.Remove(e.credPath); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, timeout, "the empty version after the grace", func() bool { return e.creds.Stats().Emptied })
	a.send(a.heartbeat(health(true, "")))
	a.expectClose(CloseCredentialRejected)
	if _, status, _ := e.dial(nodeA, secretA); status != http.StatusUnauthorized {
		t.Fatalf("connect after the deletion: %d, want 401", status)
	}
}

// TestPingFlood: a real gorilla client sending WebSocket pings back to back
// gets PingBurst pongs, then close 4007; pings within the budget keep the
// connection (and are answered).
func TestPingFlood(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	var pongs atomic.Int64
	a.ws.SetPongHandler(func(string) error { pongs.Add(1); return nil })
	go func() {
		for range 1000 {
			if a.ws.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(timeout)) != nil {
				return
			}
		}
	}()
	reason := a.expectClose(CloseFlood)
	if !strings.Contains(reason, "pings") || pongs.Load() != PingBurst {
		t.Fatalf("reason %q after %d pongs, want %d", reason, pongs.Load(), PingBurst)
	}
}

// TestPongFlood: Core never pings, so every pong a node sends is
// unsolicited; a real gorilla client's PongBurst pongs keep the connection
// (a heartbeat after them is acknowledged), and pongs sent back to back
// after them close it with 4007 — without the budget each one costs Core a
// frame read with no bound.
func TestPongFlood(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	for range PongBurst {
		if err := a.ws.WriteControl(websocket.PongMessage, []byte("p"), time.Now().Add(timeout)); err != nil {
			t.Fatal(err)
		}
	}
	a.beat(health(true, "")) // read after the pongs: the connection is intact
	go func() {
		for range 1000 {
			if a.ws.WriteControl(websocket.PongMessage, []byte("p"), time.Now().Add(timeout)) != nil {
				return
			}
		}
	}()
	if reason := a.expectClose(CloseFlood); !strings.Contains(reason, "pongs") {
		t.Fatalf("close reason %q, want one naming pongs", reason)
	}
}

// TestHeartbeatIntervalUnderIdle: a heartbeat interval that is not shorter
// than the idle timeout is refused (every node would be closed).
func TestHeartbeatIntervalUnderIdle(t *testing.T) {
	e := newEnv(t)
	cfg := e.cfg
	cfg.Timers.Heartbeat, cfg.Timers.Idle = 40*time.Second, 0
	if err := e.hub.CheckConfig(cfg); err == nil || !strings.Contains(err.Error(), "shorter than the idle timeout") {
		t.Fatalf("CheckConfig: %v", err)
	}
}

// TestRetentionFlood: a node asks about retention at most once per
// heartbeat_ack (one exchange pending at a time, answered at once), so
// retention requests have the heartbeats' budget: a real gorilla client
// of a generation-managing node that sends them back to back, each with
// the next sequence, gets 5 retention_acks (the burst) and then close
// 4007 — every one of them otherwise costs Core a placement lookup and an
// answer, with no bound.
func TestRetentionFlood(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timers.Heartbeat, c.Timers.Idle = 10*time.Second, 35*time.Second })
	g := e.join(nodeG)
	go func() {
		for i := range 1000 {
			b, _ := proto.Encode(&proto.Retention{ID: uuid.NewString(), Sequence: uint64(i + 1),
				ConnectionID: g.welcome.ConnectionID, OwnerEpoch: g.welcome.OwnerEpoch,
				Entries: []proto.RetentionEntry{{Generation: 1, SpecificationDigest: specDigest}}})
			g.wmu.Lock()
			err := g.ws.WriteMessage(websocket.TextMessage, b)
			g.wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	acks := 0
	for {
		f, err := g.next()
		if err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != CloseFlood {
				t.Fatalf("after %d acks: %v", acks, err)
			}
			break
		}
		if _, ok := f.(*proto.RetentionAck); !ok {
			t.Fatalf("frame %T", f)
		}
		if acks++; acks > 5 {
			t.Fatalf("%d retention_acks and no close, want 5 (35s/10s + 2) then 4007", acks)
		}
	}
	if acks != 5 {
		t.Fatalf("%d acks before the close, want 5 (35s/10s + 2)", acks)
	}
}
