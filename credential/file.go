package credential

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/sandgate/sandgate/filewatch"
)

// File is a Source backed by a JSON or YAML file (format: see OpenFile),
// reloaded when the file changes. Lookup is lock-free: it reads an
// immutable map published through an atomic pointer.
type File struct {
	path   string
	logger *zap.Logger

	watcher *filewatch.Watcher
	byID    atomic.Pointer[map[string]Credential]
	version atomic.Uint64
	lastErr atomic.Pointer[errBox]

	done <-chan struct{} // closed when the watch goroutine has exited
}

type errBox struct{ err error }

var _ Source = (*File)(nil)

// OpenFile loads the credential file at path and starts watching it.
//
// Format: JSON or YAML, {"credentials": [{"id": …, "enabled": …,
// "resourceSpecId": …, "resourceGroupId": …, "projectNamespace": …,
// "clusterId": …}, …]}, decoded strictly (unknown fields, duplicate keys,
// wrong types, duplicate IDs and invalid credentials are errors), at most
// MaxFileSize bytes.
//
// Reloading (package filewatch): the parent directory is watched with
// fsnotify, so in-place writes, editors' atomic rename-over and Kubernetes
// ConfigMap/Secret "..data" symlink swaps are all seen. Events are debounced
// (50 ms, at most 500 ms under a continuous stream) and the file is re-read;
// a change is therefore applied well within 1 s. A reload that fails (file
// missing, unreadable or invalid) keeps the previous credentials, records
// the reason for LastError and logs a warning with the path and reason
// (never file contents) on logger (nil means no logging).
//
// Errors: the os error (e.g. fs.ErrNotExist) or an ErrInvalid-wrapped
// reason, prefixed with the path; or the fsnotify error if the directory
// cannot be watched. Call Close to stop watching.
func OpenFile(path string, logger *zap.Logger) (*File, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	path = filepath.Clean(path)
	f := &File{path: path, logger: logger}
	// Watch before the first read so that no change can slip in between.
	w, err := filewatch.New(path, "credential file", logger)
	if err != nil {
		return nil, err
	}
	m, err := readFile(path)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	f.byID.Store(&m)
	f.version.Store(1)
	f.watcher = w
	f.done = w.Done()
	w.Start(f.reload)
	return f, nil
}

// readFile reads and parses the file at path, at most MaxFileSize bytes.
// Errors name the path and reason; they never contain file contents.
func readFile(path string) (map[string]Credential, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("credential file %q: %w", path, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("credential file %q: %w", path, err)
	}
	m, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("credential file %q: %w", path, err)
	}
	return m, nil
}

// Lookup returns the credential with the given id from the most recently
// loaded version of the file. Errors wrap ErrNotFound (no such id) or
// ErrDisabled (enabled=false; the credential is returned too); File never
// returns ErrUnavailable. ctx is not used: the lookup is an in-memory read.
// Lookup keeps serving the last version after Close.
func (f *File) Lookup(_ context.Context, id string) (Credential, error) {
	if err := checkLookupID(id); err != nil {
		return Credential{}, err
	}
	c, ok := (*f.byID.Load())[id]
	if !ok {
		return Credential{}, fmt.Errorf("%w: credential %q", ErrNotFound, id)
	}
	return answer(c)
}

// Version returns how many times the file has been loaded successfully: 1
// after OpenFile, incremented by each successful reload (even if the
// content is unchanged). Failed reloads leave it unchanged.
func (f *File) Version() uint64 { return f.version.Load() }

// LastError returns why the most recent reload attempt failed, or nil if it
// succeeded (or none has happened since OpenFile). The error names the path
// and reason, never file contents.
func (f *File) LastError() error {
	if b := f.lastErr.Load(); b != nil {
		return b.err
	}
	return nil
}

// Close stops watching the file and waits for the watch goroutine to exit.
// It is idempotent; later calls return the first call's result. It returns
// the error, if any, from closing the fsnotify watcher.
func (f *File) Close() error { return f.watcher.Close() }

// reload re-reads the file; on failure the previous map stays in place.
func (f *File) reload() {
	m, err := readFile(f.path)
	if err != nil {
		f.lastErr.Store(&errBox{err})
		f.logger.Warn("credential file reload failed; keeping the previous version",
			zap.String("path", f.path), zap.Uint64("version", f.version.Load()), zap.Error(err))
		return
	}
	f.byID.Store(&m)
	f.lastErr.Store(nil)
	v := f.version.Add(1)
	f.logger.Info("credential file reloaded",
		zap.String("path", f.path), zap.Uint64("version", v), zap.Int("credentials", len(m)))
}
