package main

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOperationsEchoThroughTheRelay runs the relay, 20 nodes and 200
// operations in one process on loopback: every operation comes back as its
// own echo (operations checks the sequence numbers), each with a round trip
// taken, while the nodes heartbeat through the same connections.
func TestOperationsEchoThroughTheRelay(t *testing.T) {
	const nodes = 20
	api, cs := startRelay(t, &relay{alloc: 64}, nodes)
	go heartbeats(cs, 100*time.Millisecond)

	rtts, err := operations(api, nodes, 2000, 100*time.Millisecond, keptConnections)
	if err != nil {
		t.Fatal(err)
	}
	if len(rtts) != 200 {
		t.Fatalf("%d round trips, want 200", len(rtts))
	}
	for i, d := range rtts {
		if d <= 0 {
			t.Fatalf("operation %d: round trip %v", i, d)
		}
	}
}

// startRelay serves r on two loopback listeners with n nodes connected
// and registered, and returns the API address and the nodes'
// connections; everything is closed when the test ends.
func startRelay(t *testing.T, r *relay, n int) (api string, nodes []*lockedConn) {
	t.Helper()
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = al.Close(); _ = nl.Close() })
	r.nodes.conns = make([]*lockedConn, n)
	r.registered = make(chan int, n)
	go func() { _ = r.serveNodes(nl) }()
	go func() { _ = r.serveAPI(al) }()
	cs, err := connectNodes(nl.Addr().String(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			_ = c.c.Close()
		}
	})
	for range n {
		<-r.registered
	}
	return al.Addr().String(), cs
}

func TestQuantile(t *testing.T) {
	s := make([]time.Duration, 1000)
	for i := range s {
		s[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {0.999, 999 * time.Millisecond}, {1, 1000 * time.Millisecond}} {
		if got := quantile(s, c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}

// TestOperationsKeepNoMoreConnectionsThanTheyMay: when more operations are
// in flight at the end of the phase than connections may be kept, the
// ones past that close theirs and the phase still ends (each kept one
// waited for a reader that never came, and the phase never ended).
func TestOperationsKeepNoMoreConnectionsThanTheyMay(t *testing.T) {
	const nodes = 4
	// 5 ms of the relay's CPU per operation, one every millisecond: several
	// are in flight at once, more than the one connection kept.
	api, _ := startRelay(t, &relay{work: 5 * time.Millisecond}, nodes)
	type result struct {
		rtts []time.Duration
		err  error
	}
	done := make(chan result, 1)
	go func() {
		rtts, err := operations(api, nodes, 1000, 20*time.Millisecond, 1)
		done <- result{rtts, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			t.Fatal(res.err)
		}
		if len(res.rtts) != 20 {
			t.Fatalf("%d round trips, want 20", len(res.rtts))
		}
	case <-time.After(30 * time.Second): // a hang's deadline; the phase takes well under a second
		t.Fatal("the phase did not end: operations past the kept connections wait to give theirs back")
	}
}

// TestCheckPinning: the tool runs only where the relay's CPU is not among
// its own (and so not among the nodes', which inherit them).
func TestCheckPinning(t *testing.T) {
	set := func(cpus ...int) *unix.CPUSet {
		var s unix.CPUSet
		for _, c := range cpus {
			s.Set(c)
		}
		return &s
	}
	if got, err := checkPinning(set(1), 0); err != nil || got != "1" {
		t.Errorf("CPU 1, relay on 0: %q, %v; want \"1\"", got, err)
	}
	if got, err := checkPinning(set(2, 3), 0); err != nil || got != "2,3" {
		t.Errorf("CPUs 2 and 3, relay on 0: %q, %v; want \"2,3\"", got, err)
	}
	if _, err := checkPinning(set(0, 1), 0); err == nil || !strings.Contains(err.Error(), "the relay's CPU 0 among them") {
		t.Errorf("CPUs 0 and 1, relay on 0: %v; want a refusal naming the relay's CPU", err)
	}
	if _, err := checkPinning(set(), 0); err == nil {
		t.Error("no CPU: no error")
	}
}

// TestOperationsRefuseAnotherOperationsAnswer: an answer that is not its
// operation's echo (here every answer carries the next sequence number)
// fails the phase.
func TestOperationsRefuseAnotherOperationsAnswer(t *testing.T) {
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = al.Close() })
	go func() {
		for {
			c, err := al.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, msgSize)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					binary.LittleEndian.PutUint64(buf[12:], binary.LittleEndian.Uint64(buf[12:])+1)
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	_, err = operations(al.Addr().String(), 1, 1000, 10*time.Millisecond, keptConnections)
	if err == nil || !strings.Contains(err.Error(), "operation 0 answered with 1's echo") {
		t.Fatalf("answers of the next operation: %v; want the mismatch named", err)
	}
}
