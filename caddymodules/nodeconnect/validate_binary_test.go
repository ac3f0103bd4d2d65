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
