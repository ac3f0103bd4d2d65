package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/harness"
)

// extendedCaddyfile is the harness's gateway with extended_operations.
var extendedCaddyfile = strings.Replace(harness.DefaultCaddyfile, "e2b_dataplane {", "e2b_dataplane {\n\t\textended_operations", 1)

// TestExtendedOperations drives the extended operations with both JS SDKs
// through the built gateway: a background command that outlives its
// stream, commands.list, commands.connect (output from where it is),
// sendStdin to it (STDIN_UNAVAILABLE: started without stdin), commands.kill
// (true, then false), a command started with stdin: true that prints what
// sendStdin wrote and ends at closeStdin (checkStdinScenario), files.exists, getInfo, makeDir (true, then false) and rename;
// checked against what execd recorded and what is on disk.
func TestExtendedOperations(t *testing.T) {
	e := startEnv(t, func(c *harness.Config) { c.Caddyfile = extendedCaddyfile })
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			dir := "/home/user/ext-" + pkg
			e.mkdir(dir)
			goFile := filepath.Join(e.Dir, "ext-go-"+pkg)
			var res struct {
				PID                                                  uint32
				List                                                 attempt
				Connected                                            []string
				SendStdin, Kill, WaitAfterKill, KillAgain, ListAfter attempt
				ConnectGone                                          attempt
				Exists, ExistsMissing, GetInfo, GetInfoDir           attempt
				GetInfoMissing, MakeDir, MakeDirAgain, Rename        attempt
				RenameMissing, ExistsAfterRename                     attempt
				StdinSend, StdinSend2, StdinClose, StdinWait         attempt
				StdinAfterEnd, StdinListAfter                        attempt
				StdinSeen                                            string
				WatchStop                                            attempt
				WatchSeen                                            []string
			}
			e.runSDK(t, pkg, "extended", sbxOK, &res, "SCENARIO_DIR="+dir, "GO_FILE="+goFile)

			wantValue(t, "commands.list()", res.List, []any{map[string]any{"pid": float64(res.PID), "cmd": "/bin/bash",
				"args": []any{"-l", "-c", "echo before; while [ ! -f '" + goFile + "' ]; do sleep 0.05; done; echo after; while true; do sleep 1; done"},
				"envs": map[string]any{"MODE": "server"}, "cwd": dir}})
			if strings.Join(res.Connected, "") != "after\n" {
				t.Errorf("commands.connect saw %q, want \"after\\n\" only (from where the output is)", res.Connected)
			}
			wantError(t, "sendStdin (started without stdin)", res.SendStdin, "SandboxError",
				fmt.Sprintf("9: [failed_precondition] STDIN_UNAVAILABLE: stdin of process with pid %d not enabled or closed", res.PID))
			checkStdinScenario(t, res.StdinSend, res.StdinSend2, res.StdinClose, res.StdinWait, res.StdinAfterEnd, res.StdinSeen)
			wantValue(t, "commands.list() after the stdin command", res.StdinListAfter, []any{})
			checkWatchScenario(t, res.WatchStop, res.WatchSeen)
			wantValue(t, "commands.kill", res.Kill, true)
			if res.WaitAfterKill.OK || res.WaitAfterKill.Error == nil || res.WaitAfterKill.Error.Name != "CommandExitError" ||
				res.WaitAfterKill.Error.ExitCode == nil || *res.WaitAfterKill.Error.ExitCode != -1 {
				t.Errorf("wait() after kill: %+v %+v", res.WaitAfterKill.Value, res.WaitAfterKill.Error)
			}
			wantValue(t, "commands.kill again", res.KillAgain, false)
			wantValue(t, "commands.list() after kill", res.ListAfter, []any{})
			wantError(t, "commands.connect(unknown pid)", res.ConnectGone, "NotFoundError", "[not_found] PROCESS_NOT_FOUND: ")

			wantValue(t, "files.exists", res.Exists, true)
			wantValue(t, "files.exists(missing)", res.ExistsMissing, false)
			wantValue(t, "files.getInfo", res.GetInfo, map[string]any{"name": "f.txt", "type": "file", "path": dir + "/f.txt",
				"size": 6.0, "mode": 420.0, "permissions": "-rw-r--r--", "modifiedIsDate": true})
			wantValue(t, "files.getInfo(dir)", res.GetInfoDir, map[string]any{"name": filepath.Base(dir), "type": "dir", "path": dir,
				"size": float64(dirSize(t, e.host(dir))), "mode": 493.0, "permissions": "drwxr-xr-x", "modifiedIsDate": true})
			wantError(t, "files.getInfo(missing)", res.GetInfoMissing, "FileNotFoundError", "[not_found] FILE_NOT_FOUND: ")
			wantValue(t, "files.makeDir", res.MakeDir, true)
			wantValue(t, "files.makeDir again", res.MakeDirAgain, false)
			wantValue(t, "files.rename", res.Rename, map[string]any{"name": "g.txt", "type": "file", "path": dir + "/new/g.txt",
				"size": 6.0, "mode": 420.0, "permissions": "-rw-r--r--", "modifiedIsDate": true})
			wantError(t, "files.rename(missing)", res.RenameMissing, "FileNotFoundError", "[not_found] FILE_NOT_FOUND: ")
			wantValue(t, "files.exists after rename", res.ExistsAfterRename, false)

			if fi, err := os.Stat(e.host(dir + "/new/deep")); err != nil || !fi.IsDir() {
				t.Errorf("makeDir on disk: %v %v", fi, err)
			}
			if b, err := os.ReadFile(e.host(dir + "/new/g.txt")); err != nil || string(b) != "hello!" {
				t.Errorf("rename on disk: %q %v", b, err)
			}
			// execd ran the command in the background and the kill was its
			// DELETE /command; the process's files are gone after List.
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			rec, err := e.Execd.WaitCommand(ctx, func(c execdstub.CommandRecord) bool {
				return c.Background && strings.Contains(c.Request.Command, goFile) && !c.Running
			})
			if err != nil || !rec.Interrupted {
				t.Errorf("execd record %+v %v", rec, err)
			}
			if left, _ := filepath.Glob(e.host("/tmp/.sandgate/processes/*")); len(left) != 0 {
				t.Errorf("process files left: %v", left)
			}
		})
	}
	if _, err := os.Stat(e.host("/tmp/.sandgate")); errors.Is(err, fs.ErrNotExist) {
		t.Error("the process directory was never created")
	}
}

