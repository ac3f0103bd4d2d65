package credentialsource

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile" // the "caddyfile" adapter

	_ "github.com/sandgate/sandgate/caddymodules/sandgate" // the sandgate global option
	"github.com/sandgate/sandgate/gateway/credential"
)

// TestHTTPCredentialSourceProvisions runs a Caddyfile whose credentials come
// from a Portal-style HTTP endpoint and checks that lookups reach the URL
// with {id} replaced by the credential ID and carry the configured header,
// its {env.*} placeholder expanded.
func TestHTTPCredentialSourceProvisions(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "hmac.key")
	writeTestFile(t, keyFile, "credentialsource-test-hmac-secret-0123456789")
	t.Setenv("SANDGATE_TEST_PORTAL_TOKEN", "portal-token")
	type portalCall struct{ path, auth string }
	var (
		mu   sync.Mutex
		seen []portalCall
	)
	portal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, portalCall{r.URL.Path, r.Header.Get("Authorization")})
		mu.Unlock()
		if r.URL.Path != "/api/v1/credentials/cred-a" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"cred-a","enabled":true,"projectNamespace":"team-a","clusterId":"cluster-a"}`)
	}))
	t.Cleanup(portal.Close)

	caddyfile := `{
	admin off
	persist_config off
	storage file_system ` + filepath.Join(dir, "storage") + `
	sandgate {
		token_key k1 HS256 ` + keyFile + `
		credentials http ` + portal.URL + `/api/v1/credentials/{id} {
			header Authorization "Bearer {env.SANDGATE_TEST_PORTAL_TOKEN}"
			cache_ttl 1s
			timeout 2s
		}
	}
}
`
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("adapting: %v %v", err, warnings)
	}
	load(t, cfg)
	app := runningApp(t)

	c, err := app.Credentials().Lookup(t.Context(), "cred-a")
	if err != nil || c.ClusterID != "cluster-a" {
		t.Fatalf("Lookup(cred-a) = %+v, %v; want the Portal's credential", c, err)
	}
	if _, err := app.Credentials().Lookup(t.Context(), "cred-b"); !errors.Is(err, credential.ErrNotFound) {
		t.Errorf("Lookup(cred-b) error = %v, want ErrNotFound", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []portalCall{
		{"/api/v1/credentials/cred-a", "Bearer portal-token"},
		{"/api/v1/credentials/cred-b", "Bearer portal-token"},
	}
	if len(seen) != len(want) {
		t.Fatalf("portal calls = %+v, want %+v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("portal call %d = %+v, want %+v", i, seen[i], want[i])
		}
	}
}
