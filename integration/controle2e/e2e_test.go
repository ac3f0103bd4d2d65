// Package controle2e_test drives the official E2B JS SDK at corectl as the
// control API and at the built gateway (bin/caddy) as the data plane:
// Sandbox.create({network}) → corectl's create orchestration against a real
// kube-apiserver → readiness through the fixed-entry stand-in → the SDK's
// commands and files through the gateway → fixed entry → execd stand-in;
// Sandbox.connect(id); kill() deletes fail-closed. Only the pod is missing:
// a stand-in OpenSandbox controller marks each BatchSandbox ready, and the
// fixed entry resolves sandboxes from BatchSandbox objects.
package controle2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"go.uber.org/zap"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// testClient is the tests' HTTP client: http.DefaultClient's transport
// with a bound on every request, its response body read included, so a
// peer that hangs fails the request instead of holding the test until the
// package's -timeout. No request here is meant to take that long.
var testClient = &http.Client{Timeout: 2 * time.Minute}

var env *kubetest.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	kubetest.Main(m, &env)
}

// sdkPackages are the pinned SDKs (integration/js/package.json).
var sdkPackages = []string{"e2b-2.51.0", "e2b-2.25.0"}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(harness.CaddyBinary(root)); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("the gateway binary bin/caddy is missing (%v): run make build", err)
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

// runSDK runs `node sdk.mjs <scenario>` with the SDK package pkg and env
// (within limit), and decodes the result it prints into result.
func runSDK(t *testing.T, root, pkg, scenario string, limit time.Duration, result any, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "sdk.mjs", scenario)
	cmd.Dir = filepath.Join(root, "integration/js")
	cmd.Env = append(append(os.Environ(), "E2B_PACKAGE="+pkg), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node sdk.mjs %s: %v\nstdout:\n%s\nstderr:\n%s", scenario, err, stdout.String(), stderr.String())
	}
	out := struct {
		Result any `json:"result"`
	}{Result: result}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil {
		t.Fatalf("sdk.mjs printed %q: %v", stdout.String(), err)
	}
	t.Logf("%s: %s", pkg, stdout.String())
}

