package lease

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/strictjson"
)

const (
	testInstallation = "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60"
	testDigest       = "1111111111111111111111111111111111111111111111111111111111111111"
	otherDigest      = "2222222222222222222222222222222222222222222222222222222222222222"
)

func want(g int64) Want {
	return Want{InstallationID: testInstallation, Generation: g, SpecificationDigest: testDigest}
}

func privateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "generations")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMain doubles as the helper process of the inheritance tests: with
// LEASE_TEST_CHILD set, the binary adopts descriptor 3 as a helper does,
// reports the descriptor's close-on-exec flag, and holds the lease until
// its stdin closes. With LEASE_TEST_CREATE set it runs Create (under
// whatever SANDGATE_CRASHPOINT says).
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("LEASE_TEST_CHILD") != "":
		dir := os.Getenv("LEASE_TEST_DIR")
		g, _ := strconv.ParseInt(os.Getenv("LEASE_TEST_GEN"), 10, 64)
		mode := Shared
		if os.Getenv("LEASE_TEST_CHILD") == "exclusive" {
			mode = Exclusive
		}
		l, err := Inherited(3, dir, want(g), mode)
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		flags, _ := unix.FcntlInt(3, unix.F_GETFD, 0)
		os.Stdout.WriteString("ok cloexec=" + strconv.FormatBool(flags&unix.FD_CLOEXEC != 0) + "\n")
		bufio.NewReader(os.Stdin).ReadString('\n')
		l.Close()
		os.Exit(0)
	case os.Getenv("LEASE_TEST_ACQUIRE") != "":
		g, _ := strconv.ParseInt(os.Getenv("LEASE_TEST_GEN"), 10, 64)
		l, err := Acquire(os.Getenv("LEASE_TEST_DIR"), want(g), Exclusive)
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		l.Close()
		os.Stdout.WriteString("ok\n")
		os.Exit(0)
	case os.Getenv("LEASE_TEST_CREATE") != "":
		g, _ := strconv.ParseInt(os.Getenv("LEASE_TEST_GEN"), 10, 64)
		if _, err := Create(os.Getenv("LEASE_TEST_DIR"), want(g)); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestCreateWritesLeaseAndIdentity(t *testing.T) {
	dir := privateDir(t)
	id, err := Create(dir, want(7))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(Path(dir, 7))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o600 || st.Ino != id.Inode || uint64(st.Dev) != id.Device {
		t.Fatalf("lease mode %v inode %d, identity %+v", fi.Mode(), st.Ino, id)
	}
	got, err := ReadIdentity(dir, 7)
	if err != nil || got != id {
		t.Fatalf("ReadIdentity = %+v, %v; want %+v", got, err, id)
	}
	if _, err := Create(dir, want(7)); !errors.Is(err, ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	if st2, _ := os.Lstat(Path(dir, 7)); st2.Sys().(*syscall.Stat_t).Ino != id.Inode {
		t.Fatal("the second Create replaced the lease")
	}
}

func TestSharedAndExclusiveExcludeEachOther(t *testing.T) {
	dir := privateDir(t)
	if _, err := Create(dir, want(3)); err != nil {
		t.Fatal(err)
	}
	a, err := Acquire(dir, want(3), Shared)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Acquire(dir, want(3), Shared)
	if err != nil {
		t.Fatalf("a second shared holder: %v", err)
	}
	if _, err := Acquire(dir, want(3), Exclusive); !errors.Is(err, ErrBusy) {
		t.Fatalf("exclusive while shared held: %v, want ErrBusy", err)
	}
	a.Close()
	if _, err := Acquire(dir, want(3), Exclusive); !errors.Is(err, ErrBusy) {
		t.Fatalf("exclusive while one shared holder remains: %v, want ErrBusy", err)
	}
	b.Close()
	x, err := Acquire(dir, want(3), Exclusive)
	if err != nil {
		t.Fatalf("exclusive after every shared holder closed: %v", err)
	}
	if _, err := Acquire(dir, want(3), Shared); !errors.Is(err, ErrBusy) {
		t.Fatalf("shared while exclusive held: %v, want ErrBusy", err)
	}
	if _, err := Acquire(dir, want(3), Exclusive); !errors.Is(err, ErrBusy) {
		t.Fatalf("second exclusive: %v, want ErrBusy", err)
	}
	x.Close()
}

// A duplicate of the descriptor shares the open file description: closing
// the node's copy does not release the lock a helper's copy holds.
func TestLockOutlivesTheNodesCopy(t *testing.T) {
	dir := privateDir(t)
	if _, err := Create(dir, want(4)); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(dir, want(4), Shared)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(l.File().Fd()))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := Acquire(dir, want(4), Exclusive); !errors.Is(err, ErrBusy) {
		t.Fatalf("exclusive while the duplicate is open: %v, want ErrBusy", err)
	}
	unix.Close(dup)
	x, err := Acquire(dir, want(4), Exclusive)
	if err != nil {
		t.Fatalf("exclusive after the last copy closed: %v", err)
	}
	x.Close()
}

