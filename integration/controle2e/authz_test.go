package controle2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/integration/controlapi"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

// corectlProc is bin/corectl running as its own process.
type corectlProc struct {
	cmd  *exec.Cmd
	addr string
	log  string // its output, a file
	done chan error
}

// logText returns the process's output so far.
func (p *corectlProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// startCorectl runs bin/corectl with args and waits for its "corectl
// serving" log line, which names the API address.
func startCorectl(t *testing.T, root string, args ...string) *corectlProc {
	t.Helper()
	bin := filepath.Join(root, "bin", "corectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("bin/corectl is missing (%v): run make build", err)
	}
	p := &corectlProc{cmd: exec.Command(bin, args...), log: filepath.Join(t.TempDir(), "corectl.log"), done: make(chan error, 1)}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	pr, pw := io.Pipe()
	p.cmd.Stderr = io.MultiWriter(pw, logf)
	p.cmd.Stdout = logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("corectl log:\n%s", p.logText())
		}
	})
	addrc := harness.CorectlServingAddr(pr)
	select {
	case p.addr = <-addrc:
	case err := <-p.done:
		t.Fatalf("bin/corectl exited while starting: %v\n%s", err, p.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("bin/corectl did not start within 60s:\n%s", p.logText())
	}
	return p
}

// freeAddr returns a loopback address with a port no one listens on now,
// picked below the kernel's ephemeral range (package freeport): the tests
// here must name it in corectl's and the gateway's configuration before
// it is bound.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

type authzResult struct {
	Killed   string            `json:"killed"`
	Before   sdkAttempt        `json:"before"`
	Metadata map[string]string `json:"metadata"`
	Kill     sdkAttempt        `json:"kill"`
	Refusal  refusal           `json:"afterKill"`
	Expiring string            `json:"expiring"`
	EndAt    time.Time         `json:"endAt"`
	Alive    sdkAttempt        `json:"beforeExpiry"`
	Expiry   refusal           `json:"afterExpiry"`
	// RefusedAt is when the expired sandbox's token was refused.
	RefusedAt      time.Time  `json:"refusedAt"`
	Owned          string     `json:"owned"`
	ConnectAsOther sdkAttempt `json:"connectAsOther"`
	InfoAsOther    sdkAttempt `json:"infoAsOther"`
	KillAsOther    sdkAttempt `json:"killAsOther"`
	ForeignRun     sdkAttempt `json:"foreignRun"`
	ForeignList    sdkAttempt `json:"foreignList"`
	ForeignRunning sdkAttempt `json:"foreignRunning"`
	OwnerRun       sdkAttempt `json:"ownerRun"`
	OwnerRunning   sdkAttempt `json:"ownerRunning"`
	SetTimeout     sdkAttempt `json:"setTimeout"`
	EndAfterSetMs  int64      `json:"endAfterSetTimeoutMs"`
	OwnerInfo      sdkAttempt `json:"ownerInfo"`
	ListAsOwner    []string   `json:"listAsOwner"`
	ListAsOther    []string   `json:"listAsOther"`
	KillOwned      sdkAttempt `json:"killOwned"`
}

