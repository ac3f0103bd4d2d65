package realpeers_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/harness"
)

// testDomain is the E2B_DOMAIN of TestSDKWithE2BDomainOnlyAgainstTheRealPeers:
// corectl answers it for cluster-a's sandboxes; the E2B_DOMAIN gateway
// serves *.sbx.test at domainIP.
const testDomain = "sbx.test"

// domainIP is where *.sbx.test resolves for the SDK's node process (the
// network namespace's loopback).
const domainIP = "127.77.0.1"

// domainCaddyfile serves E2B_DOMAIN=sbx.test on domainIP:443 over TLS
// from Caddy's internal CA: api.sbx.test to corectl, every other host to
// the data plane's host routing, both clusters' fixed entries their real
// Ingresses, corectl the sandbox authorizer; the access log drops both
// tokens. The plain {{ADDR}} site is the harness's readiness check.
const domainCaddyfile = `{
	admin {{ADMIN}}
	persist_config off
	skip_install_trust
	auto_https disable_redirects
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{INGRESS_A}}
		cluster cluster-b {{INGRESS_B}}
		authorizer http {{CORECTL_URL}} {
			header Authorization "Bearer {file.{{INTERNAL_FILE}}}"
			cache_ttl 100ms
		}
	}
}

` + harness.DomainSites

