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
// rarely, and should pick again. A Caddy binds with SO_REUSEPORT: two
// of them (the same user) that picked the same port both listen, with no
// error, and share the connections; Listeners shows it.
//
// A test that needs an address where connections are refused (a fixed
// entry or an execd that is down) takes Refusing, not Addr: a port that
// is merely free can be bound by any other test before the connection is
// tried, and the test then talks to that server instead.
//
// For the same reason a dial that succeeds does not show that the server a
// test started is the one listening on a picked port: when the port was
// taken meanwhile, the dial reaches the other process while the test's
// server fails to bind, or, when both set SO_REUSEPORT as Caddy does,
// both listen and share the connections. Listeners tells these apart, at
// the moment it is called (its doc says what that does not cover), and
// ListeningAlone is the start check built on it.
package freeport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

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

// Listeners counts the TCP sockets listening on an address that overlaps
// addr ("host:port"): all of them, and own, those process pid holds.
// own == all > 0 is the only answer that shows the process alone serves
// the address: own == 0 means another process answers there (the process
// has not listened yet, or failed to bind), and 0 < own < all that it
// shares the address with another process, each accepting some of the
// connections (sockets bound with SO_REUSEPORT by the same user, as
// Caddy's are, do not collide).
//
// A listening socket counts when it is on addr's port and its local
// address overlaps addr's host, that is when a connection to one could be
// accepted by the other: the two addresses are equal, or one of them is
// the unspecified address of its family. 0.0.0.0 overlaps every IPv4
// address; :: overlaps every IPv6 address and, as a socket on [::]
// without IPV6_V6ONLY accepts IPv4 connections too, every IPv4 address
// as well (whether a socket has IPV6_V6ONLY is not visible in the socket
// tables, so :: is taken to overlap IPv4 always: a v6-only socket there
// is counted although it would not share). An IPv4-mapped IPv6 address
// (::ffff:a.b.c.d) is taken as its IPv4 address. So a socket of another
// process on [::1]:p or 10.0.0.1:p does not count for 127.0.0.1:p, one
// on 0.0.0.0:p or [::]:p does. addr's host must be an IP literal (an
// IPv6 zone is ignored) or empty; empty overlaps every address. A host
// name is an error: nothing is resolved.
//
// What the answer guarantees holds for the moment of the call only: a
// process that listens on an overlapping address later (another Caddy
// that picked the same port, with SO_REUSEPORT) is not noticed by an
// earlier check, and from then on it receives part of the new
// connections; only a check that process makes after it listens sees
// the sharing.
//
// It reads the kernel's socket tables of the caller's network namespace
// (/proc/net/tcp and tcp6) and the process's descriptors (/proc/<pid>/fd),
// so it needs the right to read those (the same user, or root). A process
// that has exited holds nothing: its fd directory does not exist and
// signal 0 finds no such process (ESRCH); a descriptor that closes while
// it is read is skipped. The error is a malformed addr, a host name in
// it, or a /proc read that failed otherwise, such as a descriptor
// directory or link it may not read (EACCES or EPERM: another user's
// process, hidepid=1, ptrace_scope), which is named in the error. With
// hidepid=2 the directory of another user's process does not exist for
// the caller while the process does (signal 0 answers EPERM, or nothing):
// that is an error too, naming the directory and wrapping
// fs.ErrPermission (the signal's EPERM when there is one).
func Listeners(pid int, addr string) (all, own int, err error) {
	return procFS{root: "/proc", readDir: os.ReadDir, readlink: os.Readlink, kill: syscall.Kill}.listeners(pid, addr)
}

// procFS is where listeners reads /proc: root is its directory (a fake
// one in tests), readDir and readlink read a process's descriptors, kill
// sends signal 0 to a process whose descriptor directory is missing
// (syscall.Kill; a fake in tests).
type procFS struct {
	root     string
	readDir  func(string) ([]fs.DirEntry, error)
	readlink func(string) (string, error)
	kill     func(pid int, sig syscall.Signal) error
}

