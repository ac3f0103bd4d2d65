package hub

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
)

// TestCloseNotHeldBySlowNode: a node that stops reading while Core writes
// a request larger than the sockets' buffers holds its own connection's
// writer; Hub.Close still sends every other node its close frame (1001) at
// once, instead of first waiting up to Timers.Write for the slow node's
// close frame. The slow node is one of eight, so that before the close
// frames went out concurrently it came before most of the others.
func TestCloseNotHeldBySlowNode(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		// Far longer than the test's safety net: a close frame that waits
		// for the slow node's writer cannot arrive within it.
		c.Timers.Write, c.Timers.Idle, c.Timers.Online = time.Minute, time.Minute, time.Minute
	})
	// Five more enrolled nodes beside A, B and G.
	extra := map[string]string{}
	records := defaultNodes()
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("0e000000-0000-4000-8000-00000000000%d", i)
		extra[id] = fmt.Sprintf("secret-of-extra-node-%d", i)
		records += nodeRecord(id, extra[id], true, false)
	}
	writeFile(t, e.credPath, records)
	waittest.Until(t, timeout, "the extra nodes' enrolment", func() bool { return len(e.creds.Nodes()) == 9 })

	var healthy []*testNode
	healthy = append(healthy, e.join(nodeB), e.join(nodeG))
	for id, secret := range extra {
		ws, status, err := e.dial(id, secret)
		if err != nil {
			t.Fatalf("dial %s: %d %v", id, status, err)
		}
		t.Cleanup(func() { _ = ws.Close() })
		n := &testNode{t: t, id: id, ws: ws}
		n.send(n.hello())
		if _, ok := n.recv().(*proto.Welcome); !ok {
			t.Fatalf("node %s: no welcome", id)
		}
		healthy = append(healthy, n)
	}

	// The slow node: a 4 KiB receive buffer, and after the welcome it
	// reads nothing.
	var fd int
	nd := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(f uintptr) {
			fd = int(f)
			serr = syscall.SetsockoptInt(int(f), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	d := websocket.Dialer{HandshakeTimeout: timeout, NetDialContext: nd.DialContext}
	ws, _, err := d.Dial(e.url(nodeA), http.Header{"Authorization": {"Bearer " + secretA}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	slow := &testNode{t: t, id: nodeA, ws: ws}
	slow.send(slow.hello())
	if _, ok := slow.recv().(*proto.Welcome); !ok {
		t.Fatal("slow node: no welcome")
	}
	// A 16 MiB request: far more than Core's send buffer and the node's
	// receive buffer hold, so its write blocks once the node stops reading.
	req := proto.Request{DeploymentGeneration: 1, Operation: proto.OpCommand, TimeoutMS: 60000, Reference: ref,
		Command: &proto.Command{Argv: []string{strings.Repeat("x", 16<<20)}, TimeoutMS: 1000, MaxOutputBytes: 1024}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _, _ = e.hub.Dispatch(ctx, nodeA, req) }()
	waittest.Until(t, timeout, "the request's first bytes in the slow node's receive queue", func() bool {
		n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
		return err == nil && n > 0
	})

	closed := make(chan struct{})
	go func() { _ = e.hub.Close(); close(closed) }()
	for _, n := range healthy {
		n.expectClose(CloseGoingAway)
	}
	// The slow node's socket ends; Close then returns.
	_ = ws.Close()
	select {
	case <-closed:
	case <-time.After(timeout):
		t.Fatal("Close did not return after the slow node's socket closed")
	}
}
