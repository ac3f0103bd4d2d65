package freeport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

	a, err := ListenShared(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ListenShared(t.Context(), a.Addr().String())
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

// TestDecodeLocal: local_address fields as a little-endian machine's
// /proc/net/tcp and tcp6 print them decode to the address and port.
func TestDecodeLocal(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Fatal("these fixtures are a little-endian machine's tables; this machine is big-endian")
	}
	for _, tc := range []struct {
		field string
		want  string
		port  int
	}{
		{"0100007F:1F90", "127.0.0.1", 8080},
		{"00000000:0050", "0.0.0.0", 80},
		{"0100000A:2710", "10.0.0.1", 10000},
		{"00000000000000000000000001000000:1F90", "::1", 8080},
		{"00000000000000000000000000000000:1F90", "::", 8080},
		{"0000000000000000FFFF00000100007F:1F90", "127.0.0.1", 8080}, // ::ffff:127.0.0.1
		{"B80D0120000000000000000001000000:0016", "2001:db8::1", 22},
	} {
		addr, port, ok := decodeLocal(tc.field)
		if !ok || addr.String() != tc.want || port != tc.port {
			t.Errorf("decodeLocal(%q) = %v, %d, %v; want %s, %d", tc.field, addr, port, ok, tc.want, tc.port)
		}
	}
	for _, bad := range []string{"0100007F", "0100007F:", "0100007:1F90", "0100007G:1F90", "0100007F:10000", "000000000000000000000000010000:1F90"} {
		if _, _, ok := decodeLocal(bad); ok {
			t.Errorf("decodeLocal(%q) ok", bad)
		}
	}
}

