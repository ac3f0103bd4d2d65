// Package lease is a deployment generation's lease on the node (spec
// node-protocol.md "Local retention and helper lifecycle"): a permanent,
// private file state/node/generations/<generation>.lease, bound by a
// persisted identity record (<generation>.lease-identity) to the
// installation, the generation, the specification digest and the file's
// device and inode numbers.
//
// A native helper runs under a shared flock(2) on the lease, taken by the
// node before the helper starts and inherited by it; reclamation and repair
// take the exclusive flock, non-blocking, and keep it while they mutate.
// Locks are only ever released by closing the descriptor (the last copy of
// the open file description), never by an explicit unlock, so neither a
// cancelled caller nor an exiting node releases a reference a running
// helper still holds.
//
// Every open verifies the identity record and the file: a symlink, a file
// with more than one hard link, a file owned by another user, a mode that
// lets group or others in, a missing identity record and a lease whose
// device or inode differ from the record (replaced) are all refused, before
// and after the lock is taken. A lease is never deleted or replaced by this
// package.
//
// The identity record alone cannot tell a lease removed and recreated,
// with a record rewritten to match, from the original: the process
// therefore remembers each lease's identity (device and inode included)
// the first time it creates or verifies it, and refuses with ErrReplaced
// any later lease or record of that generation that differs, however
// consistent the two look together. The node is the long-lived process
// that verifies every lease at start and before each helper or reclaimer
// it starts, so a takeover while it runs is refused; across a restart the
// persisted record is the witness.
package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/atomicfile"
	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/internal/crashpoint"
)

// Errors. Every error of this package wraps one of them (or is an I/O
// error of the file system).
var (
	// ErrExists: Create found a lease for the generation already.
	ErrExists = errors.New("lease: the generation already has a lease")
	// ErrNotFound: the generation has no lease file.
	ErrNotFound = errors.New("lease: the generation has no lease")
	// ErrIdentityMissing: the lease exists but its identity record does
	// not (an installation interrupted before the record was persisted, or
	// a record removed since): takeover is refused and the lease is kept
	// for inspection.
	ErrIdentityMissing = errors.New("lease: the identity record is missing; takeover refused, the lease is kept for inspection")
	// ErrMismatch: the identity record binds another installation,
	// generation or specification digest than the one asked for.
	ErrMismatch = errors.New("lease: the identity record binds another installation, generation or specification")
	// ErrReplaced: the lease's device or inode differ from the identity
	// record, the locked path was replaced while it was being locked, or
	// the lease and its record differ from the ones this process verified
	// before (a lease removed and recreated with a matching record).
	ErrReplaced = errors.New("lease: the lease file was replaced; takeover refused")
	// ErrUnsafe: a symlink, a file with several hard links, a file or
	// directory owned by another user, or a mode that lets group or others
	// in.
	ErrUnsafe = errors.New("lease: unsafe lease file or directory")
	// ErrBusy: the lock is held in a conflicting mode (a running helper
	// holds the shared lock, or a reclaimer or repair the exclusive one).
	ErrBusy = errors.New("lease: held by another helper, reclaimer or repair")
	// ErrInvalid: the identity record is malformed.
	ErrInvalid = errors.New("lease: malformed identity record")
)

// Mode is the lock mode of an acquired lease.
type Mode int

// Lock modes.
const (
	// Shared is the mode of native helpers: any number may hold it.
	Shared Mode = iota + 1
	// Exclusive is the mode of reclamation and repair: it excludes every
	// helper and every other reclaimer or repair.
	Exclusive
)

func (m Mode) flock() int {
	if m == Exclusive {
		return unix.LOCK_EX
	}
	return unix.LOCK_SH
}

// String returns "shared" or "exclusive".
func (m Mode) String() string {
	if m == Exclusive {
		return "exclusive"
	}
	return "shared"
}

// Identity is the persisted identity record of a lease
// (<generation>.lease-identity), JSON with exactly these members.
type Identity struct {
	// InstallationID is the installation's lowercase UUID.
	InstallationID string `json:"installation_id"`
	// Generation is the deployment generation, > 0.
	Generation int64 `json:"generation"`
	// SpecificationDigest is the generation's lowercase SHA-256 digest.
	SpecificationDigest string `json:"specification_digest"`
	// Device is the lease file's device number (stat st_dev).
	Device uint64 `json:"device"`
	// Inode is the lease file's inode number (stat st_ino).
	Inode uint64 `json:"inode"`
}

