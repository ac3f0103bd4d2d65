// Package rotation rotates sandgate's shared secrets under traffic with the
// built programs, as docs/runbook.md "Rotating secrets" says, step by step.
// The internal token and the token key: bin/corectl replicas (their own
// processes, against a real kube-apiserver) behind a "Service" (a
// round-robin proxy in the test) and bin/caddy as the data plane asking
// corectl's authorizer on every request. A step of the runbook is an edit
// of the Secret's file (or the settings) followed by a roll of both
// programs: each corectl replica is replaced by a new process reading the
// file (the new one joins once ready and serves before the old one stops,
// maxUnavailable 0), and the gateway re-reads its configuration (caddy
// reload, which provisions its modules afresh, as a new pod would). The
// internal node API token: bin/caddy replicas, each roll a new process.
// The probe relay token: the same rig, bin/caddy also serving the probe
// relay (fixed_entry_probe) that the corectl replicas use. The execd
// token secret: the same rig with an execd per sandbox started with the
// token corectl gave it (the real OpenSandbox execd when
// hack/peers/build.sh's cache has it). The kubeconfigs: the corectl
// replicas reach the real apiserver with ServiceAccount tokens, rolled
// from one to another and the old one revoked.
// Requests run the whole time; none may be refused.
package rotation

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/hack/gatewayproc"
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
	// flying counts the requests each replica was given and has not
	// answered yet.
	flying  map[string]int
	changed chan struct{} // closed and replaced at each served request and answer
	refused atomic.Int64
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

