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
// relay (fixed_entry_probe) that the corectl replicas use. The API keys:
// the same rig, keys.yaml in a Secret-volume layout, control-API clients
// (and the E2B JS SDK) through corectl's Service. The peer token: bin/caddy
// replicas sharing node presence through Leases (package
// integration/replicas), simulated nodes, forwarded node API calls. A node
// credential: bin/caddy and three bin/nodeagent processes on the real
// Docker engine (DOCKER_HOST), the node's record and credential file
// edited in the runbook's steps.
// The execd token secret: the same rig with an execd per sandbox started
// with the token corectl gave it (the real OpenSandbox execd when
// hack/peers/build.sh's cache has it). The kubeconfigs: the corectl
// replicas reach the real apiserver with ServiceAccount tokens, rolled
// from one to another and the old one revoked.
// Requests run the whole time; none may be refused. One file per secret;
// this one holds the shared rig.
package rotation

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
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
	// probe is the probe listener's address ("" without -probe-listen).
	probe string
	log   string
	done  chan error
}

// startCorectl runs bin/corectl with args and waits for its "corectl
// serving" line, which names the API address and the probe listener's.
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
	case s := <-harness.CorectlServingAddrs(pr):
		p.addr, p.probe = s.Addr, s.ProbeAddr
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
	// inFlight counts each replica's requests from its choice to its
	// answer; finished is closed and replaced at each answer.
	inFlight map[string]int
	finished chan struct{}
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

// drained waits until replica name has no request in flight (after set
// left it out: the Service stops sending to a pod before the kubelet
// signals it); false when deadline passed first.
func (s *service) drained(name string, deadline <-chan time.Time) bool {
	for {
		s.mu.Lock()
		n, ch := s.inFlight[name], s.finished
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
	s.inFlight[p.name]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight[p.name]--
		close(s.finished)
		s.finished = make(chan struct{})
		s.mu.Unlock()
	}()
	u, _ := url.Parse("http://" + p.addr)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = replicaTransport
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
	// keys is corectl's Secret corectl-api-keys (keys.yaml), mounted as
	// the kubelet mounts it; apiKey is the key the rig's calls present
	// (oldAPIKey at start).
	keys   *secretVolume
	apiKey atomic.Value
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

// key returns the API key the rig's calls present.
func (r *rig) key() string { return r.apiKey.Load().(string) }

// oldAPIKey is the rig's API key at start, for credential cred-a.
const oldAPIKey = "e2b_rotation_key_old_0123456789abcdef0123456789"

// keysFile is a keys.yaml (corectl's -api-keys) with an entry for each
// key, all for credential cred-a.
func keysFile(keys ...string) string {
	var b strings.Builder
	b.WriteString("keys:\n")
	for i, k := range keys {
		fmt.Fprintf(&b, "  - {name: key-%d, sha256: %s, credentialId: cred-a}\n", i, apikey.Digest(k))
	}
	return b.String()
}

// secretVolume is a directory laid out as the kubelet mounts a Secret:
// each file a symlink to ..data/<name>, ..data a symlink to a directory of
// the current version, and an update swaps ..data at once (a new
// directory, a new link renamed over ..data, the old directory removed).
type secretVolume struct {
	t   *testing.T
	dir string
	gen int
}

// newSecretVolume creates the volume in dir with files (name → content).
func newSecretVolume(t *testing.T, dir string, files map[string]string) *secretVolume {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	v := &secretVolume{t: t, dir: dir}
	v.update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), v.path(name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// path is the path of file name in the volume.
func (v *secretVolume) path(name string) string { return filepath.Join(v.dir, name) }

// update replaces the volume's content with files (the same names).
func (v *secretVolume) update(files map[string]string) {
	t := v.t
	t.Helper()
	v.gen++
	version := fmt.Sprintf("..%d", v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, version), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(v.dir, version, name), []byte(content), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if v.gen > 1 {
		if err := os.RemoveAll(filepath.Join(v.dir, fmt.Sprintf("..%d", v.gen-1))); err != nil {
			t.Fatal(err)
		}
	}
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
	r.apiKey.Store(oldAPIKey)
	r.keys = newSecretVolume(t, filepath.Join(r.dir, "corectl-api-keys"), map[string]string{"keys.yaml": keysFile(oldAPIKey)})
	keys := r.keys.path("keys.yaml")
	kubeconfig := r.file("kubeconfig", string(env.KubeConfig))
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
	r.svc = &service{served: map[string]int{}, changed: make(chan struct{}), inFlight: map[string]int{}, finished: make(chan struct{})}
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
		KeyID: "harness", FixedEntryListener: feLn, Stderr: gwLog})
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
	// The replica picks its probe port and binds it at start; its serving
	// line names it.
	args := append(append(slices.Clone(r.args), "-probe-listen", "127.0.0.1:0"), r.extra(r)...)
	p := startCorectl(t, r.root, fmt.Sprintf("corectl-%d", r.gen), args...)
	r.all = append(r.all, p)
	if err := p.waitReady(p.probe, time.Now().Add(wait)); err != nil {
		t.Fatalf("%s never became ready: %v\n%s", p.name, err, p.notReady(p.probe))
	}
	return p
}

