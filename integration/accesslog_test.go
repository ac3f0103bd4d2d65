package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

// TestAccessLogLevelOfAGoneSandbox runs the built gateway with Caddy's
// access log on the data-plane site, as deploy/portal's Caddyfile has it
// (the access token deleted from it),
// and reads the level each answer is logged at: a Connect call for a
// sandbox its cluster's ingress does not know (SANDBOX_NOT_FOUND, 503) is
// an answer and is logged at info; the same call through a cluster whose
// fixed entry refuses connections (FIXED_ENTRY_UNREACHABLE, 503) is the
// platform's failure and keeps Caddy's error level; a call refused at its
// credential's own max_requests_per_credential (GATEWAY_BUSY, 503) while
// the credential's one command stream runs is the tenant's matter and is
// logged at info, and counted in sandgate_dataplane_busy_total by that
// bound.
func TestAccessLogLevelOfAGoneSandbox(t *testing.T) {
	root := repoRoot(t)
	if fi, err := os.Stat(harness.CaddyBinary(root)); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("the gateway binary bin/caddy is missing (%v): run make build", err)
	}
	dead, deadPort, err := freeport.Refusing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deadPort.Close() })
	caddyfile := `{
	admin {{ADMIN}}
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{FIXED_ENTRY}}
		cluster cluster-dead http://` + dead + `
	}
}

http://{{ADDR}} {
	log {
		format filter {
			request>headers>X-Access-Token delete
		}
	}
	e2b_dataplane {
		home_dir /home/user
		user root 0 0 /root
		max_requests_per_credential 1
	}
}
`
	creds := "credentials:\n"
	for id, cluster := range map[string]string{"cred-a": "cluster-a", "cred-dead": "cluster-dead"} {
		creds += "  - id: " + id + "\n    enabled: true\n    resourceSpecId: spec-small\n    resourceGroupId: group-1\n" +
			"    projectNamespace: team-a\n    clusterId: " + cluster + "\n"
	}
	log := newLogBuffer()
	env, err := harness.Start(harness.Config{RepoRoot: root, Caddyfile: caddyfile, Credentials: creds, Sandboxes: []string{sbxOK}, Stderr: log})
	if err != nil {
		t.Fatalf("starting the environment: %v\ngateway log:\n%s", err, log.String())
	}
	t.Cleanup(env.Close)

	from := len(log.String())
	// cred-a's one place, held by a command stream of sbxOK until the
	// calls below are done.
	held, stop := context.WithCancel(context.Background())
	defer stop()
	tokOK, err := env.Mint(sbxOK, harness.Grant{CredentialID: "cred-a"})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	go startAndReadOneLine(held, env.Gateway, sbxOK, tokOK,
		envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","sleep 60"]},"stdin":false}`), 1, started)
	if got := <-started; got != "line" {
		t.Fatalf("the held command stream: %s", got)
	}
	// listDir sends a ListDir of sandbox id as credential cred and returns
	// the status and the gateway's error code.
	listDir := func(id, cred string) (int, string) {
		t.Helper()
		tok, err := env.Mint(id, harness.Grant{CredentialID: cred})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", env.Gateway+"/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", tok)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Sandgate-Error-Code")
	}
	for _, c := range []struct{ sandbox, cred, code string }{{"sbxbound", "cred-a", "GATEWAY_BUSY"}, {"sbxdeadentry", "cred-dead", "FIXED_ENTRY_UNREACHABLE"}} {
		if status, code := listDir(c.sandbox, c.cred); status != http.StatusServiceUnavailable || code != c.code {
			t.Fatalf("%s: %d %s, want 503 %s", c.sandbox, status, code, c.code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The gone sandbox's call, once the stream's end has given cred-a's
	// place back.
	stop()
	busy := 1 // sbxbound's
	for {
		status, code := listDir("sbxgone", "cred-a")
		if status == http.StatusServiceUnavailable && code == "SANDBOX_NOT_FOUND" {
			break
		}
		if code != "GATEWAY_BUSY" || ctx.Err() != nil {
			t.Fatalf("sbxgone: %d %s, want 503 SANDBOX_NOT_FOUND", status, code)
		}
		busy++
	}
	// Every GATEWAY_BUSY answered is counted by the bound it met, the
	// credential's own; the other bounds' series are there at 0.
	m, err := scrapetest.Get(nil, "http://"+env.Admin+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, bound := range []string{"max_requests_per_credential", "max_requests", "max_upstream_calls_per_sandbox",
		"max_upstream_calls", "max_process_calls_per_credential", "large_lines_per_sandbox", "large_lines",
		"pty_streams_per_sandbox", "pty_streams", "watch_streams_per_sandbox", "watch_streams_per_credential", "watch_streams", "watchers_per_sandbox",
		"stdin_writes_per_sandbox", "stdin_writes_per_credential", "stdin_writes"} {
		want := 0.0
		if bound == "max_requests_per_credential" {
			want = float64(busy)
		}
		if got, ok := m.Sum("sandgate_dataplane_busy_total", "bound", bound); !ok || got != want {
			t.Errorf("sandgate_dataplane_busy_total{bound=%q}: %g (present %v), want %g", bound, got, ok, want)
		}
	}
	for _, id := range []string{"sbxbound", "sbxgone", "sbxdeadentry"} {
		if err := log.waitFor(ctx, from, `"E2b-Sandbox-Id":["`+id+`"]`); err != nil {
			t.Fatalf("no access log line for %s: %v\n%s", id, err, log.String()[from:])
		}
	}
	levels := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(log.String()[from:]))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Level   string `json:"level"`
			Msg     string `json:"msg"`
			Status  int    `json:"status"`
			Request struct {
				Headers map[string][]string `json:"headers"`
			} `json:"request"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "handled request" {
			continue
		}
		if id := line.Request.Headers["E2b-Sandbox-Id"]; len(id) == 1 {
			levels[id[0]] = line.Level
		}
		if _, ok := line.Request.Headers["X-Access-Token"]; ok {
			t.Errorf("the access log shows the access token")
		}
	}
	if levels["sbxgone"] != "info" || levels["sbxdeadentry"] != "error" || levels["sbxbound"] != "info" {
		t.Errorf("access log levels %v, want sbxgone (SANDBOX_NOT_FOUND) info, sbxdeadentry (FIXED_ENTRY_UNREACHABLE) error "+
			"and sbxbound (GATEWAY_BUSY at the credential's own bound) info\n%s", levels, log.String()[from:])
	}
}
