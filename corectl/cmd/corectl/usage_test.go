package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The test binary runs corectl's main instead of the tests when
// CORECTL_TEST_MAIN is 1 (init runs before TestMain), so the tests below
// see what a user sees: the exit status and the output of the command.
func init() {
	if os.Getenv("CORECTL_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
}

// corectlCommand runs corectl's main with args and returns its exit
// status and combined output.
func corectlCommand(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CORECTL_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	default:
		t.Fatalf("corectl %v: %v", args, err)
		return 0, ""
	}
}

// TestHelp: -h and -help print the usage (every command, rbac included,
// and the flags) and exit 0; `corectl rbac -h` prints rbac's; a flag
// that does not exist exits 2 with the usage.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"-help"}} {
		code, out := corectlCommand(t, args...)
		if code != 0 {
			t.Errorf("corectl %v: exit %d, want 0\n%s", args, code, out)
		}
		for _, want := range []string{"Usage:", "corectl rbac -config", "corectl -print-cni-facts", "-api-keys", "-probe-relay-url", "Exit status:"} {
			if !strings.Contains(out, want) {
				t.Errorf("corectl %v lacks %q:\n%s", args, want, out)
			}
		}
	}
	code, out := corectlCommand(t, "rbac", "-h")
	if code != 0 || !strings.Contains(out, "corectl-project-namespace") || !strings.Contains(out, "-service-account") {
		t.Errorf("corectl rbac -h: exit %d\n%s", code, out)
	}
	code, out = corectlCommand(t, "-no-such-flag")
	if code != 2 || !strings.Contains(out, "flag provided but not defined: -no-such-flag") || !strings.Contains(out, "Usage:") {
		t.Errorf("corectl -no-such-flag: exit %d, want 2 with the usage\n%s", code, out)
	}
	code, out = corectlCommand(t, "rbac", "-no-such-flag")
	if code != 2 {
		t.Errorf("corectl rbac -no-such-flag: exit %d, want 2\n%s", code, out)
	}
}
