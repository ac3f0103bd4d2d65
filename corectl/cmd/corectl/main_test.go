package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/corectl/cluster"
)

func TestRunReportsInvalidFiles(t *testing.T) {
	dir := t.TempDir()
	if err := run([]string{"-config", filepath.Join(dir, "missing.yaml"), "-credentials", "x", "-api-keys", "y"}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing config: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("clusters: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-config", bad, "-credentials", "x", "-api-keys", "y"}); !errors.Is(err, cluster.ErrInvalidConfig) {
		t.Fatalf("invalid config: %v", err)
	}
}
