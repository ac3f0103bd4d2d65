package enrolment_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/enrolment/enrolmenttest"
)

// fileStore is a state file in a fresh directory.
func fileStore(t *testing.T) enrolmenttest.Store {
	path := filepath.Join(t.TempDir(), "enrolment.json")
	open := func(t *testing.T, now func() time.Time) enrolmenttest.Enrolments {
		t.Helper()
		s, err := enrolment.Open(path, now)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return enrolmenttest.Store{
		Open: open,
		Snapshot: func(t *testing.T) string {
			b, err := os.ReadFile(path)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			return string(b)
		},
		// The state file's path becomes a non-empty directory, so the
		// rename over it fails (whoever runs the test, root included).
		Broken: func(t *testing.T, now func() time.Time) enrolmenttest.Enrolments {
			s := open(t, now)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// TestFileContract runs the enrolment store contract against the state
// file.
func TestFileContract(t *testing.T) { enrolmenttest.Run(t, fileStore) }