// Want is what a caller expects a lease to be bound to.
type Want struct {
	// InstallationID is this installation's UUID.
	InstallationID string
	// Generation is the deployment generation, > 0.
	Generation int64
	// SpecificationDigest is the generation's specification digest.
	SpecificationDigest string
}

func (w Want) valid() error {
	if !proto.IsUUID(w.InstallationID) || w.Generation <= 0 || !proto.IsDigest(w.SpecificationDigest) {
		return errors.New("lease: a lowercase installation UUID, a positive generation and a lowercase SHA-256 digest are required")
	}
	return nil
}

// identitySchema: every member of the identity record is required.
var identitySchema = strictjson.Schema{Required: map[string][]string{
	"": {"installation_id", "generation", "specification_digest", "device", "inode"}}}

// maxIdentity bounds the identity record, in bytes.
const maxIdentity = 4 << 10

// remembered holds, per identity record path, the identity this process
// first created or verified there (see the package comment).
var remembered = struct {
	sync.Mutex
	ids map[string]Identity
}{ids: map[string]Identity{}}

// remember records id as the lease of its generation in dir, or returns
// ErrReplaced when this process already knows a different one there.
func remember(dir string, id Identity) error {
	key := filepath.Clean(IdentityPath(dir, id.Generation))
	remembered.Lock()
	defer remembered.Unlock()
	if known, ok := remembered.ids[key]; ok {
		if known != id {
			return fmt.Errorf("%w: generation %d's lease or identity record differs from the one this process verified before", ErrReplaced, id.Generation)
		}
		return nil
	}
	remembered.ids[key] = id
	return nil
}

// Path returns the lease file of generation g in dir.
func Path(dir string, g int64) string {
	return filepath.Join(dir, strconv.FormatInt(g, 10)+".lease")
}

// IdentityPath returns the identity record of generation g's lease in dir.
func IdentityPath(dir string, g int64) string {
	return filepath.Join(dir, strconv.FormatInt(g, 10)+".lease-identity")
}

// Crash points of Create (see package crashpoint).
const (
	// CrashAfterLease: the lease file is created and durable, its identity
	// record is not.
	CrashAfterLease = "lease.after-create"
	// CrashBeforeLock: Acquire opened and verified the lease and has not
	// locked it yet (a test replaces the path there).
	CrashBeforeLock = "lease.before-lock"
)

// Create is the installer's first step for a new generation: it creates
// the lease exclusively (mode 0600) and fsyncs it and dir, then atomically
// persists the identity record and fsyncs it and dir. dir must exist and
// be private. Errors: ErrExists when the generation has a lease already
// (never replaced), ErrUnsafe for an unsafe dir, or an I/O error.
func Create(dir string, w Want) (Identity, error) {
	if err := w.valid(); err != nil {
		return Identity{}, err
	}
	if err := CheckDir(dir); err != nil {
		return Identity{}, err
	}
	path := Path(dir, w.Generation)
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return Identity{}, ErrExists
	}
	if err != nil {
		return Identity{}, fmt.Errorf("lease: create %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Identity{}, fmt.Errorf("lease: %w", err)
	}
	if err := f.Sync(); err != nil {
		return Identity{}, fmt.Errorf("lease: fsync %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return Identity{}, err
	}
	crashpoint.Hit(CrashAfterLease)
	id := Identity{InstallationID: w.InstallationID, Generation: w.Generation, SpecificationDigest: w.SpecificationDigest,
		Device: uint64(st.Dev), Inode: st.Ino}
	// A generation whose lease this process knew was removed: the new
	// file gets no identity record (the lease is never replaced).
	if err := remember(dir, id); err != nil {
		return Identity{}, err
	}
	b, err := strictjson.Encode(id)
	if err != nil {
		return Identity{}, err
	}
	if err := WriteAtomic(IdentityPath(dir, w.Generation), b); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// ReadIdentity reads and checks the identity record of generation g:
// ErrIdentityMissing when it does not exist, ErrUnsafe for a symlink, a
// file with several links, a foreign owner or an open mode, ErrInvalid for
// malformed contents or one that names another generation.
func ReadIdentity(dir string, g int64) (Identity, error) {
	path := IdentityPath(dir, g)
	b, err := ReadPrivate(path, maxIdentity)
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, ErrIdentityMissing
	}
	if err != nil {
		return Identity{}, err
	}
	var id Identity
	if err := strictjson.Decode(b, &id, identitySchema); err != nil {
		return Identity{}, fmt.Errorf("%w: %s: %v", ErrInvalid, filepath.Base(path), err)
	}
	if id.Generation != g || !proto.IsUUID(id.InstallationID) || !proto.IsDigest(id.SpecificationDigest) {
		return Identity{}, fmt.Errorf("%w: %s names another generation or is incomplete", ErrInvalid, filepath.Base(path))
	}
	return id, nil
}

// Check verifies, without opening or locking it, that generation
// id.Generation's lease in dir is the file id names: a regular file with
// one link, owned by the effective user, private, with id's device and
// inode. Errors: ErrNotFound, ErrUnsafe, ErrReplaced.
func Check(dir string, id Identity) error {
	path := Path(dir, id.Generation)
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return ErrNotFound
		}
		return fmt.Errorf("lease: %w", err)
	}
	if err := private(&st, filepath.Base(path)); err != nil {
		return err
	}
	if uint64(st.Dev) != id.Device || st.Ino != id.Inode {
		return ErrReplaced
	}
	return remember(dir, id)
}

