package realpeers_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/harness"
)

// ptyResult is what sdk.mjs's "pty" scenario prints.
type ptyResult struct {
	PID                                     uint32
	List, Hi, SizeBefore, Resize, SizeAfter sdkAttempt
	UID, Kill, Wait, KillAgain              sdkAttempt
}

// TestPTYAgainstTheRealExecd drives a terminal as a web terminal does
// with the JS SDK 2.51 (sdk.mjs "pty": pty.create, sendInput of
// `echo hi`, resize and `stty size`, the shell's uid, kill), through the
// gateway with extended_operations and the real Ingress, against each
// real execd version: as execd's own identity (no user mapped) and as the
// SDK user "user" mapped to uid 1000 (the shell then runs through
// setpriv).
func TestPTYAgainstTheRealExecd(t *testing.T) {
	requireTier(t)
	caddyfile := strings.Replace(w.caddyfile, "\t\ttoken_target\n", "\t\ttoken_target\n\t\textended_operations\n\t\tuser user 1000 1000 /home/user\n\t\tdefault_user user\n", 1)
	mapped, err := harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: caddyfile, CredentialsFile: w.gateway.CredFile,
		KeyFile: w.gateway.KeyFile, KeyID: "primary"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mapped.Close)
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			for _, gw := range []struct {
				name string
				env  *harness.Env
				uid  string
			}{{"execd-identity", w.extended, "0"}, {"user-1000", mapped, "1000"}} {
				t.Run(gw.name, func(t *testing.T) {
					id := w.createSandbox(t)
					var r ptyResult
					runScenario(t, gw.env, "node", []string{"sdk.mjs", "pty"}, filepath.Join(w.root, "integration/js"), &r,
						"E2B_PACKAGE=e2b-2.51.0", "SANDBOX_ID="+id)
					wantValue(t, "commands.list() (the terminal)", r.List, []any{map[string]any{"cmd": "/bin/bash", "args": []any{"-i", "-l"}}})
					wantValue(t, "echo hi in onData", r.Hi, true)
					wantValue(t, "stty size at create", r.SizeBefore, "24 80")
					if !r.Resize.OK {
						t.Errorf("pty.resize: %+v", r.Resize.Error)
					}
					wantValue(t, "stty size after resize", r.SizeAfter, "30 100")
					wantValue(t, "id -u", r.UID, gw.uid)
					wantValue(t, "pty.kill", r.Kill, true)
					if r.Wait.OK || r.Wait.Error == nil || r.Wait.Error.Name != "CommandExitError" {
						t.Errorf("wait() after kill: %s %+v", r.Wait.Value, r.Wait.Error)
					}
					wantValue(t, "pty.kill again", r.KillAgain, false)
				})
			}
		})
	}
}
