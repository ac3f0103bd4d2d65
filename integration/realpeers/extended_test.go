package realpeers_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// extendedResult is what sdk.mjs's "extended" scenario prints.
type extendedResult struct {
	PID                                                  uint32
	List                                                 sdkAttempt
	Connected                                            []string
	SendStdin, Kill, WaitAfterKill, KillAgain, ListAfter sdkAttempt
	ConnectGone                                          sdkAttempt
	Exists, ExistsMissing, GetInfo, GetInfoDir           sdkAttempt
	GetInfoMissing, MakeDir, MakeDirAgain, Rename        sdkAttempt
	RenameMissing, ExistsAfterRename                     sdkAttempt
	StdinSend, StdinSend2, StdinClose, StdinWait         sdkAttempt
	StdinAfterEnd, StdinListAfter                        sdkAttempt
	StdinSeen                                            string
	WatchStop                                            sdkAttempt
	WatchSeen                                            []string
}

// TestExtendedOperationsAgainstTheRealPeers drives the extended
// operations (sdk.mjs "extended": a background command that outlives its
// stream, commands.list, connect, sendStdin refused to it, kill, a
// command started with stdin: true fed by sendStdin and ended by
// closeStdin, a directory watch, files.exists, getInfo, makeDir, rename) with both JS SDKs through the gateway with
// extended_operations, on a sandbox corectl created, against each real
// execd version.
func TestExtendedOperationsAgainstTheRealPeers(t *testing.T) {
	requireTier(t)
	// The scenario's command waits for a file the test's SDK process
	// writes: in /dev/shm, which execd's mount namespace shares (its
	// /tmp and /home are its own).
	shared, err := os.MkdirTemp("/dev/shm", "sandgate-realpeers-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(shared) })
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			for _, pkg := range jsPackages {
				t.Run(pkg, func(t *testing.T) {
					id := w.createSandbox(t)
					dir := "/home/user/ext-" + pkg
					execdMkdir(t, dir)
					goFile := filepath.Join(shared, version+"-"+pkg)
					var r extendedResult
					runScenario(t, w.extended, "node", []string{"sdk.mjs", "extended"}, filepath.Join(w.root, "integration/js"), &r,
						"E2B_PACKAGE="+pkg, "SANDBOX_ID="+id, "SCENARIO_DIR="+dir, "GO_FILE="+goFile)

					wantValue(t, "commands.list()", r.List, []any{map[string]any{"pid": float64(r.PID), "cmd": "/bin/bash",
						"args": []any{"-l", "-c", "echo before; while [ ! -f '" + goFile + "' ]; do sleep 0.05; done; echo after; while true; do sleep 1; done"},
						"envs": map[string]any{"MODE": "server"}, "cwd": dir}})
					if strings.Join(r.Connected, "") != "after\n" {
						t.Errorf("commands.connect saw %q, want \"after\\n\" only (from where the output is)", r.Connected)
					}
					wantError(t, "sendStdin (started without stdin)", r.SendStdin, "SandboxError", "STDIN_UNAVAILABLE")
					// Started with stdin: true, `cat; echo; echo cat-ended-$?`
					// prints what sendStdin wrote and ends at closeStdin.
					for what, a := range map[string]sdkAttempt{"sendStdin": r.StdinSend, "sendStdin again": r.StdinSend2, "closeStdin": r.StdinClose} {
						if !a.OK {
							t.Errorf("%s failed: %+v", what, a.Error)
						}
					}
					want := "%s %% \\ ' \" $HOME \u00fc\u20ac\nsecond\n\ncat-ended-0\n"
					wantValue(t, "wait() after closeStdin", r.StdinWait, map[string]any{"exitCode": 0.0, "stdout": want})
					if r.StdinSeen != want {
						t.Errorf("onStdout saw %q, want %q", r.StdinSeen, want)
					}
					wantError(t, "sendStdin after the end", r.StdinAfterEnd, "NotFoundError", "PROCESS_NOT_FOUND")
					wantValue(t, "commands.list() after the stdin command", r.StdinListAfter, []any{})
					// watchDir: a file created, written, removed, by name,
					// in that order (an upload in steps may add writes or a
					// chmod), then stop().
					if !r.WatchStop.OK {
						t.Errorf("watchHandle.stop failed: %+v", r.WatchStop.Error)
					}
					seen := r.WatchSeen
					ok := len(seen) >= 3 && seen[0] == "create:w.txt;" && seen[len(seen)-1] == "remove:w.txt;" && slices.Contains(seen, "write:w.txt;")
					for _, ev := range seen {
						ok = ok && slices.Contains([]string{"create:w.txt;", "write:w.txt;", "chmod:w.txt;", "remove:w.txt;"}, ev)
					}
					if !ok {
						t.Errorf("watchDir reported %q, want create, write(s), remove of w.txt", seen)
					}
					wantValue(t, "commands.kill", r.Kill, true)
					if r.WaitAfterKill.OK || r.WaitAfterKill.Error == nil || r.WaitAfterKill.Error.Name != "CommandExitError" {
						t.Errorf("wait() after kill: %s %+v", r.WaitAfterKill.Value, r.WaitAfterKill.Error)
					}
					wantValue(t, "commands.kill again", r.KillAgain, false)
					wantValue(t, "commands.list() after kill", r.ListAfter, []any{})
					wantError(t, "commands.connect(unknown pid)", r.ConnectGone, "NotFoundError", "PROCESS_NOT_FOUND")
					wantValue(t, "files.exists", r.Exists, true)
					wantValue(t, "files.exists(missing)", r.ExistsMissing, false)
					wantValue(t, "files.getInfo", r.GetInfo, map[string]any{"name": "f.txt", "type": "file", "path": dir + "/f.txt",
						"size": 6.0, "mode": 420.0, "permissions": "-rw-r--r--", "modifiedIsDate": true})
					var info map[string]any
					if !r.GetInfoDir.OK || json.Unmarshal(r.GetInfoDir.Value, &info) != nil || info["type"] != "dir" || info["path"] != dir {
						t.Errorf("files.getInfo(dir) = %s %+v", r.GetInfoDir.Value, r.GetInfoDir.Error)
					}
					wantError(t, "files.getInfo(missing)", r.GetInfoMissing, "FileNotFoundError", "FILE_NOT_FOUND")
					wantValue(t, "files.makeDir", r.MakeDir, true)
					wantValue(t, "files.makeDir again", r.MakeDirAgain, false)
					wantValue(t, "files.rename", r.Rename, map[string]any{"name": "g.txt", "type": "file", "path": dir + "/new/g.txt",
						"size": 6.0, "mode": 420.0, "permissions": "-rw-r--r--", "modifiedIsDate": true})
					wantError(t, "files.rename(missing)", r.RenameMissing, "FileNotFoundError", "FILE_NOT_FOUND")
					wantValue(t, "files.exists after rename", r.ExistsAfterRename, false)
				})
			}
		})
	}
}

