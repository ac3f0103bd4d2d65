package freeport

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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

// TestListeners: a listener of this process is counted as its own; the
// same port asked of another process (a child that listens on nothing)
// or of a process that has exited is another's; a port two sockets of
// this process share with SO_REUSEPORT counts both; a bound socket that
// never listens and a port nobody uses count nothing.
func TestListeners(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	if all, own, err := Listeners(os.Getpid(), addr); all != 1 || own != 1 || err != nil {
		t.Fatalf("Listeners(this process, %s) = %d, %d, %v; want 1, 1", addr, all, own, err)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if all, own, err := Listeners(child.Process.Pid, addr); all != 1 || own != 0 || err != nil {
		t.Fatalf("Listeners(a child, %s) = %d, %d, %v; want 1, 0", addr, all, own, err)
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	if all, own, err := Listeners(child.Process.Pid, addr); all != 1 || own != 0 || err != nil {
		t.Fatalf("Listeners(an exited process, %s) = %d, %d, %v; want 1, 0", addr, all, own, err)
	}

	reuse := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	a, err := reuse.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := reuse.Listen(t.Context(), "tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if all, own, err := Listeners(os.Getpid(), a.Addr().String()); all != 2 || own != 2 || err != nil {
		t.Fatalf("Listeners(this process, %s, shared) = %d, %d, %v; want 2, 2", a.Addr(), all, own, err)
	}

	dead, held, err := Refusing()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if all, own, err := Listeners(os.Getpid(), dead); all != 0 || own != 0 || err != nil {
		t.Fatalf("Listeners(this process, %s, bound but not listening) = %d, %d, %v; want 0, 0", dead, all, own, err)
	}
	if _, _, err := Listeners(os.Getpid(), "127.0.0.1"); err == nil {
		t.Fatal("an address without a port: no error")
	}
}
