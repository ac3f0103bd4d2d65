package realpeers_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

// ptyResult is what sdk.mjs's "pty" scenario prints.
type ptyResult struct {
	PID                                             uint32
	List, Hi, Follow, SizeBefore, Resize, SizeAfter sdkAttempt
	UID, Kill, Wait, KillAgain                      sdkAttempt
	Output                                          string
}

// TestPTYAgainstTheRealExecd drives a terminal as a web terminal does
// with the JS SDK 2.51 (sdk.mjs "pty": pty.create, sendInput of
// `echo hi`, a pty.connect beside the create's stream that gets what
// follows, resize and `stty size`, the shell's uid, kill), through the
// gateway with extended_operations and the real Ingress, against each
// real execd version: as execd's own identity (no user mapped), as the
// SDK user "user" mapped to uid 1000 (the shell then runs through
// setpriv), and against an execd that requires an access token (the PTY
// WebSocket's token must survive the Ingress); and the same terminal with
// the Python SDK 2.24 (scenario.py "pty").
func TestPTYAgainstTheRealExecd(t *testing.T) {
	requireTier(t)
	logs := map[string]*lockedWriter{}
	start := func(name, lines string) *harness.Env {
		logs[name] = &lockedWriter{}
		gw, err := harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: strings.Replace(w.caddyfile, "\t\ttoken_target\n", lines, 1),
			CredentialsFile: w.gateway.CredFile, KeyFile: w.gateway.KeyFile, KeyID: "primary", Stderr: logs[name]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.Close)
		return gw
	}
	identity := start("execd-identity", "\t\ttoken_target\n\t\textended_operations\n")
	mapped := start("user-1000", "\t\ttoken_target\n\t\textended_operations\n\t\tuser user 1000 1000 /home/user\n\t\tdefault_user user\n")
	// A gateway with an execd access token for cluster-a, against an
	// execd that requires it: the PTY WebSocket goes through the real
	// Ingress, which relays a "Connection: Upgrade" WebSocket without the
	// token (docs/wire-facts.md §X2.5).
	const execdToken = "pty-test-execd-token"
	tokenFile := filepath.Join(t.TempDir(), "execd-token")
	if err := os.WriteFile(tokenFile, []byte(execdToken), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenLines := strings.Replace(w.caddyfile, "cluster "+w.a.id+" "+w.a.ingress+"\n",
		"cluster "+w.a.id+" "+w.a.ingress+" {\n\t\t\texecd_access_token {file."+tokenFile+"}\n\t\t}\n", 1)
	if tokenLines == w.caddyfile {
		t.Fatal("the Caddyfile has no cluster-a line to give a token")
	}
	logs["execd-token"] = &lockedWriter{}
	withToken, err := harness.Start(harness.Config{RepoRoot: w.root,
		Caddyfile:       strings.Replace(tokenLines, "\t\ttoken_target\n", "\t\ttoken_target\n\t\textended_operations\n", 1),
		CredentialsFile: w.gateway.CredFile, KeyFile: w.gateway.KeyFile, KeyID: "primary", Stderr: logs["execd-token"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(withToken.Close)
	type gateway struct {
		name string
		env  *harness.Env
		uid  string
	}
	run := func(t *testing.T, gw gateway, id string) {
		mark := len(logs[gw.name].String())
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the gateway's log:\n%s", logs[gw.name].String()[mark:])
			}
		})
		var r ptyResult
		runScenario(t, gw.env, "node", []string{"sdk.mjs", "pty"}, filepath.Join(w.root, "integration/js"), &r,
			"E2B_PACKAGE=e2b-2.51.0", "SANDBOX_ID="+id)
		wantValue(t, "commands.list() (the terminal)", r.List, []any{map[string]any{"cmd": "/bin/bash", "args": []any{"-i", "-l"}}})
		wantValue(t, "echo hi in onData", r.Hi, true)
		wantValue(t, "echo both in a pty.connect beside the create's stream", r.Follow, true)
		wantValue(t, "stty size at create", r.SizeBefore, "24 80")
		wantResizedAndKilled(t, r.Resize, r.SizeAfter, r.Kill, r.Wait, "CommandExitError")
		wantValue(t, "id -u", r.UID, gw.uid)
		wantValue(t, "pty.kill again", r.KillAgain, false)
		if t.Failed() {
			t.Logf("the terminal's output: %q", r.Output)
		}
	}
	python := pythonInterpreter(t)
	// The Python SDK 2.24's sync pty API, its output read by a thread in
	// wait(on_pty=).
	runPython := func(t *testing.T, gw gateway, id string) {
		var r ptyResult
		runPythonScenario(t, gw.env, python, "pty", &r, "SANDBOX_ID="+id)
		wantValue(t, "echo hi in on_pty", r.Hi, true)
		wantValue(t, "stty size at create", r.SizeBefore, "24 80")
		wantResizedAndKilled(t, r.Resize, r.SizeAfter, r.Kill, r.Wait, "CommandExitException")
		wantValue(t, "pty.kill again", r.KillAgain, false)
		if t.Failed() {
			t.Logf("the terminal's output: %q", r.Output)
		}
	}
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			t.Run("no-token", func(t *testing.T) {
				w.startExecd(t, version)
				for _, gw := range []gateway{{"execd-identity", identity, "0"}, {"user-1000", mapped, "1000"}} {
					t.Run(gw.name, func(t *testing.T) { run(t, gw, w.createSandbox(t)) })
				}
				t.Run("python-2.24.0", func(t *testing.T) { runPython(t, gateway{"execd-identity", identity, "0"}, w.createSandbox(t)) })
			})
			t.Run("execd-token", func(t *testing.T) {
				// corectl's readiness probe has no token in this world:
				// the sandbox is created while an execd without one
				// answers, then served by one that requires it.
				var id string
				t.Run("create", func(ct *testing.T) {
					w.startExecd(ct, version)
					id = w.createSandbox(t)
				})
				if id == "" {
					t.FailNow()
				}
				w.startExecdArgs(t, version, "--access-token", execdToken)
				run(t, gateway{"execd-token", withToken, "0"}, id)
			})
		})
	}
}

