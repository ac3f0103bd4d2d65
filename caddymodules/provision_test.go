package caddymodules

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	_ "github.com/caddyserver/caddy/v2/modules/filestorage" // the "file_system" storage of the test configs

	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/entryprobe"
	"github.com/sandgate/sandgate/internal/freeport"
)

// otherTransport is a reverse_proxy transport that is not Caddy's HTTP
// transport, for the "transport of another protocol" case.
type otherTransport struct{}

func (otherTransport) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.transport.sandgate_test_other",
		New: func() caddy.Module { return new(otherTransport) },
	}
}

func (otherTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("otherTransport carries nothing")
}

func init() { caddy.RegisterModule(otherTransport{}) }

// execdStub is a fake cluster fixed entry: it serves execd's file info and
// download for one sandbox and records what the gateway sent.
type execdStub struct {
	*httptest.Server
	mu   sync.Mutex
	seen []execdCall
}

type execdCall struct {
	path, query, accessToken string
}

func newExecdStub(t *testing.T, sandbox, file, content string) *execdStub {
	t.Helper()
	s := &execdStub{}
	prefix := "/" + sandbox + "/44772"
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, execdCall{r.URL.Path, r.URL.RawQuery, r.Header.Get("X-EXECD-ACCESS-TOKEN")})
		s.mu.Unlock()
		if r.URL.Query().Get("path") != file {
			http.Error(w, `{"code":"RUNTIME_ERROR","message":"file not found"}`, http.StatusInternalServerError)
			return
		}
		switch r.URL.Path {
		case prefix + "/files/info":
			_ = json.NewEncoder(w).Encode(map[string]any{file: map[string]any{
				"path": file, "type": "file", "size": len(content), "mode": 644,
			}})
		case prefix + "/files/download":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, content)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *execdStub) calls() []execdCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]execdCall(nil), s.seen...)
}

