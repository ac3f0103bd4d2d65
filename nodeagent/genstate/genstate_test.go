package genstate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/nodeagent/lease"
)

const (
	inst   = "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60"
	digest = "1111111111111111111111111111111111111111111111111111111111111111"
	imgID  = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

func open(t *testing.T) *Dir {
	t.Helper()
	d, err := Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func binding(g int64) Binding {
	return Binding{InstallationID: inst, Generation: g, SpecificationDigest: digest}
}

func config(g int64) *Config {
	return &Config{Binding: binding(g), Source: "rel-1", Path: FilesName(g), Provider: "docker",
		ImageRef: "app:1", ImageID: imgID, Command: []string{"sleep", "60"}, Env: map[string]string{"A": "b"},
		Seccomp: "seccomp.json",
		Files: []File{{Name: "manifest.json", Kind: "manifest", SHA256: digest, Size: 10},
			{Name: "seccomp.json", Kind: "seccomp", SHA256: digest, Size: 5}}}
}

func TestRecordsRoundTrip(t *testing.T) {
	d := open(t)
	plan := &Plan{Binding: binding(3), Source: "rel-1", Path: FilesName(3)}
	if err := d.WritePlan(plan); err != nil {
		t.Fatal(err)
	}
	plan.ImportStarted = true
	if err := d.WritePlan(plan); err != nil {
		t.Fatal(err)
	}
	if got, err := d.ReadPlan(3); err != nil || !reflect.DeepEqual(got, plan) {
		t.Fatalf("ReadPlan = %+v, %v", got, err)
	}
	c := config(3)
	if err := d.PublishConfig(c); err != nil {
		t.Fatal(err)
	}
	if got, err := d.ReadConfig(3); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("ReadConfig = %+v, %v", got, err)
	}
	j := &Journal{Binding: binding(3)}
	if err := d.WriteJournal(j); err != nil {
		t.Fatal(err)
	}
	j.NativeCleanupDone = true
	if err := d.WriteJournal(j); err != nil {
		t.Fatal(err)
	}
	if got, err := d.ReadJournal(3); err != nil || !got.NativeCleanupDone {
		t.Fatalf("ReadJournal = %+v, %v", got, err)
	}
	if err := d.WriteDropped(&Dropped{Binding: binding(3)}); err != nil {
		t.Fatal(err)
	}
	if got, err := d.ReadDropped(3); err != nil || got.Binding != binding(3) {
		t.Fatalf("ReadDropped = %+v, %v", got, err)
	}
	for _, p := range []string{d.RecordPath(3, RecordPlan), d.RecordPath(3, RecordConfig), d.RecordPath(3, RecordJournal), d.RecordPath(3, RecordDropped)} {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v mode %v", p, err, fi.Mode())
		}
	}
}

func TestConfigAndDroppedAreWrittenOnce(t *testing.T) {
	d := open(t)
	if err := d.PublishConfig(config(4)); err != nil {
		t.Fatal(err)
	}
	other := config(4)
	other.ImageID = "sha256:" + strings.Repeat("3", 64)
	if err := d.PublishConfig(other); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second PublishConfig: %v, want fs.ErrExist", err)
	}
	if got, _ := d.ReadConfig(4); got.ImageID != imgID {
		t.Fatal("the final configuration was replaced")
	}
	if err := d.WriteDropped(&Dropped{Binding: binding(4)}); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteDropped(&Dropped{Binding: binding(4)}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second WriteDropped: %v, want fs.ErrExist", err)
	}
}

func TestRecordRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, d *Dir)
		err   error
	}{
		{"symlink", func(t *testing.T, d *Dir) {
			d.PublishConfig(config(5))
			os.Rename(d.RecordPath(5, RecordConfig), filepath.Join(d.Path(), "x"))
			os.Symlink("x", d.RecordPath(5, RecordConfig))
		}, lease.ErrUnsafe},
		{"hard link", func(t *testing.T, d *Dir) {
			d.PublishConfig(config(5))
			os.Link(d.RecordPath(5, RecordConfig), filepath.Join(d.Path(), "x"))
		}, lease.ErrUnsafe},
		{"group readable", func(t *testing.T, d *Dir) {
			d.PublishConfig(config(5))
			os.Chmod(d.RecordPath(5, RecordConfig), 0o640)
		}, lease.ErrUnsafe},
		{"foreign owner", func(t *testing.T, d *Dir) {
			d.PublishConfig(config(5))
			if err := os.Chown(d.RecordPath(5, RecordConfig), 65534, 65534); err != nil {
				t.Fatalf("chown (the tests run as root): %v", err)
			}
		}, lease.ErrUnsafe},
		{"names another generation", func(t *testing.T, d *Dir) {
			d.PublishConfig(config(6))
			os.Rename(d.RecordPath(6, RecordConfig), d.RecordPath(5, RecordConfig))
		}, ErrMismatch},
		{"unknown member", func(t *testing.T, d *Dir) {
			b, _ := os.ReadFile(mustPublish(t, d, 5))
			os.Remove(d.RecordPath(5, RecordConfig))
			lease.WriteAtomic(d.RecordPath(5, RecordConfig), []byte(strings.Replace(string(b), "{", `{"x":1,`, 1)))
		}, ErrInvalid},
		{"null member", func(t *testing.T, d *Dir) {
			lease.WriteAtomic(d.RecordPath(5, RecordConfig), []byte(`{"schema":1,"image_id":null}`))
		}, ErrInvalid},
		{"image id not a digest", func(t *testing.T, d *Dir) {
			b, _ := os.ReadFile(mustPublish(t, d, 5))
			os.Remove(d.RecordPath(5, RecordConfig))
			lease.WriteAtomic(d.RecordPath(5, RecordConfig), []byte(strings.Replace(string(b), imgID, "app:1", 1)))
		}, ErrInvalid},
		{"path escapes", func(t *testing.T, d *Dir) {
			b, _ := os.ReadFile(mustPublish(t, d, 5))
			os.Remove(d.RecordPath(5, RecordConfig))
			lease.WriteAtomic(d.RecordPath(5, RecordConfig), []byte(strings.Replace(string(b), `"5.d"`, `"../5.d"`, 1)))
		}, ErrInvalid},
		{"too large", func(t *testing.T, d *Dir) {
			lease.WriteAtomic(d.RecordPath(5, RecordConfig), make([]byte, MaxRecord+1))
		}, lease.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := open(t)
			c.setup(t, d)
			if _, err := d.ReadConfig(5); !errors.Is(err, c.err) {
				t.Fatalf("ReadConfig = %v, want %v", err, c.err)
			}
			if l := d.Inspect(5); l.Config != nil || !errors.Is(l.ConfigErr, c.err) {
				t.Fatalf("Inspect: config %v, err %v", l.Config, l.ConfigErr)
			}
		})
	}
}

