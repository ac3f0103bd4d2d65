package controle2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/token"
	"k8s.io/client-go/rest"
)

// sdkRoot is repoRoot for the tests that drive only the control API: the
// pinned SDKs and node, no gateway binary.
func sdkRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range sdkPackages {
		if _, err := os.Stat(filepath.Join(root, "integration/js/node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("the E2B SDK %s is not installed (%v): cd integration/js && npm ci", pkg, err)
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not on PATH: %v", err)
	}
	return root
}

// controlAPI runs corectl in-process against the real apiserver with
// the API keys of the file keysPath (watched, as bin/corectl does), the
// credentials creds, and a fixed entry that answers every readiness ping
// (the SDK never reaches a data plane here). It returns the API's URL.
func controlAPI(t *testing.T, keysPath string, creds credential.Static, ns string) string {
	t.Helper()
	ingNS, tplNS := env.Namespace(t), env.Namespace(t)
	entry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/44772/ping") {
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(entry.Close)
	keyPath := filepath.Join(t.TempDir(), "token.key")
	if err := os.WriteFile(keyPath, []byte("controlapi-e2e-hmac-secret-0123456789abcdef0123"), 0o600); err != nil {
		t.Fatal(err)
	}
	sk, err := token.LoadSigningKey("primary", "HS256", keyPath)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := apikey.OpenFile(keysPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = keys.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := env.RunSandboxController(ctx, "127.0.0.1", func(err error) { t.Errorf("controller: %v", err) }, ns)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := kubetest.Cluster("cluster-a", ingNS)
	c.FixedEntry = entry.URL
	d, err := daemon.New(daemon.Options{
		Config: &cluster.Config{Clusters: []cluster.Cluster{*c}, Templates: cluster.TemplateStore{ClusterID: "cluster-a", Namespace: tplNS},
			SandboxTemplates: kubetest.SandboxTemplates()},
		Keys: keys, Credentials: creds, Listen: "127.0.0.1:0", TokenKey: &sk, ReadyBudget: 30 * time.Second,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	})
	if err != nil {
		cancel()
		wait()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		wait()
		if err := <-done; err != nil {
			t.Errorf("corectl: %v", err)
		}
	})
	return "http://" + d.Addr()
}

type controlAPIResult struct {
	SandboxID    string                `json:"sandboxId"`
	OtherID      string                `json:"otherId"`
	ByPair       map[string][]string   `json:"byPair"`
	ByAll        []string              `json:"byAll"`
	ByOtherValue []string              `json:"byOtherValue"`
	Unsupported  map[string]sdkAttempt `json:"unsupported"`
	Kill         sdkAttempt            `json:"kill"`
	KillOther    sdkAttempt            `json:"killOther"`
}

// TestSDKControlAPI drives corectl with each pinned JS SDK:
// Sandbox.list({query: {metadata}}) finds the sandbox by keys and values
// with a space, @, /, :, +, = and non-ASCII (the SDK escapes them twice;
// corectl used to decode one level short and find nothing); the E2B
// calls sandgate does not serve (snapshots, fork, volumes, secrets,
// template tags) raise an error that says "not supported", never a
// not-found error; and a key removed from the API-key file is refused
// (the SDK's AuthenticationError) within 2 s, without a restart.
func TestSDKControlAPI(t *testing.T) {
	root := sdkRoot(t)
	ns := env.Namespace(t)
	keysPath := filepath.Join(t.TempDir(), "keys.yaml")
	line := func(name, key string) string {
		return "  - {name: " + name + ", sha256: " + apikey.Digest(key) + ", credentialId: cred-e2e}\n"
	}
	if err := os.WriteFile(keysPath, []byte("keys:\n"+line("main", "key-e2e")+line("leaving", "key-leaving")), 0o600); err != nil {
		t.Fatal(err)
	}
	api := controlAPI(t, keysPath, credential.Static{"cred-e2e": {ID: "cred-e2e", Enabled: true, ProjectNamespace: ns, ClusterID: "cluster-a"}}, ns)
	md := map[string]string{"user id": "a b/c", "email": "ann@example.com", "url": "http://h:8080/p?q=1&r=2", "名前": "値 ü", "a+b": "1=2"}
	mdJSON, _ := json.Marshal(md)
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			var r controlAPIResult
			runSDK(t, root, pkg, "controlapi", 2*time.Minute, &r, "E2B_API_URL="+api, "E2B_SANDBOX_URL=http://127.0.0.1:9",
				"E2B_API_KEY=key-e2e", "METADATA="+string(mdJSON))
			for k := range md {
				if !slices.Equal(r.ByPair[k], []string{r.SandboxID}) {
					t.Errorf("list by %q = %v, want [%s]", k, r.ByPair[k], r.SandboxID)
				}
			}
			if !slices.Equal(r.ByAll, []string{r.SandboxID}) || len(r.ByOtherValue) != 0 {
				t.Errorf("list by every pair = %v, by another value = %v", r.ByAll, r.ByOtherValue)
			}
			want := []string{"createSnapshot", "listSnapshots", "volumeCreate", "volumeList"}
			if pkg == "e2b-2.51.0" {
				want = append(want, "fork", "secretList", "templateTags")
			}
			for _, name := range want {
				a, ok := r.Unsupported[name]
				if !ok || a.OK || a.Error == nil || !strings.Contains(a.Error.Message, "not supported") || strings.Contains(a.Error.Name, "NotFound") {
					t.Errorf("%s: %+v, want an error saying not supported", name, a)
				}
			}
			if !r.Kill.OK || !r.KillOther.OK {
				t.Errorf("kill %+v %+v", r.Kill, r.KillOther)
			}
		})
	}

	// The key file changes: "leaving" is removed. The SDK is refused
	// within 2 s of the write, with no restart.
	var before sdkAttempt
	runSDK(t, root, sdkPackages[0], "sandboxList", time.Minute, &before, "E2B_API_URL="+api, "E2B_API_KEY=key-leaving")
	if !before.OK {
		t.Fatalf("list with the key before its removal: %+v", before)
	}
	tmp := keysPath + ".next"
	if err := os.WriteFile(tmp, []byte("keys:\n"+line("main", "key-e2e")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, keysPath); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		req, _ := http.NewRequest("GET", api+"/v2/sandboxes", nil)
		req.Header.Set("X-API-Key", "key-leaving")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			break
		}
		if time.Since(written) > 2*time.Second {
			t.Fatalf("the removed key is still accepted %s after the write (%d)", time.Since(written), resp.StatusCode)
		}
	}
	var after sdkAttempt
	runSDK(t, root, sdkPackages[0], "sandboxList", time.Minute, &after, "E2B_API_URL="+api, "E2B_API_KEY=key-leaving")
	if after.OK || after.Error == nil || after.Error.Name != "AuthenticationError" {
		t.Fatalf("list with the removed key: %+v, want AuthenticationError", after)
	}
	var kept sdkAttempt
	runSDK(t, root, sdkPackages[0], "sandboxList", time.Minute, &kept, "E2B_API_URL="+api, "E2B_API_KEY=key-e2e")
	if !kept.OK {
		t.Fatalf("list with the kept key: %+v", kept)
	}
}