// Lease is an open, locked lease. Close releases this copy of the
// descriptor; the lock ends when the last copy (a helper's inherited one
// included) is closed.
type Lease struct {
	f        *os.File
	identity Identity
	mode     Mode
}

// Identity returns the lease's verified identity record.
func (l *Lease) Identity() Identity { return l.identity }

// Mode returns the lock mode held.
func (l *Lease) Mode() Mode { return l.mode }

// File returns the locked descriptor, for exec.Cmd.ExtraFiles: the child
// inherits the open file description and with it the lock.
func (l *Lease) File() *os.File { return l.f }

// Close closes the node's copy of the descriptor. It never unlocks
// explicitly: a helper that inherited the descriptor keeps the lock until
// it exits.
func (l *Lease) Close() error { return l.f.Close() }

// Acquire opens generation w.Generation's lease in dir and takes the lock
// in mode without blocking, verifying the identity record and the file
// before and after the lock (see the package comment). Errors:
// ErrNotFound, ErrIdentityMissing, ErrMismatch, ErrReplaced, ErrUnsafe,
// ErrInvalid, ErrBusy, or an I/O error.
func Acquire(dir string, w Want, mode Mode) (*Lease, error) {
	if err := w.valid(); err != nil {
		return nil, err
	}
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	path := Path(dir, w.Generation)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	id, err := ReadIdentity(dir, w.Generation)
	if err != nil {
		return nil, err
	}
	if id.InstallationID != w.InstallationID || id.SpecificationDigest != w.SpecificationDigest {
		return nil, ErrMismatch
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%w: %s is a symlink", ErrUnsafe, filepath.Base(path))
	case errors.Is(err, unix.ENOENT):
		return nil, ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("lease: open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	l := &Lease{f: f, identity: id, mode: mode}
	if err := l.verify(dir, path); err != nil {
		f.Close()
		return nil, err
	}
	crashpoint.Hit(CrashBeforeLock)
	if err := flock(fd, mode); err != nil {
		f.Close()
		return nil, err
	}
	// The path may have been replaced between the open and the lock, or
	// the identity record removed: check both again while holding it.
	if err := l.verify(dir, path); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// Inherited adopts a lease descriptor a helper inherited from the node
// (file descriptor fd, normally 3). It first sets close-on-exec on fd, so
// nothing the helper starts inherits it, then verifies the identity
// record, the file and the path as Acquire does, and that the descriptor
// holds the lock in mode (taking mode on the same open file description
// succeeds only if no other description holds a conflicting lock).
func Inherited(fd uintptr, dir string, w Want, mode Mode) (*Lease, error) {
	if _, err := unix.FcntlInt(fd, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("lease: set close-on-exec on the inherited descriptor: %w", err)
	}
	if err := w.valid(); err != nil {
		return nil, err
	}
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	id, err := ReadIdentity(dir, w.Generation)
	if err != nil {
		return nil, err
	}
	if id.InstallationID != w.InstallationID || id.SpecificationDigest != w.SpecificationDigest {
		return nil, ErrMismatch
	}
	path := Path(dir, w.Generation)
	l := &Lease{f: os.NewFile(fd, path), identity: id, mode: mode}
	if err := l.verify(dir, path); err != nil {
		return nil, err
	}
	if err := flock(int(fd), mode); err != nil {
		return nil, err
	}
	return l, nil
}

// verify checks the open descriptor against the identity record and the
// path: regular file, one link, our owner, private mode, the recorded
// device and inode, and the path still naming this very file.
func (l *Lease) verify(dir, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(l.f.Fd()), &st); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	if err := private(&st, filepath.Base(path)); err != nil {
		return err
	}
	if uint64(st.Dev) != l.identity.Device || st.Ino != l.identity.Inode {
		return ErrReplaced
	}
	var pst unix.Stat_t
	if err := unix.Lstat(path, &pst); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return ErrReplaced
		}
		return fmt.Errorf("lease: %w", err)
	}
	if pst.Dev != st.Dev || pst.Ino != st.Ino {
		return ErrReplaced
	}
	id, err := ReadIdentity(dir, l.identity.Generation)
	if err != nil {
		return err
	}
	if id != l.identity {
		return ErrReplaced
	}
	return remember(dir, id)
}

