package hub

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/pool"
)

// fakeStore is a cluster-wide claim store shared by several hubs (the
// replicas): one holder per node and one epoch counter, as package
// nodecore/presence keeps them in Leases.
type fakeStore struct {
	mu          sync.Mutex
	holder      map[string]string // node → replica
	claimEpoch  map[string]int64  // node → epoch of the live claim
	epoch       int64
	failAcquire error
	heldFor     time.Duration // > 0: a held node's Acquire is a *HeldError with it
	renews      map[string]int
	releases    map[string]int
	acquires    map[string]int
}

func newFakeStore() *fakeStore {
	return &fakeStore{holder: map[string]string{}, claimEpoch: map[string]int64{}, renews: map[string]int{}, releases: map[string]int{},
		acquires: map[string]int{}}
}

type fakePresence struct {
	s       *fakeStore
	replica string
}

type fakeClaim struct {
	p     fakePresence
	node  string
	epoch int64
}

func (p fakePresence) Acquire(_ context.Context, node string, minEpoch int64) (Claim, error) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquires[node]++
	if s.failAcquire != nil {
		return nil, s.failAcquire
	}
	if h := s.holder[node]; h != "" && h != p.replica {
		if s.heldFor > 0 {
			return nil, &HeldError{Remaining: s.heldFor}
		}
		return nil, ErrHeld
	}
	s.epoch = max(s.epoch+1, minEpoch)
	s.holder[node], s.claimEpoch[node] = p.replica, s.epoch
	return &fakeClaim{p: p, node: node, epoch: s.epoch}, nil
}

func (c *fakeClaim) Epoch() int64 { return c.epoch }

func (c *fakeClaim) Renew(context.Context) error {
	s := c.p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renews[c.node]++
	if s.holder[c.node] != c.p.replica || s.claimEpoch[c.node] != c.epoch {
		return ErrLost
	}
	return nil
}

func (c *fakeClaim) Release(context.Context) error {
	s := c.p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder[c.node] == c.p.replica && s.claimEpoch[c.node] == c.epoch {
		delete(s.holder, c.node)
		s.releases[c.node]++
	}
	return nil
}

func (s *fakeStore) get(f func(*fakeStore) int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f(s)
}

// TestPresenceAcrossReplicas: two hubs share a claim store. A node live on
// replica A gets 409 on replica B; when its connection on A ends, A
// releases the claim and B welcomes the node under a higher epoch. Each
// heartbeat renews the claim.
func TestPresenceAcrossReplicas(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, func(c *Config) { c.Presence = fakePresence{store, "replica-a"} })
	b := newEnv(t, func(c *Config) { c.Presence = fakePresence{store, "replica-b"} })
	n := a.join(nodeA)
	if n.welcome.OwnerEpoch != 7 {
		t.Fatalf("first claim's epoch %d, want the configured 7", n.welcome.OwnerEpoch)
	}
	if _, status, _ := b.dial(nodeA, secretA); status != http.StatusConflict {
		t.Fatalf("connect on replica B while live on A: %d, want 409", status)
	}
	if b.status(nodeA).State != StateDisconnected {
		t.Fatalf("replica B keeps a slot after the 409: %+v", b.status(nodeA))
	}
	// One renewal runs at a time and a heartbeat that arrives meanwhile
	// skips its own, so each beat waits for its renewal.
	n.beat(health(true, ""))
	waittest.Until(t, timeout, "one renewal", func() bool { return store.get(func(s *fakeStore) int { return s.renews[nodeA] }) == 1 })
	n.beat(health(true, ""))
	waittest.Until(t, timeout, "two renewals", func() bool { return store.get(func(s *fakeStore) int { return s.renews[nodeA] }) == 2 })
	if !a.status(nodeA).Online {
		t.Fatal("not online on A")
	}

	_ = n.ws.Close()
	waittest.Until(t, timeout, "A to release the claim", func() bool { return store.get(func(s *fakeStore) int { return s.releases[nodeA] }) == 1 })
	m := b.join(nodeA)
	if m.welcome.OwnerEpoch <= n.welcome.OwnerEpoch {
		t.Fatalf("B's epoch %d is not above A's %d", m.welcome.OwnerEpoch, n.welcome.OwnerEpoch)
	}
	m.beat(health(true, ""))
	if !b.status(nodeA).Online {
		t.Fatal("not online on B")
	}
}