// wantResizedAndKilled checks the end of a terminal scenario: pty.resize
// to 100x30 succeeded and `stty size` then printed "30 100"; pty.kill
// answered true; wait() threw the SDK's exit error (exitErr: its name).
func wantResizedAndKilled(t *testing.T, resize, sizeAfter, kill, wait sdkAttempt, exitErr string) {
	t.Helper()
	if !resize.OK {
		t.Errorf("pty.resize: %+v", resize.Error)
	}
	wantValue(t, "stty size after resize", sizeAfter, "30 100")
	wantValue(t, "pty.kill", kill, true)
	if wait.OK || wait.Error == nil || wait.Error.Name != exitErr {
		t.Errorf("wait() after kill: %s %+v", wait.Value, wait.Error)
	}
}

// ptyReloadResult is what sdk.mjs's "ptyReload" scenario prints.
type ptyReloadResult struct {
	Before, After, Resize, SizeAfter, Kill, Wait sdkAttempt
	Output                                       string
}

// TestPTYAcrossAReloadAgainstTheRealExecd: a web terminal (JS SDK 2.51,
// sdk.mjs "ptyReload") keeps working across a `caddy reload` of the
// gateway, against each real execd version through the real Ingress: its
// Start stream stays with the replaced configuration and holds the
// session's one WebSocket, while input and a resize after the reload reach
// the new configuration on new connections and go through that WebSocket
// (before the data plane's Shared state they were PTY_ATTACHED: execd
// refuses a second connection to a terminal); the kill ends the stream.
func TestPTYAcrossAReloadAgainstTheRealExecd(t *testing.T) {
	requireTier(t)
	extended := strings.Replace(w.caddyfile, "\t\ttoken_target\n", "\t\ttoken_target\n\t\textended_operations\n", 1)
	log := &lockedWriter{}
	gw, err := harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: extended,
		CredentialsFile: w.gateway.CredFile, KeyFile: w.gateway.KeyFile, KeyID: "primary", Stderr: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	for round, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			id := w.createSandbox(t)
			dir := t.TempDir()
			ready, goFile := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
			// The reload changes the configuration (a bound of another
			// value each round): an unchanged one is not reloaded.
			reloaded := make(chan error, 1)
			go func() {
				err := pollFor(2*time.Minute, "the scenario's ready file", func() error { return fileExists(ready) })
				if err == nil {
					err = gw.Reload(context.Background(), gw.Expand(strings.Replace(extended, "\t\textended_operations\n",
						fmt.Sprintf("\t\textended_operations\n\t\tmax_requests_per_credential %d\n", 500+round), 1)))
				}
				if err == nil {
					// The reload returns before the replaced server's
					// listener (SO_REUSEPORT, beside the new one) is
					// closed, and a connection the kernel queued on it then
					// is reset unanswered (droppedAtReload in
					// integration/): the SDK goes on once it is gone.
					err = pollFor(time.Minute, "the replaced configuration's listener to close", func() error { return listenersClosed(gw) })
				}
				reloaded <- err
				_ = os.WriteFile(goFile, nil, 0o644)
			}()
			var r ptyReloadResult
			runScenario(t, gw, "node", []string{"sdk.mjs", "ptyReload"}, filepath.Join(w.root, "integration/js"), &r,
				"E2B_PACKAGE=e2b-2.51.0", "SANDBOX_ID="+id, "READY_FILE="+ready, "GO_FILE="+goFile)
			if err := <-reloaded; err != nil {
				t.Fatalf("the reload: %v", err)
			}
			wantValue(t, "echo before in onData", r.Before, true)
			wantValue(t, "echo after the reload in onData", r.After, true)
			wantResizedAndKilled(t, r.Resize, r.SizeAfter, r.Kill, r.Wait, "CommandExitError")
			if t.Failed() {
				t.Logf("the terminal's output: %q\nthe gateway's log:\n%s", r.Output, log.String())
			}
		})
	}
}