type refusal struct {
	Refused bool  `json:"refused"`
	Ms      int64 `json:"ms"`
	Error   *struct {
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"error"`
	// Others are errors before the refusal that carried no SANDBOX_ code.
	Others []json.RawMessage `json:"others"`
}

// TestSDKAuthorizerWithCorectlProcess is the data plane honouring
// ownership and lifetime end to end: bin/corectl (its own process, the
// real kube-apiserver) as the control API and the authorizer's answerer,
// bin/caddy with `authorizer http` as the data plane, and each pinned E2B
// JS SDK: after kill() the token the SDK object still holds is refused
// within 2 s; a sandbox's token, accepted before, is refused once the end
// setTimeout(3 s) gave it passes; another
// credential of the same namespace cannot connect, read, kill or list the
// sandbox, and a token minted for that credential (a forged or leaked
// grant) is refused by the gateway exactly as for a missing sandbox.
func TestSDKAuthorizerWithCorectlProcess(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	ns, ingNS, tplNS := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile := write("primary.key", "authz-e2e-hmac-secret-0123456789abcdef0123456789")
	internal := write("internal.token", "internal-authorizer-token-0123456789abcdef\n")
	credFile := write("credentials.yaml", fmt.Sprintf("credentials:\n"+
		"  - {id: cred-a, enabled: true, projectNamespace: %s, clusterId: cluster-a}\n"+
		"  - {id: cred-b, enabled: true, projectNamespace: %s, clusterId: cluster-a}\n", ns, ns))
	keys := write("keys.yaml", "keys:\n"+
		"  - {name: a, sha256: "+apikey.Digest("key-a")+", credentialId: cred-a}\n"+
		"  - {name: b, sha256: "+apikey.Digest("key-b")+", credentialId: cred-b}\n")
	kubeconfig := write("kubeconfig", string(env.KubeConfig))
	// The fixed entry's listener is bound now, while corectl's cluster file
	// names it, and held until the harness serves on it.
	feLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = feLn.Close() })
	feAddr := feLn.Addr().String()
	c := kubetest.Cluster("cluster-a", ingNS)
	c.FixedEntry = "http://" + feAddr
	c.Kubeconfig = kubeconfig
	cfgJSON, err := json.Marshal(cluster.Config{Clusters: []cluster.Cluster{*c},
		Templates: cluster.TemplateStore{ClusterID: "cluster-a", Namespace: tplNS}, SandboxTemplates: kubetest.SandboxTemplates()})
	if err != nil {
		t.Fatal(err)
	}
	clusters := write("clusters.json", string(cfgJSON))

	ctx, cancel := context.WithCancel(context.Background())
	wait, err := env.RunSandboxController(ctx, "127.0.0.1", func(err error) { t.Errorf("controller: %v", err) }, ns)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); wait() })
	cc := startCorectl(t, root, "-config", clusters, "-credentials", credFile, "-api-keys", keys, "-listen", "127.0.0.1:0",
		"-leader-elect=false", "-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", keyFile,
		"-internal-token-file", internal, "-ready-budget", "30s")
	api := "http://" + cc.addr

	caddyfile := strings.Replace(harness.DefaultCaddyfile, "cluster cluster-a {{FIXED_ENTRY}}",
		"cluster cluster-a {{FIXED_ENTRY}}\n\t\tauthorizer http "+api+" {\n\t\t\theader Authorization \"Bearer {file."+internal+"}\"\n\t\t}", 1)
	h, err := harness.Start(harness.Config{RepoRoot: root, Caddyfile: caddyfile, CredentialsFile: credFile, KeyFile: keyFile,
		KeyID: "primary", FixedEntryListener: feLn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	h.Ingress.SetResolver(func(id string) (fixedentry.Sandbox, bool) {
		r, ok := env.Resolve(context.Background(), id)
		return fixedentry.Sandbox{Ready: r.Ready, Endpoint: r.Endpoint, Namespace: r.Namespace,
			Ports: map[int]string{44772: h.ExecdAddr}}, ok
	})
	// A control-API stub that hands out cred-b's tokens for any sandbox:
	// what a leaked or forged grant would be.
	sk, err := token.LoadSigningKey("primary", "HS256", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	foreign := httptest.NewServer(&controlapi.Server{Token: func(id string) (string, error) {
		return sk.Mint(token.Target{CredentialID: "cred-b", SandboxID: id, Port: 49983}, time.Hour, time.Now())
	}})
	t.Cleanup(foreign.Close)

	// The data plane directly: cred-b's token for a sandbox of cred-a and
	// for one that does not exist get the same answer.
	dataPlane := func(cred, id string) (int, string) {
		tok, err := sk.Mint(token.Target{CredentialID: cred, SandboxID: id, Port: 49983}, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", h.Gateway+"/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", tok)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	call := func(method, path, key, body string) (int, []byte) {
		req, _ := http.NewRequest(method, api+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", key)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	st, body := call("POST", "/v2/sandboxes", "key-a", `{"templateID":"base"}`)
	var created struct{ SandboxID string }
	if err := json.Unmarshal(body, &created); st != http.StatusCreated || err != nil {
		t.Fatalf("create = %d %s", st, body)
	}
	if st, b := dataPlane("cred-a", created.SandboxID); st != http.StatusOK {
		t.Fatalf("the owner's token: %d %s", st, b)
	}
	stForeign, bForeign := dataPlane("cred-b", created.SandboxID)
	stGhost, bGhost := dataPlane("cred-b", "sb00000000000000000000")
	if stForeign != http.StatusServiceUnavailable || !strings.Contains(bForeign, "SANDBOX_NOT_FOUND") || stForeign != stGhost || bForeign != bGhost {
		t.Fatalf("cred-b's token for cred-a's sandbox: %d %s; for a missing one: %d %s (want the same SANDBOX_NOT_FOUND)", stForeign, bForeign, stGhost, bGhost)
	}
	if st, b := call("DELETE", "/sandboxes/"+created.SandboxID, "key-a", ""); st != http.StatusNoContent {
		t.Fatalf("delete = %d %s", st, b)
	}

	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			var r authzResult
			runSDK(t, root, pkg, "authz", 3*time.Minute, &r, "E2B_API_URL="+api, "E2B_SANDBOX_URL="+h.Gateway,
				"E2B_API_KEY=key-a", "OTHER_API_KEY=key-b", "FOREIGN_API_URL="+foreign.URL)
			refusedAs := func(what string, f refusal) {
				t.Helper()
				if len(f.Others) > 0 {
					t.Logf("%s: errors without a SANDBOX_ code before the refusal: %s", what, f.Others)
				}
				if !f.Refused || f.Error == nil || !strings.Contains(f.Error.Message, "SANDBOX_") ||
					(f.Error.Name != "TimeoutError" && f.Error.Name != "SandboxNotFoundError") {
					t.Errorf("%s: %+v, want the SDK's timeout or not-found error with a SANDBOX_ code", what, f)
				}
			}
			// kill(): refused within 2 s with the token the object holds.
			if !r.Before.OK || !r.Kill.OK || r.Metadata["scenario"] != "authz" {
				t.Fatalf("before kill %+v, metadata %v, kill %+v", r.Before, r.Metadata, r.Kill)
			}
			refusedAs("old token after kill()", r.Refusal)
			if r.Refusal.Ms > 2000 {
				t.Errorf("the old token was refused %d ms after kill(), want ≤ 2000", r.Refusal.Ms)
			}
			// Expiry: alive before, refused after its end (the authorizer
			// refuses from the end on; the expiry loop deletes it).
			if !r.Alive.OK {
				t.Fatalf("the expiring sandbox did not run a command before its end was set: %+v", r.Alive)
			}
			refusedAs("token after expiry", r.Expiry)
			if r.RefusedAt.Before(r.EndAt) || r.RefusedAt.After(r.EndAt.Add(2*time.Second+5*time.Second)) {
				t.Errorf("refused at %v, the end was %v", r.RefusedAt, r.EndAt)
			}
			// Another credential of the namespace.
			for what, a := range map[string]sdkAttempt{"connect": r.ConnectAsOther, "getInfo": r.InfoAsOther} {
				if a.OK || a.Error == nil || a.Error.Name != "SandboxNotFoundError" {
					t.Errorf("%s as cred-b: %+v, want SandboxNotFoundError", what, a)
				}
			}
			if !r.KillAsOther.OK || (len(r.KillAsOther.Value) > 0 && string(r.KillAsOther.Value) != "false") {
				t.Errorf("kill as cred-b: %+v, want false (not found)", r.KillAsOther)
			}
			for what, a := range map[string]sdkAttempt{"run": r.ForeignRun, "list": r.ForeignList} {
				if a.OK || a.Error == nil || !strings.Contains(a.Error.Message, "SANDBOX_NOT_FOUND") {
					t.Errorf("cred-b's token, %s: %+v, want SANDBOX_NOT_FOUND", what, a)
				}
			}
			if !r.ForeignRunning.OK || string(r.ForeignRunning.Value) != "false" {
				t.Errorf("cred-b's token, isRunning: %+v, want false", r.ForeignRunning)
			}
			if !r.OwnerRun.OK || !r.OwnerRunning.OK || string(r.OwnerRunning.Value) != "true" || !r.SetTimeout.OK {
				t.Errorf("owner: run %+v isRunning %+v setTimeout %+v", r.OwnerRun, r.OwnerRunning, r.SetTimeout)
			}
			if r.EndAfterSetMs < 115000 || r.EndAfterSetMs > 125000 {
				t.Errorf("setTimeout(120 s) moved the end to %d ms from the call", r.EndAfterSetMs)
			}
			if !r.OwnerInfo.OK || !strings.Contains(string(r.OwnerInfo.Value), `"cpuCount":2,"memoryMB":2048`) ||
				!strings.Contains(string(r.OwnerInfo.Value), `"onTimeout":"kill"`) {
				t.Errorf("getInfo: %+v", r.OwnerInfo)
			}
			if len(r.ListAsOwner) != 1 || r.ListAsOwner[0] != r.Owned || len(r.ListAsOther) != 0 {
				t.Errorf("lists: owner %v, other %v (owned %s)", r.ListAsOwner, r.ListAsOther, r.Owned)
			}
			if !r.KillOwned.OK {
				t.Errorf("kill of the owned sandbox: %+v", r.KillOwned)
			}
		})
	}
}
