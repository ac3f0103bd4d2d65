package secret

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

func TestCheck(t *testing.T) {
	for raw, ok := range map[string]bool{
		"":                          true,
		"{env.TOKEN}":               true,
		"{file./run/secrets/token}": true,
		"Bearer {env.PORTAL}":       true,
		"s3cr3t":                    false,
		"Bearer s3cr3t":             false,
		"{system.hostname}":         false,
		"{TOKEN}":                   false,
		"literal{file./x}":          false,
		"{file./x}literal":          false,
		"lit{env.TOKEN}eral":        false,
		"s3cr3t {env.TOKEN}":        false,
		"Bearer  {env.TOKEN}":       false,
		"{env.A}{env.B}":            false,
		"{env.}":                    false,
		"{file.}":                   false,
		"token {env.PORTAL}":        true,
		"Basic {file./run/b64}":     true,
	} {
		err := Check("execd_access_token", raw)
		if (err == nil) != ok {
			t.Errorf("Check(%q) = %v", raw, err)
		}
		if err != nil && (!errors.Is(err, ErrLiteral) || strings.Contains(err.Error(), raw) || !strings.HasPrefix(err.Error(), "execd_access_token: ")) {
			t.Errorf("Check(%q) error %q", raw, err)
		}
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SECRET_TEST_TOKEN", "from-env")
	repl := caddy.NewReplacer()
	for raw, want := range map[string]string{
		"":                           "",
		"{env.SECRET_TEST_TOKEN}":    "from-env",
		"{file." + file + "}":        "from-file",
		"Bearer {file." + file + "}": "Bearer from-file",
	} {
		got, err := Resolve(repl, "s", raw)
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"{env.SECRET_TEST_UNSET}", "{file." + filepath.Join(dir, "missing") + "}", "literal"} {
		if got, err := Resolve(repl, "s", raw); err == nil || got != "" {
			t.Errorf("Resolve(%q) = %q, %v; want an error", raw, got, err)
		}
	}
}

func TestSensitiveHeader(t *testing.T) {
	for name, want := range map[string]bool{"Authorization": true, "proxy-authorization": true, "Cookie": true,
		"X-Api-Key": true, "X-Auth-Token": true, "X-Session": true, "X-Gateway": false, "Accept": false, "User-Agent": false} {
		if SensitiveHeader(name) != want {
			t.Errorf("SensitiveHeader(%q) = %v", name, !want)
		}
	}
}

// FuzzCheck: whatever Check accepts holds no text besides one
// placeholder and, before it, at most an authentication scheme and a
// space: nothing literal can reach the configuration beside a secret.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"{env.A}", "Bearer {file./x}", "literal{file./x}", "{env.A}{env.B}", "a {env.A}", "{env.{A}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if raw == "" || Check("s", raw) != nil {
			return
		}
		open, close := strings.IndexByte(raw, '{'), strings.LastIndexByte(raw, '}')
		if open < 0 || close != len(raw)-1 || strings.Count(raw, "{") != 1 || strings.Count(raw, "}") != 1 {
			t.Fatalf("accepted %q: not one placeholder at the end", raw)
		}
		if before := raw[:open]; before != "" && !authSchemes[strings.ToLower(strings.TrimSuffix(before, " "))] {
			t.Fatalf("accepted %q: %q before the placeholder", raw, before)
		}
		inner := raw[open+1 : close]
		if !strings.HasPrefix(inner, "env.") && !strings.HasPrefix(inner, "file.") {
			t.Fatalf("accepted %q: not an env or file placeholder", raw)
		}
	})
}