// TestOverlaps: equal addresses overlap, 0.0.0.0 every IPv4 address, ::
// every address; distinct specific addresses and 0.0.0.0 with an IPv6
// address do not.
func TestOverlaps(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"0.0.0.0", "127.0.0.1", true},
		{"10.0.0.1", "0.0.0.0", true},
		{"::", "127.0.0.1", true},
		{"::", "::1", true},
		{"::1", "::", true},
		{"::1", "::1", true},
		{"::1", "127.0.0.1", false},
		{"10.0.0.1", "127.0.0.1", false},
		{"0.0.0.0", "::1", false},
		{"::1", "2001:db8::1", false},
	} {
		if got := overlaps(netip.MustParseAddr(tc.a), netip.MustParseAddr(tc.b)); got != tc.want {
			t.Errorf("overlaps(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// fakeProc writes a /proc of listening sockets: tcp and tcp6 hold the
// lines (local_address, inode), and process pid's fd directory links to
// the sockets of held.
func fakeProc(t *testing.T, pid int, tcp, tcp6 [][2]string, held ...string) procFS {
	t.Helper()
	root := t.TempDir()
	write := func(name string, lines [][2]string) {
		var b strings.Builder
		b.WriteString("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n")
		for i, l := range lines {
			rem := "00000000:0000"
			if len(l[0]) > 13 {
				rem = "00000000000000000000000000000000:0000"
			}
			fmt.Fprintf(&b, "%4d: %s %s 0A 00000000:00000000 00:00000000 00000000     0        0 %s 1 0000000000000000 100 0 0 10 0\n", i, l[0], rem, l[1])
		}
		if err := os.WriteFile(filepath.Join(root, "net", name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd := filepath.Join(root, strconv.Itoa(pid), "fd")
	if err := os.MkdirAll(filepath.Join(root, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(fd, 0o755); err != nil {
		t.Fatal(err)
	}
	write("tcp", tcp)
	write("tcp6", tcp6)
	for i, inode := range held {
		if err := os.Symlink("socket:["+inode+"]", filepath.Join(fd, strconv.Itoa(i+3))); err != nil {
			t.Fatal(err)
		}
	}
	return procFS{root: root, readDir: os.ReadDir, readlink: os.Readlink, kill: func(int, syscall.Signal) error {
		t.Fatal("signal 0 sent although the process's fd directory exists")
		return nil
	}}
}

// TestListenersOverlap: of a fake /proc's listeners on port 8080 (1F90),
// only those whose address overlaps the asked host count; sockets of
// another port and non-listening ones never do; a host name is an error.
func TestListenersOverlap(t *testing.T) {
	const pid = 4242
	p := fakeProc(t, pid,
		[][2]string{{"0100007F:1F90", "101"}, {"0100000A:1F90", "102"}, {"0100007F:1F91", "103"}},
		[][2]string{{"00000000000000000000000001000000:1F90", "201"}, {"0000000000000000FFFF00000100007F:1F90", "202"}},
		"101", "201")
	for _, tc := range []struct {
		addr     string
		all, own int
	}{
		{"127.0.0.1:8080", 2, 1}, // 101 and ::ffff:127.0.0.1 (202); not 10.0.0.1, not ::1
		{"[::ffff:127.0.0.1]:8080", 2, 1},
		{"10.0.0.1:8080", 1, 0},
		{"[::1]:8080", 1, 1},
		{"0.0.0.0:8080", 3, 1},
		{"[::]:8080", 4, 2},
		{":8080", 4, 2},
		{"[fe80::1%lo]:8080", 0, 0},
		{"127.0.0.1:8081", 1, 0},
		{"127.0.0.2:8080", 0, 0},
	} {
		all, own, err := p.listeners(pid, tc.addr)
		if all != tc.all || own != tc.own || err != nil {
			t.Errorf("listeners(%s) = %d, %d, %v; want %d, %d", tc.addr, all, own, err, tc.all, tc.own)
		}
	}
	wild := fakeProc(t, pid, [][2]string{{"00000000:1F90", "301"}},
		[][2]string{{"00000000000000000000000000000000:1F90", "302"}}, "302")
	for _, tc := range []struct {
		addr     string
		all, own int
	}{
		{"127.0.0.1:8080", 2, 1},
		{"10.0.0.1:8080", 2, 1},
		{"[::1]:8080", 1, 1}, // 0.0.0.0 does not take IPv6 connections
	} {
		all, own, err := wild.listeners(pid, tc.addr)
		if all != tc.all || own != tc.own || err != nil {
			t.Errorf("listeners(%s) with 0.0.0.0 and :: = %d, %d, %v; want %d, %d", tc.addr, all, own, err, tc.all, tc.own)
		}
	}
	if _, _, err := p.listeners(pid, "localhost:8080"); err == nil || !strings.Contains(err.Error(), "localhost") {
		t.Fatalf("listeners(localhost:8080) = %v, want an error naming the host", err)
	}
}

// TestListenersIPv6LoopbackApart: a socket this process listens on at
// [::1]:p (SO_REUSEPORT, as Caddy binds) does not count for 127.0.0.1:p,
// nor the other way round; one on [::]:p counts for both.
func TestListenersIPv6LoopbackApart(t *testing.T) {
	v4, err := reuseport.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer v4.Close()
	_, port, _ := net.SplitHostPort(v4.Addr().String())
	v6, err := reuseport.Listen(t.Context(), "tcp6", "[::1]:"+port)
	if err != nil {
		t.Fatalf("listening on [::1]:%s: %v (this test needs the IPv6 loopback address ::1, which this machine does not have or refuses)", port, err)
	}
	defer v6.Close()
	for _, addr := range []string{"127.0.0.1:" + port, "[::1]:" + port} {
		if all, own, err := Listeners(os.Getpid(), addr); all != 1 || own != 1 || err != nil {
			t.Fatalf("Listeners(this process, %s) with 127.0.0.1 and ::1 = %d, %d, %v; want 1, 1", addr, all, own, err)
		}
	}
	any6, err := reuseport.Listen(t.Context(), "tcp", "[::]:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer any6.Close()
	for _, addr := range []string{"127.0.0.1:" + port, "[::1]:" + port} {
		if all, own, err := Listeners(os.Getpid(), addr); all != 2 || own != 2 || err != nil {
			t.Fatalf("Listeners(this process, %s) with :: too = %d, %d, %v; want 2, 2", addr, all, own, err)
		}
	}
}

// reuseport listens with SO_REUSEPORT, as Caddy does.
var reuseport = net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
		return err
	}
	return serr
}}

// TestListenersReadErrors: a descriptor that vanished while its directory
// was read (ENOENT) is skipped; a descriptor link or a descriptor
// directory the caller may not read (EACCES, EPERM: a restricted /proc)
// is an error naming the path, not a process that holds nothing; a
// process whose directory does not exist holds nothing when signal 0
// finds no such process (exited), and is an error naming the directory
// when it finds one (EPERM, or no error: /proc mounted with hidepid=2
// hides another user's process) or fails otherwise.
func TestListenersReadErrors(t *testing.T) {
	const pid = 4343
	p := fakeProc(t, pid, [][2]string{{"0100007F:1F90", "101"}}, nil, "101")
	fd := filepath.Join(p.root, strconv.Itoa(pid), "fd")
	if err := os.Symlink("socket:[999]", filepath.Join(fd, "9")); err != nil {
		t.Fatal(err)
	}
	vanished := filepath.Join(fd, "9")
	denied := filepath.Join(fd, "3")
	// missing is the descriptor directory of a process that has exited,
	// or that /proc hides (hidepid=2); answer is signal 0's answer.
	missing := func(path string) ([]fs.DirEntry, error) {
		return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	answer := func(err error) func(int, syscall.Signal) error {
		return func(p int, sig syscall.Signal) error {
			if p != pid || sig != 0 {
				t.Errorf("kill(%d, %d); want kill(%d, 0)", p, sig, pid)
			}
			return err
		}
	}
	for _, tc := range []struct {
		name     string
		readlink func(string) (string, error)
		readDir  func(string) ([]fs.DirEntry, error)
		kill     func(int, syscall.Signal) error
		all, own int
		errPath  string
		errno    error // what the error wraps
	}{
		{name: "closed meanwhile", all: 1, own: 1, readlink: func(path string) (string, error) {
			if path == vanished {
				return "", &fs.PathError{Op: "readlink", Path: path, Err: syscall.ENOENT}
			}
			return os.Readlink(path)
		}},
		{name: "link denied", errPath: denied, errno: syscall.EACCES, readlink: func(path string) (string, error) {
			if path == denied {
				return "", &fs.PathError{Op: "readlink", Path: path, Err: syscall.EACCES}
			}
			return os.Readlink(path)
		}},
		{name: "link not permitted", errPath: vanished, errno: syscall.EPERM, readlink: func(path string) (string, error) {
			if path == vanished {
				return "", &fs.PathError{Op: "readlink", Path: path, Err: syscall.EPERM}
			}
			return os.Readlink(path)
		}},
		{name: "directory denied", errPath: fd, errno: syscall.EACCES, readDir: func(path string) ([]fs.DirEntry, error) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.EACCES}
		}},
		{name: "directory not permitted", errPath: fd, errno: syscall.EPERM, readDir: func(path string) ([]fs.DirEntry, error) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.EPERM}
		}},
		{name: "exited", all: 1, own: 0, readDir: missing, kill: answer(syscall.ESRCH)},
		{name: "hidden (hidepid=2), another user's", errPath: fd, errno: syscall.EPERM, readDir: missing, kill: answer(syscall.EPERM)},
		{name: "hidden (hidepid=2), signal allowed", errPath: fd, errno: fs.ErrPermission, readDir: missing, kill: answer(nil)},
		{name: "signal 0 fails otherwise", errPath: fd, errno: syscall.EINVAL, readDir: missing, kill: answer(syscall.EINVAL)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := p
			if tc.readlink != nil {
				q.readlink = tc.readlink
			}
			if tc.readDir != nil {
				q.readDir = tc.readDir
			}
			if tc.kill != nil {
				q.kill = tc.kill
			}
			all, own, err := q.listeners(pid, "127.0.0.1:8080")
			if tc.errPath == "" {
				if all != tc.all || own != tc.own || err != nil {
					t.Fatalf("listeners = %d, %d, %v; want %d, %d", all, own, err, tc.all, tc.own)
				}
				return
			}
			if err == nil || !errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.errPath) {
				t.Fatalf("listeners = %d, %d, %v; want an error %v naming %s", all, own, err, tc.errno, tc.errPath)
			}
		})
	}
}

// TestListeningAlone: the start check reads Listeners' counts as alone
// (every socket the process's), not yet (none of them its), or shared
// (ErrShared, naming the address); on this process's own listener it
// answers alone, for a process without one not yet.
func TestListeningAlone(t *testing.T) {
	for _, tc := range []struct {
		all, own int
		alone    bool
		shared   bool
	}{
		{0, 0, false, false}, {1, 0, false, false}, {1, 1, true, false}, {2, 2, true, false}, {2, 1, false, true},
	} {
		got, err := alone("127.0.0.1:1", tc.all, tc.own)
		if got != tc.alone || errors.Is(err, ErrShared) != tc.shared || (err != nil) != tc.shared {
			t.Errorf("alone(all %d, own %d) = %v, %v; want %v, shared %v", tc.all, tc.own, got, err, tc.alone, tc.shared)
		}
		if tc.shared && !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("the shared error %q does not name the address", err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, err := ListeningAlone(os.Getpid(), l.Addr().String()); !got || err != nil {
		t.Fatalf("ListeningAlone(this process, its listener) = %v, %v; want true", got, err)
	}
	if got, err := ListeningAlone(os.Getppid(), l.Addr().String()); got || err != nil {
		t.Fatalf("ListeningAlone(the parent, this process's listener) = %v, %v; want false, nil", got, err)
	}
}
