package placement_test

import (
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/nodecore/placement"
	"github.com/sandgate/sandgate/nodecore/placement/placementtest"
)

// fileStore is a journal in a fresh directory; each Open closes the
// previous store (one process writes the journal).
func fileStore(t *testing.T) placementtest.Store {
	path := filepath.Join(t.TempDir(), "placements.jsonl")
	var prev *placement.File
	t.Cleanup(func() {
		if prev != nil {
			prev.Close()
		}
	})
	return placementtest.Store{Open: func(t *testing.T) placement.Store {
		t.Helper()
		if prev != nil {
			prev.Close()
		}
		s, err := placement.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		prev = s
		return s
	}}
}

// TestFileContract runs the store contract against the journal.
func TestFileContract(t *testing.T) { placementtest.Run(t, fileStore) }

// TestMemory: the in-memory store (no state_dir) within one process.
func TestMemory(t *testing.T) {
	placementtest.Exercise(t, placement.NewMemory())
	placementtest.Malformed(t, placement.NewMemory())
}
