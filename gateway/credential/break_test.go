package credential

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/waittest"
)

// TestBreakFlippingFileConcurrentLookups: a credential file flipped
// between enabled and disabled (atomic renames) while lookups run: every
// lookup sees one whole version (the credential, or ErrDisabled), never
// ErrNotFound or another error; odd IDs are refused as not found.
func TestBreakFlippingFileConcurrentLookups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "creds.yaml")
	version := func(enabled bool) string {
		e := "false"
		if enabled {
			e = "true"
		}
		return "credentials:\n  - id: flip\n    enabled: " + e + "\n    resourceSpecId: s\n    resourceGroupId: g\n    projectNamespace: ns\n    clusterId: c1\n" +
			"  - id: other\n    enabled: true\n    resourceSpecId: s\n    resourceGroupId: g\n    projectNamespace: ns\n    clusterId: c2\n"
	}
	writeAtomic(t, path, version(true))
	f, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stop atomic.Bool
	var bad atomic.Value
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				c, err := f.Lookup(context.Background(), "flip")
				if err != nil && !errors.Is(err, ErrDisabled) {
					bad.Store(err)
				} else if err == nil && c.ClusterID != "c1" {
					bad.Store(errors.New("wrong cluster " + c.ClusterID))
				}
				if _, err := f.Lookup(context.Background(), "other"); err != nil {
					bad.Store(err)
				}
			}
		}()
	}
	for i := range 20 {
		en := i%2 == 1
		writeAtomic(t, path, version(en))
		want := error(nil)
		if !en {
			want = ErrDisabled
		}
		waittest.Until(t, 5*time.Second, "flip to be applied", func() bool { return lookupIs(f, "flip", want) })
	}
	stop.Store(true)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatalf("a lookup during reloads failed: %v", v)
	}
	for _, id := range []string{"", ".", "..", "../flip", "flip/", strings.Repeat("x", 300), "fl\x00ip", "FLIP"} {
		if _, err := f.Lookup(context.Background(), id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup(%q) = %v", id, err)
		}
	}
}