// startChild starts this test binary as a helper that inherits l as
// descriptor 3 and waits for its first line.
func startChild(t *testing.T, dir string, g int64, l *Lease, mode string) (*exec.Cmd, *os.File, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LEASE_TEST_CHILD="+mode, "LEASE_TEST_DIR="+dir, "LEASE_TEST_GEN="+strconv.FormatInt(g, 10))
	cmd.ExtraFiles = []*os.File{l.File()}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	return cmd, stdin.(*os.File), strings.TrimSpace(line)
}

func TestHelperInheritsTheLockAndSetsCloseOnExec(t *testing.T) {
	dir := privateDir(t)
	if _, err := Create(dir, want(5)); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(dir, want(5), Shared)
	if err != nil {
		t.Fatal(err)
	}
	cmd, stdin, line := startChild(t, dir, 5, l, "shared")
	if line != "ok cloexec=true" {
		t.Fatalf("helper said %q, want ok cloexec=true", line)
	}
	// The node closes its copy (as it may when the caller is cancelled,
	// or as happens when it exits): the helper still holds the lease.
	l.Close()
	if _, err := Acquire(dir, want(5), Exclusive); !errors.Is(err, ErrBusy) {
		t.Fatalf("exclusive while the helper runs: %v, want ErrBusy", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	x, err := Acquire(dir, want(5), Exclusive)
	if err != nil {
		t.Fatalf("exclusive after the helper exited: %v", err)
	}
	x.Close()
}

func TestInheritedRefusesADescriptorWithoutTheLock(t *testing.T) {
	dir := privateDir(t)
	if _, err := Create(dir, want(6)); err != nil {
		t.Fatal(err)
	}
	x, err := Acquire(dir, want(6), Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	// A descriptor of the same file that holds no lock, while another
	// description holds the exclusive one.
	f, err := os.OpenFile(Path(dir, 6), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd, stdin, line := startChild(t, dir, 6, &Lease{f: f}, "shared")
	stdin.Close()
	cmd.Wait()
	if !strings.HasPrefix(line, "error ") || !strings.Contains(line, ErrBusy.Error()) {
		t.Fatalf("helper said %q, want an ErrBusy error", line)
	}
}

func TestAcquireRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  Want
		err   error
	}{
		{"no lease", func(t *testing.T, dir string) {}, want(9), ErrNotFound},
		{"identity missing", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			os.Remove(IdentityPath(dir, 9))
		}, want(9), ErrIdentityMissing},
		{"other digest", func(t *testing.T, dir string) { mustCreate(t, dir, 9) },
			Want{InstallationID: testInstallation, Generation: 9, SpecificationDigest: otherDigest}, ErrMismatch},
		{"other installation", func(t *testing.T, dir string) { mustCreate(t, dir, 9) },
			Want{InstallationID: "7c0e5f0a-4c1e-4e55-9a7e-2f1f6d1b9a01", Generation: 9, SpecificationDigest: testDigest}, ErrMismatch},
		{"replaced lease, consistent metadata", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			tmp := filepath.Join(dir, "new")
			os.WriteFile(tmp, nil, 0o600)
			os.Rename(tmp, Path(dir, 9))
		}, want(9), ErrReplaced},
		{"symlink", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			os.Rename(Path(dir, 9), filepath.Join(dir, "real"))
			os.Symlink("real", Path(dir, 9))
		}, want(9), ErrUnsafe},
		{"second hard link", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			os.Link(Path(dir, 9), filepath.Join(dir, "alias"))
		}, want(9), ErrUnsafe},
		{"group readable lease", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			os.Chmod(Path(dir, 9), 0o640)
		}, want(9), ErrUnsafe},
		{"foreign owner", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			if err := os.Chown(Path(dir, 9), 65534, 65534); err != nil {
				t.Fatalf("chown (the tests run as root): %v", err)
			}
		}, want(9), ErrUnsafe},
		{"identity record world readable", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			os.Chmod(IdentityPath(dir, 9), 0o644)
		}, want(9), ErrUnsafe},
		{"identity record symlink", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			os.Rename(IdentityPath(dir, 9), filepath.Join(dir, "id"))
			os.Symlink("id", IdentityPath(dir, 9))
		}, want(9), ErrUnsafe},
		{"identity record malformed", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			WriteAtomic(IdentityPath(dir, 9), []byte(`{"installation_id":null}`))
		}, want(9), ErrInvalid},
		{"identity record with an unknown member", func(t *testing.T, dir string) {
			id := mustCreate(t, dir, 9)
			b := `{"installation_id":"` + id.InstallationID + `","generation":9,"specification_digest":"` + testDigest +
				`","device":` + strconv.FormatUint(id.Device, 10) + `,"inode":` + strconv.FormatUint(id.Inode, 10) + `,"extra":1}`
			WriteAtomic(IdentityPath(dir, 9), []byte(b))
		}, want(9), ErrInvalid},
		{"identity record too large", func(t *testing.T, dir string) {
			mustCreate(t, dir, 9)
			WriteAtomic(IdentityPath(dir, 9), make([]byte, maxIdentity+1))
		}, want(9), ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := privateDir(t)
			c.setup(t, dir)
			before := snapshot(t, dir)
			for _, mode := range []Mode{Shared, Exclusive} {
				if l, err := Acquire(dir, c.want, mode); !errors.Is(err, c.err) {
					if l != nil {
						l.Close()
					}
					t.Fatalf("Acquire(%v) = %v, want %v", mode, err, c.err)
				}
			}
			if after := snapshot(t, dir); after != before {
				t.Fatalf("a refused Acquire changed the directory:\n%s\n→\n%s", before, after)
			}
		})
	}
}