type sdkAttempt struct {
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value"`
	Error *struct {
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"error"`
}

type commandResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
}

type lifecycleResult struct {
	SandboxID        string        `json:"sandboxId"`
	Run              commandResult `json:"run"`
	Write            struct{ Path string }
	ConnectedID      string        `json:"connectedId"`
	Read             string        `json:"read"`
	RunAgain         commandResult `json:"runAgain"`
	Kill             sdkAttempt    `json:"kill"`
	KillAgain        sdkAttempt    `json:"killAgain"`
	ConnectAfterKill sdkAttempt    `json:"connectAfterKill"`
}

// checkLifecycle checks the "lifecycle" scenario's session: created,
// commands and a file through the data plane, connected again, killed once
// (true, then false), not connectable after.
func checkLifecycle(t *testing.T, r lifecycleResult) {
	t.Helper()
	if sandbox.ValidateID(r.SandboxID) != nil || r.ConnectedID != r.SandboxID {
		t.Fatalf("ids %q %q", r.SandboxID, r.ConnectedID)
	}
	if r.Run.ExitCode != 0 || r.Run.Stdout != "created\n" || r.RunAgain.Stdout != "connected\n" || r.Read != "hello corectl\n" {
		t.Fatalf("session %+v", r)
	}
	if !r.Kill.OK || (len(r.Kill.Value) > 0 && string(r.Kill.Value) != "true") || !r.KillAgain.OK || string(r.KillAgain.Value) != "false" || r.ConnectAfterKill.OK {
		t.Fatalf("kill %+v / %+v / %+v", r.Kill, r.KillAgain, r.ConnectAfterKill)
	}
}

// stack is corectl (on the test apiserver, credential cred-e2e with API
// key key-e2e, template admin key-admin) and the gateway harness.
type stack struct {
	root, api, ns, ingNS string
	h                    *harness.Env
}

// startStack starts corectl and the gateway, with the stand-in OpenSandbox
// controller marking the namespace's BatchSandboxes ready; extra is added
// to the credential's YAML mapping (e.g. "    limits: {...}\n").
func startStack(t *testing.T, extra string) stack {
	t.Helper()
	return startStackCaddyfile(t, extra, "")
}

// startStackCaddyfile is startStack with the gateway's Caddyfile (the
// harness's placeholders; "" is harness.DefaultCaddyfile).
func startStackCaddyfile(t *testing.T, extra, caddyfile string) stack {
	t.Helper()
	return startStackWith(t, extra, caddyfile, nil, nil)
}

// startStackWith is startStackCaddyfile with the gateway harness's and
// corectl's options changed by gateway and corectl (nil: none) before each
// starts. gateway is called before every start attempt: a start that
// fails with harness.ErrBindRace (a port the Caddyfile names was taken
// before the gateway listened) is tried again, up to 5 attempts, and
// gateway may pick new ports for it.
func startStackWith(t *testing.T, extra, caddyfile string, gateway func(*harness.Config), corectl func(*daemon.Options)) stack {
	t.Helper()
	root := repoRoot(t)
	ns, ingNS, tplNS := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	creds := fmt.Sprintf("credentials:\n  - id: cred-e2e\n    enabled: true\n    resourceSpecId: spec-small\n"+
		"    resourceGroupId: group-1\n    projectNamespace: %s\n    clusterId: cluster-a\n", ns) + extra
	var h *harness.Env
	for attempt := 1; ; attempt++ {
		hc := harness.Config{RepoRoot: root, Credentials: creds, Caddyfile: caddyfile}
		if gateway != nil {
			gateway(&hc)
		}
		var err error
		if h, err = harness.Start(hc); err == nil {
			break
		}
		if !errors.Is(err, harness.ErrBindRace) || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("gateway start attempt %d: %v; again", attempt, err)
	}
	t.Cleanup(h.Close)
	h.Ingress.SetResolver(func(id string) (fixedentry.Sandbox, bool) {
		r, ok := env.Resolve(context.Background(), id)
		return fixedentry.Sandbox{Ready: r.Ready, Endpoint: r.Endpoint, Namespace: r.Namespace,
			Ports: map[int]string{44772: h.ExecdAddr}}, ok
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
	keys, err := apikey.Parse([]byte("keys:\n" +
		"  - {name: e2e, sha256: " + apikey.Digest("key-e2e") + ", credentialId: cred-e2e}\n" +
		"  - {name: admin, sha256: " + apikey.Digest("key-admin") + ", templateAdmin: true}\n"))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := kubetest.Cluster("cluster-a", ingNS)
	c.FixedEntry = h.FixedEntry
	o := daemon.Options{
		Config: &cluster.Config{Clusters: []cluster.Cluster{*c}, Templates: cluster.TemplateStore{ClusterID: "cluster-a", Namespace: tplNS},
			SandboxTemplates: kubetest.SandboxTemplates()},
		Keys: keys, Credentials: src, Listen: "127.0.0.1:0", TokenKey: &h.Key, ReadyBudget: 30 * time.Second,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	}
	if corectl != nil {
		corectl(&o)
	}
	d, err := daemon.New(o)
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
	api := "http://" + d.Addr()

	return stack{root: root, api: api, ns: ns, ingNS: ingNS, h: h}
}

// putTemplate sets the base template's network defaults (body: sandgate's
// template network object).
func (st stack) putTemplate(t *testing.T, body string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", st.api+"/sandbox-templates/base/network", strings.NewReader(body))
	req.Header.Set("X-API-Key", "key-admin")
	resp, err := testClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("template PUT: %v %v", err, resp)
	}
	resp.Body.Close()
}

// TestSDKCreateConnectKillThroughCorectl is the closed loop of issue 6
// with both pinned SDKs.
func TestSDKCreateConnectKillThroughCorectl(t *testing.T) {
	st := startStack(t, "")
	root, api, ns, ingNS, h := st.root, st.api, st.ns, st.ingNS, st.h
	// Template defaults carry an ingress allowlist, so create writes the
	// managed Ingress too; the SDK's network object sets the egress.
	st.putTemplate(t, `{"ingress":[{"cidr":"203.0.113.0/24"}],"egress":[]}`)

	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			h.Ingress.ResetRequests()
			var r lifecycleResult
			runSDK(t, root, pkg, "lifecycle", 2*time.Minute, &r, "E2B_API_URL="+api, "E2B_SANDBOX_URL="+h.Gateway,
				"E2B_API_KEY=key-e2e", "SCENARIO_DIR=/home/user/e2e", `NETWORK={"allowOut":["198.51.100.7"]}`)
			checkLifecycle(t, r)
			// The readiness ping and the SDK's traffic went through the
			// fixed entry to this sandbox.
			var ping, data bool
			for _, q := range h.Ingress.Requests() {
				ping = ping || (q.Path == "/"+r.SandboxID+"/44772/ping" && q.Status == 200)
				data = data || (q.SandboxID == r.SandboxID && q.Path != "/"+r.SandboxID+"/44772/ping" && q.Status == 200)
			}
			if !ping || !data {
				t.Fatalf("fixed entry saw ping=%v data=%v", ping, data)
			}
			// kill() removed everything.
			var ings networkingv1.IngressList
			var nps networkingv1.NetworkPolicyList
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
			for _, l := range []struct {
				obj client.ObjectList
				ns  string
			}{{&ings, ingNS}, {&nps, ns}, {list, ns}} {
				if err := env.Client.List(context.Background(), l.obj, client.InNamespace(l.ns)); err != nil {
					t.Fatal(err)
				}
			}
			if len(ings.Items)+len(nps.Items)+len(list.Items) != 0 {
				t.Fatalf("left after kill: %d Ingresses, %d policies, %d BatchSandboxes", len(ings.Items), len(nps.Items), len(list.Items))
			}
		})
	}
}
