// Package freeport picks loopback TCP ports for test and benchmark
// servers whose address must be written into a configuration (a
// Caddyfile, corectl's cluster file, a node's config) before the server
// binds it.
//
// Binding ":0" and closing the listener, the usual way, leaves a window in
// which the port can be taken: the kernel hands out the same ephemeral
// range for every other process's outgoing connections and ":0"
// listeners, and on a machine running a test suite in parallel one of
// them sometimes gets it ("bind: address already in use" in CI). The
// ports here are picked at random below the ephemeral range
// (net.ipv4.ip_local_port_range, read from /proc), where nothing is
// handed out automatically; only an explicit bind to the same number can
// still collide, so callers that bind later may still see EADDRINUSE,
// rarely, and should pick again.
//
// A test that needs an address where connections are refused (a fixed
// entry or an execd that is down) takes Refusing, not Addr: a port that
// is merely free can be bound by any other test before the connection is
// tried, and the test then talks to that server instead.
package freeport

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// lowest is the lowest port picked; below it live well-known and
// registered services.
const lowest = 10000

// Addr returns "127.0.0.1:<port>" with a port that was free a moment ago:
// one below the ephemeral range when the range can be read and starts
// above lowest+1, else one the kernel picks. The error is the listen
// error of the fallback (the loopback interface is unusable).
func Addr() (string, error) {
	if low := ephemeralLow(); low > lowest+1 {
		for range 100 {
			port := lowest + rand.IntN(low-lowest)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				addr := l.Addr().String()
				l.Close()
				return addr, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Port returns the port of Addr, as decimal text.
func Port() (string, error) {
	addr, err := Addr()
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(addr)
	return port, err
}

// ephemeralLow returns the first port of the kernel's ephemeral range,
// 0 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}

// Refusing returns "127.0.0.1:<port>" where every TCP connection is
// refused (ECONNREFUSED: the kernel answers the SYN with a reset) until
// the returned Closer is closed. A socket bound to the port that never
// listens holds it: without SO_REUSEADDR or SO_REUSEPORT on it, no other
// socket of the machine can bind that port, and no outgoing connection
// is given it, so nothing can start answering there while the caller
// counts on the refusal. The port is the kernel's pick. The error is the
// socket, bind or getsockname error (the loopback interface is unusable).
// Close releases the port; calling it again returns nil.
func Refusing() (string, io.Closer, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("freeport: socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return "", nil, fmt.Errorf("freeport: bind 127.0.0.1:0: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return "", nil, fmt.Errorf("freeport: getsockname: %w", err)
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		unix.Close(fd)
		return "", nil, errors.New("freeport: getsockname: not an IPv4 address")
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port)), &heldPort{fd: fd}, nil
}

// heldPort is Refusing's Closer: the bound socket's descriptor.
type heldPort struct {
	once sync.Once
	fd   int
}

// Close closes the socket once; the port is free again after it.
func (h *heldPort) Close() error {
	var err error
	h.once.Do(func() { err = unix.Close(h.fd) })
	return err
}
