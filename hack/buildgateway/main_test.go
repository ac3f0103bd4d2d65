package main

import (
	"strings"
	"testing"
)

// TestBuildFlagsTags: -tags adds to xcaddy's build tags, and a tag that
// could split xcaddy's shell-like flags (or is empty) is refused.
func TestBuildFlagsTags(t *testing.T) {
	got, err := buildFlags("-X a.b=c", "")
	if err != nil || !strings.HasSuffix(got, " -tags nobadger,nomysql,nopgx") {
		t.Fatalf("no extra tags: %q, %v", got, err)
	}
	got, err = buildFlags("", "some_tag,x2")
	if err != nil || !strings.HasSuffix(got, " -tags nobadger,nomysql,nopgx,some_tag,x2") {
		t.Fatalf("extra tags: %q, %v", got, err)
	}
	for _, bad := range []string{"a b", "a,", ",a", "a;b", "a'b", "-x", "a\\b"} {
		if _, err := buildFlags("", bad); err == nil || !strings.Contains(err.Error(), "-tags") {
			t.Errorf("tags %q: %v, want an error naming -tags", bad, err)
		}
	}
	if _, err := buildFlags("'", ""); err == nil {
		t.Error("a quote in -ldflags was accepted")
	}
}
