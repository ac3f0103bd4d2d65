package agent_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/agent"
	"github.com/sandgate/sandgate/nodeagent/internal/fakecore"
)

// logHook is a slog handler that hands every record to the test, so a
// test can wait for the agent to reach a state ("draining") instead of
// sleeping.
type logHook struct{ records chan slog.Record }

func newLogHook() *logHook { return &logHook{records: make(chan slog.Record, 256)} }

func (h *logHook) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHook) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.records <- r.Clone():
	default:
	}
	return nil
}

func (h *logHook) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logHook) WithGroup(string) slog.Handler      { return h }

// wait returns the next record with message msg, failing the test after
// fakecore.Wait.
func (h *logHook) wait(t *testing.T, msg string) slog.Record {
	t.Helper()
	deadline := time.After(fakecore.Wait)
	for {
		select {
		case r := <-h.records:
			if r.Message == msg {
				return r
			}
		case <-deadline:
			t.Fatalf("no %q log record within %v", msg, fakecore.Wait)
		}
	}
}

// attr returns the value of the record's attribute key.
func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// A slow operation running when Run's context ends completes, and its
// response reaches Core before the 1001 close; a request arriving during
// the drain is answered unconfirmed without reaching the provider; heart-
// beats continue meanwhile.
func TestDrainSendsRunningResponsesThenGoesAway(t *testing.T) {
	core := fakecore.New(t, credential, false)
	f := newFake(nil)
	f.gate = make(chan struct{})
	hook := newLogHook()
	n := startNode(t, core, f, func(c *agent.Config) {
		c.Log = slog.New(hook)
		c.Timers.Heartbeat = 10 * time.Millisecond
		c.Timers.ShutdownGrace = time.Hour
	})
	conn := core.Accept()
	conn.Open(1)

	slow := conn.NewRequest(proto.OpKill, generation, 60000, ref)
	conn.Send(slow)
	<-f.started
	n.cancel()
	if r := hook.wait(t, "draining"); attr(r, "in_flight").Int64() != 1 {
		t.Fatalf("draining with in_flight %v, want 1", attr(r, "in_flight"))
	}

	late := conn.NewRequest(proto.OpCreate, generation, 60000, ref)
	late.Bootstrap = &proto.Bootstrap{Image: "img"}
	conn.Send(late)
	resp := conn.Response()
	if resp.ID != late.ID || resp.ErrorCode != proto.ErrUnconfirmed {
		t.Fatalf("request during the drain: %+v, want unconfirmed", resp)
	}
	if out, _ := proto.Classify(late, resp, nil); out != proto.OutcomeUnknown {
		t.Fatalf("Core would classify the drained request as %v, want unknown", out)
	}
	// Heartbeats continue while draining.
	conn.Heartbeat()
	conn.Heartbeat()

	f.gate <- struct{}{}
	if resp := conn.Response(); resp.ID != slow.ID || resp.ErrorCode != "" {
		t.Fatalf("running operation's response: %+v, want success", resp)
	}
	if code := conn.Closed(); code != websocket.CloseGoingAway {
		t.Fatalf("close code %d, want %d", code, websocket.CloseGoingAway)
	}
	hook.wait(t, "drained")
	if calls := f.Calls(); len(calls) != 1 || calls[0] != string(proto.OpKill) {
		t.Fatalf("provider calls %v, want only the kill that was running", calls)
	}
}

// An operation longer than the grace: the node closes with 1001 when the
// grace runs out, and the operation's response is not sent.
func TestDrainGraceExpires(t *testing.T) {
	const grace = 100 * time.Millisecond
	core := fakecore.New(t, credential, false)
	f := newFake(nil)
	f.gate = make(chan struct{})
	hook := newLogHook()
	n := startNode(t, core, f, func(c *agent.Config) {
		c.Log = slog.New(hook)
		c.Timers.ShutdownGrace = grace
	})
	conn := core.Accept()
	conn.Open(1)

	slow := conn.NewRequest(proto.OpKill, generation, 60000, ref)
	conn.Send(slow)
	<-f.started
	start := time.Now()
	n.cancel()
	rest, code := conn.Rest()
	if code != websocket.CloseGoingAway {
		t.Fatalf("close code %d, want %d", code, websocket.CloseGoingAway)
	}
	if elapsed := time.Since(start); elapsed < grace {
		t.Fatalf("closed after %v, before the grace of %v", elapsed, grace)
	}
	if r := hook.wait(t, "drain grace expired"); attr(r, "in_flight").Int64() != 1 {
		t.Fatalf("grace expired with in_flight %v, want 1", attr(r, "in_flight"))
	}
	f.gate <- struct{}{} // the operation ends after the close
	for _, fr := range rest {
		if _, ok := fr.(*proto.Response); ok {
			t.Fatalf("a response was sent before the close: %+v", fr)
		}
	}
}

// Nothing in flight: the node closes with 1001 at once.
func TestDrainWithNothingInFlight(t *testing.T) {
	core := fakecore.New(t, credential, false)
	hook := newLogHook()
	n := startNode(t, core, newFake(nil), func(c *agent.Config) {
		c.Log = slog.New(hook)
		c.Timers.Heartbeat = 10 * time.Millisecond
		c.Timers.ShutdownGrace = time.Hour
	})
	conn := core.Accept()
	conn.Open(1)
	// Heartbeats start once the welcome was processed.
	conn.Heartbeat()

	n.cancel()
	if code := conn.Closed(); code != websocket.CloseGoingAway {
		t.Fatalf("close code %d, want %d", code, websocket.CloseGoingAway)
	}
	if r := hook.wait(t, "draining"); attr(r, "in_flight").Int64() != 0 {
		t.Fatalf("draining with in_flight %v, want 0", attr(r, "in_flight"))
	}
	hook.wait(t, "drained")
}

// Before welcome there is nothing to drain: the node closes at once, as
// before, without announcing 1001.
func TestCancelBeforeWelcomeClosesAtOnce(t *testing.T) {
	core := fakecore.New(t, credential, false)
	n := startNode(t, core, newFake(nil), func(c *agent.Config) { c.Timers.ShutdownGrace = time.Hour })
	conn := core.Accept()
	conn.Hello()
	n.cancel()
	if code := conn.Closed(); code == websocket.CloseGoingAway {
		t.Fatal("a connection that was never welcomed drained")
	}
}
