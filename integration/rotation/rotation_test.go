// Package rotation rotates sandgate's shared secrets under traffic with the
// built programs, as docs/runbook.md "Rotating secrets" says, step by step:
// bin/corectl replicas (their own processes, against a real kube-apiserver)
// behind a "Service" (a round-robin proxy in the test), and bin/caddy as the
// data plane asking corectl's authorizer on every request. A step of the
// runbook is an edit of the Secret's file followed by a roll of both
// programs: each corectl replica is replaced by a new process reading the
// file (the new one serves before the old one stops, maxUnavailable 0), and
// the gateway re-reads its configuration (caddy reload, which provisions its
// modules afresh, as a new pod would). Data-plane requests run the whole
// time; none may be refused.
package rotation

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	kubetest.Main(m, &env)
}

// wait bounds every wait: a safety net against a hang, not a measurement.
const wait = 2 * time.Minute

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"caddy", "corectl"} {
		if fi, err := os.Stat(filepath.Join(root, "bin", b)); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("bin/%s is missing (%v): run make build", b, err)
		}
	}
	return root
}

// writeFile replaces path's content at once (a rename, as the kubelet
// swaps a Secret volume's files).
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// corectlProc is one bin/corectl replica.
type corectlProc struct {
	name string
	cmd  *exec.Cmd
	addr string
	log  string
	done chan error
}

// startCorectl runs bin/corectl with args and waits for its "corectl
// serving" line, which names the API address.
func startCorectl(t *testing.T, root, name string, args ...string) *corectlProc {
	t.Helper()
	p := &corectlProc{name: name, cmd: exec.Command(filepath.Join(root, "bin", "corectl"), args...),
		log: filepath.Join(t.TempDir(), name+".log"), done: make(chan error, 1)}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	pr, pw := io.Pipe()
	p.cmd.Stderr, p.cmd.Stdout = io.MultiWriter(pw, logf), logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { p.stop(t) })
	select {
	case p.addr = <-harness.CorectlServingAddr(pr):
	case err := <-p.done:
		p.done <- err
		b, _ := os.ReadFile(p.log)
		t.Fatalf("%s exited while starting: %v\n%s", name, err, b)
	case <-time.After(wait):
		t.Fatalf("%s did not start", name)
	}
	return p
}

// stop ends the replica with SIGTERM, as the kubelet does, and waits.
func (p *corectlProc) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(wait):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// service is corectl's Service: a round-robin proxy over the ready
// replicas, counting what each served and every refusal corectl answered.
type service struct {
	mu       sync.Mutex
	replicas []*corectlProc
	next     int
	served   map[string]int
	changed  chan struct{} // closed and replaced at each served request
	refused  atomic.Int64
	// proxyErrors are the replicas' transport errors ("name: error").
	proxyErrors sync.Map
}

