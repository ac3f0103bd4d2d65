package realpeers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/harness"
)

// TestReadOfADirectoryAgainstTheRealExecd: files.read of a directory, of a
// symlink to one and of the home directory is IS_A_DIRECTORY (400, the
// SDKs' InvalidArgumentError) through both gateways against each real
// execd, whose download of a directory on tmpfs (the sandbox's /home
// here) is a 500 "seeker can't seek", not the broken 200 it gives on ext4;
// a file beside them reads as itself.
func TestReadOfADirectoryAgainstTheRealExecd(t *testing.T) {
	requireTier(t)
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			id, token := w.createSandboxAs(t, apiKey)
			execdRun(t, `mkdir -p /home/user/rd/sub && ln -s sub /home/user/rd/link && printf x >/home/user/rd/f`)
			for _, gw := range []struct {
				name string
				env  *harness.Env
			}{{"six-operation", w.gateway}, {"extended_operations", w.extended}} {
				t.Run(gw.name, func(t *testing.T) {
					for _, p := range []string{"/home/user/rd/sub", "/home/user/rd/link", "/home/user"} {
						status, code, body := readThrough(t, gw.env, id, token, p)
						if status != http.StatusBadRequest || code != "IS_A_DIRECTORY" || !strings.Contains(body, "is a directory") {
							t.Errorf("read %s: %d %s %s, want 400 IS_A_DIRECTORY", p, status, code, body)
						}
					}
					if status, _, body := readThrough(t, gw.env, id, token, "/home/user/rd/f"); status != http.StatusOK || body != "x" {
						t.Errorf("read of the file: %d %q", status, body)
					}
				})
			}
		})
	}
}

// readThrough sends envd's GET /files?path=p for sandbox id through gateway
// gw and returns the status, the Sandgate-Error-Code and the body.
func readThrough(t *testing.T, gw *harness.Env, id, token, p string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("GET", gw.Gateway+"/files?path="+url.QueryEscape(p), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", token)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("read %s: the body: %v", p, err)
	}
	return resp.StatusCode, resp.Header.Get("Sandgate-Error-Code"), string(b)
}

// execdRun runs script at execd (POST /command, as execd's own identity),
// as test setup, and fails t unless it ends with exit code 0.
func execdRun(t *testing.T, script string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": script, "timeout": int64((30 * time.Second).Milliseconds())})
	resp, err := testClient.Post("http://"+probeIP+":44772/command", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	// The stream's events are bare JSON objects (docs/wire-facts.md §X1.4);
	// execution_complete says the command ended with 0, an error event
	// carries its exit status.
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"execution_complete"`) || strings.Contains(string(b), `"type":"error"`) {
		t.Fatalf("execd ran %q: %d %s", script, resp.StatusCode, b)
	}
}