// domainResult is what sdk.mjs's "domain" scenario prints.
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
	} `json:"fetchWithout"`
	Fetch struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"fetch"`
	WS   sdkAttempt `json:"ws"`
	Kill sdkAttempt `json:"kill"`
}

// TestSDKWithE2BDomainOnlyAgainstTheRealPeers is the E2B_DOMAIN contract
// (docs/dataplane.md "Host routing") on the real chain: both JS SDKs and
// the Python SDK 2.24.0 with only E2B_DOMAIN and E2B_API_KEY (the test's
// CA trusted, *.sbx.test resolved to the gateway in the SDK's process:
// integration/js/resolve-domain.mjs, python/scenario.py's
// resolve_test_domain) create a
// sandbox through https://api.sbx.test (corectl, answering domain),
// run a command and a file through https://49983-<id>.sbx.test (the
// gateway's host routing, the real Ingress, the real execd), connect,
// reach the port helper at getHost(18080) with fetch and a WebSocket
// (the gateway → the real Ingress in URI mode → the Pod IP) and kill. A
// sandbox created with allowPublicTraffic false answers 403 without its
// traffic token and serves with it. The access log holds no token.
func TestSDKWithE2BDomainOnlyAgainstTheRealPeers(t *testing.T) {
	requireTier(t)
	w.startExecd(t, "head")
	w.startPortServer(t)

	accessLog := filepath.Join(t.TempDir(), "access.log")
	corectl := strings.TrimPrefix(w.api, "http://")
	cf := strings.NewReplacer("{{INGRESS_A}}", w.a.ingress, "{{INGRESS_B}}", w.b.ingress, "{{CORECTL}}", corectl, "{{CORECTL_URL}}", w.api,
		"{{INTERNAL_FILE}}", w.internalFile, "{{IP}}", domainIP, "{{ACCESS_LOG}}", accessLog).Replace(domainCaddyfile)
	gwLogPath := filepath.Join(t.TempDir(), "gateway.log")
	gwLog, err := os.Create(gwLogPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gwLog.Close() })
	g, err := harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: cf, CredentialsFile: w.gateway.CredFile,
		KeyFile: w.gateway.KeyFile, KeyID: "primary", Stderr: gwLog})
	if err != nil {
		b, _ := os.ReadFile(gwLogPath)
		t.Fatalf("the E2B_DOMAIN gateway: %v\n%.4000s", err, b)
	}
	t.Cleanup(g.Close)
	// Caddy's internal CA signs the *.sbx.test certificate at start; the
	// SDK's node process trusts its root.
	rootCA := filepath.Join(g.Dir, "caddy", "pki", "authorities", "local", "root.crt")
	if err := pollFor(30*time.Second, "the internal CA's root", func() error { _, err := os.Stat(rootCA); return err }); err != nil {
		b, _ := os.ReadFile(gwLogPath)
		t.Fatalf("%v\n%.4000s", err, b)
	}
	hook := filepath.Join(w.root, "integration/js/resolve-domain.mjs")
	port := fmt.Sprint(businessPorts[2])

	python := pythonInterpreter(t)
	for _, pkg := range append(append([]string{}, jsPackages...), "python-2.24.0") {
		for _, private := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/allowPublicTraffic=%v", pkg, !private), func(t *testing.T) {
				dir := fmt.Sprintf("/home/user/domain-%s-%v", pkg, private)
				execdMkdir(t, dir)
				var r domainResult
				// Only E2B_DOMAIN and E2B_API_KEY name sandgate; the rest
				// is the test's DNS and CA.
				env := []string{"E2B_DOMAIN=" + testDomain, "E2B_API_URL=", "E2B_SANDBOX_URL=", "TEST_DOMAIN=" + testDomain,
					"TEST_DOMAIN_IP=" + domainIP, "PORT=" + port, "SCENARIO_DIR=" + dir}
				if pkg == "python-2.24.0" {
					runPythonScenario(t, w.gateway, python, "domain", &r, append(env, "SSL_CERT_FILE="+rootCA,
						fmt.Sprintf(`NETWORK={"allow_public_traffic":%v}`, !private))...)
				} else {
					runScenario(t, w.gateway, "node", []string{"sdk.mjs", "domain"}, filepath.Join(w.root, "integration/js"), &r, append(env,
						"E2B_PACKAGE="+pkg, "NODE_EXTRA_CA_CERTS="+rootCA, "NODE_OPTIONS=--import="+hook,
						fmt.Sprintf(`NETWORK={"allowPublicTraffic":%v}`, !private))...)
				}
				if r.ConnectedID != r.SandboxID || r.Run != (commandResult{0, "created\n"}) || r.Read != "hello domain\n" {
					t.Fatalf("envd through 49983-<id>.%s: %+v", testDomain, r)
				}
				if r.Host != port+"-"+r.SandboxID+"."+testDomain {
					t.Fatalf("getHost(%s) = %q", port, r.Host)
				}
				if r.HasTrafficToken != private {
					t.Fatalf("trafficAccessToken given: %v, want %v", r.HasTrafficToken, private)
				}
				wantWithout, code := 200, ""
				if private {
					wantWithout, code = 403, "TRAFFIC_TOKEN_REQUIRED"
				}
				if r.FetchWithout.Status != wantWithout || r.FetchWithout.Code != code {
					t.Errorf("fetch without a token: %+v, want %d %q", r.FetchWithout, wantWithout, code)
				}
				// The port helper saw the POST as sent, without either
				// token (the gateway drops them).
				if r.Fetch.Status != 200 || r.Fetch.Body != "POST /hello q=1 payload tokens=0" {
					t.Errorf("fetch: %+v", r.Fetch)
				}
				if !r.WS.OK || string(r.WS.Value) != `"echo ping"` {
					t.Errorf("WebSocket: %+v", r.WS)
				}
				if !r.Kill.OK {
					t.Errorf("kill: %+v", r.Kill)
				}
				// The port requests went through cluster-a's real Ingress.
				b, err := os.ReadFile(w.a.ingressLog)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(b), "/"+r.SandboxID+"/"+port+"/hello") || !strings.Contains(string(b), "/"+r.SandboxID+"/"+port+"/ws") {
					t.Errorf("cluster-a's Ingress log shows no /%s/%s/ request", r.SandboxID, port)
				}
			})
		}
	}
	logged, err := os.ReadFile(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logged), port+"-") {
		t.Fatalf("the access log has no port request:\n%.2000s", logged)
	}
	// A JWT starts with the base64 of `{"`; neither token header is kept.
	for _, leak := range []string{"eyJ", "X-Access-Token", "E2b-Traffic-Access-Token"} {
		if strings.Contains(string(logged), leak) {
			t.Errorf("the access log holds %q", leak)
		}
	}
}
