package credential

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/waittest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

const jsonFile = `{
	"credentials": [
		{"id": "a", "enabled": true, "resourceSpecId": "spec-1", "resourceGroupId": "rg-1", "projectNamespace": "proj-a", "clusterId": "cluster-1"},
		{"id": "b", "enabled": true, "projectNamespace": "proj-b", "clusterId": "cluster-2"},
		{"id": "off", "enabled": false, "projectNamespace": "proj-c", "clusterId": "cluster-3"}
	]
}
`

const yamlFile = `# resource credentials
credentials:
  - id: a
    enabled: true
    resourceSpecId: spec-1
    resourceGroupId: rg-1
    projectNamespace: proj-a
    clusterId: cluster-1
  - id: b
    enabled: true
    projectNamespace: proj-b
    clusterId: cluster-2
  - id: "off"
    enabled: false
    projectNamespace: proj-c
    clusterId: cluster-3
`

var credA = Credential{ID: "a", Enabled: true, ResourceSpecID: "spec-1", ResourceGroupID: "rg-1", ProjectNamespace: "proj-a", ClusterID: "cluster-1"}

func openFile(t *testing.T, content string, logger *zap.Logger) (*File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path, logger)
	if err != nil {
		t.Fatalf("OpenFile: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f, path
}

func TestOpenFileFormats(t *testing.T) {
	for name, content := range map[string]string{"JSON": jsonFile, "YAML": yamlFile} {
		t.Run(name, func(t *testing.T) {
			f, _ := openFile(t, content, nil)
			ctx := context.Background()
			got, err := f.Lookup(ctx, "a")
			if err != nil || got != credA {
				t.Fatalf("Lookup(a) = %+v, %v; want %+v", got, err, credA)
			}
			got, err = f.Lookup(ctx, "b")
			if err != nil || got.ClusterID != "cluster-2" || got.ResourceSpecID != "" {
				t.Fatalf("Lookup(b) = %+v, %v", got, err)
			}
			got, err = f.Lookup(ctx, "off")
			assertOnly(t, err, ErrDisabled)
			if got.ID != "off" || got.ClusterID != "cluster-3" {
				t.Errorf("Lookup(off) returned %+v with ErrDisabled, want the credential", got)
			}
			for _, id := range []string{"missing", "", "A", strings.Repeat("x", MaxIDLength+1), ".."} {
				got, err := f.Lookup(ctx, id)
				assertOnly(t, err, ErrNotFound)
				if got != (Credential{}) {
					t.Errorf("Lookup(%q) = %+v with ErrNotFound", id, got)
				}
			}
			if f.Version() != 1 || f.LastError() != nil {
				t.Errorf("Version() = %d, LastError() = %v after OpenFile", f.Version(), f.LastError())
			}
		})
	}
}

func TestOpenFileRejects(t *testing.T) {
	cred := func(fields string) string { return `{"credentials": [` + fields + `]}` }
	okFields := `"id": "a", "enabled": true, "projectNamespace": "p", "clusterId": "c"`
	cases := []struct {
		name, content, reason string
	}{
		{"unknown credential field", cred(`{` + okFields + `, "region": "eu"}`), `unknown field "region"`},
		{"unknown top-level field", `{"credentials": [], "version": 2}`, `unknown top-level field "version"`},
		{"field name in other case", cred(`{"ID": "a", "enabled": true, "projectNamespace": "p", "clusterId": "c"}`), `unknown field "ID"`},
		{"duplicate id", cred(`{` + okFields + `}, {` + okFields + `}`), "credentials[1] repeats the id of credentials[0]"},
		{"duplicate key in YAML mapping", "credentials:\n- id: a\n  id: b\n  projectNamespace: p\n  clusterId: c\n", `already set`},
		{"missing clusterId", cred(`{"id": "a", "enabled": true, "projectNamespace": "p"}`), "credentials[0]: credential: invalid credential data: clusterId is empty"},
		{"missing projectNamespace", cred(`{"id": "a", "clusterId": "c"}`), "projectNamespace is empty"},
		{"missing id", cred(`{"projectNamespace": "p", "clusterId": "c"}`), "id is empty"},
		{"id too long", cred(`{"id": "` + strings.Repeat("i", MaxIDLength+1) + `", "projectNamespace": "p", "clusterId": "c"}`), "id is longer than 253 bytes"},
		{"projectWide as string", cred(`{` + okFields + `, "projectWide": "true"}`), "field projectWide is a JSON string, want a boolean"},
		{"YAML quoted projectWide", "credentials:\n- id: a\n  projectNamespace: p\n  clusterId: c\n  projectWide: \"true\"\n", "field projectWide is a JSON string, want a boolean"},
		{"projectWide in other case", cred(`{` + okFields + `, "projectwide": true}`), `unknown field "projectwide"`},
		{"null projectWide", cred(`{` + okFields + `, "projectWide": null}`), "field projectWide is null"},
		{"enabled as string", cred(`{"id": "a", "enabled": "yes", "projectNamespace": "p", "clusterId": "c"}`), "field enabled is a JSON string, want a boolean"},
		{"id as number", cred(`{"id": 7, "projectNamespace": "p", "clusterId": "c"}`), "field id is a JSON number, want a string"},
		{"YAML unquoted numeric id", "credentials:\n- id: 0123\n  projectNamespace: p\n  clusterId: c\n", "field id is a JSON number, want a string"},
		{"null field", cred(`{` + okFields + `, "resourceSpecId": null}`), "field resourceSpecId is null"},
		{"null element", cred(`null`), "credentials[0]: credential: invalid credential data: not a JSON object"},
		{"credentials is an object", `{"credentials": {"a": {}}}`, "credentials must be a list"},
		{"credentials is null", `{"credentials": null}`, "credentials must be a list"},
		{"no credentials key", `{}`, `missing top-level field "credentials"`},
		{"empty file", ``, "top level must be a mapping"},
		{"top level is a list", `[1, 2]`, "top level must be a mapping"},
		{"not JSON or YAML", "credentials: [\n  {id: a,\n", "not valid JSON or YAML"},
		{"binary garbage", "\x00\x01\x02\xff", "not valid JSON or YAML"},
		{"oversize", "credentials: []\n" + strings.Repeat("#", MaxFileSize), "larger than 16777216 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "creds.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := OpenFile(path, nil)
			if f != nil {
				_ = f.Close()
				t.Fatalf("OpenFile succeeded")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("OpenFile error = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("OpenFile error = %q, want the path and %q", err, tc.reason)
			}
			for _, s := range sentinels {
				if errors.Is(err, s) {
					t.Errorf("OpenFile error also matches %v", s)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.yaml")
		f, err := OpenFile(path, nil)
		if f != nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Fatalf("OpenFile = %v, %v; want fs.ErrNotExist naming the path", f, err)
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nodir", "creds.yaml")
		f, err := OpenFile(path, nil)
		if f != nil || err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("OpenFile = %v, %v; want an error naming the path", f, err)
		}
	})
	t.Run("empty list is valid", func(t *testing.T) {
		f, _ := openFile(t, "credentials: []\n", nil)
		assertOnly(t, lookupErr(f, "a"), ErrNotFound)
	})
}

func lookupErr(src Source, id string) error {
	_, err := src.Lookup(context.Background(), id)
	return err
}

// TestReloadRenameOver: after an atomic rename-over, a credential set to
// enabled=false is refused with ErrDisabled and a removed one with
// ErrNotFound, both within 1 s of the rename.
func TestReloadRenameOver(t *testing.T) {
	f, path := openFile(t, yamlFile, nil)
	v0 := f.Version()
	const next = `credentials:
  - id: a
    enabled: false
    projectNamespace: proj-a
    clusterId: cluster-1
  - id: "off"
    enabled: true
    projectNamespace: proj-c
    clusterId: cluster-9
`
	writeAtomic(t, path, next)
	waittest.Until(t, time.Second, "the rename-over to be applied", func() bool {
		return f.Version() > v0 && lookupIs(f, "a", ErrDisabled) && lookupIs(f, "b", ErrNotFound)
	})
	got, err := f.Lookup(context.Background(), "off")
	if err != nil || got.ClusterID != "cluster-9" {
		t.Fatalf("Lookup(off) = %+v, %v after reload", got, err)
	}
	if f.LastError() != nil {
		t.Fatalf("LastError() = %v after a good reload", f.LastError())
	}
}

// TestReloadInPlace covers editors that truncate and rewrite the file.
func TestReloadInPlace(t *testing.T) {
	f, path := openFile(t, jsonFile, nil)
	v0 := f.Version()
	if err := os.WriteFile(path, []byte(`{"credentials": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, time.Second, "the in-place write to be applied", func() bool {
		return f.Version() > v0 && lookupIs(f, "a", ErrNotFound) && f.LastError() == nil
	})
}

// TestReloadBrokenKeepsPrevious: a broken rewrite keeps the last good
// version, reports LastError and logs a warning with the path but no
// contents; a later good write recovers.
func TestReloadBrokenKeepsPrevious(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	f, path := openFile(t, yamlFile, zap.New(core))
	v0 := f.Version()

	const secretish = "do-not-log-this-cluster"
	writeAtomic(t, path, "credentials:\n  - id: a\n    clusterId: "+secretish+"\n    projectNamespace: p\n    colour: blue\n")
	// The warning is the failed reload's last step, after LastError is
	// set: waiting for LastError alone raced the warning's logging.
	waittest.Until(t, time.Second, "the broken reload to fail and log its warning", func() bool {
		return f.LastError() != nil && logs.FilterLevelExact(zapcore.WarnLevel).Len() > 0
	})
	if !errors.Is(f.LastError(), ErrInvalid) || !strings.Contains(f.LastError().Error(), `unknown field "colour"`) {
		t.Fatalf("LastError() = %v", f.LastError())
	}
	if f.Version() != v0 {
		t.Fatalf("Version() = %d after a failed reload, want %d", f.Version(), v0)
	}
	if got, err := f.Lookup(context.Background(), "a"); err != nil || got != credA {
		t.Fatalf("Lookup(a) = %+v, %v; want the previous version", got, err)
	}
	assertOnly(t, lookupErr(f, "off"), ErrDisabled)

	warnings := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warnings) == 0 {
		t.Fatal("no warning logged for the failed reload")
	}
	for _, e := range warnings {
		fields := e.ContextMap()
		if fields["path"] != path {
			t.Errorf("warning %q has path %v, want %q", e.Message, fields["path"], path)
		}
		if strings.Contains(fmt.Sprint(e.Message, fields), secretish) {
			t.Errorf("warning %q %v contains file contents", e.Message, fields)
		}
	}

	// Removing the file is also a failed reload that keeps the data.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, time.Second, "the removal to be reported", func() bool { return errors.Is(f.LastError(), fs.ErrNotExist) })
	if got, err := f.Lookup(context.Background(), "a"); err != nil || got != credA || f.Version() != v0 {
		t.Fatalf("after removal: Lookup(a) = %+v, %v, Version() = %d", got, err, f.Version())
	}

	writeAtomic(t, path, jsonFile+"\n")
	waittest.Until(t, time.Second, "recovery after a good write", func() bool {
		return f.Version() > v0 && f.LastError() == nil
	})
	if got, err := f.Lookup(context.Background(), "b"); err != nil || got.ClusterID != "cluster-2" {
		t.Fatalf("Lookup(b) = %+v, %v after recovery", got, err)
	}
}

// TestReloadConfigMapSwap simulates a Kubernetes ConfigMap volume update:
// the file is a symlink through "..data", which kubelet swaps atomically.
func TestReloadConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mkVersion := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "credentials.yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mkVersion("..2030_01_01_00_00_00.1", yamlFile)
	if err := os.Symlink("..2030_01_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "credentials.yaml")
	if err := os.Symlink(filepath.Join("..data", "credentials.yaml"), path); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v0 := f.Version()

	mkVersion("..2030_01_01_00_00_01.2", "credentials:\n- id: b\n  enabled: false\n  projectNamespace: p\n  clusterId: c\n")
	if err := os.Symlink("..2030_01_01_00_00_01.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2030_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, time.Second, "the ..data swap to be applied", func() bool {
		return f.Version() > v0 && lookupIs(f, "a", ErrNotFound) && lookupIs(f, "b", ErrDisabled)
	})
}

// TestCloseStopsWatcher checks that Close ends the watch goroutine (and
// fsnotify's), is idempotent, and leaves Lookup serving the last version.
func TestCloseStopsWatcher(t *testing.T) {
	before := runtime.NumGoroutine()
	path := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(path, []byte(jsonFile), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.done:
		t.Fatal("watch goroutine exited before Close")
	default:
	}
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-f.done:
	default:
		t.Fatal("watch goroutine still running after Close returned")
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	waittest.Until(t, time.Second, "goroutines to return to the baseline", func() bool {
		return runtime.NumGoroutine() <= before
	})
	if got, err := f.Lookup(context.Background(), "a"); err != nil || got != credA {
		t.Fatalf("Lookup after Close = %+v, %v", got, err)
	}
}

// FuzzParse asserts the file parser never panics and that everything it
// accepts satisfies validation with unique, correctly keyed IDs.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		jsonFile, yamlFile, `{"credentials": []}`, "credentials: []\n", "",
		`{"credentials": [{"id": "a", "enabled": "yes"}]}`,
		"credentials:\n- &x {id: a, projectNamespace: p, clusterId: c}\n- *x\n",
		"credentials:\n- id: a\n  id: b\n", "[1,2]", "\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("parse error %v does not wrap ErrInvalid", err)
			}
			if m != nil {
				t.Fatalf("parse returned a map with an error")
			}
			return
		}
		for id, c := range m {
			if id != c.ID {
				t.Fatalf("map key %q holds credential %q", id, c.ID)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("accepted invalid credential %+v: %v", c, err)
			}
		}
	})
}

// TestParseLimits: the optional limits mapping of a credential is decoded
// strictly (unknown members, negative values refused).
func TestParseLimits(t *testing.T) {
	const head = "credentials:\n  - {id: a, enabled: true, projectNamespace: ns, clusterId: c1, "
	m, err := parse([]byte(head + "limits: {concurrentSandboxes: 2, createsPerMinute: 10, maxTimeoutSeconds: 600}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l := m["a"].Limits; l == nil || *l != (Limits{ConcurrentSandboxes: 2, CreatesPerMinute: 10, MaxTimeoutSeconds: 600}) {
		t.Fatalf("limits %+v", m["a"].Limits)
	}
	for _, bad := range []string{
		"limits: {concurrentSandboxes: -1}}\n",
		"limits: {concurrent: 1}}\n",
		"limits: {createsPerMinute: \"10\"}}\n",
	} {
		if _, err := parse([]byte(head + bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", bad, err)
		}
	}
}