// waitReady waits until the replica's /readyz (probe is its probe
// listener) answers 200; the error says the replica exited first
// (its exit status), or that deadline passed. Each request ends at
// deadline too: corectl binds the probe listener at start but serves it
// only once the gateway's probe relay has confirmed the clusters, so
// until then a request gets no answer, and a replica whose relay check
// fails exits instead.
func (p *corectlProc) waitReady(probe string, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return kwait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.done:
			p.done <- err
			return false, fmt.Errorf("%s exited (%v) before its /readyz answered 200", p.name, err)
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probe+"/readyz", nil)
		resp, err := testClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// notReady says why the replica whose probe listener is probe is not
// ready, for a test's failure message: its /readyz?verbose answer (each
// check's status) and the last 4 KiB of its log.
func (p *corectlProc) notReady(probe string) string {
	var b strings.Builder
	// Bounded: a replica still waiting for the probe relay has bound its
	// probe listener but serves nothing on it.
	hc := &http.Client{Timeout: 10 * time.Second}
	if resp, err := hc.Get("http://" + probe + "/readyz?verbose"); err != nil {
		fmt.Fprintf(&b, "/readyz?verbose: %v\n", err)
	} else {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
		resp.Body.Close()
		fmt.Fprintf(&b, "/readyz?verbose: %d\n%s\n", resp.StatusCode, body)
	}
	if log, err := os.ReadFile(p.log); err == nil {
		if len(log) > 4<<10 {
			log = log[len(log)-4<<10:]
		}
		fmt.Fprintf(&b, "the end of %s's log:\n%s", p.name, log)
	}
	return b.String()
}

// api calls corectl's API through its Service with the rig's API key.
func (r *rig) api(method, path, body string, out any) int {
	r.t.Helper()
	req, _ := http.NewRequest(method, r.front+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", r.key())
	resp, err := testClient.Do(req)
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

var dataPlaneClient = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}

// replicaTransport carries the Service's requests to the corectl
// replicas: kept-alive connections, enough for every client at once (a
// new connection per request would use up the machine's ephemeral ports
// in a long run). A replica leaves the Service before it stops, so no
// request is sent on its connections as they close.
var replicaTransport = &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: time.Minute}

// keepAliveClient is for the test's own calls to servers that do not
// restart under them (corectl's Service, a replica still in the clients'
// set): kept-alive connections, as replicaTransport.
var keepAliveClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: time.Minute}}

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
// Service once ready and answers before the old one leaves, and the old
// one stops once the requests the Service sent it are answered.
func (r *rig) rollCorectl(step string) {
	r.phase.Store(step + " corectl roll")
	for i, old := range r.live {
		p := r.replica()
		r.svc.set(append(slices.Clone(r.live), p)...)
		r.answered(step+": new replica "+p.name, 20, p)
		r.live[i] = p
		r.svc.set(r.live...)
		if !r.svc.drained(old.name, time.After(wait)) {
			r.t.Fatalf("%s: requests to %s still in flight after %s", step, old.name, wait)
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

// randomToken returns 32 random bytes in hex, a token as docs/runbook.md
// tells an operator to make one (openssl rand -hex 32).
func randomToken(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// sha256Hex is a token's digest as the Caddyfile and the records name it
// (printf %s "$TOKEN" | sha256sum).
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestReplicaExitEndsReadinessWait: a replica that exits before it is
// ready ends the rig's wait for its readiness with its exit, not after the
// rig's 2-minute bound. The bin/corectl here prints "corectl serving",
// binds its probe listener, and then waits for the gateway's probe relay,
// which nothing serves: past -probe-relay-wait it exits 1, having served
// no probe (so each /readyz request of the wait got no answer while it
// waited).
func TestReplicaExitEndsReadinessWait(t *testing.T) {
	root, dir := repoRoot(t), t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, content)
		return p
	}
	ns := env.Namespace(t)
	c := kubetest.Cluster("cluster-a", env.Namespace(t))
	c.Kubeconfig = file("kubeconfig", string(env.KubeConfig))
	cfgJSON, err := json.Marshal(cluster.Config{Clusters: []cluster.Cluster{*c},
		Templates: cluster.TemplateStore{ClusterID: "cluster-a", Namespace: env.Namespace(t)}, SandboxTemplates: kubetest.SandboxTemplates()})
	if err != nil {
		t.Fatal(err)
	}
	relay, held, err := freeport.Refusing() // the relay refuses connections
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	p := startCorectl(t, root, "corectl-no-relay", "-config", file("clusters.json", string(cfgJSON)),
		"-credentials", file("credentials.yaml", fmt.Sprintf("credentials:\n  - {id: cred-a, enabled: true, projectNamespace: %s, clusterId: cluster-a}\n", ns)),
		"-api-keys", file("keys.yaml", keysFile(oldAPIKey)), "-listen", "127.0.0.1:0", "-leader-election-namespace", env.Namespace(t),
		"-probe-listen", "127.0.0.1:0", "-probe-relay-url", "http://"+relay, "-probe-relay-token-file", file("relay.token", randomToken(t)+"\n"),
		"-probe-relay-wait", "1s")
	err = p.waitReady(p.probe, time.Now().Add(wait))
	if err == nil || !strings.Contains(err.Error(), "corectl-no-relay exited (exit status 1)") {
		t.Fatalf("the wait for a replica that exits = %v, want its exit", err)
	}
	if why := p.notReady(p.probe); !strings.Contains(why, "the gateway's probe relay") {
		t.Fatalf("the replica's log does not say why it exited:\n%s", why)
	}
}
