package realpeers_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/harness"
)

// TestWriteOntoADirectoryAgainstTheRealExecd: files.write onto a
// directory is IS_A_DIRECTORY and under a regular file NOT_A_DIRECTORY
// (400, the SDKs' InvalidArgumentError, as envd answers both), through
// both gateways against each real execd, which answers both uploads with
// a 500; the directory and the file are left as they were, and a write
// beside them succeeds.
func TestWriteOntoADirectoryAgainstTheRealExecd(t *testing.T) {
	requireTier(t)
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			id, token := w.createSandboxAs(t, apiKey)
			execdRun(t, `mkdir -p /home/user/wd/sub && printf x >/home/user/wd/f`)
			for _, gw := range []struct {
				name string
				env  *harness.Env
			}{{"six-operation", w.gateway}, {"extended_operations", w.extended}} {
				t.Run(gw.name, func(t *testing.T) {
					for _, c := range []struct{ path, code, says string }{
						{"/home/user/wd/sub", "IS_A_DIRECTORY", "is a directory"},
						{"/home/user/wd/f/x", "NOT_A_DIRECTORY", "not a directory"},
					} {
						status, code, body := writeThrough(t, gw.env, id, token, c.path, "y")
						if status != http.StatusBadRequest || code != c.code || !strings.Contains(body, c.says) {
							t.Errorf("write %s: %d %s %s, want 400 %s", c.path, status, code, body, c.code)
						}
					}
					if status, _, body := readThrough(t, gw.env, id, token, "/home/user/wd/f"); status != http.StatusOK || body != "x" {
						t.Errorf("the file after the refused writes: %d %q, want x", status, body)
					}
					execdRun(t, `[ -d /home/user/wd/sub ]`)
					if status, _, body := writeThrough(t, gw.env, id, token, "/home/user/wd/g", "z"); status != http.StatusOK {
						t.Errorf("write beside them: %d %s", status, body)
					}
				})
			}
		})
	}
}

// writeThrough sends envd's POST /files?path=p (an octet-stream body) for
// sandbox id through gateway gw and returns the status, the
// Sandgate-Error-Code and the body.
func writeThrough(t *testing.T, gw *harness.Env, id, token, p, content string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("POST", gw.Gateway+"/files?path="+url.QueryEscape(p), strings.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", token)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("write %s: the body: %v", p, err)
	}
	return resp.StatusCode, resp.Header.Get("Sandgate-Error-Code"), string(b)
}
