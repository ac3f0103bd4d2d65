package state

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
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

// Every record the node reads at start (installation_id, owner_epoch, a
// record of Load, node/identity.json) is read without following a
// symlink, without blocking on a named pipe and only up to its bound:
// a symlink to a valid record elsewhere, a named pipe and an oversized
// file are refused with ErrBadRecord, and nothing else is read.
func TestRecordsAreReadBoundedWithoutFollowingOrBlocking(t *testing.T) {
	id := &Identity{NodeID: "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60", InstallationID: "1b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60",
		CoreOrigin: "https://core.example", Pool: "default", DeploymentGeneration: 1,
		SpecificationDigest: "0000000000000000000000000000000000000000000000000000000000000000"}
	reads := []struct {
		name string
		good []byte // a valid record, for the symlink's target
		read func(d *Dir) error
	}{
		{InstallationIDRecord, []byte("2b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60\n"), func(d *Dir) error { _, err := d.InstallationID(); return err }},
		{OwnerEpochRecord, []byte("7\n"), func(d *Dir) error { _, err := d.OwnerEpoch(); return err }},
		{FingerprintRecord, []byte("x\n"), func(d *Dir) error { _, err := d.Load(FingerprintRecord); return err }},
		{IdentityRecord, nil, func(d *Dir) error { _, err := d.Identity(); return err }},
	}
	for _, r := range reads {
		t.Run(r.name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			good := r.good
			if good == nil {
				if err := d.StoreIdentity(id); err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, filepath.FromSlash(IdentityRecord))
				if good, err = os.ReadFile(p); err != nil {
					t.Fatal(err)
				}
				os.Remove(p)
			}
			path := filepath.Join(dir, filepath.FromSlash(r.name))
			os.MkdirAll(filepath.Dir(path), 0o700)
			// The valid record itself is read.
			if err := os.WriteFile(path, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := r.read(d); err != nil {
				t.Fatalf("the valid record: %v", err)
			}
			os.Remove(path)

			elsewhere := filepath.Join(t.TempDir(), "record")
			if err := os.WriteFile(elsewhere, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, path); err != nil {
				t.Fatal(err)
			}
			if err := r.read(d); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("a symlinked record: %v, want ErrBadRecord", err)
			}
			os.Remove(path)

			big := append(bytes.Repeat([]byte(" "), MaxRecord+1), good...)
			if err := os.WriteFile(path, big, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := r.read(d); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("an oversized record: %v, want ErrBadRecord", err)
			}
			os.Remove(path)

			// A named pipe with no writer: opened without blocking, refused.
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := r.read(d); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("a named pipe: %v, want ErrBadRecord", err)
			}
		})
	}
}
