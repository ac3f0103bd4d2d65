package freeport

import (
	"errors"
	"net"
	"os"
	"os/exec"
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

// TestListenedBy: a listener of this process is found on its port; the
// same port asked of another process (a child that listens on nothing),
// a port nobody listens on, and a process that has exited are not.
func TestListenedBy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	if ok, err := ListenedBy(os.Getpid(), addr); !ok || err != nil {
		t.Fatalf("ListenedBy(this process, %s) = %v, %v; want true", addr, ok, err)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if ok, err := ListenedBy(child.Process.Pid, addr); ok || err != nil {
		t.Fatalf("ListenedBy(a child, %s) = %v, %v; want false", addr, ok, err)
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	if ok, err := ListenedBy(child.Process.Pid, addr); ok || err != nil {
		t.Fatalf("ListenedBy(an exited process, %s) = %v, %v; want false", addr, ok, err)
	}
	dead, held, err := Refusing()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if ok, err := ListenedBy(os.Getpid(), dead); ok || err != nil {
		t.Fatalf("ListenedBy(this process, %s, bound but not listening) = %v, %v; want false", dead, ok, err)
	}
	if _, err := ListenedBy(os.Getpid(), "127.0.0.1"); err == nil {
		t.Fatal("an address without a port: no error")
	}
}
