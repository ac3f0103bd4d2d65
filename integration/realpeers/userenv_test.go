package realpeers_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/harness"
)

// userEnvResult is what sdk.mjs's "userEnv" scenario and scenario.py's
// "user_env" print.
type userEnvResult struct {
	Env, Background, Asked, Home, GitGlobal sdkAttempt
}

// TestCommandsAsAMappedUser runs commands as the SDK user "user", which
// the gateway maps to uid 1000 with home /home/user as Caddyfile.example
// does, with each SDK, in both modes, against each real execd: the command
// gets envd's HOME, USER and LOGNAME for that user (not execd's own HOME,
// /root, which uid 1000 cannot enter), the request's envs win over them,
// and what needs HOME works: a file in ~ and git's global configuration
// (sbx.git's configureUser writes it), with nothing on stderr.
func TestCommandsAsAMappedUser(t *testing.T) {
	requireTier(t)
	python := pythonInterpreter(t)
	gateways := map[string]*harness.Env{}
	for _, mode := range []struct{ name, lines string }{
		{"six-operation", "\t\ttoken_target\n\t\tuser user 1000 1000 /home/user\n"},
		{"extended_operations", "\t\ttoken_target\n\t\textended_operations\n\t\tuser user 1000 1000 /home/user\n"},
	} {
		caddyfile := strings.Replace(w.caddyfile, "\t\ttoken_target\n", mode.lines, 1)
		gw, err := harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: caddyfile, CredentialsFile: w.gateway.CredFile,
			KeyFile: w.gateway.KeyFile, KeyID: "primary"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.Close)
		gateways[mode.name] = gw
	}
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			for _, mode := range []string{"six-operation", "extended_operations"} {
				t.Run(mode, func(t *testing.T) {
					for _, sdk := range append(jsPackages, "python-2.24.0") {
						t.Run(sdk, func(t *testing.T) {
							id := w.createSandbox(t)
							var r userEnvResult
							if sdk == "python-2.24.0" {
								runPythonScenario(t, gateways[mode], python, "user_env", &r, "SANDBOX_ID="+id)
							} else {
								runScenario(t, gateways[mode], "node", []string{"sdk.mjs", "userEnv"}, filepath.Join(w.root, "integration/js"), &r,
									"E2B_PACKAGE="+sdk, "SANDBOX_ID="+id)
							}
							out := func(stdout string) map[string]any { return map[string]any{"stdout": stdout, "stderr": ""} }
							wantValue(t, "as user", r.Env, out("1000|/home/user|user|user|"))
							wantValue(t, "as user, in the background", r.Background, out("1000|/home/user|user|user|"))
							wantValue(t, "as user with HOME and USER asked for", r.Asked, out("1000|/tmp|me|user|"))
							wantValue(t, "a file in ~", r.Home, out("at-home\n"))
							wantValue(t, "git config --global", r.GitGlobal, out("Sandbox User\n"))
						})
					}
				})
			}
		})
	}
}

// stdinResult is what scenario.py's "stdin" scenario prints.
type stdinResult struct {
	Send, Send2, Wait, AfterEnd sdkAttempt
}

// TestStdinAsAMappedUser runs scenario.py's "stdin" with the Python SDK
// 2.24 through the gateway with extended_operations and the user "user"
// mapped to uid 1000, against each real execd: a command started with
// stdin=True as that user reads what two send_stdin calls wrote, byte for
// byte and in order, and ends when it has read them; its stdin's FIFOs
// belong to that user, who runs the command and the holder; a send_stdin
// after the end fails.
func TestStdinAsAMappedUser(t *testing.T) {
	requireTier(t)
	python := pythonInterpreter(t)
	gw := w.extendedGateway(t, "\t\tuser user 1000 1000 /home/user\n")
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			id := w.createSandbox(t)
			var r stdinResult
			runPythonScenario(t, gw, python, "stdin", &r, "SANDBOX_ID="+id)
			for what, a := range map[string]sdkAttempt{"send_stdin": r.Send, "send_stdin again": r.Send2} {
				if !a.OK {
					t.Errorf("%s failed: %+v", what, a.Error)
				}
			}
			wantValue(t, "wait()", r.Wait, map[string]any{"exitCode": 0.0, "stdout": "ab%s\\\u00fc\n\n1000\n", "stderr": ""})
			if r.AfterEnd.OK || r.AfterEnd.Error == nil || !strings.Contains(r.AfterEnd.Error.Message, "PROCESS_NOT_FOUND") {
				t.Errorf("send_stdin after the end: %+v", r.AfterEnd)
			}
		})
	}
}

// watchResult is what scenario.py's "watch" scenario prints.
type watchResult struct {
	None, Created, Written, Removed, Stop, StopAgain sdkAttempt
}

// TestWatcherWithThePythonSDK runs scenario.py's "watch" with the Python
// SDK 2.24 through the gateway with extended_operations against each real
// execd: its synchronous watch_dir (envd's watchers) answers, at each
// get_new_events, what changed since the call before, by name, and nothing
// when nothing did; stop() removes the watcher, so a second stop() is
// WATCHER_NOT_FOUND.
func TestWatcherWithThePythonSDK(t *testing.T) {
	requireTier(t)
	python := pythonInterpreter(t)
	gw := w.extendedGateway(t, "")
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			id := w.createSandbox(t)
			var r watchResult
			runPythonScenario(t, gw, python, "watch", &r, "SANDBOX_ID="+id, "SCENARIO_DIR=/home/user/watch-"+version)
			wantValue(t, "get_new_events() with nothing changed", r.None, []any{})
			wantValue(t, "after a file written and a directory made", r.Created, []any{"create:sub", "create:w.txt"})
			wantValue(t, "after the file written again", r.Written, []any{"write:w.txt"})
			wantValue(t, "after the file removed", r.Removed, []any{"remove:w.txt"})
			if !r.Stop.OK {
				t.Errorf("stop(): %+v", r.Stop.Error)
			}
			wantError(t, "stop() again", r.StopAgain, "NotFoundException", "WATCHER_NOT_FOUND")
		})
	}
}

// extendedGateway starts a gateway of the world's with extended_operations
// and the e2b_dataplane lines lines, stopped when t ends.
func (w *world) extendedGateway(t *testing.T, lines string) *harness.Env {
	t.Helper()
	caddyfile := strings.Replace(w.caddyfile, "\t\ttoken_target\n", "\t\ttoken_target\n\t\textended_operations\n"+lines, 1)
	gw, err := harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: caddyfile, CredentialsFile: w.gateway.CredFile,
		KeyFile: w.gateway.KeyFile, KeyID: "primary"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	return gw
}
