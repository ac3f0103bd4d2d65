package filewatch

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultMissingGrace is how long a watched file may be missing before its
// Snapshot serves the empty version: long enough for a writer that deletes
// and recreates the file, far shorter than anyone would keep a revoked
// credential working. Atomic replacements (rename-over, the Kubernetes
// "..data" swap) never make the file missing at all.
const DefaultMissingGrace = 5 * time.Second

// Options are the settings of Open.
type Options[T any] struct {
	// What names the file in errors and log lines ("credential file").
	What string
	// MaxSize is the largest file parse is meant to accept; at most
	// MaxSize+1 bytes are read, so that parse can refuse a larger file with
	// its own error.
	MaxSize int64
	// Parse parses the file's content. Required.
	Parse func([]byte) (T, error)
	// Count tells how many entries a version holds, for log lines and
	// Stats. Required.
	Count func(T) int
	// Empty is the version served once the file has been missing for
	// MissingGrace: a deleted credential file revokes every credential.
	Empty T
	// MissingGrace is how long the file may be missing before Empty is
	// served; 0 means DefaultMissingGrace.
	MissingGrace time.Duration
	// Logger receives an info line per reload and a warning per failed
	// reload or missing file, with the path and reason but never file
	// contents; nil means no logging.
	Logger *zap.Logger
}

// Snapshot is the last good version of a watched file, as parsed by its
// parse function: Open reads it and starts watching; every change re-reads
// it, and a version that fails to read or parse keeps the previous one
// (the reason goes to LastError and a warning log line) — except a missing
// file: once it has been missing for the grace (Options.MissingGrace), the
// empty version is served, until the file is back. Load is lock-free: it
// reads an immutable value published through an atomic pointer.
// Package credential and package nodecore/credential build their file sources
// on it.
type Snapshot[T any] struct {
	path    string
	opts    Options[T]
	logger  *zap.Logger
	watcher *Watcher
	value   atomic.Pointer[T]
	version atomic.Uint64
	lastErr atomic.Pointer[errBox]

	// mu serialises reloads and the missing-file timer, and guards the
	// fields below.
	mu           sync.Mutex
	closed       bool
	lastLoad     time.Time   // of the version served
	failingSince time.Time   // first failed reload since the last good load; zero when none
	missingSince time.Time   // when the file was first found missing; zero when it exists
	emptied      bool        // Empty is served because the file is missing
	missingTimer *time.Timer // fires at missingSince + grace
}

type errBox struct{ err error }

// Open reads the file at path (at most o.MaxSize+1 bytes, so that o.Parse
// can refuse a larger file with its own error), parses it and starts
// watching it (see New).
//
// Errors: the fsnotify error when the directory cannot be watched; the os
// error of reading (a missing file included: the first version must
// exist); or Parse's error; each prefixed with o.What and the path.
func Open[T any](path string, o Options[T]) (*Snapshot[T], error) {
	if o.MissingGrace <= 0 {
		o.MissingGrace = DefaultMissingGrace
	}
	logger := o.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &Snapshot[T]{path: filepath.Clean(path), opts: o, logger: logger}
	// Watch before the first read so that no change can slip in between.
	w, err := New(s.path, o.What, logger)
	if err != nil {
		return nil, err
	}
	v, err := s.read()
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	s.value.Store(&v)
	s.version.Store(1)
	s.lastLoad = time.Now()
	s.watcher = w
	w.Start(s.reload)
	return s, nil
}

// read reads at most MaxSize+1 bytes of the file, so that parse can refuse
// a file over MaxSize with its own error, and parses them. Errors name the
// path and reason.
func (s *Snapshot[T]) read() (T, error) {
	var zero T
	fh, err := os.Open(s.path)
	if err != nil {
		return zero, fmt.Errorf("%s %q: %w", s.opts.What, s.path, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, s.opts.MaxSize+1))
	if err != nil {
		return zero, fmt.Errorf("%s %q: %w", s.opts.What, s.path, err)
	}
	v, err := s.opts.Parse(data)
	if err != nil {
		return zero, fmt.Errorf("%s %q: %w", s.opts.What, s.path, err)
	}
	return v, nil
}

