package credentialsource

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/filestorage" // the "file_system" storage of the test configs

	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/internal/waittest"
)

const goodCredentials = `credentials:
  - id: cred-a
    enabled: true
    projectNamespace: team-a
    clusterId: cluster-a
`

// appConfig is a JSON config with only the sandgate app: one HMAC key, the
// given credential source and the given clusters (ID → fixed entry).
func appConfig(t *testing.T, dir string, credentials map[string]any, clusters map[string]string) []byte {
	t.Helper()
	keyFile := filepath.Join(dir, "hmac.key")
	if _, err := os.Stat(keyFile); err != nil {
		writeTestFile(t, keyFile, "reload-test-hmac-secret-0123456789abcdef")
	}
	cl := map[string]any{}
	for id, entry := range clusters {
		cl[id] = map[string]any{"fixed_entry": entry}
	}
	b, err := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"storage": map[string]any{"module": "file_system", "root": filepath.Join(dir, "storage")},
		"apps": map[string]any{"sandgate": map[string]any{
			"token_keys":  []any{map[string]any{"kid": "k1", "algorithm": "HS256", "file": keyFile}},
			"credentials": credentials,
			"clusters":    cl,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// load runs cfg and makes sure the test ends with Caddy stopped.
func load(t *testing.T, cfg []byte) {
	t.Helper()
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("caddy.Load: %v", err)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("caddy.Stop: %v", err)
		}
	})
}

// runningApp returns the sandgate app of the running config.
func runningApp(t *testing.T) *sandgate.App {
	t.Helper()
	a, err := caddy.ActiveContext().App(sandgate.AppName)
	if err != nil {
		t.Fatal(err)
	}
	return a.(*sandgate.App)
}

// references returns how many configs hold the pooled source under key.
func references(key string) int {
	n, _ := pool.References(key)
	return n
}

// TestReloadKeepsFileSource loads a config, breaks the credentials file so
// that opening it afresh fails, and reloads with an unrelated change (another
// cluster): the reload succeeds because the new config gets the pooled
// source of the old one, which still answers with the last good
// credentials. Stopping Caddy releases the pool entry, after which the
// broken file can no longer be loaded.
func TestReloadKeepsFileSource(t *testing.T) {
	dir := t.TempDir()
	credFile := filepath.Join(dir, "credentials.yaml")
	writeTestFile(t, credFile, goodCredentials)
	source := map[string]any{"source": "file", "path": credFile}
	key := "file:" + credFile

	load(t, appConfig(t, dir, source, map[string]string{"cluster-a": "http://10.0.0.5"}))
	app1 := runningApp(t)
	mod1, ok := app1.Credentials().(*File)
	if !ok {
		t.Fatalf("credential source is %T, want *File", app1.Credentials())
	}
	first, ok := mod1.src.(*credential.File)
	if !ok {
		t.Fatalf("pooled source is %T, want *credential.File", mod1.src)
	}
	if n := references(key); n != 1 {
		t.Fatalf("pool references after the first load = %d, want 1", n)
	}
	if c, err := app1.Credentials().Lookup(t.Context(), "cred-a"); err != nil || c.ClusterID != "cluster-a" {
		t.Fatalf("Lookup(cred-a) = %+v, %v", c, err)
	}

	// Break the file: a fresh open now fails, and the running source sees
	// the change, refuses it and keeps the last good version.
	writeTestFile(t, credFile, "credentials:\n  - id: cred-a\n    colour: blue\n")
	if f, err := credential.OpenFile(credFile, nil); err == nil {
		_ = f.Close()
		t.Fatal("opening the broken credentials file afresh succeeded")
	}
	waittest.Until(t, 5*time.Second, "the running source to notice the broken file", func() bool {
		return first.LastError() != nil
	})

	load(t, appConfig(t, dir, source, map[string]string{"cluster-a": "http://10.0.0.5", "cluster-b": "http://10.0.0.6"}))
	app2 := runningApp(t)
	if app2 == app1 {
		t.Fatal("the reload kept the old app instance")
	}
	if _, ok := app2.Cluster("cluster-b"); !ok {
		t.Fatal("the reloaded config does not have cluster-b")
	}
	mod2 := app2.Credentials().(*File)
	if mod2 == mod1 {
		t.Fatal("the reload kept the old module instance")
	}
	if mod2.src != mod1.src {
		t.Fatal("the reloaded config opened a new credential source instead of reusing the pooled one")
	}
	if n := references(key); n != 1 {
		t.Errorf("pool references after the reload = %d, want 1 (the old config released its use)", n)
	}
	c, err := app2.Credentials().Lookup(t.Context(), "cred-a")
	if err != nil || c.ClusterID != "cluster-a" || c.ProjectNamespace != "team-a" {
		t.Errorf("Lookup(cred-a) after the reload = %+v, %v; want the last good credential", c, err)
	}
	if v := first.Version(); v != 1 {
		t.Errorf("source version = %d, want 1 (the broken file was never loaded)", v)
	}

	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if n, ok := pool.References(key); n != 0 || ok {
		t.Errorf("pool references after stop = %d, %v; want the entry released", n, ok)
	}
	// Nothing holds the source any more, so a new config opens the file
	// afresh, and the broken file is refused.
	err = caddy.Load(appConfig(t, dir, source, map[string]string{"cluster-a": "http://10.0.0.5"}), true)
	if err == nil {
		t.Fatal("loading a config with the broken credentials file succeeded after the pool entry was released")
	}
	if n := references(key); n != 0 {
		t.Errorf("pool references after the failed load = %d, want 0", n)
	}
}

