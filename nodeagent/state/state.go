// Package state is the node's private state directory: small records that
// must survive a restart (the installation ID, the highest owner epoch seen,
// the last backend fingerprint, renewal times), each in its own file,
// written atomically (temporary file, fsync, rename, fsync of the
// directory) and readable only by the node's user.
package state

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/internal/atomicfile"
)

// Record names used by nodeagent. Each is a file name inside the state
// directory.
const (
	// InstallationIDRecord holds the installation's UUID.
	InstallationIDRecord = "installation_id"
	// OwnerEpochRecord holds the highest owner epoch accepted from Core,
	// in decimal.
	OwnerEpochRecord = "owner_epoch"
	// FingerprintRecord holds the last backend fingerprint (lowercase hex
	// SHA-256).
	FingerprintRecord = "backend_fingerprint"
)

// Dir is an open state directory. Its methods are safe for concurrent use
// within one process; two processes must not share a directory.
type Dir struct {
	path string
	mu   sync.Mutex
}

// Open creates path (mode 0700) if needed and returns it as a Dir. It
// refuses a path that is not a directory, or one that other users can
// write to.
func Open(path string) (*Dir, error) {
	if path == "" {
		return nil, errors.New("state: no state directory configured")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("state: create the state directory: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("state: %s is not a directory", abs)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("state: %s is writable by other users (mode %v)", abs, fi.Mode().Perm())
	}
	return &Dir{path: abs}, nil
}

// Path returns the directory's absolute path.
func (d *Dir) Path() string { return d.path }

// checkName accepts a record name: one or more path elements of
// [A-Za-z0-9._-] (not "." or ".."), separated by "/".
func checkName(name string) error {
	if name == "" {
		return errors.New("state: empty record name")
	}
	for _, el := range strings.Split(name, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("state: bad record name %q", name)
		}
		for i := range len(el) {
			c := el[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return fmt.Errorf("state: bad record name %q", name)
			}
		}
	}
	return nil
}

// MaxRecord bounds a record read by Load, InstallationID and OwnerEpoch,
// in bytes.
const MaxRecord = 4 << 10

// ErrBadRecord: a record is a symlink, not a regular file (a named pipe,
// a device, a directory) or larger than its bound; it is refused without
// reading more than the bound.
var ErrBadRecord = errors.New("state: record is a symlink, not a regular file or too large")

// readRecord reads the record file at path, at most limit bytes, without
// following a symlink and without blocking on a named pipe. A missing
// file is an error for which errors.Is(err, fs.ErrNotExist) holds; a
// symlink, a file that is not regular, one with a permission bit of
// denied or one over limit is ErrBadRecord.
func readRecord(path string, limit int64, denied fs.FileMode) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("%w: %s is a symlink", ErrBadRecord, filepath.Base(path))
	case err != nil:
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadRecord, filepath.Base(path))
	}
	if fi.Mode().Perm()&denied != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v", ErrBadRecord, filepath.Base(path), fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadRecord, filepath.Base(path), limit)
	}
	return b, nil
}

// Load returns the record's bytes (at most MaxRecord); a missing record
// is reported with an error for which errors.Is(err, fs.ErrNotExist)
// holds, a symlink, a file that is not regular or a larger one with
// ErrBadRecord.
func (d *Dir) Load(name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return readRecord(filepath.Join(d.path, filepath.FromSlash(name)), MaxRecord, 0)
}

// Store replaces the record atomically with data (mode 0600), creating its
// parent directories (mode 0700).
func (d *Dir) Store(name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.store(name, data)
}

func (d *Dir) store(name string, data []byte) error {
	target := filepath.Join(d.path, filepath.FromSlash(name))
	parent := filepath.Dir(target)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := atomicfile.Write(target, data, 0o600); err != nil {
		return fmt.Errorf("state: write %s: %w", name, err)
	}
	return nil
}

// Remove deletes the record; a missing record is not an error.
func (d *Dir) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err := os.Remove(filepath.Join(d.path, filepath.FromSlash(name)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// InstallationID returns the installation's UUID, creating and storing a
// new random one the first time.
func (d *Dir) InstallationID() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := readRecord(filepath.Join(d.path, InstallationIDRecord), MaxRecord, 0)
	switch {
	case err == nil:
		id := string(bytes.TrimSpace(b))
		if u, perr := uuid.Parse(id); perr != nil || u.String() != id {
			return "", fmt.Errorf("state: %s does not hold a lowercase UUID", InstallationIDRecord)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("state: %w", err)
	}
	id := uuid.NewString()
	if err := d.store(InstallationIDRecord, []byte(id+"\n")); err != nil {
		return "", err
	}
	return id, nil
}

// OwnerEpoch returns the highest owner epoch stored, or 0 when none is.
func (d *Dir) OwnerEpoch() (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ownerEpoch()
}

func (d *Dir) ownerEpoch() (int64, error) {
	b, err := readRecord(filepath.Join(d.path, OwnerEpochRecord), MaxRecord, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("state: %w", err)
	}
	e, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || e < 0 {
		return 0, fmt.Errorf("state: %s does not hold a non-negative integer", OwnerEpochRecord)
	}
	return e, nil
}

// AcceptOwnerEpoch applies the spec's rule "the node stores a higher owner
// epoch and rejects lower values": it returns false (and stores nothing)
// when epoch is lower than the stored one, and otherwise stores epoch if it
// is higher and returns true.
func (d *Dir) AcceptOwnerEpoch(epoch int64) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, err := d.ownerEpoch()
	if err != nil {
		return false, err
	}
	switch {
	case epoch < cur:
		return false, nil
	case epoch == cur:
		return true, nil
	}
	if err := d.store(OwnerEpochRecord, []byte(strconv.FormatInt(epoch, 10)+"\n")); err != nil {
		return false, err
	}
	return true, nil
}