// TestLeaseRecreatedWithAMatchingRecordIsRefused: a lease removed from
// its path and recreated, with an identity record rewritten to match the
// new file, looks consistent on disk; the process that verified the
// original refuses it (Acquire in both modes, Check) and Create does not
// give the generation a second lease.
func TestLeaseRecreatedWithAMatchingRecordIsRefused(t *testing.T) {
	dir := privateDir(t)
	orig := mustCreate(t, dir, 9)
	l, err := Acquire(dir, want(9), Shared)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()

	// The original leaves the path (kept aside, so its inode number is not
	// reused) and its record is removed.
	if err := os.Rename(Path(dir, 9), filepath.Join(dir, "aside")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(IdentityPath(dir, 9)); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(dir, want(9)); !errors.Is(err, ErrReplaced) {
		t.Fatalf("Create of a generation whose lease was removed = %v, want ErrReplaced", err)
	}
	os.Remove(Path(dir, 9)) // what the refused Create left: a lease file without a record

	// Someone recreates the lease and a record that matches it.
	f, err := os.OpenFile(Path(dir, 9), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	var st unix.Stat_t
	if err := unix.Stat(Path(dir, 9), &st); err != nil {
		t.Fatal(err)
	}
	forged := orig
	forged.Device, forged.Inode = uint64(st.Dev), st.Ino
	if forged == orig {
		t.Fatal("the new lease has the original's device and inode")
	}
	b, err := strictjson.Encode(forged)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(IdentityPath(dir, 9), b); err != nil {
		t.Fatal(err)
	}
	if id, err := ReadIdentity(dir, 9); err != nil || id != forged {
		t.Fatalf("the rewritten record reads %+v, %v", id, err)
	}

	for _, mode := range []Mode{Shared, Exclusive} {
		if l, err := Acquire(dir, want(9), mode); !errors.Is(err, ErrReplaced) {
			if l != nil {
				l.Close()
			}
			t.Fatalf("Acquire(%v) of the recreated lease = %v, want ErrReplaced", mode, err)
		}
	}
	if err := Check(dir, forged); !errors.Is(err, ErrReplaced) {
		t.Fatalf("Check of the recreated lease = %v, want ErrReplaced", err)
	}
}

func TestUnsafeDirectoryIsRefused(t *testing.T) {
	dir := privateDir(t)
	mustCreate(t, dir, 1)
	os.Chmod(dir, 0o777)
	if _, err := Acquire(dir, want(1), Shared); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Acquire in a world-writable directory: %v, want ErrUnsafe", err)
	}
	if _, err := Create(dir, want(2)); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Create in a world-writable directory: %v, want ErrUnsafe", err)
	}
}