// waitServed waits until replica name has served at least n authorize
// requests; false when deadline passed first.
func (s *service) waitServed(name string, n int, deadline <-chan time.Time) bool {
	for {
		s.mu.Lock()
		got, ch := s.served[name], s.changed
		s.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

func (s *service) set(replicas ...*corectlProc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replicas = replicas
}

// servedBy returns how many authorize requests replica name served.
func (s *service) servedBy(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[name]
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if len(s.replicas) == 0 {
		s.mu.Unlock()
		http.Error(w, "no replica", http.StatusServiceUnavailable)
		return
	}
	p := s.replicas[s.next%len(s.replicas)]
	s.next++
	s.mu.Unlock()
	u, _ := url.Parse("http://" + p.addr)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if strings.HasPrefix(r.URL.Path, "/internal/") {
			s.mu.Lock()
			s.served[p.name]++
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode >= 500 {
				s.refused.Add(1)
			}
		}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		s.proxyErrors.Store(fmt.Sprintf("%s: %v", p.name, err), true)
		w.WriteHeader(http.StatusBadGateway)
	}
	rp.ServeHTTP(w, r)
}

// TestInternalTokenRotationWithProcesses follows docs/runbook.md "Internal
// token" with two bin/corectl replicas and bin/caddy's authorizer under
// continuous data-plane traffic: step 1 (token = old, new), step 2 (new,
// old), step 3 (new), each a roll of both programs. No data-plane request
// and no authorize request is refused; after each roll every new replica
// has answered the gateway. At the end the old token is refused, so the
// rotation did happen.
func TestInternalTokenRotationWithProcesses(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	ns, ingNS, tplNS, leNS := env.Namespace(t), env.Namespace(t), env.Namespace(t), env.Namespace(t)
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, content)
		return p
	}
	const oldTok, newTok = "internal-token-old-0123456789abcdef0123456789", "internal-token-new-0123456789abcdef0123456789"
	keyFile := file("primary.key", "rotation-hmac-secret-0123456789abcdef0123456789")
	internal := file("internal.token", oldTok+"\n")
	credFile := file("credentials.yaml", fmt.Sprintf("credentials:\n  - {id: cred-a, enabled: true, projectNamespace: %s, clusterId: cluster-a}\n", ns))
	keys := file("keys.yaml", "keys:\n  - {name: a, sha256: "+apikey.Digest("key-a")+", credentialId: cred-a}\n")
	kubeconfig := file("kubeconfig", string(env.KubeConfig))
	feAddr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	c := kubetest.Cluster("cluster-a", ingNS)
	c.FixedEntry = "http://" + feAddr
	c.Kubeconfig = kubeconfig
	cfgJSON, err := json.Marshal(cluster.Config{Clusters: []cluster.Cluster{*c},
		Templates: cluster.TemplateStore{ClusterID: "cluster-a", Namespace: tplNS}, SandboxTemplates: kubetest.SandboxTemplates()})
	if err != nil {
		t.Fatal(err)
	}
	clusters := file("clusters.json", string(cfgJSON))
	ctx, cancel := context.WithCancel(context.Background())
	waitCtl, err := env.RunSandboxController(ctx, "127.0.0.1", func(err error) { t.Errorf("controller: %v", err) }, ns)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); waitCtl() })

	generation := 0
	// replica starts a corectl replica and waits until its readiness probe
	// passes (/readyz: its caches synced), as the kubelet does before the
	// Service sends it anything.
	replica := func() *corectlProc {
		generation++
		probe, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		p := startCorectl(t, root, fmt.Sprintf("corectl-%d", generation), "-config", clusters, "-credentials", credFile,
			"-api-keys", keys, "-listen", "127.0.0.1:0", "-probe-listen", probe, "-leader-election-namespace", leNS,
			"-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", keyFile,
			"-internal-token-file", internal, "-ready-budget", "30s", "-shutdown-grace", "5s")
		err = kwait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, wait, true, func(ctx context.Context) (bool, error) {
			resp, err := http.Get("http://" + probe + "/readyz")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
		if err != nil {
			t.Fatalf("%s never became ready: %v", p.name, err)
		}
		return p
	}
	svc := &service{served: map[string]int{}, changed: make(chan struct{})}
	live := []*corectlProc{replica(), replica()}
	svc.set(live...)
	front := serve(t, svc)

	// The gateway's configuration: the shipped authorizer block
	// (bearer_token_file), answers not reused (every request asks
	// corectl), and a step number that makes each reload a new
	// configuration.
	caddyfile := func(step int) string {
		return strings.Replace(harness.DefaultCaddyfile, "cluster cluster-a {{FIXED_ENTRY}}",
			fmt.Sprintf("cluster cluster-a {{FIXED_ENTRY}}\n\t\tauthorizer http %s {\n\t\t\tbearer_token_file %s\n\t\t\tcache_ttl 1ns\n\t\t\theader X-Rotation-Step %d\n\t\t}", front, internal, step), 1)
	}
	h, err := harness.Start(harness.Config{RepoRoot: root, Caddyfile: caddyfile(0), CredentialsFile: credFile, KeyFile: keyFile,
		KeyID: "primary", FixedEntryAddr: feAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	h.Ingress.SetResolver(func(id string) (fixedentry.Sandbox, bool) {
		r, ok := env.Resolve(context.Background(), id)
		return fixedentry.Sandbox{Ready: r.Ready, Endpoint: r.Endpoint, Namespace: r.Namespace,
			Ports: map[int]string{44772: h.ExecdAddr}}, ok
	})
	rendered := func(step int) string {
		return strings.NewReplacer("{{ADDR}}", strings.TrimPrefix(h.Gateway, "http://"), "{{ADMIN}}", h.Admin, "{{KEY}}", h.KeyFile,
			"{{CREDENTIALS}}", h.CredFile, "{{FIXED_ENTRY}}", h.FixedEntry).Replace(caddyfile(step))
	}

	// A sandbox, created through corectl's API, and its token.
	req, _ := http.NewRequest("POST", front+"/v2/sandboxes", strings.NewReader(`{"templateID":"base"}`))
	req.Header.Set("X-API-Key", "key-a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ SandboxID, EnvdAccessToken string }
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(body, &created); resp.StatusCode != http.StatusCreated || err != nil {
		t.Fatalf("create = %d %s", resp.StatusCode, body)
	}

	// Traffic: data-plane requests with the sandbox's token, until the end.
	// One connection per request: a reload closes the gateway's idle
	// keep-alive connections (as a pod's shutdown does), and a POST sent
	// on one as it closes fails before the gateway reads it. Even so a
	// connection accepted as caddy swaps its servers may close without an
	// answer (the reload's stand-in for a pod roll, not the rotation):
	// such requests are counted apart, and the test needs answered
	// requests in every phase.
	dataPlane := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var sent, refused, dropped atomic.Int64
	var drops sync.Map
	var phase atomic.Value // what the test is doing, for the refusals' report
	phase.Store("start")
	var refusals sync.Map
	trafficCtx, stopTraffic := context.WithCancel(context.Background())
	var traffic sync.WaitGroup
	for range 4 {
		traffic.Add(1)
		go func() {
			defer traffic.Done()
			for trafficCtx.Err() == nil {
				req, _ := http.NewRequestWithContext(trafficCtx, "POST", h.Gateway+"/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("E2b-Sandbox-Id", created.SandboxID)
				req.Header.Set("E2b-Sandbox-Port", "49983")
				req.Header.Set("X-Access-Token", created.EnvdAccessToken)
				resp, err := dataPlane.Do(req)
				if trafficCtx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil {
					// No answer: the connection closed under a reload
					// (below). Not a refusal; counted apart, and only
					// while the gateway reloads.
					if !strings.Contains(phase.Load().(string), "gateway roll") {
						refused.Add(1)
						refusals.Store(phase.Load().(string)+": "+err.Error(), true)
						continue
					}
					dropped.Add(1)
					drops.Store(phase.Load().(string)+": "+err.Error(), true)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					refused.Add(1)
					refusals.Store(fmt.Sprintf("%s: %d %.200s", phase.Load().(string), resp.StatusCode, b), true)
				}
			}
		}()
	}
	defer func() { stopTraffic(); traffic.Wait() }()

	// answered waits until each replica has served n more authorize
	// requests than it had when the wait began.
	answered := func(what string, n int, ps ...*corectlProc) {
		t.Helper()
		base := map[string]int{}
		for _, p := range ps {
			base[p.name] = svc.servedBy(p.name)
		}
		deadline := time.After(wait)
		for _, p := range ps {
			if !svc.waitServed(p.name, base[p.name]+n, deadline) {
				t.Fatalf("%s: %s served %d authorize requests", what, p.name, svc.servedBy(p.name)-base[p.name])
			}
		}
	}
	answered("before the rotation", 20, live...)

	// rollCorectl replaces each replica in turn: the new process joins
	// the Service and answers before the old one leaves and stops.
	rollCorectl := func(step int) {
		phase.Store(fmt.Sprintf("step %d corectl roll", step))
		for i, old := range live {
			p := replica()
			svc.set(append(append([]*corectlProc{}, live...), p)...)
			answered(fmt.Sprintf("step %d: new replica %s", step, p.name), 20, p)
			live[i] = p
			svc.set(live...)
			old.stop(t)
		}
		answered(fmt.Sprintf("step %d: after the corectl roll", step), 20, live...)
	}
	rollGateway := func(step int) {
		phase.Store(fmt.Sprintf("step %d gateway roll", step))
		if err := h.Reload(context.Background(), rendered(step)); err != nil {
			t.Fatalf("step %d: gateway reload: %v", step, err)
		}
		answered(fmt.Sprintf("step %d: after the gateway roll", step), 20, live...)
	}

	// The runbook's steps, literally. In a cluster both Deployments roll
	// at once; here step 1 and 3 roll corectl first, step 2 the gateway
	// first (each order is safe by the runbook's argument).
	writeFile(t, internal, oldTok+"\n"+newTok+"\n") // 1. token = old, new
	rollCorectl(1)
	rollGateway(1)
	writeFile(t, internal, newTok+"\n"+oldTok+"\n") // 2. token = new, old
	rollGateway(2)
	rollCorectl(2)
	writeFile(t, internal, newTok+"\n") // 3. token = new
	rollCorectl(3)
	rollGateway(3)

	stopTraffic()
	traffic.Wait()
	if n := refused.Load(); n != 0 {
		var kinds []string
		refusals.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
		t.Errorf("%d of %d data-plane requests refused during the rotation: %v", n, sent.Load(), kinds)
	}
	svc.proxyErrors.Range(func(k, _ any) bool { t.Errorf("corectl's Service could not reach a replica: %s", k); return true })
	if n := svc.refused.Load(); n != 0 {
		t.Errorf("corectl refused %d authorize requests during the rotation", n)
	}
	drops.Range(func(k, _ any) bool { t.Logf("closed without an answer: %s", k); return true })
	t.Logf("%d data-plane requests, none refused; %d closed without an answer by a reload", sent.Load(), dropped.Load())

	// The old token is retired: corectl refuses it now.
	for _, tok := range []string{oldTok, newTok} {
		req, _ := http.NewRequest("GET", "http://"+live[0].addr+"/internal/v1/authorize?credential=cred-a&sandbox="+created.SandboxID, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := tok == newTok; (resp.StatusCode != http.StatusUnauthorized) != want {
			t.Errorf("authorize with the %s token after the rotation = %d", map[bool]string{true: "new", false: "old"}[want], resp.StatusCode)
		}
	}
}

// serve runs h on a loopback port until the test ends and returns its URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}
