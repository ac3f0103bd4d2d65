package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EdgeTLSCaddyfile writes dir/tls.caddyfile, the shipped edge TLS
// configuration (deploy/components/tls-caddy/tls.caddyfile under root)
// rewritten for a test: its certificate directory /etc/sandgate/edge-tls/
// becomes certDir, corectl's address corectl:8090 becomes corectlAddr, and
// the API site's ":30084" becomes "127.0.0.1:<apiPort>" (bound to
// loopback). It returns the file's path. Errors: the shipped file cannot
// be read, no longer holds one of the three strings it rewrites (the
// tests that use it then test something else), or dir cannot be written.
func EdgeTLSCaddyfile(root, dir, certDir, corectlAddr, apiPort string) (string, error) {
	shipped, err := os.ReadFile(filepath.Join(root, "deploy/components/tls-caddy/tls.caddyfile"))
	if err != nil {
		return "", err
	}
	for _, want := range []string{"/etc/sandgate/edge-tls/", "corectl:8090", "\n:30084 {\n"} {
		if !strings.Contains(string(shipped), want) {
			return "", fmt.Errorf("the component's tls.caddyfile no longer holds %q, which the tests rewrite", want)
		}
	}
	file := strings.NewReplacer("/etc/sandgate/edge-tls/", certDir+"/", "corectl:8090", corectlAddr,
		"\n:30084 {\n", "\n:"+apiPort+" {\n\tbind 127.0.0.1\n").Replace(string(shipped))
	path := filepath.Join(dir, "tls.caddyfile")
	return path, os.WriteFile(path, []byte(file), 0o644)
}