// waitIdle waits until replica name has answered every request it was
// given (taken out of the Service, it gets no new ones); false when
// deadline passed first. A pod's endpoint leaves the Service before the
// kubelet's SIGTERM reaches it in the same way (the preStop pause).
func (s *service) waitIdle(name string, deadline <-chan time.Time) bool {
	for {
		s.mu.Lock()
		n, ch := s.flying[name], s.changed
		s.mu.Unlock()
		if n == 0 {
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
	s.flying[p.name]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.flying[p.name]--
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}()
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
		if r.Context().Err() != nil {
			// The caller went away first (a gateway reload cancels the
			// old configuration's authorize calls): no replica failed.
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		s.proxyErrors.Store(fmt.Sprintf("%s: %v", p.name, err), true)
		w.WriteHeader(http.StatusBadGateway)
	}
	rp.ServeHTTP(w, r)
}

// rig is the rotation's world: the real kube-apiserver with a stand-in
// OpenSandbox controller, corectl replicas (bin/corectl) behind svc, the
// gateway (bin/caddy, with the harness's fixed entry and execd stand-ins)
// and the data-plane traffic.
type rig struct {
	t        *testing.T
	root     string
	dir      string
	internal string // corectl's -internal-token-file, the gateway's bearer_token_file
	// args are corectl's flags; extra, read at each replica's start, adds
	// the token key's.
	args  []string
	extra func(r *rig) []string
	leNS  string
	svc   *service
	front string // corectl's Service
	live  []*corectlProc
	all   []*corectlProc // every replica started, live or stopped
	gen   int
	h     *harness.Env
	// gatewayLog is the file bin/caddy logs to.
	gatewayLog string
	// caddyfile is the gateway's configuration at a step (harness
	// placeholders allowed).
	caddyfile func(r *rig, step int) string

	phase          atomic.Value // what the test is doing, for the reports
	sent, refused  atomic.Int64
	dropped        atomic.Int64
	refusals       sync.Map
	drops          sync.Map
	stopTraffic    context.CancelFunc
	trafficStopped sync.WaitGroup
	// inFlight counts the data-plane requests under way, by sandbox ID
	// (*atomic.Int64); a pick and its count are made under picking.
	inFlight sync.Map
	picking  sync.Mutex
}

// flying returns how many data-plane requests for sandbox id are under
// way, counting every pick made before the call.
func (r *rig) flying(id string) int64 {
	r.picking.Lock()
	defer r.picking.Unlock()
	n, _ := r.inFlight.LoadOrStore(id, new(atomic.Int64))
	return n.(*atomic.Int64).Load()
}

// file writes name in the rig's directory and returns its path.
func (r *rig) file(name, content string) string {
	p := filepath.Join(r.dir, name)
	writeFile(r.t, p, content)
	return p
}

// newRig starts the gateway and corectl (two replicas). extra adds
// corectl flags at each replica's start; caddyfile is the gateway's
// configuration at a step (0 at start; r.front is corectl's Service);
// each of edit changes corectl's cluster-a before it is written.
func newRig(t *testing.T, extra func(r *rig) []string, caddyfile func(r *rig, step int) string, edit ...func(r *rig, c *cluster.Cluster)) *rig {
	r := &rig{t: t, root: repoRoot(t), dir: t.TempDir(), extra: extra, caddyfile: caddyfile}
	r.phase.Store("start")
	ns, ingNS, tplNS := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	r.leNS = env.Namespace(t)
	r.internal = r.file("internal.token", "internal-token-old-0123456789abcdef0123456789\n")
	credFile := r.file("credentials.yaml", fmt.Sprintf("credentials:\n  - {id: cred-a, enabled: true, projectNamespace: %s, clusterId: cluster-a}\n", ns))
	keys := r.file("keys.yaml", "keys:\n  - {name: a, sha256: "+apikey.Digest("key-a")+", credentialId: cred-a}\n")
	kubeconfig := r.file("kubeconfig", string(env.KubeConfig))
	feAddr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	c := kubetest.Cluster("cluster-a", ingNS)
	c.FixedEntry = "http://" + feAddr
	c.Kubeconfig = kubeconfig
	for _, e := range edit {
		e(r, c)
	}
	cfgJSON, err := json.Marshal(cluster.Config{Clusters: []cluster.Cluster{*c},
		Templates: cluster.TemplateStore{ClusterID: "cluster-a", Namespace: tplNS}, SandboxTemplates: kubetest.SandboxTemplates()})
	if err != nil {
		t.Fatal(err)
	}
	clusters := r.file("clusters.json", string(cfgJSON))
	ctx, cancel := context.WithCancel(context.Background())
	waitCtl, err := env.RunSandboxController(ctx, "127.0.0.1", func(err error) { t.Errorf("controller: %v", err) }, ns)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); waitCtl() })
	r.args = []string{"-config", clusters, "-credentials", credFile, "-api-keys", keys, "-listen", "127.0.0.1:0",
		"-leader-election-namespace", r.leNS, "-internal-token-file", r.internal, "-ready-budget", "30s", "-shutdown-grace", "5s"}
	// The Service first (the gateway's configuration names it), then the
	// gateway, then the replicas: a corectl using the gateway's probe
	// relay checks it before it is ready.
	r.svc = &service{served: map[string]int{}, flying: map[string]int{}, changed: make(chan struct{})}
	r.front = serve(t, r.svc)
	// The harness's own control API stand-in is not used; it wants an
	// HS256 key.
	hk := r.file("harness-hs256.key", "harness-hmac-secret-0123456789abcdef0123456789")
	r.gatewayLog = filepath.Join(r.dir, "gateway.log")
	gwLog, err := os.Create(r.gatewayLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gwLog.Close() })
	r.h, err = harness.Start(harness.Config{RepoRoot: r.root, Caddyfile: r.caddyfile(r, 0), CredentialsFile: credFile, KeyFile: hk,
		KeyID: "harness", FixedEntryAddr: feAddr, Stderr: gwLog})
	if err != nil {
		b, _ := os.ReadFile(r.gatewayLog)
		t.Fatalf("%v\n%s", err, b)
	}
	t.Cleanup(r.h.Close)
	r.h.Ingress.SetResolver(func(id string) (fixedentry.Sandbox, bool) {
		rs, ok := env.Resolve(context.Background(), id)
		return fixedentry.Sandbox{Ready: rs.Ready, Endpoint: rs.Endpoint, Namespace: rs.Namespace,
			Ports: map[int]string{44772: r.h.ExecdAddr}}, ok
	})
	r.live = []*corectlProc{r.replica(), r.replica()}
	r.svc.set(r.live...)
	return r
}

