package filewatch

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	errOdd   = errors.New("not a number")
	errLarge = errors.New("over 8 bytes")
)

// parseNumber parses a file of at most 8 bytes holding a number.
func parseNumber(b []byte) (int, error) {
	if len(b) > 8 {
		return 0, errLarge
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, errOdd
	}
	return n, nil
}

// TestSnapshotKeepsTheLastGoodVersion: a change is loaded, a broken file
// keeps the previous value and says why, a good file recovers, and an
// oversized file is refused.
func TestSnapshotKeepsTheLastGoodVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.txt")
	write(t, path, "1")
	s, err := Open(path, "number file", 8, parseNumber, func(int) int { return 1 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Load() != 1 || s.Version() != 1 || s.LastError() != nil {
		t.Fatalf("open: %d v%d %v", s.Load(), s.Version(), s.LastError())
	}
	write(t, path, "2")
	waitFor(t, 5*time.Second, "version 2", func() bool { return s.Version() == 2 })
	if s.Load() != 2 {
		t.Fatalf("value %d", s.Load())
	}
	write(t, path, "two")
	waitFor(t, 5*time.Second, "the failed reload", func() bool { return s.LastError() != nil })
	if s.Load() != 2 || s.Version() != 2 || !errors.Is(s.LastError(), errOdd) || !strings.Contains(s.LastError().Error(), "number file") {
		t.Fatalf("after a broken write: %d v%d %v", s.Load(), s.Version(), s.LastError())
	}
	write(t, path, "123456789") // over the 8-byte limit
	waitFor(t, 5*time.Second, "the oversized file to be refused", func() bool { return errors.Is(s.LastError(), errLarge) })
	if s.Load() != 2 || s.Version() != 2 {
		t.Fatalf("after an oversized write: %d v%d", s.Load(), s.Version())
	}
	write(t, path, "3")
	waitFor(t, 5*time.Second, "recovery", func() bool { return s.Version() == 3 && s.LastError() == nil })
	if s.Load() != 3 {
		t.Fatalf("value %d", s.Load())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	if s.Load() != 3 {
		t.Fatal("the last version is not kept after Close")
	}
}

func TestSnapshotOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing"), "number file", 8, parseNumber, func(int) int { return 1 }, nil); err == nil {
		t.Fatal("a missing file opened")
	}
	bad := filepath.Join(dir, "bad")
	write(t, bad, "x")
	if _, err := Open(bad, "number file", 8, parseNumber, func(int) int { return 1 }, nil); !errors.Is(err, errOdd) {
		t.Fatalf("a broken file: %v", err)
	}
}