// TestPresenceClaimLost: a claim another replica took over is found at
// the next heartbeat's renewal, and the connection is closed with 4005 so
// the node reconnects.
func TestPresenceClaimLost(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, func(c *Config) { c.Presence = fakePresence{store, "replica-a"} })
	n := a.join(nodeA)
	store.mu.Lock()
	store.holder[nodeA] = "replica-b" // e.g. A's claim expired while A was cut off
	store.mu.Unlock()
	n.send(n.heartbeat(health(true, "")))
	if _, ok := n.recv().(*proto.HeartbeatAck); !ok {
		t.Fatal("no heartbeat_ack")
	}
	n.expectClose(CloseEpochSuperseded)
	waittest.Until(t, timeout, "A to end the connection", func() bool { return a.status(nodeA).State == StateDisconnected })
	if r := store.get(func(s *fakeStore) int { return s.releases[nodeA] }); r != 0 {
		t.Fatalf("a lost claim was released %d times", r)
	}
}

// TestPresenceAcquireFails: a claim that cannot be made answers 503 and
// leaves no slot taken; the next connect succeeds.
func TestPresenceAcquireFails(t *testing.T) {
	store := newFakeStore()
	store.failAcquire = errors.New("apiserver unavailable")
	a := newEnv(t, func(c *Config) { c.Presence = fakePresence{store, "replica-a"} })
	if _, status, _ := a.dial(nodeA, secretA); status != http.StatusServiceUnavailable {
		t.Fatalf("connect with the claim store down: %d, want 503", status)
	}
	store.mu.Lock()
	store.failAcquire = nil
	store.mu.Unlock()
	a.join(nodeA)
}

// TestPresenceEpochFloor: a claim's epoch is at least the configured
// owner epoch; raising the configured epoch above a connection's claim
// supersedes it (4005 at the next heartbeat), and the node comes back
// under a new claim at or above the new floor.
func TestPresenceEpochFloor(t *testing.T) {
	store := newFakeStore()
	store.epoch = 100
	a := newEnv(t, func(c *Config) { c.Presence = fakePresence{store, "replica-a"} })
	n := a.join(nodeA)
	if n.welcome.OwnerEpoch != 101 {
		t.Fatalf("epoch %d, want the store's next, 101", n.welcome.OwnerEpoch)
	}
	cfg := a.cfg
	cfg.OwnerEpoch = 500
	if err := a.hub.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if a.status(nodeA).Online {
		t.Fatal("online under a superseded claim")
	}
	n.send(n.heartbeat(health(true, "")))
	n.expectClose(CloseEpochSuperseded)
	waittest.Until(t, timeout, "A to end the connection", func() bool { return a.status(nodeA).State == StateDisconnected })
	if m := a.join(nodeA); m.welcome.OwnerEpoch != 500 {
		t.Fatalf("epoch after the raise %d, want 500", m.welcome.OwnerEpoch)
	}
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu         sync.Mutex
	dispatched []string
	refused    []string
	connects   []int
	durations  []time.Duration // of Dispatched, in its order
	hubTimes   []string        // operation of each HubTime
	hubTime    []time.Duration
}

func (r *recorder) Dispatched(op proto.Operation, outcome string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dispatched = append(r.dispatched, string(op)+":"+outcome)
	r.durations = append(r.durations, d)
}

func (r *recorder) HubTime(op proto.Operation, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hubTimes = append(r.hubTimes, string(op))
	r.hubTime = append(r.hubTime, d)
}

func (r *recorder) FrameRefused(class string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused = append(r.refused, class)
}

func (r *recorder) ConnectRefused(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.connects = append(r.connects, status)
}

func (r *recorder) snapshot() (d, f []string, c []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.dispatched...), append([]string(nil), r.refused...), append([]int(nil), r.connects...)
}

