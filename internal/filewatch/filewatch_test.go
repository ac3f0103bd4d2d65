package filewatch

import (
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sandgate/sandgate/internal/waittest"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// started returns a running watcher on path and a counter of callbacks.
func started(t *testing.T, path string) (*Watcher, *atomic.Int64) {
	t.Helper()
	w, err := New(path, "test file", nil)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	w.Start(func() { n.Add(1) })
	t.Cleanup(func() { _ = w.Close() })
	return w, &n
}

// TestInPlaceWriteCallsBack: a write to the file calls back within a
// second.
func TestInPlaceWriteCallsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.yaml")
	write(t, path, "a")
	_, n := started(t, path)
	write(t, path, "b")
	waittest.Until(t, time.Second, "the callback after an in-place write", func() bool { return n.Load() >= 1 })
}

// TestRenameOverCallsBack: an atomic rename over the file calls back.
func TestRenameOverCallsBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yaml")
	write(t, path, "a")
	_, n := started(t, path)
	tmp := filepath.Join(dir, ".tmp")
	write(t, tmp, "b")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, time.Second, "the callback after a rename-over", func() bool { return n.Load() >= 1 })
}

// TestConfigMapSwapCallsBack: swapping the "..data" symlink of a
// Kubernetes volume calls back although the file's own name sees no event.
func TestConfigMapSwapCallsBack(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"..v1", "..v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, v, "f.yaml"), v)
	}
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "f.yaml")
	if err := os.Symlink(filepath.Join("..data", "f.yaml"), path); err != nil {
		t.Fatal(err)
	}
	_, n := started(t, path)
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, time.Second, "the callback after a ..data swap", func() bool { return n.Load() >= 1 })
}

// TestRelevantEvents: only events on the file's own name or the "..data"
// link of its directory count; other files and other directories do not.
func TestRelevantEvents(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yaml")
	write(t, path, "a")
	w, err := New(path, "test file", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for name, want := range map[string]bool{
		path:                                 true,
		filepath.Join(dir, "..data"):         true,
		filepath.Join(dir, "other.yaml"):     false,
		filepath.Join(dir, "f.yaml.swp"):     false,
		filepath.Join(dir, "sub", "f.yaml"):  false,
		filepath.Join(dir, "..data_tmp"):     false,
		filepath.Join(t.TempDir(), "f.yaml"): false,
	} {
		if got := w.relevant(fsnotify.Event{Name: name, Op: fsnotify.Write}); got != want {
			t.Errorf("relevant(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestCloseStopsWatching: Close ends the goroutine (Done is closed), is
// idempotent and leaves no goroutines behind; Close without Start works.
func TestCloseStopsWatching(t *testing.T) {
	before := runtime.NumGoroutine()
	path := filepath.Join(t.TempDir(), "f.yaml")
	write(t, path, "a")
	w, err := New(path, "test file", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(func() {})
	select {
	case <-w.Done():
		t.Fatal("Done closed before Close")
	default:
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-w.Done():
	default:
		t.Fatal("Done not closed after Close returned")
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	unstarted, err := New(path, "test file", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := unstarted.Close(); err != nil {
		t.Fatalf("Close without Start: %v", err)
	}
	<-unstarted.Done()
	unstarted.Start(func() { t.Error("callback after Close") })
	waittest.Until(t, time.Second, "goroutines to return to the baseline", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// TestNewMissingDirectory: a file in a directory that does not exist is an
// error naming the file.
func TestNewMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope", "f.yaml")
	w, err := New(path, "test file", nil)
	if err == nil {
		_ = w.Close()
		t.Fatal("New succeeded on a missing directory")
	}
	if want := `test file "` + path + `": watch directory`; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Fatalf("error = %q, want prefix %q", err, want)
	}
}