func wantValue(t *testing.T, what string, a attempt, want any) {
	t.Helper()
	if !a.OK {
		t.Errorf("%s failed: %+v", what, a.Error)
		return
	}
	var got any
	if err := json.Unmarshal(a.Value, &got); err != nil {
		t.Fatalf("%s: %s: %v", what, a.Value, err)
	}
	if !reflect.DeepEqual(got, want) {
		w, _ := json.Marshal(want)
		t.Errorf("%s = %s, want %s", what, a.Value, w)
	}
}

func dirSize(t *testing.T, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// stdinText is what the extended scenario's first sendStdin writes: printf
// directives, a backslash, quotes, a variable and two non-ASCII letters,
// which must reach the command as written.
const stdinText = "%s %% \\ ' \" $HOME \u00fc\u20ac\n"

// checkStdinScenario checks the extended scenario's command started with
// stdin: true (`cat; echo; echo cat-ended-$?`): both sendStdin calls work
// and cat prints their text in order; after closeStdin cat ends with 0 and
// wait() has all of it, and a later sendStdin is PROCESS_NOT_FOUND.
func checkStdinScenario(t *testing.T, send, send2, closed, wait, afterEnd attempt, seen string) {
	t.Helper()
	wantOK(t, "sendStdin", send)
	wantOK(t, "sendStdin again", send2)
	wantOK(t, "closeStdin", closed)
	want := stdinText + "second\n\ncat-ended-0\n"
	wantValue(t, "wait() after closeStdin", wait, map[string]any{"exitCode": 0.0, "stdout": want})
	if seen != want {
		t.Errorf("onStdout saw %q, want %q", seen, want)
	}
	wantError(t, "sendStdin after the end", afterEnd, "NotFoundError", "[not_found] PROCESS_NOT_FOUND: ")
}

// wantOK checks that a call resolving to nothing (undefined) worked.
func wantOK(t *testing.T, what string, a attempt) {
	t.Helper()
	if !a.OK {
		t.Errorf("%s failed: %+v", what, a.Error)
	}
}

// checkWatchScenario checks the extended scenario's directory watch: the
// file it created, wrote and removed is reported by name, created first,
// written, removed last (a write the upload made in more than one step
// may show as more than one write, and its mode as a chmod), and stop()
// works.
func checkWatchScenario(t *testing.T, stop attempt, seen []string) {
	t.Helper()
	wantOK(t, "watchHandle.stop", stop)
	ok := len(seen) >= 3 && seen[0] == "create:w.txt;" && seen[len(seen)-1] == "remove:w.txt;" && slices.Contains(seen, "write:w.txt;")
	for _, ev := range seen {
		ok = ok && slices.Contains([]string{"create:w.txt;", "write:w.txt;", "chmod:w.txt;", "remove:w.txt;"}, ev)
	}
	if !ok {
		t.Errorf("watchDir reported %q, want create, write(s), remove of w.txt", seen)
	}
}