// TestFailedProvisionReleasesFileSource provisions a config whose
// credentials open fine but whose cluster is invalid: the failure must
// release the pooled source it had opened.
func TestFailedProvisionReleasesFileSource(t *testing.T) {
	dir := t.TempDir()
	credFile := filepath.Join(dir, "credentials.yaml")
	writeTestFile(t, credFile, goodCredentials)
	cfgJSON := appConfig(t, dir, map[string]any{"source": "file", "path": credFile}, map[string]string{"cluster-a": "ftp://10.0.0.5"})
	var cfg caddy.Config
	if err := caddy.StrictUnmarshalJSON(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	err := caddy.Validate(&cfg)
	if err == nil {
		t.Fatal("a config with an ftp:// fixed entry provisioned")
	}
	if n, ok := pool.References("file:" + credFile); n != 0 || ok {
		t.Errorf("pool references after the failed provision = %d, %v; want none (%v)", n, ok, err)
	}
}

// TestReloadKeepsHTTPSourceCache reloads a config whose credentials come
// from an HTTP endpoint: with the same source settings the reloaded config
// shares the source and its cache (no second request to the endpoint);
// changed settings give a new source.
func TestReloadKeepsHTTPSourceCache(t *testing.T) {
	dir := t.TempDir()
	requests := make(chan string, 10)
	portal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests <- r.URL.Path
		fmt.Fprint(w, `{"id":"cred-a","enabled":true,"projectNamespace":"team-a","clusterId":"cluster-a"}`)
	}))
	t.Cleanup(portal.Close)
	source := map[string]any{"source": "http", "url": portal.URL + "/credentials/{id}", "cache_ttl": "1m"}

	load(t, appConfig(t, dir, source, map[string]string{"cluster-a": "http://10.0.0.5"}))
	mod1 := runningApp(t).Credentials().(*HTTP)
	if _, err := mod1.Lookup(t.Context(), "cred-a"); err != nil {
		t.Fatal(err)
	}
	if p := <-requests; p != "/credentials/cred-a" {
		t.Fatalf("portal request path = %q, want /credentials/cred-a", p)
	}

	load(t, appConfig(t, dir, source, map[string]string{"cluster-a": "http://10.0.0.5", "cluster-b": "http://10.0.0.6"}))
	mod2 := runningApp(t).Credentials().(*HTTP)
	if mod2.src != mod1.src {
		t.Fatal("the reloaded config built a new HTTP source for the same settings")
	}
	if _, err := mod2.Lookup(t.Context(), "cred-a"); err != nil {
		t.Fatal(err)
	}
	if n := len(requests); n != 0 {
		t.Errorf("the portal got %d more requests; want the cached answer to survive the reload", n)
	}
	if n := references(mod2.key); n != 1 {
		t.Errorf("pool references after the reload = %d, want 1", n)
	}

	changed := map[string]any{"source": "http", "url": portal.URL + "/credentials/{id}", "cache_ttl": "30s"}
	load(t, appConfig(t, dir, changed, map[string]string{"cluster-a": "http://10.0.0.5"}))
	mod3 := runningApp(t).Credentials().(*HTTP)
	if mod3.src == mod2.src {
		t.Error("changing cache_ttl kept the old HTTP source")
	}
	if n, ok := pool.References(mod2.key); n != 0 || ok {
		t.Errorf("the replaced HTTP source still has %d references (%v)", n, ok)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if n, ok := pool.References(mod3.key); n != 0 || ok {
		t.Errorf("pool references after stop = %d, %v; want the entry released", n, ok)
	}
}
