package hub

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/credential"
)

// TestBreakResponseWrongConnection: a response with the right id but
// another connection_id is not matched: the connection closes 1002 and the
// caller gets unknown/disconnected, never the forged outcome.
func TestBreakResponseWrongConnection(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	pending := e.dispatchAsync(nodeA, infoReq())
	got := a.request()
	a.send(&proto.Response{ID: got.ID, ConnectionID: uuid.NewString(), Info: info()})
	reason := a.expectClose(1002)
	if !strings.Contains(reason, "another connection") {
		t.Fatalf("reason %q", reason)
	}
	d := e.await(pending)
	if d.err != nil || d.res.Outcome != proto.OutcomeUnknown || d.res.Reason != ReasonDisconnected || d.res.Response != nil {
		t.Fatalf("result %+v, %v", d.res, d.err)
	}
	e.assertNoSecretsLogged()
}

// TestBreakConcurrentDispatchLimit: 40 concurrent dispatches to one node:
// exactly 32 reach the wire with sequences 1..32, the rest are refused
// with ErrTooManyPending before anything is written.
func TestBreakConcurrentDispatchLimit(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.hub.Dispatch(t.Context(), nodeA, infoReq())
			errs <- err
		}()
	}
	seen := map[uint64]bool{}
	for range proto.MaxPendingRequests {
		r := a.request()
		if seen[r.Sequence] || r.Sequence < 1 || r.Sequence > proto.MaxPendingRequests {
			t.Fatalf("sequence %d", r.Sequence)
		}
		seen[r.Sequence] = true
		defer a.send(&proto.Response{ID: r.ID, ConnectionID: r.ConnectionID, Info: info()})
	}
	// The refused ones return without a response.
	refused := 0
	for refused < n-proto.MaxPendingRequests {
		err := <-errs
		if !errors.Is(err, ErrTooManyPending) {
			t.Fatalf("error %v before all refusals", err)
		}
		refused++
	}
	if s := e.status(nodeA); s.Pending != proto.MaxPendingRequests {
		t.Fatalf("pending %d", s.Pending)
	}
	// The heartbeat's ack is the next frame: nothing else was written.
	a.beat(health(true, ""))
	t.Cleanup(wg.Wait)
}

// TestBreakConnectRace: many simultaneous connects for one node: exactly
// one is upgraded, the others get 409.
func TestBreakConnectRace(t *testing.T) {
	e := newEnv(t)
	const n = 8
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws, status, _ := e.dial(nodeA, secretA)
			if ws != nil {
				t.Cleanup(func() { _ = ws.Close() })
			}
			statuses <- status
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[http.StatusSwitchingProtocols] != 1 || count[http.StatusConflict] != n-1 {
		t.Fatalf("statuses %v", count)
	}
}

// TestBreakRevokedMidDispatch: a node's credential revoked while a request
// is pending: the next heartbeat closes 4003 and the caller gets
// unknown/disconnected.
func TestBreakRevokedMidDispatch(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	pending := e.dispatchAsync(nodeA, infoReq())
	a.request()
	writeFile(t, e.credPath, "nodes:\n"+nodeRecord(nodeA, secretA, false, false)+nodeRecord(nodeB, secretB, true, false))
	waittest.Until(t, timeout, "the revocation to load", func() bool {
		_, err := e.creds.Authenticate(nodeA, credential.Sum(secretA))
		return err != nil
	})
	a.send(a.heartbeat(health(true, "")))
	a.expectClose(4003)
	d := e.await(pending)
	if d.err != nil || d.res.Outcome != proto.OutcomeUnknown || d.res.Reason != ReasonDisconnected {
		t.Fatalf("result %+v, %v", d.res, d.err)
	}
	// Dispatch to the now disconnected node is refused as offline.
	if _, err := e.hub.Dispatch(t.Context(), nodeA, infoReq()); !errors.Is(err, ErrOffline) {
		t.Fatalf("dispatch after revocation: %v", err)
	}
	e.assertNoSecretsLogged()
}

// TestBreakOversizeControlFrame: a heartbeat over the 32 KiB control-frame
// limit, with no request pending, closes the connection 1009 without
// echoing contents.
func TestBreakOversizeControlFrame(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	hb := a.heartbeat(health(true, ""))
	b, err := proto.Encode(hb)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Replace(string(b), `"type":"heartbeat"`, `"type":"heartbeat","pad":"`+strings.Repeat("Z", 40<<10)+`"`, 1)
	a.sendRaw([]byte(big))
	reason := a.expectClose(CloseMessageTooBig)
	if strings.Contains(reason, "ZZZZ") {
		t.Fatalf("reason echoes contents: %q", reason)
	}
}

// TestBreakDispatchCallerAlreadyGone: a caller whose context has ended
// before anything is written (the API client hung up) must not send the
// operation: the node would perform a mutation nobody waits for, reported
// as unknown. Nothing reaches the wire and no sequence is used.
func TestBreakDispatchCallerAlreadyGone(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res, err := e.hub.Dispatch(ctx, nodeA, infoReq())
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("dispatch with an ended context = %+v, %v", res, err)
	}
	a.beat(health(true, "")) // the ack is the next frame: no request was written
	pending := e.dispatchAsync(nodeA, infoReq())
	if r := a.request(); r.Sequence != 1 {
		t.Fatalf("sequence %d", r.Sequence)
	} else {
		a.send(&proto.Response{ID: r.ID, ConnectionID: r.ConnectionID, Info: info()})
	}
	if d := e.await(pending); d.err != nil || d.res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("%+v %v", d.res, d.err)
	}
}
