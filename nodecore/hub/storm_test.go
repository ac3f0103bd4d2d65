package hub

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/sandgate/sandgate/internal/waittest"
)

// TestReconnectStormBounded: a node holding a valid credential that
// connects and drops its socket over and over gets ConnectBurst upgrades
// (each of which claims the node in the cluster-wide store: writes to the
// apiserver that every node's claims share), then 429 with Retry-After
// and no claim, until its budget refills by one connect per ConnectEvery
// on the presence clock. Another node's connects are not touched.
func TestReconnectStormBounded(t *testing.T) {
	store := newFakeStore()
	e := newEnv(t, func(c *Config) { c.Presence = fakePresence{store, "replica-a"} })
	e.freeze()
	// attempt connects as id and drops the socket at once; it returns the
	// handshake's status and Retry-After once the hub has released the
	// node's slot.
	attempt := func(id string) (int, string) {
		t.Helper()
		d := websocket.Dialer{HandshakeTimeout: timeout}
		ws, resp, err := d.Dial(e.url(id), http.Header{"Authorization": {"Bearer " + secrets[id]}})
		if err != nil {
			if resp == nil {
				t.Fatalf("connect %s: %v", id, err)
			}
			resp.Body.Close()
			return resp.StatusCode, resp.Header.Get("Retry-After")
		}
		_ = ws.Close()
		waittest.Until(t, timeout, "the dropped connection's slot to be released", func() bool {
			return e.status(id).State == StateDisconnected
		})
		return http.StatusSwitchingProtocols, ""
	}
	for i := range ConnectBurst {
		if st, _ := attempt(nodeA); st != http.StatusSwitchingProtocols {
			t.Fatalf("connect %d of the burst: status %d, want the upgrade", i+1, st)
		}
	}
	maxRetry := int(ConnectEvery / time.Second)
	for i := range 3 * ConnectBurst {
		st, ra := attempt(nodeA)
		if secs, err := strconv.Atoi(ra); st != http.StatusTooManyRequests || err != nil || secs < 1 || secs > maxRetry {
			t.Fatalf("connect %d past the burst: status %d, Retry-After %q; want 429 with 1..%d",
				i+1, st, ra, maxRetry)
		}
	}
	if n := store.get(func(s *fakeStore) int { return s.acquires[nodeA] }); n != ConnectBurst {
		t.Fatalf("%d claims acquired for the storming node, want %d", n, ConnectBurst)
	}
	// Another node is untouched by the first one's storm.
	e.join(nodeB)
	// The budget refills with the presence clock: one connect per
	// ConnectEvery.
	e.advance(ConnectEvery)
	if st, _ := attempt(nodeA); st != http.StatusSwitchingProtocols {
		t.Fatalf("connect after ConnectEvery: status %d, want the upgrade", st)
	}
	if st, _ := attempt(nodeA); st != http.StatusTooManyRequests {
		t.Fatalf("the next connect: status %d, want 429", st)
	}
}