// TestObserverAndStats: dispatch outcomes and refusals, refused connects
// and frames reach the Observer; Stats counts connections, online nodes
// and ready generations.
func TestObserverAndStats(t *testing.T) {
	rec := &recorder{}
	e := newEnv(t, func(c *Config) { c.Observer = rec })
	a := e.join(nodeA)
	g := e.join(nodeG)
	g.beat(health(true, ""))
	ch := e.dispatchAsync(nodeA, infoReq())
	req := a.request()
	a.send(&proto.Response{ID: req.ID, ConnectionID: req.ConnectionID, Info: info()})
	if d := e.await(ch); d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("dispatch: %+v", d)
	}
	if _, err := e.hub.Dispatch(t.Context(), nodeB, infoReq()); !errors.Is(err, ErrOffline) {
		t.Fatalf("dispatch to B: %v", err)
	}
	if _, status, _ := e.dial(nodeA, secretA); status != http.StatusConflict {
		t.Fatalf("second connect: %d", status)
	}
	if _, status, _ := e.dial(nodeB, "wrong"); status != http.StatusUnauthorized {
		t.Fatalf("wrong credential: %d", status)
	}

	st := e.hub.Stats()
	if st.Live != 2 || st.Online != 2 || st.Connecting != 0 || st.Closing != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A serves its enrolled generation 1; G reports 1 ready and 2 preparing.
	if st.GenerationsReady[PoolGeneration{pool.Default, 1}] != 2 || st.GenerationsReady[PoolGeneration{pool.Default, 2}] != 0 {
		t.Fatalf("generations ready %v", st.GenerationsReady)
	}

	b := e.connect(nodeB)
	b.sendRaw([]byte(`{"version":1,"type":"hello","bogus":true}`))
	b.expectClose(CloseProtocolError)
	d, f, c := rec.snapshot()
	if len(d) != 2 || d[0] != "info:success" || d[1] != "info:node_offline" {
		t.Fatalf("dispatched %v", d)
	}
	// One hub time, for the operation that got a response; it is part of
	// that dispatch's duration (the node's turn left out).
	rec.mu.Lock()
	hubOps, hubTime, durations := rec.hubTimes, rec.hubTime, rec.durations
	rec.mu.Unlock()
	if len(hubOps) != 1 || hubOps[0] != "info" || hubTime[0] < 0 || hubTime[0] > durations[0] {
		t.Fatalf("hub times %v %v (dispatch durations %v)", hubOps, hubTime, durations)
	}
	if len(f) != 1 || f[0] != RefusedInvalid {
		t.Fatalf("frames refused %v", f)
	}
	if len(c) != 2 || c[0] != http.StatusConflict || c[1] != http.StatusUnauthorized {
		t.Fatalf("connects refused %v", c)
	}
}

// TestShutdownDrains: Shutdown refuses new connects (503) and dispatches
// (ErrClosed) at once, lets the dispatch under way get its response, and
// then closes the connection with 1001; a Shutdown whose context ends
// first closes at once and the dispatch still waiting ends unknown.
func TestShutdownDrains(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	ch := e.dispatchAsync(nodeA, infoReq())
	req := a.request()
	done := make(chan error, 1)
	go func() { done <- e.hub.Shutdown(context.Background()) }()
	waittest.Until(t, timeout, "connects to be refused", func() bool {
		_, status, _ := e.dial(nodeB, secretB)
		return status == http.StatusServiceUnavailable
	})
	if _, err := e.hub.Dispatch(t.Context(), nodeA, infoReq()); !errors.Is(err, ErrClosed) {
		t.Fatalf("dispatch during shutdown: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a dispatch under way", err)
	default:
	}
	a.send(&proto.Response{ID: req.ID, ConnectionID: req.ConnectionID, Info: info()})
	if d := e.await(ch); d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("the dispatch under way: %+v", d)
	}
	a.expectClose(CloseGoingAway)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	e2 := newEnv(t)
	b := e2.join(nodeB)
	ch = e2.dispatchAsync(nodeB, infoReq())
	b.request()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := e2.hub.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown past its grace: %v", err)
	}
	if d := e2.await(ch); d.err != nil || d.res.Outcome != proto.OutcomeUnknown || d.res.Reason != ReasonDisconnected {
		t.Fatalf("the dispatch cut off: %+v", d)
	}
	b.expectClose(CloseGoingAway)
}

// TestHeldRetryAfter: a connect refused because another replica holds the
// node's claim carries Retry-After: the claim's remaining time in whole
// seconds, rounded up; a plain ErrHeld (the time unknown) carries none.
func TestHeldRetryAfter(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, func(c *Config) { c.Presence = fakePresence{store, "replica-a"} })
	b := newEnv(t, func(c *Config) { c.Presence = fakePresence{store, "replica-b"} })
	a.join(nodeA)
	retryAfter := func() (int, string) {
		d := websocket.Dialer{HandshakeTimeout: timeout}
		_, resp, err := d.Dial(b.url(nodeA), http.Header{"Authorization": {"Bearer " + secretA}})
		if err == nil || resp == nil {
			t.Fatalf("connect on replica B while live on A: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	if st, ra := retryAfter(); st != http.StatusConflict || ra != "" {
		t.Fatalf("plain ErrHeld: %d Retry-After %q, want 409 without", st, ra)
	}
	store.mu.Lock()
	store.heldFor = 2500 * time.Millisecond
	store.mu.Unlock()
	if st, ra := retryAfter(); st != http.StatusConflict || ra != "3" {
		t.Fatalf("HeldError 2.5s: %d Retry-After %q, want 409 with 3", st, ra)
	}
	if !errors.Is(&HeldError{Remaining: time.Second}, ErrHeld) {
		t.Fatal("a HeldError is not ErrHeld")
	}
}
