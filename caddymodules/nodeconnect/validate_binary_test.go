package nodeconnect

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryValidateAPIOnSiteAddress runs the built gateway's `caddy
// validate` and `caddy adapt --validate` (bin/caddy, `make bin/caddy`) on
// a Caddyfile whose nodes block's api listens on the address of a site
// (the same port, the same IP): both refuse it, naming the server and the
// address, and quote neither the token nor (in errors) its digest. With the api on a port of its own,
// both accept the same Caddyfile. Nothing listens: validation provisions
// the apps without starting them.
func TestBinaryValidateAPIOnSiteAddress(t *testing.T) {
	bin := builtCaddy(t)
	f := newFiles(t)
	admin := "127.0.0.1:" + freePort(t)
	digest := hexSum(apiToken)
	// run returns the command's standard error, and its standard output
	// (adapt prints the adapted JSON there, the digests included).
	run := func(caddyfile string, args ...string) (string, string, error) {
		t.Helper()
		dir := t.TempDir()
		path := filepath.Join(dir, "Caddyfile")
		write(t, path, caddyfile)
		cmd := exec.Command(bin, append(args, "--config", path, "--adapter", "caddyfile")...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stderr.String(), stdout.String(), err
	}
	clash := appAPICaddyfile(f, admin, "127.0.0.1:"+f.port, apiToken)
	own := appAPICaddyfile(f, admin, "127.0.0.1:"+freePort(t), apiToken)
	// The error is in a JSON log line: the server's name is quoted there
	// as \"srv0\".
	want := `the http app's server \"srv0\" listens on 127.0.0.1:` + f.port + `, the same port on an overlapping host`
	for _, cmd := range [][]string{{"validate"}, {"adapt", "--validate"}} {
		out, stdout, err := run(clash, cmd...)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("caddy %s with the api on the site's address: %v, want a refusal containing %q; output:\n%s", cmd, err, want, out)
		}
		if strings.Contains(out, digest) || strings.Contains(out+stdout, apiToken) {
			t.Errorf("caddy %s quotes the API token or its digest:\n%s", cmd, out)
		}
		if out, _, err := run(own, cmd...); err != nil {
			t.Errorf("caddy %s with the api on a port of its own: %v; output:\n%s", cmd, err, out)
		}
	}
}

// TestBinaryAdaptWrongArgumentCount runs the built gateway's `caddy adapt`
// (bin/caddy) on Caddyfiles whose lines take their arguments from {$NAME}
// environment placeholders, as the shipped deploy/ Caddyfile does: unset,
// a placeholder adds no argument; with spaces in its value, one per word.
// Each refusal names the directive, the counts wanted and given, the
// {$NAME} cause and the line, and quotes no argument.
func TestBinaryAdaptWrongArgumentCount(t *testing.T) {
	bin := builtCaddy(t)
	const kidVar, digestVar = "SANDGATE_TEST_ARGS_KID", "SANDGATE_TEST_ARGS_DIGEST"
	caddyfile := `{
	sandgate {
		token_key {$` + kidVar + `} HS256 /etc/sandgate/k1.key
		credentials file /etc/sandgate/credentials.yaml
		nodes {
			credentials file /etc/sandgate/nodes.yaml
			api 127.0.0.1:30087 {
				token_sha256 {$` + digestVar + `}
			}
		}
	}
}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	write(t, path, caddyfile)
	hint := `(a {$NAME} environment placeholder that is unset or empty adds no argument, and one whose value has spaces adds one argument per word)`
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"kid unset", nil, "token_key wants 3 arguments, <kid> <algorithm> <key file>, and got 2 " + hint + ", at " + path + ":3"},
		{"kid with a space", []string{kidVar + "=s3cr3t kid"}, "token_key wants 3 arguments, <kid> <algorithm> <key file>, and got 4 " + hint + ", at " + path + ":3"},
		{"digest unset", []string{kidVar + "=k1"}, "token_sha256 wants at least 1 argument, <64 hex> [<64 hex>...], and got 0 " + hint + ", at " + path + ":8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir, "PATH=" + os.Getenv("PATH")}
			cmd := exec.Command(bin, "adapt", "--config", path)
			cmd.Env = append(env, tc.env...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err == nil || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("caddy adapt: %v, want a refusal containing %q; output:\n%s", err, tc.want, stderr.String())
			}
			if strings.Contains(stdout.String()+stderr.String(), "s3cr3t") {
				t.Errorf("caddy adapt quotes an argument:\n%s%s", stdout.String(), stderr.String())
			}
		})
	}
}
