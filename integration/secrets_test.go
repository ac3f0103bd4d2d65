package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/harness"
)

// secretsCaddyfile is DefaultCaddyfile with the config persisted
// (autosave.json) and cluster-a's execd access token given as a file
// placeholder, plus a second cluster whose token comes from the
// environment.
const secretsCaddyfile = `{
	admin {{ADMIN}}
	auto_https off
	default_bind 127.0.0.1
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{FIXED_ENTRY}} {
			execd_access_token {file.TOKEN_FILE}
		}
		cluster cluster-b {{FIXED_ENTRY}} {
			execd_access_token {env.SANDGATE_IT_EXECD_TOKEN_B}
		}
	}
}

http://{{ADDR}} {
	e2b_dataplane {
		home_dir /home/user
		user root 0 0 /root
	}
}
`

// TestSecretsStayOutOfConfig: an execd access token given as {file.…} or
// {env.…} reaches execd (a command through the SDK succeeds against an
// execd that requires it), and appears neither in GET /config/ on the
// admin API, nor in autosave.json, nor in the output of `caddy adapt`; a
// Caddyfile that would put it into the config ({$VAR} or a literal) is
// refused by `caddy adapt` without echoing it.
func TestSecretsStayOutOfConfig(t *testing.T) {
	const tokenA = "execd-token-A-DO-NOT-LEAK-7f3e"
	const tokenB = "execd-token-B-DO-NOT-LEAK-19ac"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "execd-token")
	if err := os.WriteFile(tokenFile, []byte(tokenA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cf := strings.Replace(secretsCaddyfile, "TOKEN_FILE", tokenFile, 1)
	e := startEnv(t, func(c *harness.Config) {
		c.Caddyfile = cf
		c.ExecdAccessToken = tokenA
		c.Env = append(c.Env, "SANDGATE_IT_EXECD_TOKEN_B="+tokenB)
	})
	secrets := []string{tokenA, tokenB}

	// The resolved token reaches execd: without it every call is 401.
	dir2 := "/home/user/secrets"
	e.mkdir(dir2)
	var run struct{ OK, Fail, Exact, EnvCwd, Args attempt }
	e.runSDK(t, sdkPackages[len(sdkPackages)-1], "run", sbxOK, &run, "SCENARIO_DIR="+dir2)
	wantCommand(t, "run('echo hi')", run.OK, commandResult{Stdout: "hi\n"})

	// GET /config/ shows the placeholders, never the values.
	resp, err := testClient.Get("http://" + e.Admin + "/config/")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(cfg, []byte(`"execd_access_token":"{file.`+tokenFile+`}"`)) ||
		!bytes.Contains(cfg, []byte(`"execd_access_token":"{env.SANDGATE_IT_EXECD_TOKEN_B}"`)) {
		t.Fatalf("GET /config/: %d %s", resp.StatusCode, cfg)
	}
	assertNoSecret(t, "GET /config/", cfg, secrets)

	// autosave.json (Caddy saves the running config under XDG_CONFIG_HOME).
	saved, err := os.ReadFile(filepath.Join(e.Dir, "caddy", "autosave.json"))
	if err != nil {
		t.Fatalf("autosave.json: %v", err)
	}
	if !bytes.Contains(saved, []byte("execd_access_token")) {
		t.Fatalf("autosave.json has no cluster config: %s", saved)
	}
	assertNoSecret(t, "autosave.json", saved, secrets)
	assertNoSecret(t, "the gateway log", []byte(e.log.String()), secrets)

	// caddy adapt prints the placeholders.
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(e.Expand(cf)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := adapt(t, e.root, path, "SANDGATE_IT_EXECD_TOKEN_B="+tokenB)
	if err != nil || !bytes.Contains(out, []byte("{env.SANDGATE_IT_EXECD_TOKEN_B}")) {
		t.Fatalf("caddy adapt: %v\n%s", err, out)
	}
	assertNoSecret(t, "caddy adapt", out, secrets)

	// A {$VAR} or a literal would be expanded into the config: refused.
	for name, value := range map[string]string{"{$VAR}": "{$SANDGATE_IT_EXECD_TOKEN_B}", "literal": tokenB} {
		bad := strings.Replace(cf, "{env.SANDGATE_IT_EXECD_TOKEN_B}", value, 1)
		if err := os.WriteFile(path, []byte(e.Expand(bad)), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := adapt(t, e.root, path, "SANDGATE_IT_EXECD_TOKEN_B="+tokenB)
		if err == nil || !bytes.Contains(out, []byte("a secret must not be written into the configuration")) {
			t.Fatalf("caddy adapt with a %s token: %v\n%s", name, err, out)
		}
		assertNoSecret(t, "caddy adapt's error", out, secrets)
	}
}

// adapt runs `bin/caddy adapt --config path` and returns its combined
// output.
func adapt(t *testing.T, root, path string, env ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.CaddyBinary(root), "adapt", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

func assertNoSecret(t *testing.T, where string, data []byte, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if bytes.Contains(data, []byte(s)) {
			t.Errorf("%s contains a secret", where)
		}
	}
}
