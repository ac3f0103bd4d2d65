package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinariesNameTheirCommit runs the three built binaries (make build) and
// checks that each names the commit of this checkout, the stamp that
// hack/version.sh hands to the linker (package internal/version). Outside a
// git checkout the stamp is "unknown" and that is what the binaries must say.
func TestBinariesNameTheirCommit(t *testing.T) {
	root := repoRoot(t)
	want := "sandgate commit unknown"
	if out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		want = "sandgate commit " + strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		binary string
		args   []string
	}{
		{"caddy", []string{"sandgate-version"}},
		{"corectl", []string{"-version"}},
		{"nodeagent", []string{"--version"}},
	} {
		bin := filepath.Join(root, "bin", c.binary)
		out, err := exec.Command(bin, c.args...).Output()
		if err != nil {
			t.Fatalf("%s %s: %v (run make build)", bin, strings.Join(c.args, " "), err)
		}
		got := strings.TrimSpace(string(out))
		if strings.Count(got, "\n") != 0 || !strings.HasPrefix(got, want) {
			t.Errorf("%s %s printed %q, want one line starting %q (a binary older than HEAD: run make build)",
				c.binary, strings.Join(c.args, " "), got, want)
		}
	}
}