// replica starts a corectl replica and waits until its readiness probe
// passes (/readyz: its caches synced), as the kubelet does before the
// Service sends it anything.
func (r *rig) replica() *corectlProc {
	t := r.t
	r.gen++
	probe, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append(slices.Clone(r.args), "-probe-listen", probe), r.extra(r)...)
	p := startCorectl(t, r.root, fmt.Sprintf("corectl-%d", r.gen), args...)
	r.all = append(r.all, p)
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

// api calls corectl's API through its Service with key-a.
func (r *rig) api(method, path, body string, out any) int {
	r.t.Helper()
	req, _ := http.NewRequest(method, r.front+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", "key-a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			r.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// sandbox is a sandbox and an envd access token for it.
type sandbox struct{ id, token string }

// create creates a sandbox through corectl's API (timeout in seconds)
// and waits until it is servable.
func (r *rig) create(timeout int) sandbox {
	r.t.Helper()
	var created struct{ SandboxID, EnvdAccessToken string }
	if st := r.api("POST", "/v2/sandboxes", fmt.Sprintf(`{"templateID":"base","timeout":%d}`, timeout), &created); st != http.StatusCreated {
		r.t.Fatalf("create = %d", st)
	}
	sb := sandbox{created.SandboxID, created.EnvdAccessToken}
	r.servable(sb)
	return sb
}

// servable waits until the data plane has served sb four times in a
// row: every corectl replica's cache has seen the sandbox ready (a create
// returns once the replica that made it saw it so; the others' watches
// may be a moment behind, and their authorizer answers "not ready" until
// then, which is not the rotation's doing). Any other answer is a
// refusal and fails the test.
func (r *rig) servable(sb sandbox) {
	r.t.Helper()
	ok := 0
	err := kwait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, wait, true, func(ctx context.Context) (bool, error) {
		code, body, err := r.dataPlane(ctx, sb)
		switch {
		case err == nil && code == http.StatusOK:
			ok++
		case err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "SANDBOX_NOT_READY"):
			ok = 0
		default:
			return false, fmt.Errorf("refused: %d %.200s %v", code, body, err)
		}
		return ok >= 4, nil
	})
	if err != nil {
		r.t.Fatalf("sandbox %s never served four times in a row: %v", sb.id, err)
	}
}

// dataPlane sends one data-plane request for sb with its token.
// One connection per request: a reload closes the gateway's idle
// keep-alive connections (as a pod's shutdown does), and a POST sent on
// one as it closes fails before the gateway reads it.
func (r *rig) dataPlane(ctx context.Context, sb sandbox) (int, string, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", r.h.Gateway+"/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Id", sb.id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", sb.token)
	resp, err := dataPlaneClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b), nil
}

var dataPlaneClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// startTraffic sends data-plane requests from 4 goroutines until
// stopTraffic, each with a sandbox pick returns. Any answer but 200 is a
// refusal. A connection closed without an answer by a request that
// overlapped a gateway reload (it began or failed during one: a connection
// accepted as caddy swaps its servers, the reload's stand-in for a pod
// roll, not the rotation) is counted apart; elsewhere it is a refusal too.
func (r *rig) startTraffic(pick func() sandbox) {
	ctx, cancel := context.WithCancel(context.Background())
	r.stopTraffic = cancel
	for range 4 {
		r.trafficStopped.Add(1)
		go func() {
			defer r.trafficStopped.Done()
			for ctx.Err() == nil {
				phase := r.phase.Load().(string)
				r.picking.Lock()
				sb := pick()
				n, _ := r.inFlight.LoadOrStore(sb.id, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				r.picking.Unlock()
				code, body, err := r.dataPlane(ctx, sb)
				n.(*atomic.Int64).Add(-1)
				if ctx.Err() != nil {
					return
				}
				r.sent.Add(1)
				switch {
				case err != nil && (strings.Contains(phase, "gateway roll") || strings.Contains(r.phase.Load().(string), "gateway roll")):
					r.dropped.Add(1)
					r.drops.Store(phase+": "+err.Error(), true)
				case err != nil:
					r.refused.Add(1)
					r.refusals.Store(phase+": "+err.Error(), true)
				case code != http.StatusOK:
					r.refused.Add(1)
					r.refusals.Store(fmt.Sprintf("%s: %d %.200s", phase, code, body), true)
				}
			}
		}()
	}
	r.t.Cleanup(r.endTraffic)
}

// endTraffic stops the traffic and reports: no request refused.
func (r *rig) endTraffic() {
	if r.stopTraffic == nil {
		return
	}
	r.stopTraffic()
	r.stopTraffic = nil
	r.trafficStopped.Wait()
	t := r.t
	if n := r.refused.Load(); n != 0 {
		var kinds []string
		r.refusals.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
		t.Errorf("%d of %d data-plane requests refused during the rotation: %v", n, r.sent.Load(), kinds)
	}
	r.svc.proxyErrors.Range(func(k, _ any) bool { t.Errorf("corectl's Service could not reach a replica: %s", k); return true })
	if n := r.svc.refused.Load(); n != 0 {
		t.Errorf("corectl refused %d authorize requests during the rotation", n)
	}
	r.drops.Range(func(k, _ any) bool { t.Logf("closed without an answer: %s", k); return true })
	t.Logf("%d data-plane requests, %d refused; %d closed without an answer by a reload", r.sent.Load(), r.refused.Load(), r.dropped.Load())
}

// answered waits until each replica has served n more authorize requests
// than it had when the wait began.
func (r *rig) answered(what string, n int, ps ...*corectlProc) {
	r.t.Helper()
	base := map[string]int{}
	for _, p := range ps {
		base[p.name] = r.svc.servedBy(p.name)
	}
	deadline := time.After(wait)
	for _, p := range ps {
		if !r.svc.waitServed(p.name, base[p.name]+n, deadline) {
			r.t.Fatalf("%s: %s served %d authorize requests", what, p.name, r.svc.servedBy(p.name)-base[p.name])
		}
	}
}

// rollCorectl replaces each replica in turn: the new process joins the
// Service once ready and answers before the old one leaves and stops.
func (r *rig) rollCorectl(step string) {
	r.phase.Store(step + " corectl roll")
	for i, old := range r.live {
		p := r.replica()
		r.svc.set(append(slices.Clone(r.live), p)...)
		r.answered(step+": new replica "+p.name, 20, p)
		r.live[i] = p
		r.svc.set(r.live...)
		if !r.svc.waitIdle(old.name, time.After(wait)) {
			r.t.Fatalf("%s: %s never finished its requests", step, old.name)
		}
		old.stop(r.t)
	}
	r.answered(step+": after the corectl roll", 20, r.live...)
	r.phase.Store(step + " done")
}

// rollGateway re-reads the gateway's configuration at step n.
func (r *rig) rollGateway(step string, n int) {
	r.phase.Store(step + " gateway roll")
	h := r.h
	cf := strings.NewReplacer("{{ADDR}}", strings.TrimPrefix(h.Gateway, "http://"), "{{ADMIN}}", h.Admin, "{{KEY}}", h.KeyFile,
		"{{CREDENTIALS}}", h.CredFile, "{{FIXED_ENTRY}}", h.FixedEntry).Replace(r.caddyfile(r, n))
	if err := h.Reload(context.Background(), cf); err != nil {
		r.t.Fatalf("%s: gateway reload: %v", step, err)
	}
	r.answered(step+": after the gateway roll", 20, r.live...)
	r.phase.Store(step + " done")
}

// authorizerBlock is the shipped authorizer block (bearer_token_file) for
// the Service at front, its answers not reused (every data-plane request
// asks corectl), with a step number that makes each reload a new
// configuration.
func authorizerBlock(front, tokenFile string, step int) string {
	return fmt.Sprintf("authorizer http %s {\n\t\t\tbearer_token_file %s\n\t\t\tcache_ttl 1ns\n\t\t\theader X-Rotation-Step %d\n\t\t}", front, tokenFile, step)
}

// TestInternalTokenRotationWithProcesses follows docs/runbook.md "Internal
// token" with two bin/corectl replicas and bin/caddy's authorizer under
// continuous data-plane traffic: step 1 (token = old, new), step 2 (new,
// old), step 3 (new), each a roll of both programs. No data-plane request
// and no authorize request is refused; after each roll every new replica
// has answered the gateway. At the end the old token is refused, so the
// rotation did happen.
func TestInternalTokenRotationWithProcesses(t *testing.T) {
	const oldTok, newTok = "internal-token-old-0123456789abcdef0123456789", "internal-token-new-0123456789abcdef0123456789"
	keyFile := filepath.Join(t.TempDir(), "primary.key")
	writeFile(t, keyFile, "rotation-hmac-secret-0123456789abcdef0123456789")
	r := newRig(t, func(*rig) []string {
		return []string{"-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", keyFile}
	}, func(r *rig, step int) string {
		return strings.Replace(strings.Replace(harness.DefaultCaddyfile, "token_key primary HS256 {{KEY}}", "token_key primary HS256 "+keyFile, 1),
			"cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}}\n\t\t"+authorizerBlock(r.front, r.internal, step), 1)
	})
	writeFile(t, r.internal, oldTok+"\n")
	sb := r.create(600)
	r.startTraffic(func() sandbox { return sb })
	r.answered("before the rotation", 20, r.live...)

	// The runbook's steps, literally. In a cluster both Deployments roll
	// at once; here steps 1 and 3 roll corectl first, step 2 the gateway
	// first (each order is safe by the runbook's argument).
	writeFile(t, r.internal, oldTok+"\n"+newTok+"\n") // 1. token = old, new
	r.rollCorectl("step 1")
	r.rollGateway("step 1", 1)
	writeFile(t, r.internal, newTok+"\n"+oldTok+"\n") // 2. token = new, old
	r.rollGateway("step 2", 2)
	r.rollCorectl("step 2")
	writeFile(t, r.internal, newTok+"\n") // 3. token = new
	r.rollCorectl("step 3")
	r.rollGateway("step 3", 3)
	r.endTraffic()

	// The old token is retired: corectl refuses it now.
	for _, tok := range []string{oldTok, newTok} {
		req, _ := http.NewRequest("GET", "http://"+r.live[0].addr+"/internal/v1/authorize?credential=cred-a&sandbox="+sb.id, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := dataPlaneClient.Do(req)
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

// ed25519Pair writes a new Ed25519 key pair as openssl writes it (PKCS #8
// private key, SPKI public key) and returns the two files' contents.
func ed25519Pair(t *testing.T) (private, public string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})), string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki}))
}

