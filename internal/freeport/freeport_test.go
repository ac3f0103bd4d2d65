package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddrBelowTheEphemeralRange: the ports are loopback, free, and below
// the kernel's ephemeral range when it starts above 10001 (on a machine
// without /proc the fallback is the kernel's pick, checked only for
// being free).
func TestAddrBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 50 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("Addr() = %q, %v", addr, err)
		}
		p, _ := strconv.Atoi(port)
		if low > lowest+1 && (p < lowest || p >= low) {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the port Addr returned is not free: %v", err)
		}
		l.Close()
	}
	if p, err := Port(); err != nil || p == "" {
		t.Fatalf("Port() = %q, %v", p, err)
	}
}