// TestPTYOrphanAgainstTheRealExecd: a terminal whose gateway process
// stops (SIGKILL) before its deadline is ended by the next
// commands.list() from another gateway process once the deadline has
// passed (the record's endsAt, plus ptyOrphanGrace, 5 s), against each
// real execd version through the real Ingress, with the JS SDK 2.51
// (sdk.mjs "ptyOrphan"): listed by the other gateway before its deadline,
// not listed after it, and pty.kill then finds nothing (false). Before
// the record held the deadline, the terminal ran until a pty.kill.
func TestPTYOrphanAgainstTheRealExecd(t *testing.T) {
	requireTier(t)
	const timeout = 8 * time.Second
	extended := strings.Replace(w.caddyfile, "\t\ttoken_target\n", "\t\ttoken_target\n\t\textended_operations\n", 1)
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			id := w.createSandbox(t)
			starter, err := harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: extended,
				CredentialsFile: w.gateway.CredFile, KeyFile: w.gateway.KeyFile, KeyID: "primary"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(starter.Close)
			js := filepath.Join(w.root, "integration/js")
			var created struct{ PID uint32 }
			runScenario(t, starter, "node", []string{"sdk.mjs", "ptyOrphan"}, js, &created, "E2B_PACKAGE=e2b-2.51.0",
				"SANDBOX_ID="+id, "PHASE=create", fmt.Sprintf("TIMEOUT_MS=%d", timeout.Milliseconds()))
			deadline := time.Now().Add(timeout) // at or after the record's endsAt
			if err := starter.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if _, ok := starter.WaitExit(time.Minute); !ok {
				t.Fatal("the starting gateway did not exit after SIGKILL")
			}
			type check struct{ Listed, Kill sdkAttempt }
			pid := fmt.Sprintf("PID=%d", created.PID)
			var c check
			runScenario(t, w.extended, "node", []string{"sdk.mjs", "ptyOrphan"}, js, &c, "E2B_PACKAGE=e2b-2.51.0",
				"SANDBOX_ID="+id, "PHASE=check", pid)
			if time.Now().Before(deadline) {
				wantValue(t, "listed by another gateway before the deadline", c.Listed, true)
			} else {
				t.Logf("the first check ended after the deadline (a slow machine): whether the terminal outlived its gateway is not checked")
			}
			// The rule is about time: the check waits for the deadline and
			// the grace to pass.
			time.Sleep(time.Until(deadline.Add(5*time.Second + time.Second)))
			c = check{}
			runScenario(t, w.extended, "node", []string{"sdk.mjs", "ptyOrphan"}, js, &c, "E2B_PACKAGE=e2b-2.51.0",
				"SANDBOX_ID="+id, "PHASE=check", pid, "KILL=1")
			wantValue(t, "listed after the deadline", c.Listed, false)
			wantValue(t, "pty.kill after the deadline", c.Kill, false)
		})
	}
}

// listenersClosed reports as an error while the gateway process holds
// more than one socket listening on its address: the replaced
// configuration's beside the new one's, after a reload.
func listenersClosed(gw *harness.Env) error {
	addr := strings.TrimPrefix(gw.Gateway, "http://")
	all, _, err := freeport.Listeners(gw.PID(), addr)
	if err == nil && all != 1 {
		err = fmt.Errorf("%d sockets listen on %s", all, addr)
	}
	return err
}

// fileExists reports as an error that path does not exist yet.
func fileExists(path string) error {
	_, err := os.Stat(path)
	return err
}

// lockedWriter keeps a gateway's log, written by the process's output
// copier while the test may read it.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
