package filewatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/waittest"
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

// numberFile opens a file of one number; -1 is the empty version.
var numberFile = Options[int]{What: "number file", MaxSize: 8, Parse: parseNumber, Count: func(int) int { return 1 }, Empty: -1}

// TestSnapshotKeepsTheLastGoodVersion: a change is loaded, a broken file
// keeps the previous value and says why, a good file recovers, and an
// oversized file is refused.
func TestSnapshotKeepsTheLastGoodVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.txt")
	write(t, path, "1")
	s, err := Open(path, numberFile)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Load() != 1 || s.Version() != 1 || s.LastError() != nil {
		t.Fatalf("open: %d v%d %v", s.Load(), s.Version(), s.LastError())
	}
	write(t, path, "2")
	waittest.Until(t, 5*time.Second, "version 2", func() bool { return s.Version() == 2 })
	if s.Load() != 2 {
		t.Fatalf("value %d", s.Load())
	}
	write(t, path, "two")
	waittest.Until(t, 5*time.Second, "the failed reload", func() bool { return s.LastError() != nil })
	if s.Load() != 2 || s.Version() != 2 || !errors.Is(s.LastError(), errOdd) || !strings.Contains(s.LastError().Error(), "number file") {
		t.Fatalf("after a broken write: %d v%d %v", s.Load(), s.Version(), s.LastError())
	}
	write(t, path, "123456789") // over the 8-byte limit
	waittest.Until(t, 5*time.Second, "the oversized file to be refused", func() bool { return errors.Is(s.LastError(), errLarge) })
	if s.Load() != 2 || s.Version() != 2 {
		t.Fatalf("after an oversized write: %d v%d", s.Load(), s.Version())
	}
	write(t, path, "3")
	waittest.Until(t, 5*time.Second, "recovery", func() bool { return s.Version() == 3 && s.LastError() == nil })
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
	if _, err := Open(filepath.Join(dir, "missing"), numberFile); err == nil {
		t.Fatal("a missing file opened")
	}
	bad := filepath.Join(dir, "bad")
	write(t, bad, "x")
	if _, err := Open(bad, numberFile); !errors.Is(err, errOdd) {
		t.Fatalf("a broken file: %v", err)
	}
}

// openNumber opens the number file at path with the given missing-file
// grace; Cleanup closes it.
func openNumber(t *testing.T, path string, grace time.Duration) *Snapshot[int] {
	t.Helper()
	o := numberFile
	o.MissingGrace = grace
	s, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestSnapshotMissingFileRevokesAfterGrace: a deleted file keeps the last
// version during the grace (Stats says it is missing and failing), then
// the empty version is served; the file coming back is loaded again and
// clears the state.
func TestSnapshotMissingFileRevokesAfterGrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.txt")
	write(t, path, "7")
	s := openNumber(t, path, time.Second)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 5*time.Second, "the file to be seen missing", func() bool { return s.Stats().Missing })
	st := s.Stats()
	if st.Emptied || st.FailingSince.IsZero() || !errors.Is(s.LastError(), fs.ErrNotExist) {
		t.Fatalf("stats while missing: %+v, %v", st, s.LastError())
	}
	if !st.Emptied && s.Load() != 7 {
		t.Fatalf("value during the grace: %d", s.Load())
	}
	waittest.Until(t, 5*time.Second, "the empty version", func() bool { return s.Stats().Emptied })
	if st := s.Stats(); s.Load() != -1 || st.Version != 2 || !st.Missing || st.Entries != 1 {
		t.Fatalf("after the grace: %d %+v", s.Load(), st)
	}
	write(t, path, "8")
	waittest.Until(t, 5*time.Second, "the file to be back", func() bool { return s.Load() == 8 })
	if st := s.Stats(); st.Missing || st.Emptied || !st.FailingSince.IsZero() || s.LastError() != nil {
		t.Fatalf("after the file came back: %+v, %v", st, s.LastError())
	}
}

// TestSnapshotRecreatedWithinGrace: deleting and writing the file again
// (a writer that does not rename) within the grace never serves the empty
// version.
func TestSnapshotRecreatedWithinGrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.txt")
	write(t, path, "1")
	s := openNumber(t, path, time.Hour)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 5*time.Second, "the file to be seen missing", func() bool { return s.Stats().Missing })
	if err := os.WriteFile(path, []byte("2"), 0o600); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 5*time.Second, "the new version", func() bool { return s.Load() == 2 })
	if st := s.Stats(); st.Missing || st.Emptied || st.Version != 2 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestSnapshotConfigMapSwapIsNotMissing: Kubernetes' atomic "..data"
// swaps (and the removal of the old data directory after them) never make
// the file missing, even with a grace of one millisecond.
func TestSnapshotConfigMapSwapIsNotMissing(t *testing.T) {
	dir := t.TempDir()
	mk := func(version, content string) {
		if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, version, "n.txt"), content)
	}
	mk("..v1", "1")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "n.txt")
	if err := os.Symlink(filepath.Join("..data", "n.txt"), path); err != nil {
		t.Fatal(err)
	}
	s := openNumber(t, path, time.Millisecond)
	prev := "..v1"
	for i := 2; i <= 20; i++ {
		next := fmt.Sprintf("..v%d", i)
		mk(next, strconv.Itoa(i))
		if err := os.Symlink(next, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, prev)); err != nil {
			t.Fatal(err)
		}
		prev = next
		waittest.Until(t, 5*time.Second, "version "+next, func() bool { return s.Load() == i })
		if st := s.Stats(); st.Missing || st.Emptied || !st.FailingSince.IsZero() {
			t.Fatalf("after swap %d: %+v", i, st)
		}
	}
}

// TestSnapshotDirectoryRemovedAndRecreated: removing the file's whole
// directory revokes like a missing file; a recreated directory with the
// file in it is watched again and loaded.
func TestSnapshotDirectoryRemovedAndRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "n.txt")
	write(t, path, "1")
	s := openNumber(t, path, 100*time.Millisecond)
	if err := os.Rename(dir, dir+".old"); err != nil { // the directory itself goes; its file is not deleted
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, "the empty version", func() bool { return s.Stats().Emptied })
	if s.Load() != -1 {
		t.Fatalf("value %d", s.Load())
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, path, "2")
	waittest.Until(t, 10*time.Second, "the recreated file", func() bool { return s.Load() == 2 })
	write(t, path, "3")
	waittest.Until(t, 10*time.Second, "a change in the recreated directory", func() bool { return s.Load() == 3 })
}
