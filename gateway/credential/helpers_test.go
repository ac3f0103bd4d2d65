package credential

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sentinels are the Lookup errors; each Lookup error matches exactly one.
var sentinels = []error{ErrNotFound, ErrDisabled, ErrUnavailable}

// writeAtomic replaces path by writing a temporary file in the same
// directory and renaming it over path, as editors and config tools do.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		t.Fatal(err)
	}
}

// lookupIs reports whether src.Lookup(id) fails with exactly want (nil:
// succeeds).
func lookupIs(src Source, id string, want error) bool {
	_, err := src.Lookup(context.Background(), id)
	if want == nil {
		return err == nil
	}
	return errors.Is(err, want)
}

// assertOnly fails unless err matches want and no other Lookup sentinel,
// and its text contains none of forbidden.
func assertOnly(t *testing.T, err, want error, forbidden ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	for _, s := range sentinels {
		if got := errors.Is(err, s); got != (s == want) {
			t.Errorf("errors.Is(%q, %v) = %v, want %v", err, s, got, s == want)
		}
	}
	for _, f := range forbidden {
		if strings.Contains(err.Error(), f) {
			t.Errorf("error %q contains %q", err, f)
		}
	}
}
