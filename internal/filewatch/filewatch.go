// Package filewatch tells its owner when one file may have changed, so a
// configuration or credential file can be re-read while the process runs.
//
// It watches the file's parent directory with fsnotify rather than the file
// itself, so that in-place writes, editors' atomic rename-over and
// Kubernetes ConfigMap/Secret volume updates (an atomic swap of the "..data"
// symlink the file points through) are all seen. If the directory itself is
// removed or renamed away, that is a change too, and the watcher tries every
// RewatchInterval to watch it again, calling back once it can. Bursts of events are
// debounced: the callback runs DefaultDebounce after the last relevant
// event, and at most DefaultMaxDelay after the first one of a burst, so a
// change is applied well within a second even under a continuous stream of
// events.
//
// What to do with the file is the owner's business: the callback re-reads
// and parses it and decides whether a broken version replaces the last good
// one (package credential and package nodecore/credential keep the last good version).
package filewatch

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

const (
	// DefaultDebounce is how long the watcher waits after the last relevant
	// event before calling back (editors and kubelet produce bursts).
	DefaultDebounce = 50 * time.Millisecond
	// DefaultMaxDelay caps the debounce under a continuous event stream: the
	// callback runs at most this long after the first event of a burst.
	DefaultMaxDelay = 500 * time.Millisecond
	// configMapDataLink is the symlink Kubernetes swaps atomically when a
	// ConfigMap or Secret volume is updated.
	configMapDataLink = "..data"
)

// Watcher watches one file. Create it with New before the first read of the
// file (so no change can slip in between), read the file, then Start it.
// Close stops it. A Watcher is safe for concurrent use of Done and Close.
type Watcher struct {
	path   string
	dir    string
	base   string
	logger *zap.Logger

	// Debounce is how long after the last relevant event onChange runs;
	// New sets DefaultDebounce. Change it only before Start.
	Debounce time.Duration
	// MaxDelay caps the wait after the first event of a burst; New sets
	// DefaultMaxDelay. Change it only before Start.
	MaxDelay time.Duration

	fs        *fsnotify.Watcher
	stop      chan struct{}
	done      chan struct{} // closed when the watch goroutine has exited
	startOnce sync.Once
	closeOnce sync.Once
	closeErr  error
	started   bool
}

// New starts watching the directory of path (cleaned) for changes to path.
// Nothing is called back until Start. what names the file in log lines and
// errors ("credential file", "node credential file"); logger receives a
// warning, with the path but never file contents, when fsnotify reports an
// error (nil means no logging).
//
// Errors: the fsnotify error when the watcher cannot be created or the
// directory cannot be watched, prefixed with what and the path.
func New(path, what string, logger *zap.Logger) (*Watcher, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	path = filepath.Clean(path)
	w := &Watcher{
		path:     path,
		dir:      filepath.Dir(path),
		base:     filepath.Base(path),
		logger:   logger,
		Debounce: DefaultDebounce,
		MaxDelay: DefaultMaxDelay,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("%s %q: start watcher: %w", what, path, err)
	}
	if err := fw.Add(w.dir); err != nil {
		_ = fw.Close()
		return nil, fmt.Errorf("%s %q: watch directory: %w", what, path, err)
	}
	w.fs = fw
	return w, nil
}

// Start runs onChange on a goroutine of the watcher each time the file may
// have changed (debounced; see the package comment), until Close. Calls of
// onChange never overlap. Start may be called once; later calls do nothing.
func (w *Watcher) Start(onChange func()) {
	w.startOnce.Do(func() {
		w.started = true
		go w.watch(onChange)
	})
}

// Done returns a channel that is closed once the watch goroutine has
// exited (after Close; or immediately after Close when Start was never
// called).
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Close stops watching and waits for the watch goroutine, including a
// running onChange, to return. It is idempotent; later calls return the
// first call's result, the error (if any) from closing the fsnotify watcher.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		// Make sure Start can no longer launch the goroutine.
		w.startOnce.Do(func() {})
		close(w.stop)
		w.closeErr = w.fs.Close()
		if w.started {
			<-w.done
		} else {
			close(w.done)
		}
	})
	return w.closeErr
}

// relevant reports whether ev can change what path resolves to.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	name := filepath.Base(ev.Name)
	return filepath.Dir(ev.Name) == w.dir && (name == w.base || name == configMapDataLink)
}

// dirGone reports whether ev is the watched directory itself being
// removed or renamed away; its watch then ends.
func (w *Watcher) dirGone(ev fsnotify.Event) bool {
	return filepath.Clean(ev.Name) == w.dir && ev.Has(fsnotify.Remove|fsnotify.Rename)
}

// RewatchInterval is how often a watcher whose directory was removed or
// renamed away tries to watch it again, so that a file in a recreated
// directory is seen.
const RewatchInterval = time.Second

func (w *Watcher) watch(onChange func()) {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var (
		pending bool
		first   time.Time
		rewatch *time.Ticker
		retry   <-chan time.Time // rewatch's channel while the directory is gone
	)
	defer func() {
		if rewatch != nil {
			rewatch.Stop()
		}
	}()
	for {
		select {
		case <-w.stop:
			return
		case <-retry:
			if err := w.fs.Add(w.dir); err != nil {
				continue
			}
			rewatch.Stop()
			rewatch, retry = nil, nil
			w.logger.Info("watching the file's directory again", zap.String("path", w.path))
			if !pending {
				pending, first = true, time.Now()
				timer.Reset(w.Debounce)
			}
		case ev, ok := <-w.fs.Events:
			if !ok {
				return
			}
			if w.dirGone(ev) && retry == nil {
				w.logger.Warn("the file's directory was removed or renamed; watching for it to come back",
					zap.String("path", w.path))
				rewatch = time.NewTicker(RewatchInterval)
				retry = rewatch.C
			} else if !w.relevant(ev) {
				continue
			}
			now := time.Now()
			if !pending {
				pending, first = true, now
			}
			d := w.Debounce
			if rem := first.Add(w.MaxDelay).Sub(now); rem < d {
				d = max(rem, 0)
			}
			timer.Reset(d)
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			w.logger.Warn("file watcher error", zap.String("path", w.path), zap.Error(err))
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: call back to be safe.
				if !pending {
					pending, first = true, time.Now()
					timer.Reset(w.Debounce)
				}
			}
		case <-timer.C:
			pending = false
			onChange()
		}
	}
}