// tokenPool is the envd access tokens the traffic uses: the sandbox's and
// those corectl's connect handed out since, the last 32 of them.
type tokenPool struct {
	mu     sync.Mutex
	tokens []sandbox
	next   int
}

func (p *tokenPool) add(sb sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens = append(p.tokens, sb)
	if len(p.tokens) > 32 {
		p.tokens = p.tokens[1:]
	}
}

func (p *tokenPool) reset(sb sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens = []sandbox{sb}
}

func (p *tokenPool) pick() sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	return p.tokens[p.next%len(p.tokens)]
}

// TestTokenKeyRotationWithProcesses follows docs/runbook.md "Token key"
// with an EdDSA pair, the gateway's two token_key lines (the current key
// and the rotation slot, as in deploy/portal/gateway/Caddyfile), two
// bin/corectl replicas signing, and data-plane traffic with the tokens
// corectl hands out (create, and connect calls throughout): step 1 adds
// the new public key to the slot, step 2 switches the gateway's key, the
// slot and corectl's signing key in one apply, step 3, once every token of
// the old key has expired, empties the slot. Every step rolls both
// programs. No request is refused; a token of the old key is accepted
// until step 3 and refused after it.
func TestTokenKeyRotationWithProcesses(t *testing.T) {
	keys := t.TempDir()
	gwKey, gwNext, signing := filepath.Join(keys, "key"), filepath.Join(keys, "next"), filepath.Join(keys, "signing.key")
	priv1, pub1 := ed25519Pair(t)
	priv2, pub2 := ed25519Pair(t)
	// The settings (sandgate-settings): SANDGATE_TOKEN_KID, _SLOT_KID,
	// _SLOT_FILE; out of a rotation the slot repeats "key".
	var mu sync.Mutex
	kid, slotKID, slotFile := "k1", "unused-slot", "key"
	settings := func() (string, string, string) { mu.Lock(); defer mu.Unlock(); return kid, slotKID, slotFile }
	set := func(k, sk, sf string) { mu.Lock(); defer mu.Unlock(); kid, slotKID, slotFile = k, sk, sf }
	writeFile(t, gwKey, pub1)
	writeFile(t, signing, priv1)
	r := newRig(t, func(*rig) []string {
		k, _, _ := settings()
		return []string{"-token-key-id", k, "-token-key-algorithm", "EdDSA", "-token-key-file", signing, "-max-timeout", "180s", "-token-grace", "1s"}
	}, func(r *rig, step int) string {
		k, sk, sf := settings()
		return strings.Replace(strings.Replace(harness.DefaultCaddyfile, "token_key primary HS256 {{KEY}}",
			fmt.Sprintf("token_key %s EdDSA %s\n\t\ttoken_key %s EdDSA %s", k, gwKey, sk, filepath.Join(keys, sf)), 1),
			"cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}}\n\t\t"+authorizerBlock(r.front, r.internal, step), 1)
	})
	// Traffic: the first sandbox's token, and the tokens connect hands
	// out, minted by whichever replica answers.
	first := r.create(60)
	pool := &tokenPool{}
	pool.add(first)
	r.startTraffic(pool.pick)
	connecting, stopConnect := context.WithCancel(context.Background())
	var connects sync.WaitGroup
	var current atomic.Value
	current.Store(first.id)
	connects.Add(1)
	go func() {
		defer connects.Done()
		for connecting.Err() == nil {
			id := current.Load().(string)
			var got struct{ EnvdAccessToken string }
			req, _ := http.NewRequestWithContext(connecting, "POST", r.front+"/sandboxes/"+id+"/connect", strings.NewReader(`{"timeout":60}`))
			req.Header.Set("X-API-Key", "key-a")
			resp, err := http.DefaultClient.Do(req)
			if connecting.Err() != nil {
				return
			}
			if err != nil {
				t.Errorf("connect: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &got) != nil {
				t.Errorf("connect = %d %s", resp.StatusCode, b)
				return
			}
			pool.add(sandbox{id, got.EnvdAccessToken})
		}
	}()
	t.Cleanup(func() { stopConnect(); connects.Wait() })
	r.answered("before the rotation", 20, r.live...)

	// 1. The new public key as the file next, in the slot.
	writeFile(t, gwNext, pub2)
	set("k1", "k2", "next")
	r.rollGateway("step 1", 1)
	r.rollCorectl("step 1")
	// 2. In one apply: key = new public key, next = old; corectl signs
	// with the new private key under k2; the slot holds k1.
	writeFile(t, gwKey, pub2)
	writeFile(t, gwNext, pub1)
	writeFile(t, signing, priv2)
	set("k2", "k1", "next")
	r.rollCorectl("step 2")
	r.rollGateway("step 2", 2)

	// From here new sandboxes and tokens are of k2. A token of the old
	// key for the new sandbox (as a replica not yet rolled would sign)
	// is still accepted.
	// Its end may move to 180 s after its start (-max-timeout), far
	// beyond step 3, which begins about 60 s from here, however long the
	// rolls take; with a cap of 60 s it could end during step 3's rolls.
	second := r.create(60)
	// The fixed entry stand-in learns the new sandbox from its own watch.
	if err := kwait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, wait, true, func(ctx context.Context) (bool, error) {
		code, _, err := r.dataPlane(ctx, second)
		return err == nil && code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the second sandbox never answered: %v", err)
	}
	current.Store(second.id)
	oldKeyFile := filepath.Join(t.TempDir(), "old-signing.key")
	writeFile(t, oldKeyFile, priv1)
	old, err := token.LoadSigningKey("k1", "EdDSA", oldKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	oldTok, err := old.Mint(token.Target{CredentialID: "cred-a", SandboxID: second.id, Port: 49983}, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := r.dataPlane(context.Background(), sandbox{second.id, oldTok}); err != nil || code != http.StatusOK {
		t.Fatalf("a token of the old key before step 3: %d %s %v", code, body, err)
	}

	// 3. Wait until every token of the old key has expired (the first
	// sandbox's: its end, at most -max-timeout after its start, plus
	// -token-grace): the traffic moves to the new sandbox, as clients of
	// an ended sandbox do, and the test waits for that time.
	pool.reset(second)
	var info struct{ EndAt time.Time }
	if st := r.api("GET", "/sandboxes/"+first.id, "", &info); st != http.StatusOK {
		t.Fatalf("GET the first sandbox = %d", st)
	}
	<-time.After(time.Until(info.EndAt.Add(time.Second)))
	set("k2", "unused-slot", "key")
	if err := os.Remove(gwNext); err != nil {
		t.Fatal(err)
	}
	r.rollGateway("step 3", 3)
	r.rollCorectl("step 3")
	stopConnect()
	connects.Wait()
	r.endTraffic()

	if code, _, err := r.dataPlane(context.Background(), sandbox{second.id, oldTok}); err != nil || code == http.StatusOK {
		t.Errorf("a token of the old key after step 3: %d %v, want refused", code, err)
	}
}

// nodeAPIGateway is one gateway replica serving the internal node API.
type nodeAPIGateway struct {
	proc *gatewayproc.Process
	stop func() // proc.Stop, once (a second Stop would wait for ever)
	url  string
	log  *bytes.Buffer
	// inUse is read-held by each client request to this gateway, from
	// its choice to its answer: the roll takes it before stopping the
	// gateway, as the Service stops sending to a pod before the kubelet
	// signals it.
	inUse sync.RWMutex
}

// TestNodeAPITokenRotationWithProcesses follows docs/runbook.md "Internal
// node API token" with bin/caddy replicas (each roll starts a new process
// with the new settings, moves the clients' traffic to it once it listens
// and stops the old one) and clients calling the internal node API
// (GET /internal/v1/sandbox-nodes) the whole time: step 1 puts the new
// token's digest in the slot, step 2 switches every client to the new
// token, step 3 moves the new digest to the current one and resets the
// slot to 64 f's. No request is refused; the old token is refused at the
// end, and neither token appears in a gateway's log.
func TestNodeAPITokenRotationWithProcesses(t *testing.T) {
	root := repoRoot(t)
	caddy := filepath.Join(root, "bin", "caddy")
	dir := t.TempDir()
	const oldTok, newTok = "node-api-token-old-0123456789abcdef0123456789", "node-api-token-new-0123456789abcdef0123456789"
	digest := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	none := strings.Repeat("f", 64)
	key := filepath.Join(dir, "k1.key")
	writeFile(t, key, "node-api-rotation-hmac-secret-0123456789abcdef")
	creds := filepath.Join(dir, "credentials.yaml")
	writeFile(t, creds, "credentials: []\n")
	var gens int
	var all []*nodeAPIGateway
	start := func(current, slot string) *nodeAPIGateway {
		gens++
		gdir := filepath.Join(dir, fmt.Sprintf("gateway-%d", gens))
		if err := os.MkdirAll(gdir, 0o700); err != nil {
			t.Fatal(err)
		}
		admin, err := freeport.Port()
		if err != nil {
			t.Fatal(err)
		}
		port, err := freeport.Port()
		if err != nil {
			t.Fatal(err)
		}
		cf := fmt.Sprintf(`{
	admin 127.0.0.1:%s
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key k1 HS256 %s
		credentials file %s
		nodes {
			state_dir %s
		}
	}
}

http://127.0.0.1:%s {
	sandbox_node_api {
		token_sha256 %s
		token_sha256 %s
	}
}
`, admin, key, creds, filepath.Join(gdir, "state"), port, current, slot)
		g := &nodeAPIGateway{url: "http://127.0.0.1:" + port, log: &bytes.Buffer{}}
		g.proc, err = gatewayproc.Start(caddy, gdir, cf, g.log)
		if err != nil {
			t.Fatal(err)
		}
		g.stop = sync.OnceFunc(g.proc.Stop)
		t.Cleanup(g.stop)
		if err := g.proc.WaitListening("127.0.0.1:" + port); err != nil {
			t.Fatalf("gateway %d: %v\n%s", gens, err, g.log)
		}
		all = append(all, g)
		return g
	}

	// The clients: GET the node list from the live gateways in turn, with
	// the token they hold.
	var mu sync.Mutex
	live := []*nodeAPIGateway{start(digest(oldTok), none)}
	clientToken := oldTok
	phase := "start"
	var next int
	var sent, refused atomic.Int64
	var refusals sync.Map
	ask := func(ctx context.Context, g *nodeAPIGateway, tok string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", g.url+"/internal/v1/sandbox-nodes", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := dataPlaneClient.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	ctx, stop := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	// served counts the answers of each gateway, to wait for traffic.
	served := map[*nodeAPIGateway]int{}
	changed := make(chan struct{})
	for range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for ctx.Err() == nil {
				mu.Lock()
				g, tok, ph := live[next%len(live)], clientToken, phase
				next++
				g.inUse.RLock()
				mu.Unlock()
				code, err := ask(ctx, g, tok)
				g.inUse.RUnlock()
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil || code != http.StatusOK {
					refused.Add(1)
					refusals.Store(fmt.Sprintf("%s: %d %v", ph, code, err), true)
					continue
				}
				mu.Lock()
				served[g]++
				close(changed)
				changed = make(chan struct{})
				mu.Unlock()
			}
		}()
	}
	defer func() { stop(); clients.Wait() }()
	// answered waits until g has answered n more requests.
	answered := func(g *nodeAPIGateway, n int) {
		t.Helper()
		mu.Lock()
		want := served[g] + n
		mu.Unlock()
		deadline := time.After(wait)
		for {
			mu.Lock()
			got, ch := served[g], changed
			mu.Unlock()
			if got >= want {
				return
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("the gateway answered %d requests", got-want+n)
			}
		}
	}
	// roll replaces the gateway with one of the new settings: it joins
	// once it listens and has answered, then the old one stops.
	roll := func(step, current, slot string) {
		mu.Lock()
		phase = step + " gateway roll"
		old := live[0]
		mu.Unlock()
		g := start(current, slot)
		mu.Lock()
		live = []*nodeAPIGateway{old, g}
		mu.Unlock()
		answered(g, 20)
		mu.Lock()
		live = []*nodeAPIGateway{g}
		mu.Unlock()
		old.inUse.Lock() // no request to it is left
		old.stop()
		answered(g, 20)
		mu.Lock()
		phase = step + " done"
		mu.Unlock()
	}
	answered(live[0], 20)

	roll("step 1", digest(oldTok), digest(newTok)) // 1. the slot: the new digest
	mu.Lock()                                      // 2. every client switches to the new token
	clientToken, phase = newTok, "step 2"
	g := live[0]
	mu.Unlock()
	answered(g, 20)
	roll("step 3", digest(newTok), none) // 3. the new digest current, the slot 64 f's

	stop()
	clients.Wait()
	if n := refused.Load(); n != 0 {
		var kinds []string
		refusals.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
		t.Errorf("%d of %d node API requests refused during the rotation: %v", n, sent.Load(), kinds)
	}
	t.Logf("%d node API requests, none refused", sent.Load())
	mu.Lock()
	g = live[0]
	mu.Unlock()
	if code, err := ask(context.Background(), g, oldTok); err != nil || code != http.StatusUnauthorized {
		t.Errorf("the old token after the rotation: %d %v, want 401", code, err)
	}
	for i, g := range all {
		if s := g.log.String(); strings.Contains(s, oldTok) || strings.Contains(s, newTok) {
			t.Errorf("gateway %d's log contains a node API token", i+1)
		}
	}
}