// A crash between the durable lease and its identity record leaves the
// lease without a record: every takeover is refused, and the lease is
// kept (never replaced or removed) for inspection.
func TestCrashBeforeTheIdentityRecordRefusesTakeover(t *testing.T) {
	dir := privateDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LEASE_TEST_CREATE=1", "LEASE_TEST_DIR="+dir, "LEASE_TEST_GEN=12",
		"SANDGATE_CRASHPOINT="+CrashAfterLease)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the creating process ended with %v, want SIGKILL at the crash point", err)
	}
	fi, err := os.Lstat(Path(dir, 12))
	if err != nil {
		t.Fatalf("the lease is not durable after the crash: %v", err)
	}
	if _, err := os.Lstat(IdentityPath(dir, 12)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("identity record: %v, want none", err)
	}
	for _, mode := range []Mode{Shared, Exclusive} {
		if _, err := Acquire(dir, want(12), mode); !errors.Is(err, ErrIdentityMissing) {
			t.Fatalf("Acquire(%v) after the crash: %v, want ErrIdentityMissing", mode, err)
		}
	}
	if _, err := Create(dir, want(12)); !errors.Is(err, ErrExists) {
		t.Fatalf("Create after the crash: %v, want ErrExists", err)
	}
	fi2, _ := os.Lstat(Path(dir, 12))
	if !os.SameFile(fi, fi2) {
		t.Fatal("the lease was replaced")
	}
}

func TestWriteOnceNeverReplaces(t *testing.T) {
	dir := privateDir(t)
	p := filepath.Join(dir, "7.json")
	if err := WriteOnce(p, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := WriteOnce(p, []byte("second")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second WriteOnce: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "first" {
		t.Fatalf("contents %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

func TestInstallationLockSerialises(t *testing.T) {
	p := filepath.Join(privateDir(t), "install.lock")
	a, err := LockInstallation(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := LockInstallation(ctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: %v, want the context's deadline", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := LockInstallation(context.Background(), p)
		if err == nil {
			l.Close()
		}
		got <- err
	}()
	a.Close()
	if err := <-got; err != nil {
		t.Fatalf("lock after release: %v", err)
	}
}

func mustCreate(t *testing.T, dir string, g int64) Identity {
	t.Helper()
	id, err := Create(dir, want(g))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// snapshot describes every entry of dir (name, mode, inode, size).
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		b.WriteString(e.Name() + " " + fi.Mode().String() + " " + strconv.FormatUint(st.Ino, 10) + " " + strconv.FormatInt(fi.Size(), 10) + "\n")
	}
	return b.String()
}

// TestPathReplacedWhileLockingIsRefused: the lease's path is replaced by
// another file after Acquire opened and verified it but before the lock
// was taken (the child process stops there on a named pipe). Acquire
// must look again while holding the lock and refuse (ErrReplaced): the
// lock it holds is on a file that is no longer the lease.
func TestPathReplacedWhileLockingIsRefused(t *testing.T) {
	dir := privateDir(t)
	if _, err := Create(dir, want(13)); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "hold")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LEASE_TEST_ACQUIRE=1", "LEASE_TEST_DIR="+dir, "LEASE_TEST_GEN=13",
		"SANDGATE_CRASHPOINT="+CrashBeforeLock+"=hold:"+fifo)
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Opening the pipe for writing returns once the child holds at the
	// step.
	hold, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The locked file moves away (still one link, ours, private, the
	// recorded inode) and another takes its path.
	if err := os.Rename(Path(dir, 13), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(Path(dir, 13), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	hold.Write([]byte{1})
	hold.Close()
	cmd.Wait()
	if !strings.HasPrefix(out.String(), "error "+ErrReplaced.Error()) {
		t.Fatalf("Acquire across a replaced path: %q, want %v", out.String(), ErrReplaced)
	}
}