// loadConfig runs cfg with caddy.Load and stops it when the test ends.
func loadConfig(t *testing.T, cfg []byte) {
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

// activeApp returns the running app of the given name.
func activeApp[T any](t *testing.T, name string) T {
	t.Helper()
	a, err := caddy.ActiveContext().App(name)
	if err != nil {
		t.Fatalf("app %s: %v", name, err)
	}
	app, ok := a.(T)
	if !ok {
		t.Fatalf("app %s is %T", name, a)
	}
	return app
}

// TestJSONConfigProvisionsAndServes loads a JSON config (no Caddyfile) with
// real key files and a credentials file, and checks that the app holds the
// keys, the credentials and the clusters (placeholders expanded), and that
// the data plane serves a file read end to end through the configured
// cluster's fixed entry.
func TestJSONConfigProvisionsAndServes(t *testing.T) {
	f := newFixtures(t)
	const execdToken = "execd-token-from-env"
	t.Setenv("SANDGATE_TEST_EXECD_TOKEN", execdToken)
	t.Setenv("SANDGATE_TEST_KEY_DIR", f.dir)
	stub := newExecdStub(t, "sbx-1", "/home/user/greeting.txt", "hello from execd")

	cfg := baseConfig(f, stub.URL)
	// The key file path is a placeholder, expanded at provision time.
	sub(cfg, "apps", "sandgate")["token_keys"].([]any)[0].(obj)["file"] = "{env.SANDGATE_TEST_KEY_DIR}/hmac.key"
	loadConfig(t, mustJSON(t, cfg))

	app := activeApp[*sandgate.App](t, "sandgate")
	for _, tc := range []struct{ kid, alg, key string }{
		{"hmac", "HS256", f.hmacKey},
		{"ed", "EdDSA", f.edPrivate},
	} {
		tgt, err := app.Tokens().Verify(mint(t, tc.kid, tc.alg, tc.key, "cred-a", "sbx-1"))
		if err != nil {
			t.Errorf("kid %s: the app's verifier refuses a valid token: %v", tc.kid, err)
		} else if tgt.CredentialID != "cred-a" || tgt.SandboxID != "sbx-1" || tgt.Port != 49983 {
			t.Errorf("kid %s: verified target = %+v", tc.kid, tgt)
		}
	}
	c, err := app.Credentials().Lookup(t.Context(), "cred-a")
	if err != nil || c.ClusterID != "cluster-a" || c.ProjectNamespace != "team-a" {
		t.Errorf("Lookup(cred-a) = %+v, %v; want the credential of cluster-a", c, err)
	}
	if _, err := app.Credentials().Lookup(t.Context(), "cred-off"); !errors.Is(err, credential.ErrDisabled) {
		t.Errorf("Lookup(cred-off) error = %v, want ErrDisabled", err)
	}
	cl, ok := app.Cluster("cluster-a")
	if !ok || cl.FixedEntry.String() != stub.URL || cl.ExecdAccessToken != execdToken {
		t.Errorf("Cluster(cluster-a) = %+v, %v; want fixed entry %s and the token from the environment", cl, ok, stub.URL)
	}
	if cl, ok := app.Cluster("cluster-b"); !ok || cl.FixedEntry.String() != "https://entry.b.example:8443" || cl.ExecdAccessToken != "" {
		t.Errorf("Cluster(cluster-b) = %+v, %v", cl, ok)
	}
	if _, ok := app.Cluster("cluster-z"); ok {
		t.Error("Cluster(cluster-z) found a cluster that is not configured")
	}

	httpApp := activeApp[*caddyhttp.App](t, "http")
	lns := httpApp.Servers["dp"].Listeners()
	if len(lns) != 1 {
		t.Fatalf("server dp has %d listeners, want 1", len(lns))
	}
	base := "http://" + lns[0].Addr().String()
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(tok string) (*http.Response, string) {
		t.Helper()
		// A relative path resolves against the default user's home.
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/files?path=greeting.txt", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(dataplane.HeaderSandboxID, "sbx-1")
		req.Header.Set(dataplane.HeaderSandboxPort, "49983")
		req.Header.Set(dataplane.HeaderAccessToken, tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	resp, body := get(mint(t, "ed", "EdDSA", f.edPrivate, "cred-a", "sbx-1"))
	if resp.StatusCode != http.StatusOK || body != "hello from execd" {
		t.Fatalf("GET /files = %d %q (error code %q); want 200 with the file from execd",
			resp.StatusCode, body, resp.Header.Get(dataplane.ErrorHeader))
	}
	calls := stub.calls()
	if len(calls) != 2 {
		t.Fatalf("execd got %d calls, want 2 (info, download): %+v", len(calls), calls)
	}
	for i, want := range []string{"/sbx-1/44772/files/info", "/sbx-1/44772/files/download"} {
		if calls[i].path != want || calls[i].query != "path=%2Fhome%2Fuser%2Fgreeting.txt" || calls[i].accessToken != execdToken {
			t.Errorf("execd call %d = %+v; want %s?path=/home/user/greeting.txt with X-EXECD-ACCESS-TOKEN from the cluster", i, calls[i], want)
		}
	}

	// A disabled credential is refused before execd is called.
	resp, _ = get(mint(t, "hmac", "HS256", f.hmacKey, "cred-off", "sbx-1"))
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get(dataplane.ErrorHeader) != string(dataplane.CodeCredentialDisabled) {
		t.Errorf("disabled credential: %d %q, want 401 CREDENTIAL_DISABLED", resp.StatusCode, resp.Header.Get(dataplane.ErrorHeader))
	}
	if n := len(stub.calls()); n != 2 {
		t.Errorf("execd got %d calls after the refused request, want still 2", n)
	}
}

// TestJSONConfigErrors provisions bad JSON configs (caddy.Validate: load
// and provision without starting) and checks that each fails with an error
// naming the offending item and containing no key material.
func TestJSONConfigErrors(t *testing.T) {
	f := newFixtures(t)
	const shortSecret = "short-secret-DO-NOT-LEAK"
	shortKey := filepath.Join(f.dir, "short.key")
	writeFile(t, shortKey, shortSecret)
	const portalSecret = "Bearer portal-secret-DO-NOT-LEAK"
	const execdSecret = "execd-secret-DO-NOT-LEAK"
	t.Setenv("SANDGATE_TEST_EXECD_TOKEN", execdSecret)
	t.Setenv("SANDGATE_TEST_PORTAL_TOKEN", portalSecret)
	const kubeSecret = "kube-bearer-DO-NOT-LEAK-0123456789"
	kubeconfig := filepath.Join(f.dir, "kubeconfig")
	writeFile(t, kubeconfig, "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n"+
		"users:\n- name: u\n  user: {token: "+kubeSecret+"}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	secrets := []string{hmacSecret, shortSecret, portalSecret, execdSecret, kubeSecret}
	peerTokens := filepath.Join(f.dir, "peer-token")
	writeFile(t, peerTokens, strings.Repeat("p", 32)+"\n")
	presenceNodes := obj{"state_dir": filepath.Join(f.dir, "node-state"), "presence": obj{"store": "kubernetes",
		"advertise": "http://127.0.0.1:30086", "peer_token_file": peerTokens}}
	portalAuth := obj{"Authorization": []any{"{env.SANDGATE_TEST_PORTAL_TOKEN}"}}

	sg := func(cfg obj) obj { return sub(cfg, "apps", "sandgate") }
	digest := strings.Repeat("ab", 32)
	// apiNodes is a nodes block of enrolled nodes only with the api setting a.
	apiNodes := func(a obj) obj { return obj{"state_dir": filepath.Join(f.dir, "node-state"), "api": a} }
	key0 := func(cfg obj) obj { return sg(cfg)["token_keys"].([]any)[0].(obj) }
	for _, tc := range []struct {
		name   string
		mutate func(cfg obj)
		want   []string
	}{
		{"no token keys", func(cfg obj) { delete(sg(cfg), "token_keys") },
			[]string{"at least one token key is required"}},
		{"empty token keys", func(cfg obj) { sg(cfg)["token_keys"] = []any{} },
			[]string{"at least one token key is required"}},
		{"no credentials", func(cfg obj) { delete(sg(cfg), "credentials") },
			[]string{"a credential source is required"}},
		{"unknown key algorithm", func(cfg obj) { key0(cfg)["algorithm"] = "HS999" },
			[]string{`kid "hmac"`, `unknown algorithm "HS999"`}},
		{"algorithm none", func(cfg obj) { key0(cfg)["algorithm"] = "none" },
			[]string{`kid "hmac"`, `"none" is never accepted`}},
		{"missing key file", func(cfg obj) { key0(cfg)["file"] = filepath.Join(f.dir, "missing.key") },
			[]string{`kid "hmac"`, "missing.key"}},
		{"key file of another algorithm", func(cfg obj) { key0(cfg)["algorithm"] = "EdDSA" },
			[]string{`kid "hmac"`, "EdDSA"}},
		{"HMAC secret too short", func(cfg obj) { key0(cfg)["file"] = shortKey },
			[]string{`kid "hmac"`, "shorter than the minimum"}},
		{"duplicate kid", func(cfg obj) { sg(cfg)["token_keys"].([]any)[1].(obj)["kid"] = "hmac" },
			[]string{`duplicate key ID "hmac"`}},
		{"cluster without fixed_entry", func(cfg obj) { sg(cfg)["clusters"].(obj)["cluster-b"] = obj{} },
			[]string{`cluster "cluster-b"`, "fixed_entry"}},
		{"cluster null", func(cfg obj) { sg(cfg)["clusters"].(obj)["cluster-b"] = nil },
			[]string{`cluster "cluster-b"`, "empty definition"}},
		{"fixed_entry ftp", func(cfg obj) { sg(cfg)["clusters"].(obj)["cluster-b"] = obj{"fixed_entry": "ftp://10.0.0.5"} },
			[]string{`cluster "cluster-b"`, "fixed_entry must be an http:// or https:// URL"}},
		{"fixed_entry with query", func(cfg obj) {
			sg(cfg)["clusters"].(obj)["cluster-b"] = obj{"fixed_entry": "http://10.0.0.5/?a=b"}
		}, []string{`cluster "cluster-b"`, "must not have a query"}},
		{"leeway 10m", func(cfg obj) { sg(cfg)["token_leeway"] = "10m" },
			[]string{"leeway", "10m0s", "5m0s"}},
		{"negative leeway", func(cfg obj) { sg(cfg)["token_leeway"] = "-1s" },
			[]string{"leeway", "-1s"}},
		{"credentials file missing", func(cfg obj) {
			sg(cfg)["credentials"] = obj{"source": "file", "path": filepath.Join(f.dir, "missing-credentials.yaml")}
		}, []string{"credential", "missing-credentials.yaml"}},
		{"credentials file without path", func(cfg obj) { sg(cfg)["credentials"] = obj{"source": "file"} },
			[]string{"a credentials file path is required"}},
		{"credentials file invalid", func(cfg obj) {
			bad := filepath.Join(f.dir, "bad-credentials.yaml")
			writeFile(t, bad, "credentials:\n  - id: x\n    color: blue\n")
			sg(cfg)["credentials"] = obj{"source": "file", "path": bad}
		}, []string{"bad-credentials.yaml", "invalid credential data"}},
		{"credentials of unknown source", func(cfg obj) { sg(cfg)["credentials"] = obj{"source": "vault"} },
			[]string{"sandgate.credentials.vault"}},
		{"credentials http without {id}", func(cfg obj) {
			sg(cfg)["credentials"] = obj{"source": "http", "url": "https://portal.internal/credentials",
				"headers": portalAuth}
		}, []string{"{id}"}},
		{"credentials http cache_ttl too long", func(cfg obj) {
			sg(cfg)["credentials"] = obj{"source": "http", "url": "https://portal.internal/credentials/{id}",
				"cache_ttl": "10m", "headers": portalAuth}
		}, []string{"CacheTTL", "10m0s"}},
		{"credentials http literal Authorization", func(cfg obj) {
			sg(cfg)["credentials"] = obj{"source": "http", "url": "https://portal.internal/credentials/{id}",
				"headers": obj{"Authorization": []any{portalSecret}}}
		}, []string{"header Authorization", "must not be written into the configuration", "{env.NAME} or {file./path/to/secret}"}},
		{"credentials http literal cookie", func(cfg obj) {
			sg(cfg)["credentials"] = obj{"source": "http", "url": "https://portal.internal/credentials/{id}",
				"headers": obj{"Cookie": []any{"session=" + execdSecret}}}
		}, []string{"header Cookie", "must not be written into the configuration"}},
		{"credentials http URL with user info", func(cfg obj) {
			sg(cfg)["credentials"] = obj{"source": "http", "url": "https://gateway:" + execdSecret + "@portal.internal/credentials/{id}"}
		}, []string{"must not carry user info"}},
		{"credentials http URL with a literal api_key", func(cfg obj) {
			sg(cfg)["credentials"] = obj{"source": "http", "url": "https://portal.internal/credentials/{id}?region=eu&api_key=" + execdSecret}
		}, []string{"URL query parameter api_key", "must not be written into the configuration"}},
		{"credentials http placeholder of an unset variable", func(cfg obj) {
			sg(cfg)["credentials"] = obj{"source": "http", "url": "https://portal.internal/credentials/{id}",
				"headers": obj{"Authorization": []any{"Bearer {env.SANDGATE_TEST_UNSET}"}}}
		}, []string{"header Authorization", "{env.SANDGATE_TEST_UNSET} is empty"}},
		{"authorizer http without url", func(cfg obj) { sg(cfg)["authorizer"] = obj{"source": "http"} },
			[]string{"loading the sandbox authorizer", "base URL"}},
		{"authorizer http cache_ttl above 1s", func(cfg obj) {
			sg(cfg)["authorizer"] = obj{"source": "http", "url": "http://corectl:8090", "cache_ttl": "2s"}
		}, []string{"cache TTL 2s"}},
		{"authorizer http literal Authorization", func(cfg obj) {
			sg(cfg)["authorizer"] = obj{"source": "http", "url": "http://corectl:8090", "headers": obj{"Authorization": []any{portalSecret}}}
		}, []string{"authorizer http header Authorization", "must not be written into the configuration"}},
		{"authorizer http URL with user info", func(cfg obj) {
			sg(cfg)["authorizer"] = obj{"source": "http", "url": "http://gateway:" + execdSecret + "@corectl:8090"}
		}, []string{"must not carry user info"}},
		{"authorizer of unknown source", func(cfg obj) { sg(cfg)["authorizer"] = obj{"source": "grpc"} },
			[]string{"sandgate.authorizer.grpc"}},
		{"cluster host not a DNS name", func(cfg obj) {
			sg(cfg)["clusters"].(obj)["cluster-b"] = obj{"fixed_entry": "http://10.0.0.5", "host": "{env.SANDGATE_TEST_UNSET_HOST}x_y"}
		}, []string{`cluster "cluster-b"`, `host "x_y" must be a lowercase DNS name`}},
		{"literal execd_access_token", func(cfg obj) {
			sg(cfg)["clusters"].(obj)["cluster-b"] = obj{"fixed_entry": "http://10.0.0.5", "execd_access_token": execdSecret}
		}, []string{`cluster "cluster-b"`, "execd_access_token: a secret must not be written into the configuration"}},
		{"execd_access_token of a missing file", func(cfg obj) {
			sg(cfg)["clusters"].(obj)["cluster-b"] = obj{"fixed_entry": "http://10.0.0.5",
				"execd_access_token": "{file." + filepath.Join(f.dir, "no-such-token") + "}"}
		}, []string{`cluster "cluster-b"`, "execd_access_token", "no-such-token", "is empty"}},
		{"extra_execd_token_secrets without execd_token_secret", func(cfg obj) {
			sg(cfg)["clusters"].(obj)["cluster-b"] = obj{"fixed_entry": "http://10.0.0.5",
				"extra_execd_token_secrets": []any{"{env.SANDGATE_TEST_UNSET_SECRET}"}}
		}, []string{`cluster "cluster-b"`, "extra_execd_token_secrets needs execd_token_secret"}},
		{"a short extra execd token secret", func(cfg obj) {
			long, short := filepath.Join(f.dir, "execd-secret-long"), filepath.Join(f.dir, "execd-secret-short")
			writeFile(t, long, strings.Repeat("l", 32))
			writeFile(t, short, "short")
			sg(cfg)["clusters"].(obj)["cluster-b"] = obj{"fixed_entry": "http://10.0.0.5", "execd_token_secret": "{file." + long + "}",
				"extra_execd_token_secrets": []any{"{file." + short + "}"}}
		}, []string{`cluster "cluster-b"`, "extra_execd_token_secrets[0]", "at least 32 bytes"}},
		{"five execd token secrets", func(cfg obj) {
			sg(cfg)["clusters"].(obj)["cluster-b"] = obj{"fixed_entry": "http://10.0.0.5", "execd_token_secret": "{env.A}",
				"extra_execd_token_secrets": []any{"{env.B}", "{env.C}", "{env.D}", "{env.E}"}}
		}, []string{`cluster "cluster-b"`, "at most 4 execd token secrets per cluster"}},
		{"e2b_dataplane transport of another protocol", func(cfg obj) {
			handlerOf(cfg)["transport"] = obj{"protocol": "sandgate_test_other"}
		}, []string{"e2b_dataplane", "not supported", "use transport http"}},
		{"e2b_dataplane transport of an unknown protocol", func(cfg obj) {
			handlerOf(cfg)["transport"] = obj{"protocol": "carrier_pigeon"}
		}, []string{"http.reverse_proxy.transport.carrier_pigeon"}},
		{"e2b_dataplane unary_client unknown", func(cfg obj) { handlerOf(cfg)["unary_client"] = "fasthttp" },
			[]string{"e2b_dataplane", `unary_client "fasthttp": must be builtin or transport`}},
		{"e2b_dataplane unary_client builtin over a transport without HTTP/1.1", func(cfg obj) {
			handlerOf(cfg)["unary_client"] = "builtin"
			handlerOf(cfg)["transport"] = obj{"protocol": "http", "versions": []any{"h2c"}}
		}, []string{"e2b_dataplane", "unary_client builtin needs a transport with HTTP/1.1"}},
		{"max_port_requests below max_port_requests_per_sandbox", func(cfg obj) {
			handlerOf(cfg)["hosts"] = []any{"sbx.test"}
			handlerOf(cfg)["max_port_requests_per_sandbox"] = 100
			handlerOf(cfg)["max_port_requests"] = 50
		}, []string{"e2b_dataplane", "max_port_requests_per_sandbox, max_port_requests", "the per-sandbox one at most the total"}},
		{"max_requests below max_requests_per_credential", func(cfg obj) {
			handlerOf(cfg)["max_requests_per_credential"] = 100
			handlerOf(cfg)["max_requests"] = 50
		}, []string{"e2b_dataplane", "max_requests 50 is below max_requests_per_credential 100: max_requests must be at least max_requests_per_credential"}},
		{"max_requests below the default max_requests_per_credential", func(cfg obj) {
			handlerOf(cfg)["max_requests"] = 500
		}, []string{"e2b_dataplane", "max_requests 500 is below max_requests_per_credential 1024 (its default)"}},
		{"max_requests_per_credential above max_requests", func(cfg obj) {
			handlerOf(cfg)["max_requests_per_credential"] = 5000
			handlerOf(cfg)["max_requests"] = 4096
		}, []string{"e2b_dataplane", "max_requests 4096 is below max_requests_per_credential 5000"}},
		{"default_user not among users", func(cfg obj) { handlerOf(cfg)["default_user"] = "ghost" },
			[]string{"e2b_dataplane", "default user ghost is not among the users"}},
		{"user home relative", func(cfg obj) {
			handlerOf(cfg)["users"].(obj)["user"] = obj{"uid": 1000, "gid": 1000, "home": "home/user"}
		},
			[]string{"e2b_dataplane", `user "user"`, "home must be an absolute path"}},
		{"user null", func(cfg obj) { handlerOf(cfg)["users"].(obj)["user"] = nil },
			[]string{`user "user"`, "empty definition"}},
		{"home_dir relative", func(cfg obj) { handlerOf(cfg)["home_dir"] = "workspace" },
			[]string{"e2b_dataplane", "home directory must be absolute"}},
		{"process_dir relative", func(cfg obj) { handlerOf(cfg)["process_dir"] = "tmp/procs" },
			[]string{"e2b_dataplane", "process directory must be an absolute, clean path"}},
		{"process_dir root", func(cfg obj) { handlerOf(cfg)["process_dir"] = "/" },
			[]string{"e2b_dataplane", "process directory must be an absolute, clean path"}},
		{"max_message_size too big", func(cfg obj) { handlerOf(cfg)["max_message_size"] = 64<<20 + 1 },
			[]string{"e2b_dataplane", "max_message_size", "67108864"}},
		{"max_message_size negative", func(cfg obj) { handlerOf(cfg)["max_message_size"] = -1 },
			[]string{"max_message_size"}},
		{"kubernetes with a missing kubeconfig", func(cfg obj) {
			sg(cfg)["kubernetes"] = obj{"kubeconfig": filepath.Join(f.dir, "no-kubeconfig"), "replica": "r"}
		}, []string{"kubernetes: kubeconfig", "no-kubeconfig"}},
		{"kubernetes with a bad namespace", func(cfg obj) {
			sg(cfg)["kubernetes"] = obj{"kubeconfig": kubeconfig, "namespace": "Bad_NS", "replica": "r"}
		}, []string{`kubernetes: portal: namespace "Bad_NS"`}},
		{"kubernetes with a bad replica", func(cfg obj) {
			sg(cfg)["kubernetes"] = obj{"kubeconfig": kubeconfig, "namespace": "n", "replica": "{env.SANDGATE_TEST_UNSET}-"}
		}, []string{`kubernetes: portal: replica "-"`}},
		{"kubernetes with an unknown context", func(cfg obj) {
			sg(cfg)["kubernetes"] = obj{"kubeconfig": kubeconfig, "context": "nope", "replica": "r"}
		}, []string{"kubernetes: portal: kubeconfig", `"nope"`}},
		{"kubernetes in cluster outside a cluster", func(cfg obj) { sg(cfg)["kubernetes"] = obj{} },
			[]string{"kubernetes: portal: no kubeconfig is set and the in-cluster configuration is unavailable"}},
		{"kubernetes with an unknown field", func(cfg obj) { sg(cfg)["kubernetes"] = obj{"server": "https://x"} },
			[]string{"unknown field", "server"}},
		{"presence kubernetes without the kubernetes block", func(cfg obj) { sg(cfg)["nodes"] = presenceNodes },
			[]string{"presence kubernetes needs the Portal cluster connection: add a kubernetes block"}},
		{"fixed_entry_probe without token", func(cfg obj) { addRelay(cfg, nil) },
			[]string{"fixed_entry_probe", "at least one token_sha256 is required"}},
		{"fixed_entry_probe with a bad digest", func(cfg obj) { addRelay(cfg, []any{strings.Repeat("ab", 32), "not-a-digest-DO-NOT-LEAK"}) },
			[]string{"fixed_entry_probe", "token_sha256[1]: must be 64 lowercase hexadecimal digits"}},
		{"fixed_entry_probe without the sandgate app", func(cfg obj) {
			delete(sub(cfg, "apps"), "sandgate")
			sub(cfg, "apps", "http", "servers")["dp"].(obj)["routes"] = []any{}
			addRelay(cfg, []any{strings.Repeat("ab", 32)})
		}, []string{"fixed_entry_probe", "sandgate"}},
		{"store kubernetes without the kubernetes block", func(cfg obj) { sg(cfg)["nodes"] = obj{"store": "kubernetes"} },
			[]string{"store kubernetes needs the sandgate app's kubernetes block"}},
		{"store kubernetes with state_dir", func(cfg obj) {
			sg(cfg)["kubernetes"] = obj{"kubeconfig": kubeconfig, "namespace": "n", "replica": "r"}
			sg(cfg)["nodes"] = obj{"store": "kubernetes", "state_dir": filepath.Join(f.dir, "node-state")}
		}, []string{"store kubernetes keeps the node state in the Portal cluster: remove state_dir"}},
		{"unknown store", func(cfg obj) {
			sg(cfg)["nodes"] = obj{"store": "etcd", "state_dir": filepath.Join(f.dir, "node-state")}
		},
			[]string{`store "etcd": must be file or kubernetes`}},
		{"store kubernetes with an unreachable apiserver", func(cfg obj) {
			sg(cfg)["kubernetes"] = obj{"kubeconfig": kubeconfig, "namespace": "n", "replica": "r"}
			sg(cfg)["nodes"] = obj{"store": "kubernetes"}
		}, []string{"nodes: kubestore: the node state could not be read from the apiserver", "namespace n"}},
		{"nodes api without listen", func(cfg obj) { sg(cfg)["nodes"] = apiNodes(obj{"token_sha256": []any{digest}}) },
			[]string{"nodes: api: listen is required"}},
		{"nodes api on a port range", func(cfg obj) {
			sg(cfg)["nodes"] = apiNodes(obj{"listen": "127.0.0.1:30087-30088", "token_sha256": []any{digest}})
		}, []string{`nodes: api: listen "127.0.0.1:30087-30088": must be one port, not a range`}},
		{"nodes api on udp", func(cfg obj) {
			sg(cfg)["nodes"] = apiNodes(obj{"listen": "udp/127.0.0.1:30087", "token_sha256": []any{digest}})
		}, []string{`nodes: api: listen "udp/127.0.0.1:30087": the network must be tcp, not udp`}},
		{"nodes api with a placeholder address without a port", func(cfg obj) {
			sg(cfg)["nodes"] = apiNodes(obj{"listen": "{env.SANDGATE_TEST_UNSET}127.0.0.1", "token_sha256": []any{digest}})
		}, []string{`nodes: api: listen "127.0.0.1": needs a port (host:port)`}},
		{"nodes api without token_sha256", func(cfg obj) { sg(cfg)["nodes"] = apiNodes(obj{"listen": "127.0.0.1:30087"}) },
			[]string{"nodes: api: at least one token_sha256 is required"}},
		{"nodes api with a bad digest", func(cfg obj) {
			sg(cfg)["nodes"] = apiNodes(obj{"listen": "127.0.0.1:30087", "token_sha256": []any{digest, execdSecret}})
		}, []string{"nodes: api: token_sha256[1]: must be 64 lowercase hexadecimal digits"}},
		{"e2b_dataplane without the sandgate app", func(cfg obj) { delete(sub(cfg, "apps"), "sandgate") },
			[]string{"e2b_dataplane", "sandgate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig(f, "http://127.0.0.1:1")
			tc.mutate(cfg)
			err := validate(t, mustJSON(t, cfg))
			if err == nil {
				t.Fatal("the config provisioned; want an error")
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, s := range secrets {
				if strings.Contains(msg, s) {
					t.Errorf("error %q contains a secret", strings.ReplaceAll(msg, s, "[SECRET]"))
				}
			}
		})
	}

	// The unmodified base config provisions: each failure above is the
	// mutation's doing.
	if err := validate(t, mustJSON(t, baseConfig(f, "http://127.0.0.1:1"))); err != nil {
		t.Fatalf("the base config does not provision: %v", err)
	}
	// Nor is the api setting's: a complete one provisions.
	withAPI := baseConfig(f, "http://127.0.0.1:1")
	sg(withAPI)["nodes"] = apiNodes(obj{"listen": "127.0.0.1:30087", "token_sha256": []any{digest, "{env.SANDGATE_TEST_API_DIGEST}"}})
	t.Setenv("SANDGATE_TEST_API_DIGEST", strings.Repeat("cd", 32))
	if err := validate(t, mustJSON(t, withAPI)); err != nil {
		t.Fatalf("a config with nodes api does not provision: %v", err)
	}
}

// addRelay adds a server with a fixed_entry_probe handler of the given
// token_sha256 list (nil: none) to cfg.
func addRelay(cfg obj, digests []any) {
	h := obj{"handler": "fixed_entry_probe"}
	if digests != nil {
		h["token_sha256"] = digests
	}
	sub(cfg, "apps", "http", "servers")["relay"] = obj{"listen": []any{"127.0.0.1:0"}, "automatic_https": obj{"disable": true},
		"routes": []any{obj{"handle": []any{h}}}}
}

// validate provisions cfgJSON without starting it and cleans it up.
func validate(t *testing.T, cfgJSON []byte) error {
	t.Helper()
	var cfg caddy.Config
	if err := caddy.StrictUnmarshalJSON(cfgJSON, &cfg); err != nil {
		t.Fatalf("decoding the config: %v", err)
	}
	return caddy.Validate(&cfg)
}

// TestCaddyfileExampleProvisions adapts Caddyfile.example from the
// repository root, as `make demo` runs it, and provisions the result with
// the demo key and credentials.
func TestCaddyfileExampleProvisions(t *testing.T) {
	unsetExampleEnv(t)
	example, err := os.ReadFile(filepath.Join("..", "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	storage := t.TempDir()
	t.Chdir("..") // the example's relative paths are from the repository root
	cfgJSON := adaptCaddyfile(t, example)
	var cfg caddy.Config
	if err := caddy.StrictUnmarshalJSON(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.StorageRaw = mustJSON(t, obj{"module": "file_system", "root": storage})
	if err := caddy.Validate(&cfg); err != nil {
		t.Fatalf("Caddyfile.example does not provision: %v", err)
	}
}

// TestProbeRelayPingCarriesExecdToken: a readiness ping through
// fixed_entry_probe reaches execd with the cluster's execd_access_token,
// as the data plane's own requests do, and an echo probe (which reaches
// corectl's echo Ingress, no execd) without it; neither answer shows it.
// The relay sent no token at all, so in a cluster whose execd runs with
// one (docs/deploy.md's cluster-b) every readiness ping corectl sends
// through the relay was execd's 401 and no sandbox there became ready.
func TestProbeRelayPingCarriesExecdToken(t *testing.T) {
	f := newFixtures(t)
	const execdToken = "execd-token-from-env"
	t.Setenv("SANDGATE_TEST_EXECD_TOKEN", execdToken)
	stub := newExecdStub(t, "sbx-1", "/home/user/greeting.txt", "hello from execd")
	cfg := baseConfig(f, stub.URL)
	const relayToken = "relay-token-0123456789abcdef0123456789"
	sum := sha256.Sum256([]byte(relayToken))
	addRelay(cfg, []any{hex.EncodeToString(sum[:])})
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	sub(cfg, "apps", "http", "servers", "relay")["listen"] = []any{addr} // dp has 127.0.0.1:0
	loadConfig(t, mustJSON(t, cfg))

	lns := activeApp[*caddyhttp.App](t, "http").Servers["relay"].Listeners()
	if len(lns) != 1 {
		t.Fatalf("server relay has %d listeners, want 1", len(lns))
	}
	c := &entryprobe.Client{URL: "http://" + lns[0].Addr().String(), Token: relayToken}
	echo := entryprobe.EchoPathPrefix + strings.Repeat("ab", 16)
	for _, p := range []string{"/sbx-1/44772/ping", echo} {
		a, err := c.Probe(t.Context(), "cluster-a", p)
		if err != nil {
			t.Fatalf("probe %s: %v", p, err)
		}
		if strings.Contains(a.Body, execdToken) {
			t.Fatalf("probe %s: the answer shows the execd token: %+v", p, a)
		}
	}
	calls := stub.calls()
	if len(calls) != 2 || calls[0].path != "/sbx-1/44772/ping" || calls[1].path != echo {
		t.Fatalf("the fixed entry saw %+v", calls)
	}
	if calls[0].accessToken != execdToken {
		t.Errorf("the readiness ping carried X-EXECD-ACCESS-TOKEN %q, want the cluster's token", calls[0].accessToken)
	}
	if calls[1].accessToken != "" {
		t.Errorf("the echo probe carried X-EXECD-ACCESS-TOKEN %q, want none", calls[1].accessToken)
	}
}

// TestProvisionAndStartAPIOnSiteAddress loads configs whose nodes api listens
// where a server of the http app does (the same port, on every interface
// or on the same IP): the load fails before anything serves, naming the
// server and its address, and the port is free again; caddy.Validate (what
// `caddy validate` runs) refuses them the same way. The same config with
// the api on a port of its own validates, loads and serves the API there.
func TestProvisionAndStartAPIOnSiteAddress(t *testing.T) {
	f := newFixtures(t)
	t.Setenv("SANDGATE_TEST_EXECD_TOKEN", "execd-token")
	digest := strings.Repeat("ab", 32)
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	other, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	config := func(siteListen, apiListen string) []byte {
		cfg := baseConfig(f, "http://127.0.0.1:1")
		sub(cfg, "apps", "sandgate")["nodes"] = obj{"state_dir": filepath.Join(f.dir, "node-state"),
			"api": obj{"listen": apiListen, "token_sha256": []any{digest}}}
		sub(cfg, "apps", "http", "servers")["site"] = obj{"listen": []any{siteListen}, "automatic_https": obj{"disable": true},
			"routes": []any{obj{"handle": []any{obj{"handler": "static_response", "body": "site"}}}}}
		return mustJSON(t, cfg)
	}
	p := port
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ site, api string }{
		{":" + p, "127.0.0.1:" + p},
		{"127.0.0.1:" + p, "127.0.0.1:" + p},
		{"127.0.0.1:" + p, ":" + p},
		{"127.0.0.1:" + strconv.Itoa(n-1) + "-" + p, "tcp4/127.0.0.1:" + p},
	} {
		// caddy validate (and adapt --validate) refuses it too.
		var vc caddy.Config
		if err := json.Unmarshal(config(c.site, c.api), &vc); err != nil {
			t.Fatal(err)
		}
		want := `the http app's server "site" listens on ` + c.site + `, the same port on an overlapping host`
		if err := caddy.Validate(&vc); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), digest) {
			t.Fatalf("site on %s, api on %s: caddy.Validate: %v; want an error containing %q (and no digest)", c.site, c.api, err, want)
		}
		err := caddy.Load(config(c.site, c.api), true)
		if err == nil {
			_ = caddy.Stop()
			t.Fatalf("site on %s, api on %s: the config loaded", c.site, c.api)
		}
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), digest) {
			t.Fatalf("site on %s, api on %s: %v; want an error containing %q (and no digest)", c.site, c.api, err, want)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			t.Fatalf("after the refused load, %s is still held: %v", p, err)
		}
		_ = ln.Close()
	}

	var vc caddy.Config
	if err := json.Unmarshal(config("127.0.0.1:"+p, "127.0.0.1:"+other), &vc); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&vc); err != nil {
		t.Fatalf("the api on a port of its own: caddy.Validate: %v", err)
	}
	loadConfig(t, config("127.0.0.1:"+p, "127.0.0.1:"+other))
	resp, err := http.Get("http://127.0.0.1:" + other + "/internal/v1/sandbox-nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the api on a port of its own: %d, want 401", resp.StatusCode)
	}
}