func mustPublish(t *testing.T, d *Dir, g int64) string {
	t.Helper()
	if err := d.PublishConfig(config(g)); err != nil {
		t.Fatal(err)
	}
	return d.RecordPath(g, RecordConfig)
}

func TestGenerationsAndInspect(t *testing.T) {
	d := open(t)
	if gs, err := d.Generations(); err != nil || len(gs) != 0 {
		t.Fatalf("empty directory: %v, %v", gs, err)
	}
	if _, err := lease.Create(d.Path(), binding(2).Want()); err != nil {
		t.Fatal(err)
	}
	d.WritePlan(&Plan{Binding: binding(9), Source: "s", Path: FilesName(9)})
	os.Mkdir(d.FilesPath(12), 0o700)
	os.WriteFile(filepath.Join(d.Path(), "notes.txt"), nil, 0o600)
	os.WriteFile(filepath.Join(d.Path(), "007.json"), nil, 0o600)
	os.WriteFile(filepath.Join(d.Path(), "3.unknown"), nil, 0o600)
	gs, err := d.Generations()
	if err != nil || !slices.Equal(gs, []int64{2, 9, 12}) {
		t.Fatalf("Generations = %v, %v; want [2 9 12]", gs, err)
	}
	l := d.Inspect(2)
	if !l.Lease || l.Identity == nil || l.Plan != nil || l.Config != nil || l.Journal != nil || l.Dropped != nil {
		t.Fatalf("Inspect(2) = %+v", l)
	}
	if b, ok := l.Binding(); !ok || b != binding(2) {
		t.Fatalf("Binding = %+v %v", b, ok)
	}
	l = d.Inspect(9)
	if l.Lease || l.Identity != nil || l.Plan == nil || l.PlanErr != nil {
		t.Fatalf("Inspect(9) = %+v", l)
	}
	l = d.Inspect(12)
	if _, ok := l.Binding(); ok {
		t.Fatalf("Inspect(12) has a binding: %+v", l)
	}
}

// TestConfigurationWitnessesItsLease: a configuration records the lease
// it was published under; a lease and identity record that agree with
// each other but not with it (a lease recreated with a matching record)
// are refused by Inspect, even in a process that never saw the original
// lease (generation 5 here).
func TestConfigurationWitnessesItsLease(t *testing.T) {
	d := open(t)
	id, err := lease.Create(d.Path(), binding(4).Want())
	if err != nil {
		t.Fatal(err)
	}
	c := config(4)
	c.Lease = &LeaseFile{Device: id.Device, Inode: id.Inode}
	if err := d.PublishConfig(c); err != nil {
		t.Fatal(err)
	}
	if l := d.Inspect(4); l.IdentityErr != nil || l.ConfigErr != nil || l.Config.Lease == nil || *l.Config.Lease != *c.Lease {
		t.Fatalf("Inspect(4) = %+v", l)
	}
	// Another generation's configuration, whose recorded lease is not the
	// one its identity record names.
	id5, err := lease.Create(d.Path(), binding(5).Want())
	if err != nil {
		t.Fatal(err)
	}
	c = config(5)
	c.Lease = &LeaseFile{Device: id5.Device, Inode: id5.Inode + 1}
	if err := d.PublishConfig(c); err != nil {
		t.Fatal(err)
	}
	if l := d.Inspect(5); !errors.Is(l.IdentityErr, lease.ErrReplaced) {
		t.Fatalf("Inspect(5).IdentityErr = %v, want ErrReplaced", l.IdentityErr)
	}
}

func TestOpenRefusesAnUnsafeDirectory(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if _, err := Open(state); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(state, "node", "generations"), 0o777)
	if _, err := Open(state); !errors.Is(err, lease.ErrUnsafe) {
		t.Fatalf("Open: %v, want ErrUnsafe", err)
	}
}
