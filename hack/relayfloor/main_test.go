package main

import (
	"net"
	"testing"
	"time"
)

// TestOperationsEchoThroughTheRelay runs the relay, 20 nodes and 200
// operations in one process on loopback: every operation comes back as its
// own echo (operations checks the sequence numbers), each with a round trip
// taken, while the nodes heartbeat through the same connections.
func TestOperationsEchoThroughTheRelay(t *testing.T) {
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = al.Close(); _ = nl.Close() })
	const nodes = 20
	r := &relay{alloc: 64, nodes: make([]*lockedConn, nodes), registered: make(chan int, nodes)}
	go func() { _ = r.serveNodes(nl) }()
	go func() { _ = r.serveAPI(al) }()
	cs, err := connectNodes(nl.Addr().String(), nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			_ = c.c.Close()
		}
	})
	for range nodes {
		<-r.registered
	}
	go heartbeats(cs, 100*time.Millisecond)

	rtts, err := operations(al.Addr().String(), nodes, 2000, 100*time.Millisecond)
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