// listeners is Listeners reading p.
func (p procFS) listeners(pid int, addr string) (all, own int, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, 0, fmt.Errorf("freeport: %w", err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 || n > 65535 {
		return 0, 0, fmt.Errorf("freeport: port %q of %q", port, addr)
	}
	var want netip.Addr // invalid: any address
	if host != "" {
		if want, err = netip.ParseAddr(host); err != nil {
			return 0, 0, fmt.Errorf("freeport: host %q of %q is not an IP address (names are not resolved)", host, addr)
		}
		want = want.WithZone("").Unmap()
	}
	inodes := map[string]bool{}
	for _, table := range []string{"net/tcp", "net/tcp6"} {
		data, err := os.ReadFile(filepath.Join(p.root, table))
		if errors.Is(err, fs.ErrNotExist) && table == "net/tcp6" {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return 0, 0, fmt.Errorf("freeport: %w", err)
		}
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) <= 9 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			local, lport, ok := decodeLocal(f[1])
			if ok && lport == n && (!want.IsValid() || overlaps(local, want)) {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0, 0, nil
	}
	dir := filepath.Join(p.root, strconv.Itoa(pid), "fd")
	fds, err := p.readDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// Exited, or hidden from the caller (hidepid=2): signal 0 tells
		// them apart. (A zombie's directory exists, empty.)
		if pid <= 0 {
			return len(inodes), 0, nil // no such process: kill would signal a group
		}
		switch kerr := p.kill(pid, 0); {
		case errors.Is(kerr, syscall.ESRCH):
			return len(inodes), 0, nil
		case kerr == nil || errors.Is(kerr, syscall.EPERM):
			return 0, 0, fmt.Errorf("freeport: %s does not exist but process %d does: "+
				"/proc hides it from this user (hidepid=2), so its sockets cannot be read: %w", dir, pid, hiddenErr(kerr))
		default:
			return 0, 0, fmt.Errorf("freeport: %s does not exist; signal 0 to process %d: %w", dir, pid, kerr)
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("freeport: %w", err)
	}
	held := map[string]bool{}
	for _, fd := range fds {
		link, err := p.readlink(filepath.Join(dir, fd.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // closed since the directory was read
		}
		if err != nil {
			return 0, 0, fmt.Errorf("freeport: %w", err)
		}
		if inodes[link] {
			held[link] = true
		}
	}
	return len(inodes), len(held), nil
}

// hiddenErr is what the error of a hidden process wraps: the signal's
// error (EPERM, which is an fs.ErrPermission), or fs.ErrPermission when
// the signal went through.
func hiddenErr(kerr error) error {
	if kerr != nil {
		return kerr
	}
	return fs.ErrPermission
}

// decodeLocal decodes a local_address of /proc/net/tcp or tcp6: the
// address in hex, as the kernel's 32-bit words print in the machine's
// byte order (one word for IPv4, 0100007F for 127.0.0.1 on a
// little-endian machine; four for IPv6), a colon and the port in hex. An
// IPv4-mapped IPv6 address comes back as its IPv4 address. ok is false
// for a malformed field.
func decodeLocal(field string) (addr netip.Addr, port int, ok bool) {
	h, p, found := strings.Cut(field, ":")
	if !found {
		return netip.Addr{}, 0, false
	}
	pn, err := strconv.ParseUint(p, 16, 16)
	if err != nil || (len(h) != 8 && len(h) != 32) {
		return netip.Addr{}, 0, false
	}
	b := make([]byte, 0, 16)
	for i := 0; i < len(h); i += 8 {
		w, err := strconv.ParseUint(h[i:i+8], 16, 32)
		if err != nil {
			return netip.Addr{}, 0, false
		}
		b = binary.NativeEndian.AppendUint32(b, uint32(w))
	}
	addr, _ = netip.AddrFromSlice(b)
	return addr.Unmap(), int(pn), true
}

// overlaps reports whether a socket listening on a and one on b (both
// unmapped, without a zone) could accept each other's connections: equal
// addresses, 0.0.0.0 and any IPv4 address, :: and any address.
func overlaps(a, b netip.Addr) bool {
	switch {
	case a == b:
		return true
	case a == netip.IPv6Unspecified() || b == netip.IPv6Unspecified():
		return true
	case a.Is4() && b.Is4():
		return a.IsUnspecified() || b.IsUnspecified()
	}
	return false
}

// ListenShared listens on addr ("host:port"; port 0 lets the kernel pick)
// over TCP with SO_REUSEPORT set, as Caddy's listeners are: for a test
// that stands in for another Caddy on a port, which a second
// SO_REUSEPORT listener of the same user binds with no error and shares
// (what Listeners detects). The error is the listen's.
func ListenShared(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(ctx, "tcp", addr)
}

// ErrShared reports that a process listens on an address together with
// another process (ListeningAlone).
var ErrShared = errors.New("another process listens there too")

// ListeningAlone is the start check of a server process pid on addr, by
// Listeners: true when pid holds every socket listening on an address
// overlapping addr (own == all > 0); false with a nil error when pid holds
// none yet (it has not listened, or another process alone answers there
// and pid will fail to bind); an error wrapping ErrShared, naming addr,
// when pid and another process both listen there (SO_REUSEPORT). Other
// errors are Listeners'. It holds at the moment of the call only, as
// Listeners does.
func ListeningAlone(pid int, addr string) (bool, error) {
	all, own, err := Listeners(pid, addr)
	if err != nil {
		return false, err
	}
	return alone(addr, all, own)
}

// alone is ListeningAlone's reading of Listeners' counts for addr.
func alone(addr string, all, own int) (bool, error) {
	switch {
	case own == 0:
		return false, nil
	case own < all:
		return false, fmt.Errorf("%s: %w", addr, ErrShared)
	}
	return true, nil
}
