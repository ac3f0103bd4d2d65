package freeport

import (
	"errors"
	"net"
	"strconv"
	"syscall"
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

// TestRefusingHoldsThePort: a dial to Refusing's address is refused
// (ECONNREFUSED), a listener cannot bind the port while it is held (as Go
// listeners do, with SO_REUSEADDR), and after Close the port binds again.
func TestRefusingHoldsThePort(t *testing.T) {
	addr, held, err := Refusing()
	if err != nil {
		t.Fatal(err)
	}
	if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
		t.Fatalf("Refusing() = %q, %v", addr, err)
	}
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("a dial to %s connected", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("a dial to %s = %v, want ECONNREFUSED", addr, err)
		}
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("a listener bound %s while it was held", addr)
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a listen on the held %s = %v, want EADDRINUSE", addr, err)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if err := held.Close(); err != nil {
		t.Fatalf("a second Close = %v, want nil", err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port is not free after Close: %v", err)
	}
	l.Close()
}
