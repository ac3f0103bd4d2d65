package state

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestOwnerEpochKeepsTheHighest(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := d.OwnerEpoch(); err != nil || e != 0 {
		t.Fatalf("fresh epoch %d, %v", e, err)
	}
	for _, step := range []struct {
		epoch  int64
		accept bool
		stored int64
	}{{3, true, 3}, {3, true, 3}, {2, false, 3}, {7, true, 7}, {6, false, 7}} {
		ok, err := d.AcceptOwnerEpoch(step.epoch)
		if err != nil || ok != step.accept {
			t.Fatalf("accept %d = %v, %v; want %v", step.epoch, ok, err, step.accept)
		}
		if e, _ := d.OwnerEpoch(); e != step.stored {
			t.Fatalf("after %d: stored %d, want %d", step.epoch, e, step.stored)
		}
	}
	// A restart reads the same directory.
	d2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := d2.AcceptOwnerEpoch(6); ok {
		t.Fatal("a lower epoch was accepted after a restart")
	}
}

func TestInstallationIDIsStable(t *testing.T) {
	dir := t.TempDir()
	d, _ := Open(dir)
	id, err := d.InstallationID()
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := Open(dir)
	if again, err := d2.InstallationID(); err != nil || again != id {
		t.Fatalf("second read %q, %v; want %q", again, err, id)
	}
	if err := os.WriteFile(filepath.Join(dir, InstallationIDRecord), []byte("not-a-uuid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d2.InstallationID(); err == nil {
		t.Fatal("a corrupt installation ID was accepted")
	}
}

func TestRecords(t *testing.T) {
	d, _ := Open(t.TempDir())
	if err := d.Store("renewals/abc", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if b, err := d.Load("renewals/abc"); err != nil || string(b) != "x" {
		t.Fatalf("load: %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(d.Path(), "renewals", "abc"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if err := d.Remove("renewals/abc"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("renewals/abc"); err != nil {
		t.Fatalf("removing a missing record: %v", err)
	}
	if _, err := d.Load("renewals/abc"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("load after remove: %v", err)
	}
	for _, bad := range []string{"", "../x", "a/../b", "/abs", "a//b", "sp ace", "."} {
		if err := d.Store(bad, nil); err == nil {
			t.Errorf("record name %q accepted", bad)
		}
	}
}

func TestOpenRefusesUnsafeDirectories(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil {
		t.Fatal("a world-writable state directory was accepted")
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := Open(file); err == nil {
		t.Fatal("a file was accepted as the state directory")
	}
	if _, err := Open(""); err == nil {
		t.Fatal("an empty path was accepted")
	}
}
