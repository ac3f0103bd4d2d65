package filewatch

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"go.uber.org/zap"
)

// Snapshot is the last good version of a watched file, as parsed by its
// parse function: Open reads it and starts watching; every change re-reads
// it, and a version that fails to read or parse keeps the previous one
// (the reason goes to LastError and a warning log line). Load is lock-free:
// it reads an immutable value published through an atomic pointer.
// Package credential and package node/credential build their file sources on it.
type Snapshot[T any] struct {
	path    string
	what    string
	maxSize int64
	parse   func([]byte) (T, error)
	count   func(T) int
	logger  *zap.Logger
	watcher *Watcher
	value   atomic.Pointer[T]
	version atomic.Uint64
	lastErr atomic.Pointer[errBox]
}

type errBox struct{ err error }

// Open reads the file at path (at most maxSize+1 bytes, so that parse can
// refuse a file over maxSize bytes with its own error), parses it with parse
// and starts watching it (see New). what names the file in errors and log
// lines ("credential file"); count tells how many
// entries a version holds, for the "reloaded" log line. logger receives an
// info line per reload and a warning per failed reload, with the path and
// reason but never file contents (nil means no logging).
//
// Errors: the fsnotify error when the directory cannot be watched; the os
// error of reading; or parse's error; each prefixed with what and the path.
func Open[T any](path, what string, maxSize int64, parse func([]byte) (T, error), count func(T) int, logger *zap.Logger) (*Snapshot[T], error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &Snapshot[T]{path: filepath.Clean(path), what: what, maxSize: maxSize, parse: parse, count: count, logger: logger}
	// Watch before the first read so that no change can slip in between.
	w, err := New(s.path, what, logger)
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
	s.watcher = w
	w.Start(s.reload)
	return s, nil
}

// read reads at most maxSize+1 bytes of the file, so that parse can refuse
// a file over maxSize with its own error, and parses them. Errors name the
// path and reason.
func (s *Snapshot[T]) read() (T, error) {
	var zero T
	fh, err := os.Open(s.path)
	if err != nil {
		return zero, fmt.Errorf("%s %q: %w", s.what, s.path, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, s.maxSize+1))
	if err != nil {
		return zero, fmt.Errorf("%s %q: %w", s.what, s.path, err)
	}
	v, err := s.parse(data)
	if err != nil {
		return zero, fmt.Errorf("%s %q: %w", s.what, s.path, err)
	}
	return v, nil
}

// reload re-reads the file; on failure the previous version stays.
func (s *Snapshot[T]) reload() {
	v, err := s.read()
	if err != nil {
		s.lastErr.Store(&errBox{err})
		s.logger.Warn(s.what+" reload failed; keeping the previous version",
			zap.String("path", s.path), zap.Uint64("version", s.version.Load()), zap.Error(err))
		return
	}
	s.value.Store(&v)
	s.lastErr.Store(nil)
	n := s.version.Add(1)
	s.logger.Info(s.what+" reloaded", zap.String("path", s.path), zap.Uint64("version", n), zap.Int("entries", s.count(v)))
}

// Load returns the most recently loaded version. It keeps returning the
// last version after Close.
func (s *Snapshot[T]) Load() T { return *s.value.Load() }

// Version returns how many times the file has been loaded successfully: 1
// after Open, plus one per successful reload (even if the content is
// unchanged). Failed reloads leave it unchanged.
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

// Close stops watching the file and waits for the watch goroutine to exit.
// It is idempotent; later calls return the first call's result, the error
// (if any) from closing the fsnotify watcher.
func (s *Snapshot[T]) Close() error { return s.watcher.Close() }