// private checks a stat result: a regular file with one link, owned by
// the effective user, without group or other permissions.
func private(st *unix.Stat_t, name string) error {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("%w: %s is a symlink", ErrUnsafe, name)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%w: %s is not a regular file", ErrUnsafe, name)
	case st.Nlink != 1:
		return fmt.Errorf("%w: %s has %d hard links", ErrUnsafe, name, st.Nlink)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is owned by uid %d, not the node's user", ErrUnsafe, name, st.Uid)
	case st.Mode&0o077 != 0:
		return fmt.Errorf("%w: %s has mode %#o; want no group or other permissions", ErrUnsafe, name, st.Mode&0o777)
	}
	return nil
}

// flock takes the lock without blocking; EWOULDBLOCK is ErrBusy.
func flock(fd int, mode Mode) error {
	for {
		err := unix.Flock(fd, mode.flock()|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return ErrBusy
		}
		return fmt.Errorf("lease: flock: %w", err)
	}
}

// CheckDir checks that dir is a real directory owned by the effective
// user that group and others cannot write (ErrUnsafe otherwise).
func CheckDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafe, dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is owned by uid %d, not the node's user", ErrUnsafe, dir, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%w: %s is writable by group or others", ErrUnsafe, dir)
	}
	return nil
}

// ReadPrivate reads a private record file of at most limit bytes without
// following a symlink, refusing (ErrUnsafe) a non-regular file, one with
// several hard links, a foreign owner or group/other permissions. A
// missing file is an error for which errors.Is(err, fs.ErrNotExist)
// holds; a larger file is ErrInvalid. At most limit+1 bytes are read.
func ReadPrivate(path string, limit int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, fs.ErrNotExist
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%w: %s is a symlink", ErrUnsafe, filepath.Base(path))
	case err != nil:
		return nil, fmt.Errorf("lease: open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if err := private(&st, filepath.Base(path)); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("lease: read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalid, filepath.Base(path), limit)
	}
	return b, nil
}

// WriteAtomic replaces path with data (mode 0600): a temporary file in the
// same directory, fsync, rename, fsync of the directory
// (internal/atomicfile).
func WriteAtomic(path string, data []byte) error {
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("lease: write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// WriteOnce writes path with data (mode 0600) like WriteAtomic, but never
// replaces an existing file: the rename is RENAME_NOREPLACE, and an
// existing path is an error for which errors.Is(err, fs.ErrExist) holds.
func WriteOnce(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
		if errors.Is(werr, unix.EEXIST) {
			werr = fs.ErrExist
		}
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("lease: write %s: %w", filepath.Base(path), werr)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs directory dir, so the entries created, renamed or
// removed in it are durable.
func SyncDir(dir string) error {
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("lease: fsync %s: %w", dir, err)
	}
	return nil
}

// InstallLock is the node's installation lock
// (state/node/install.lock): preparation, repair and reclamation hold it
// exclusively, so they run one at a time across processes (a preparer
// left running by a node that died included).
type InstallLock struct{ f *os.File }

// LockInstallation takes the installation lock at path (created 0600 when
// missing), waiting while another process holds it until ctx ends (then
// ctx's error is returned). The lock is released by Close or by the
// process exiting.
func LockInstallation(ctx context.Context, path string) (*InstallLock, error) {
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symlink", ErrUnsafe, filepath.Base(path))
		}
		return nil, fmt.Errorf("lease: open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("lease: %w", err)
	}
	if err := private(&st, filepath.Base(path)); err != nil {
		f.Close()
		return nil, err
	}
	// flock(2) cannot be interrupted by a context; poll without blocking.
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		err := flock(fd, Exclusive)
		if err == nil {
			return &InstallLock{f: f}, nil
		}
		if !errors.Is(err, ErrBusy) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Close releases the installation lock.
func (l *InstallLock) Close() error { return l.f.Close() }
