package fakecore

import (
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/proto"
)

// Auto plays Core for a generation-managing node on one connection:
// welcome with the deployment, a heartbeat_ack with the deployment for
// every heartbeat, a retention_ack for every retention (keep decided by
// Keep), and requests sent with Do. Observations and retention requests
// are recorded for the test.
type Auto struct {
	c *Conn

	mu         sync.Mutex
	deployment proto.Deployment
	keep       func(proto.RetentionEntry) bool
	hello      *proto.Hello
	latest     []proto.GenerationObservation
	observed   chan []proto.GenerationObservation
	retentions []*proto.Retention
	pending    map[string]chan *proto.Response
	// holdAcks, when set, holds retention requests unanswered.
	holdAcks bool
	held     chan *proto.Retention
	done     chan struct{}
}

// Auto reads hello, sends welcome (epoch 1) with d, and serves the
// connection until it ends. keep decides each retention entry (nil: keep
// everything).
func (c *Conn) Auto(d proto.Deployment, keep func(proto.RetentionEntry) bool) *Auto {
	c.t.Helper()
	a := &Auto{c: c, deployment: d, keep: keep, observed: make(chan []proto.GenerationObservation, 1024),
		pending: map[string]chan *proto.Response{}, done: make(chan struct{}),
		held: make(chan *proto.Retention, 1024)}
	a.hello = c.Hello()
	a.observed <- a.hello.Generations
	a.latest = a.hello.Generations
	c.ConnectionID, c.OwnerEpoch = uuid.NewString(), 1
	dd := d
	c.Send(&proto.Welcome{ConnectionID: c.ConnectionID, OwnerEpoch: 1, Deployment: &dd})
	go a.loop()
	return a
}

// Hello returns the node's hello.
func (a *Auto) Hello() *proto.Hello { return a.hello }

// Done is closed when the connection ended.
func (a *Auto) Done() <-chan struct{} { return a.done }

// SetDeployment changes the deployment the next heartbeat_ack carries.
func (a *Auto) SetDeployment(d proto.Deployment) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deployment = d
}

// SetKeep changes the retention policy.
func (a *Auto) SetKeep(keep func(proto.RetentionEntry) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keep = keep
}

// HoldAcks makes the stand-in leave retention requests unanswered (the
// test answers them with Send) while hold is true.
func (a *Auto) HoldAcks(hold bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holdAcks = hold
}

// NextHeld returns the next retention request left unanswered.
func (a *Auto) NextHeld() *proto.Retention {
	a.c.t.Helper()
	select {
	case r := <-a.held:
		return r
	case <-time.After(Wait):
		a.c.t.Fatal("no retention request within the wait")
	}
	return nil
}

// Retentions returns the retention requests received so far.
func (a *Auto) Retentions() []*proto.Retention {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*proto.Retention(nil), a.retentions...)
}

func (a *Auto) loop() {
	defer close(a.done)
	for {
		var f proto.Frame
		select {
		case f = <-a.c.frames:
		case <-a.c.closed:
			return
		}
		switch f := f.(type) {
		case *proto.Heartbeat:
			a.mu.Lock()
			d := a.deployment
			a.latest = f.Generations
			a.mu.Unlock()
			a.observed <- f.Generations
			a.c.writeMu.Lock()
			data, _ := proto.Encode(&proto.HeartbeatAck{ConnectionID: a.c.ConnectionID, OwnerEpoch: a.c.OwnerEpoch, Deployment: &d})
			a.c.ws.WriteMessage(1, data)
			a.c.writeMu.Unlock()
		case *proto.Retention:
			a.mu.Lock()
			a.retentions = append(a.retentions, f)
			ack := &proto.RetentionAck{ID: f.ID, ConnectionID: f.ConnectionID}
			for _, e := range f.Entries {
				keep := a.keep == nil || a.keep(e)
				ack.Entries = append(ack.Entries, proto.RetentionDecision{Generation: e.Generation, SpecificationDigest: e.SpecificationDigest, Keep: keep})
			}
			hold := a.holdAcks
			a.mu.Unlock()
			if hold {
				a.held <- f
			}
			if !hold {
				a.send(ack)
			}
		case *proto.Response:
			a.mu.Lock()
			ch := a.pending[f.ID]
			delete(a.pending, f.ID)
			a.mu.Unlock()
			if ch != nil {
				ch <- f
			}
		}
	}
}

func (a *Auto) send(f proto.Frame) {
	data, err := proto.Encode(f)
	if err != nil {
		return
	}
	a.c.writeMu.Lock()
	defer a.c.writeMu.Unlock()
	a.c.ws.WriteMessage(1, data)
}

// Send sends any frame (a test's hand-made retention_ack, say).
func (a *Auto) Send(f proto.Frame) { a.send(f) }

// Do sends a request with the next sequence number and waits for its
// response (nil when the connection ends or Wait passes first).
func (a *Auto) Do(op proto.Operation, generation int64, timeoutMS int, ref proto.Reference, fill func(*proto.Request)) *proto.Response {
	ch := make(chan *proto.Response, 1)
	a.mu.Lock()
	r := a.c.NewRequest(op, generation, timeoutMS, ref)
	if fill != nil {
		fill(r)
	}
	a.pending[r.ID] = ch
	a.mu.Unlock()
	a.send(r)
	select {
	case resp := <-ch:
		return resp
	case <-a.done:
		return nil
	case <-time.After(Wait):
		return nil
	}
}

// WaitObservations waits until a hello or heartbeat's observations
// satisfy ok and returns them; it fails the test after Wait.
func (a *Auto) WaitObservations(ok func([]proto.GenerationObservation) bool) []proto.GenerationObservation {
	a.c.t.Helper()
	deadline := time.After(Wait)
	for {
		select {
		case obs := <-a.observed:
			if ok(obs) {
				return obs
			}
		case <-a.done:
			a.c.t.Fatalf("the connection ended while waiting for observations (last %+v)", a.latest)
			return nil
		case <-deadline:
			a.mu.Lock()
			last := a.latest
			a.mu.Unlock()
			a.c.t.Fatalf("no matching observations within %v; last %+v", Wait, last)
			return nil
		}
	}
}

// State returns a predicate: generation g is reported in state s.
func State(g int64, s proto.GenerationState) func([]proto.GenerationObservation) bool {
	return func(obs []proto.GenerationObservation) bool {
		for _, o := range obs {
			if o.Generation == g {
				return o.State == s
			}
		}
		return false
	}
}