// reload re-reads the file. On failure the previous version stays; a
// missing file starts the grace after which the empty version is served.
func (s *Snapshot[T]) reload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	now := time.Now()
	v, err := s.read()
	if err != nil {
		s.lastErr.Store(&errBox{err})
		if s.failingSince.IsZero() {
			s.failingSince = now
		}
		if errors.Is(err, fs.ErrNotExist) {
			if s.missingSince.IsZero() {
				s.missingSince = now
				s.missingTimer = time.AfterFunc(s.opts.MissingGrace, s.expireMissing)
			}
			s.logger.Warn(s.opts.What+" is missing; keeping the previous version until the grace ends",
				zap.String("path", s.path), zap.Uint64("version", s.version.Load()),
				zap.Duration("grace", s.opts.MissingGrace), zap.Error(err))
			return
		}
		s.stopMissing()
		s.logger.Warn(s.opts.What+" reload failed; keeping the previous version",
			zap.String("path", s.path), zap.Uint64("version", s.version.Load()), zap.Error(err))
		return
	}
	s.stopMissing()
	s.value.Store(&v)
	s.lastErr.Store(nil)
	s.lastLoad, s.failingSince, s.emptied = now, time.Time{}, false
	n := s.version.Add(1)
	s.logger.Info(s.opts.What+" reloaded", zap.String("path", s.path), zap.Uint64("version", n), zap.Int("entries", s.opts.Count(v)))
}

// stopMissing ends a missing-file grace; s.mu is held.
func (s *Snapshot[T]) stopMissing() {
	if s.missingTimer != nil {
		s.missingTimer.Stop()
		s.missingTimer = nil
	}
	s.missingSince = time.Time{}
}

// expireMissing runs when the file has been missing for the grace: if it
// still is, the empty version is served.
func (s *Snapshot[T]) expireMissing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.missingSince.IsZero() || s.emptied {
		return
	}
	if _, err := os.Stat(s.path); !errors.Is(err, fs.ErrNotExist) {
		// Back (a reload is on its way), or unreadable for another reason:
		// that keeps the last good version.
		return
	}
	empty := s.opts.Empty
	s.value.Store(&empty)
	s.emptied = true
	s.lastLoad = time.Now()
	n := s.version.Add(1)
	s.logger.Warn(s.opts.What+" has been missing for the grace; serving an empty version (nothing it granted is accepted)",
		zap.String("path", s.path), zap.Uint64("version", n), zap.Duration("grace", s.opts.MissingGrace),
		zap.Time("missing_since", s.missingSince))
}

// Stats is the state of a Snapshot, for metrics and alerts.
type Stats struct {
	// Path is the watched file.
	Path string
	// Version is Version().
	Version uint64
	// Entries is how many entries the served version holds (Options.Count).
	Entries int
	// LastLoad is when the served version was loaded: the last successful
	// read, or when the empty version replaced a missing file.
	LastLoad time.Time
	// FailingSince is when the first reload failed (missing, unreadable,
	// invalid) since the last successful read; zero when the last attempt
	// succeeded. While it is set, the file on disk is not what is served.
	FailingSince time.Time
	// Missing reports that the file does not exist.
	Missing bool
	// Emptied reports that the empty version is served because the file
	// has been missing for longer than the grace.
	Emptied bool
}

// Stats returns the snapshot's state.
func (s *Snapshot[T]) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Path: s.path, Version: s.version.Load(), Entries: s.opts.Count(s.Load()), LastLoad: s.lastLoad,
		FailingSince: s.failingSince, Missing: !s.missingSince.IsZero(), Emptied: s.emptied}
}

// Load returns the most recently loaded version. It keeps returning the
// last version after Close.
func (s *Snapshot[T]) Load() T { return *s.value.Load() }

// Version returns how many versions have been served: 1 after Open, plus
// one per successful reload (even if the content is unchanged) and one
// when the empty version replaces a missing file. Failed reloads leave it
// unchanged.
func (s *Snapshot[T]) Version() uint64 { return s.version.Load() }

// LastError returns why the most recent reload attempt failed, or nil if
// it succeeded (or none has happened since Open). It names the path and
// reason, never file contents.
func (s *Snapshot[T]) LastError() error {
	if b := s.lastErr.Load(); b != nil {
		return b.err
	}
	return nil
}

// Done returns a channel that is closed once the watch goroutine has
// exited (after Close).
func (s *Snapshot[T]) Done() <-chan struct{} { return s.watcher.Done() }

// Close stops watching the file (and a pending missing-file grace) and
// waits for the watch goroutine to exit. It is idempotent; later calls
// return the first call's result, the error (if any) from closing the
// fsnotify watcher.
func (s *Snapshot[T]) Close() error {
	s.mu.Lock()
	s.closed = true
	s.stopMissing()
	s.mu.Unlock()
	return s.watcher.Close()
}
