package pool_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/pool/pooltest"
)

// fileStore is a state file in a fresh directory.
func fileStore(t *testing.T) pooltest.Store {
	path := filepath.Join(t.TempDir(), "pools.json")
	return pooltest.Store{
		Open: func(t *testing.T) *pool.Registry {
			t.Helper()
			r, err := pool.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
		Snapshot: func(t *testing.T) string {
			b, err := os.ReadFile(path)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			return string(b)
		},
	}
}

// TestFileContract runs the backend contract against the state file.
func TestFileContract(t *testing.T) { pooltest.Run(t, fileStore) }

// TestMemory: the in-memory registry (no state_dir) follows the same rules
// within one process.
func TestMemory(t *testing.T) {
	r, err := pool.Open("")
	if err != nil {
		t.Fatal(err)
	}
	pooltest.ConfigureAndSet(t, pooltest.Store{Open: func(*testing.T) *pool.Registry { return r }})
}

func TestStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pools.json")
	r, _ := pool.Open(path)
	if _, err := r.Configure(pooltest.Spec7()); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	// A corrupt state file is refused with a clear error.
	for name, content := range map[string]string{
		"negative target": `{"version": 1, "pools": {"default": {"target": -1, "serving": null, "generations": {}}}}`,
		"version 2":       `{"version": 2}`,
		"unbound target":  `{"version": 1, "pools": {"default": {"target": 3, "serving": null, "generations": {}}}}`,
		"bad generation":  `{"version": 1, "pools": {"default": {"serving": null, "generations": {"x": {"specification_digest": "` + pooltest.D7 + `"}}}}}`,
		"bad digest":      `{"version": 1, "pools": {"default": {"serving": null, "generations": {"1": {"specification_digest": "x"}}}}}`,
		"zero serving":    `{"version": 1, "pools": {"default": {"serving": 0, "generations": {}}}}`,
		"unknown member":  `{"version": 1, "pools": {}, "x": 1}`,
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Open(path); !errors.Is(err, pool.ErrState) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestFailedWriteChangesNothing: a state file that cannot be replaced
// refuses the change with ErrState and the registry keeps its state.
func TestFailedWriteChangesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pools.json")
	r, _ := pool.Open(path)
	if _, err := r.Configure(pooltest.Spec7()); err != nil {
		t.Fatal(err)
	}
	// The path becomes a non-empty directory: the rename over it fails,
	// whoever runs the test.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Set("default", 8, nil, &pool.Binding{Generation: 8, SpecificationDigest: pooltest.D8}); !errors.Is(err, pool.ErrState) {
		t.Fatalf("%v", err)
	}
	if d := pooltest.Dep(t, r, "default"); !pooltest.Same(d, 7, pooltest.D7, 0) {
		t.Fatalf("%+v", d)
	}
	if _, ok := r.Binding("default", 8); ok {
		t.Fatal("the binding of a failed write was kept")
	}
}

func TestIsName(t *testing.T) {
	for s, want := range map[string]bool{"default": true, "gpu-1": true, "": false, "-a": false, "a-": false, "A": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false, "a_b": false} {
		if pool.IsName(s) != want {
			t.Errorf("IsName(%q) = %v", s, !want)
		}
	}
}
