package controle2e_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
)

// testDomain is the E2B_DOMAIN of TestSDKWithE2BDomainOnly.
const testDomain = "sbx.test"

// domainCaddyfile serves E2B_DOMAIN=sbx.test on <IP>:443 over TLS from
// Caddy's internal CA: api.sbx.test to corectl, every other host to the
// data plane's host routing; the access log drops both tokens. The plain
// {{ADDR}} site is the harness's readiness check.
const domainCaddyfile = `{
	admin {{ADMIN}}
	persist_config off
	skip_install_trust
	auto_https disable_redirects
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{FIXED_ENTRY}}
		authorizer http http://{{CORECTL}} {
			header Authorization "Bearer {file.{{INTERNAL_FILE}}}"
			cache_ttl 100ms
		}
	}
}

` + harness.DomainSites

type domainResult struct {
	SandboxID       string        `json:"sandboxId"`
	Run             commandResult `json:"run"`
	ConnectedID     string        `json:"connectedId"`
	Read            string        `json:"read"`
	Host            string        `json:"host"`
	HasTrafficToken bool          `json:"hasTrafficToken"`
	FetchWithout    struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
		Body   string `json:"body"`
	} `json:"fetchWithout"`
	Fetch struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"fetch"`
	WS   sdkAttempt `json:"ws"`
	Kill sdkAttempt `json:"kill"`
}

// TestSDKWithE2BDomainOnly is issue 27 as a user sees it: both pinned JS
// SDKs with only E2B_DOMAIN and E2B_API_KEY (plus the test CA trusted and
// a wildcard resolver for sbx.test in the node process) create a sandbox
// through corectl at https://api.sbx.test, run a command and a file
// through https://49983-<id>.sbx.test, connect, and reach a server on
// port 3000 of the sandbox at getHost(3000) with fetch and a WebSocket; a
// sandbox created with allowPublicTraffic false answers 403 without its
// traffic token; kill() ends it. The access log holds no token.
func TestSDKWithE2BDomainOnly(t *testing.T) {
	root := repoRoot(t)
	ns, ingNS, tplNS := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	creds := fmt.Sprintf("credentials:\n  - id: cred-e2e\n    enabled: true\n    resourceSpecId: spec-small\n"+
		"    resourceGroupId: group-1\n    projectNamespace: %s\n    clusterId: cluster-a\n", ns)

	// The user's server on port 3000 of every sandbox.
	up := websocket.Upgrader{}
	user := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ws":
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			if mt, m, err := c.ReadMessage(); err == nil {
				_ = c.WriteMessage(mt, append([]byte("echo "), m...))
			}
		default:
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
			tokens := r.Header.Get("X-Access-Token") + r.Header.Get("E2b-Traffic-Access-Token")
			_, _ = fmt.Fprintf(w, "%s %s %s %s tokens=%d", r.Method, r.URL.Path, r.URL.RawQuery, b, len(tokens))
		}
	})}
	userLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = user.Serve(userLn) }()
	t.Cleanup(func() { _ = user.Close() })

	// corectl's API listener, bound now and held until corectl serves it:
	// its address goes into the Caddyfile before corectl starts.
	corectlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = corectlLn.Close() }) // for a test that ends before corectl owns it
	corectlAddr := corectlLn.Addr().String()
	internal := "internal-" + rand.Text()
	internalFile := filepath.Join(t.TempDir(), "corectl-internal")
	if err := os.WriteFile(internalFile, []byte(internal), 0o600); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	ip := fmt.Sprintf("127.77.%d.%d", b[0], 1+b[1]%250)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	cf := strings.NewReplacer("{{CORECTL}}", corectlAddr, "{{INTERNAL_FILE}}", internalFile, "{{IP}}", ip, "{{ACCESS_LOG}}", accessLog).Replace(domainCaddyfile)
	gwLogPath := filepath.Join(t.TempDir(), "gateway.log")
	gwLog, err := os.Create(gwLogPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gwLog.Close() })
	h, err := harness.Start(harness.Config{RepoRoot: root, Credentials: creds, Caddyfile: cf, Stderr: gwLog})
	if err != nil {
		b, _ := os.ReadFile(gwLogPath)
		t.Fatalf("%v\n%.4000s", err, b)
	}
	t.Cleanup(h.Close)
	h.Ingress.SetResolver(func(id string) (fixedentry.Sandbox, bool) {
		r, ok := env.Resolve(context.Background(), id)
		return fixedentry.Sandbox{Ready: r.Ready, Endpoint: r.Endpoint, Namespace: r.Namespace,
			Ports: map[int]string{44772: h.ExecdAddr, 3000: userLn.Addr().String()}}, ok
	})

	ctx, cancel := context.WithCancel(context.Background())
	wait, err := env.RunSandboxController(ctx, "127.0.0.1", func(err error) { t.Errorf("controller: %v", err) }, ns)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	src, err := credential.OpenFile(h.CredFile, zap.NewNop())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	keys, err := apikey.Parse([]byte("keys:\n  - {name: e2e, sha256: " + apikey.Digest("key-e2e") + ", credentialId: cred-e2e}\n"))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := kubetest.Cluster("cluster-a", ingNS)
	c.FixedEntry = h.FixedEntry
	c.Domain = testDomain
	d, err := daemon.New(daemon.Options{
		Config: &cluster.Config{Clusters: []cluster.Cluster{*c}, Templates: cluster.TemplateStore{ClusterID: "cluster-a", Namespace: tplNS},
			SandboxTemplates: kubetest.SandboxTemplates()},
		Keys: keys, Credentials: src, Listener: corectlLn, TokenKey: &h.Key, ReadyBudget: 30 * time.Second,
		InternalToken: internal,
		RESTConfig:    func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		wait()
		_ = src.Close()
		if err := <-done; err != nil {
			t.Errorf("corectl: %v", err)
		}
	})

	// Caddy's internal CA signs the *.sbx.test certificate at start; the
	// SDK's node process trusts its root.
	rootCA := filepath.Join(h.Dir, "caddy", "pki", "authorities", "local", "root.crt")
	kubetest.Eventually(t, 30*time.Second, "the internal CA's root is written", func() (bool, error) {
		_, err := os.Stat(rootCA)
		return err == nil, nil
	})
	hook, err := filepath.Abs(filepath.Join(root, "integration/js/resolve-domain.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	userEnv := []string{"E2B_DOMAIN=" + testDomain, "E2B_API_KEY=key-e2e", "E2B_API_URL=", "E2B_SANDBOX_URL=",
		"NODE_EXTRA_CA_CERTS=" + rootCA, "NODE_OPTIONS=--import=" + hook, "TEST_DOMAIN=" + testDomain, "TEST_DOMAIN_IP=" + ip,
		"PORT=3000", "SCENARIO_DIR=/home/user/e2e"}

	for _, pkg := range sdkPackages {
		for _, private := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/allowPublicTraffic=%v", pkg, !private), func(t *testing.T) {
				var r domainResult
				runSDK(t, root, pkg, "domain", 2*time.Minute, &r, append(userEnv,
					fmt.Sprintf(`NETWORK={"allowPublicTraffic":%v}`, !private))...)
				if r.ConnectedID != r.SandboxID || r.Run.Stdout != "created\n" || r.Read != "hello domain\n" {
					t.Fatalf("envd through 49983-<id>.%s: %+v", testDomain, r)
				}
				if r.Host != "3000-"+r.SandboxID+"."+testDomain {
					t.Fatalf("getHost(3000) = %q", r.Host)
				}
				if r.HasTrafficToken != private {
					t.Fatalf("trafficAccessToken given: %v, want %v", r.HasTrafficToken, private)
				}
				wantWithout := 200
				if private {
					wantWithout = 403
					if r.FetchWithout.Code != "TRAFFIC_TOKEN_REQUIRED" {
						t.Errorf("without the token: %+v", r.FetchWithout)
					}
				}
				if r.FetchWithout.Status != wantWithout {
					t.Errorf("fetch without a token: %+v, want %d", r.FetchWithout, wantWithout)
				}
				if r.Fetch.Status != 200 || r.Fetch.Body != "POST /hello q=1 payload tokens=0" {
					t.Errorf("fetch: %+v", r.Fetch)
				}
				if !r.WS.OK || string(r.WS.Value) != `"echo ping"` {
					t.Errorf("WebSocket: %+v", r.WS)
				}
				if !r.Kill.OK {
					t.Errorf("kill: %+v", r.Kill)
				}
			})
		}
	}
	logged, err := os.ReadFile(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logged), "3000-") {
		t.Fatalf("the access log has no port request:\n%.2000s", logged)
	}
	// A JWT starts with the base64 of `{"`; neither token header is kept.
	for _, leak := range []string{"eyJ", "X-Access-Token", "E2b-Traffic-Access-Token"} {
		if strings.Contains(string(logged), leak) {
			t.Errorf("the access log holds %q", leak)
		}
	}
}