// createSandbox creates a "base" sandbox through corectl's API (POST
// /sandboxes) with the SDKs' API key and deletes it when t ends.
func (w *world) createSandbox(t *testing.T) string {
	t.Helper()
	id, _ := w.createSandboxAs(t, apiKey)
	return id
}

// createSandboxAs creates a "base" sandbox with API key key, deletes it
// when t ends, and returns its ID and envd access token.
func (w *world) createSandboxAs(t *testing.T, key string) (id, token string) {
	t.Helper()
	resp := apiCall(t, key, "POST", w.api+"/sandboxes", `{"templateID":"base","timeout":300}`)
	var s struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if resp.status != http.StatusCreated || json.Unmarshal(resp.body, &s) != nil || s.SandboxID == "" {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	t.Cleanup(func() {
		if r := apiCall(t, key, "DELETE", w.api+"/sandboxes/"+s.SandboxID, ""); r.status != http.StatusNoContent {
			t.Errorf("delete %s: %d %s", s.SandboxID, r.status, r.body)
		}
	})
	return s.SandboxID, s.EnvdAccessToken
}

type apiAnswer struct {
	status int
	body   []byte
}

// apiCall sends a control-API request with API key key.
func apiCall(t *testing.T, key, method, url, body string) apiAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	c := http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return apiAnswer{resp.StatusCode, b}
}

// execdMkdir makes dir in the sandbox, straight at execd (POST
// /directories), as test setup.
func execdMkdir(t *testing.T, dir string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{dir: map[string]any{"mode": 755}})
	resp, err := testClient.Post("http://"+probeIP+":44772/directories", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		t.Fatalf("mkdir %s at execd: %d %s", dir, resp.StatusCode, b)
	}
}

func wantValue(t *testing.T, what string, a sdkAttempt, want any) {
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
		wb, _ := json.Marshal(want)
		t.Errorf("%s = %s, want %s", what, a.Value, wb)
	}
}

// wantError checks that a failed with the SDK error name whose message
// contains code.
func wantError(t *testing.T, what string, a sdkAttempt, name, code string) {
	t.Helper()
	if a.OK || a.Error == nil || a.Error.Name != name || !strings.Contains(a.Error.Message, code) {
		t.Errorf("%s: ok=%v %s %+v, want %s with %s", what, a.OK, a.Value, a.Error, name, code)
	}
}
