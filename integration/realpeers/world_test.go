package realpeers_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/deploy"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/internal/kubeenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// probeIP is an address of cluster-a's Pod network execd's readiness
	// is checked on (execd answers on every Pod IP of both clusters).
	probeIP = "10.77.0.254"
	// kwokNode is the one node each cluster's kwok plays; the sandbox
	// template's pods name it (there is no scheduler).
	kwokNode = "kwok-node-0"
	// apiKey is the API key of the credential the SDKs use (cluster-a);
	// connectAPIKey the same credential's key that sdk.mjs's connect()
	// sends (its per-sandbox scenarios); apiKeyB a credential of
	// cluster-b.
	apiKey        = "key-peers"
	connectAPIKey = "e2b_sandgate_test"
	apiKeyB       = "key-peers-b"
)

// compute is one compute cluster of the chain: a control plane with the
// real controller, kwok and the Ingress.
type compute struct {
	// id is the cluster's ID in corectl's configuration, the credentials
	// and the gateway's Caddyfile; credential the credential bound to it.
	id, credential string
	// cidr is kwok's Pod network, podPrefix its addresses' start
	// ("10.77.0."), loopback the address of it the namespace's loopback
	// carries (the loopback then answers for all of it).
	cidr, podPrefix, loopback string
	kube                      *kubeenv.Env
	client                    client.Client
	kubeconfig                string
	// namespace is the credential's project namespace (the sandboxes'),
	// ingressNS the managed Ingresses'.
	namespace, ingressNS string
	// ingress is the OpenSandbox Ingress's URL (the cluster's fixed
	// entry), ingressLog its log file.
	ingress, ingressLog string
}

// newCompute describes cluster id with Pod network 10.77.<n>.0/24.
func newCompute(id, credential string, n int) *compute {
	prefix := fmt.Sprintf("10.77.%d.", n)
	return &compute{id: id, credential: credential, cidr: prefix + "0/24", podPrefix: prefix, loopback: prefix + "254",
		namespace: "sandboxes", ingressNS: "sandbox-ingress"}
}

// world is the chain the tests share: two compute clusters, a and b
// (each a control plane with the real controller, kwok and the Ingress),
// and one corectl and the gateways serving both. execd is started per
// test (one version at a time: it listens on every Pod IP of both).
type world struct {
	// bin is hack/peers/build.sh's directory.
	bin string
	// root is the repository root; dir a scratch directory.
	root, dir string
	a, b      *compute
	// api is corectl's URL; internalFile the file holding the bearer
	// token of its /internal/v1/authorize route (the sandbox authorizer of
	// the E2B_DOMAIN gateway).
	api, internalFile string
	// gateway is the data plane in the six-operation mode; extended is
	// a second one, with extended_operations, on the same key and
	// credentials.
	gateway, extended *harness.Env
	// caddyfile is gateway's configuration, for a test that starts a
	// gateway of its own beside it.
	caddyfile string
	procs     []*proc
	// stopGC ends the garbage collectors (collectGarbage) of both
	// clusters; gcDone holds one channel per collector, closed when it
	// has ended.
	gcCtx  context.Context
	stopGC context.CancelFunc
	gcDone []chan struct{}
}

// startWorld starts the chain from the programs in bin; on error what was
// started is stopped again.
func startWorld(bin string) (_ *world, err error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	w := &world{bin: bin, root: root}
	defer func() {
		if err != nil {
			w.stop()
		}
	}()
	for _, need := range []string{"execd-head", "execd-v1.0.18", "opensandbox-controller", "opensandbox-ingress", "kwok"} {
		if _, err := os.Stat(filepath.Join(bin, need)); err != nil {
			return nil, fmt.Errorf("%s is incomplete (%w): run hack/peers/build.sh again", bin, err)
		}
	}
	for _, need := range []string{harness.CaddyBinary(root), filepath.Join(root, "bin", "corectl")} {
		if _, err := os.Stat(need); err != nil {
			return nil, fmt.Errorf("%s is missing (%w): run make build", need, err)
		}
	}
	if w.dir, err = os.MkdirTemp("", "sandgate-realpeers-"); err != nil {
		return nil, err
	}
	w.a, w.b = newCompute("cluster-a", "cred-peers", 0), newCompute("cluster-b", "cred-peers-b", 1)
	// The namespace's loopback: 127.0.0.1 and both Pod networks. The
	// default route, also to the loopback, is for kube-apiserver, which
	// refuses to start without one (it picks its advertised address from
	// it: 10.77.0.254); nothing leaves the namespace by it.
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", w.a.loopback + "/24", "dev", "lo"},
		{"addr", "add", w.b.loopback + "/24", "dev", "lo"}, {"route", "add", "default", "dev", "lo"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// execd listens on a fixed port, 44772, on every address: reserved
	// in this namespace, so no connection made here (kube-apiserver's to
	// etcd, the tests' own) is given it as its local port, which fails
	// execd's listen (EADDRINUSE) for as long as that connection lasts: a
	// whole run once, every test's execd "address already in use".
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_reserved_ports", []byte("44772\n"), 0o644); err != nil {
		return nil, fmt.Errorf("reserve execd's port in the namespace: %w", err)
	}
	for _, c := range []*compute{w.a, w.b} {
		if err := w.startControlPlane(c); err != nil {
			return nil, err
		}
		if err := w.startOpenSandbox(c); err != nil {
			return nil, err
		}
	}
	if err := w.startSandgate(); err != nil {
		return nil, err
	}
	return w, nil
}

// startControlPlane starts c's kube-apiserver and etcd with OpenSandbox's
// CRDs (from the archive) and corectl's, and creates the kwok node and the
// namespaces.
func (w *world) startControlPlane(c *compute) error {
	crds, err := deploy.CRDs()
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(w.bin, "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no OpenSandbox CRDs in %s/crd (%v)", w.bin, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd, err := deploy.DecodeCRD(data)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		crds = append(crds, crd)
	}
	scheme, err := cluster.NewScheme()
	if err != nil {
		return err
	}
	if c.kube, err = kubeenv.Start(crds, scheme); err != nil {
		return fmt.Errorf("%s: %w", c.id, err)
	}
	c.kubeconfig = filepath.Join(w.dir, c.id+".kubeconfig")
	if err := os.WriteFile(c.kubeconfig, c.kube.KubeConfig, 0o600); err != nil {
		return err
	}
	if c.client, err = client.New(c.kube.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kwokNode,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		Labels:      map[string]string{"kubernetes.io/hostname": kwokNode, "type": "kwok"}}}
	if err := c.client.Create(ctx, node); err != nil {
		return fmt.Errorf("create node %s: %w", kwokNode, err)
	}
	for _, ns := range []string{c.namespace, c.ingressNS, "templates"} {
		if err := c.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	// No controller-manager: the ServiceAccount admission needs the
	// namespace's default account to exist before a Pod is admitted.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: c.namespace}}
	if err := c.client.Create(ctx, sa); err != nil {
		return fmt.Errorf("create service account: %w", err)
	}
	return nil
}

// startOpenSandbox starts c's kwok, OpenSandbox controller and Ingress in
// URI mode, and waits until each answers.
func (w *world) startOpenSandbox(c *compute) error {
	stages, err := filepath.Glob(filepath.Join(w.bin, "kwok-stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("no kwok stages in %s/kwok-stages (%v)", w.bin, err)
	}
	kwokAddr, err := freeport.Addr()
	if err != nil {
		return err
	}
	args := []string{"--kubeconfig", c.kubeconfig, "--manage-all-nodes=true", "--cidr", c.cidr,
		"--node-ip", c.loopback, "--server-address", kwokAddr}
	for _, s := range stages {
		args = append(args, "-c", s)
	}
	kwok, err := w.start(c.id+"-kwok", filepath.Join(w.bin, "kwok"), nil, args...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// kwok marks its node Ready.
	if err := poll(ctx, "kwok to mark node "+kwokNode+" Ready", func() error {
		if err := kwok.exited(); err != nil {
			return err
		}
		var n corev1.Node
		if err := c.client.Get(ctx, client.ObjectKey{Name: kwokNode}, &n); err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("not Ready yet")
	}); err != nil {
		return w.withLogs(err)
	}

	probe, err := freeport.Addr()
	if err != nil {
		return err
	}
	if w.stopGC == nil {
		var gcCtx context.Context
		gcCtx, w.stopGC = context.WithCancel(context.Background())
		w.gcCtx = gcCtx
	}
	done := make(chan struct{})
	w.gcDone = append(w.gcDone, done)
	go collectGarbage(w.gcCtx, c, done)

	ctl, err := w.start(c.id+"-controller", filepath.Join(w.bin, "opensandbox-controller"), nil, "--kubeconfig", c.kubeconfig,
		"--health-probe-bind-address", probe, "--metrics-bind-address", "0", "--leader-elect=false")
	if err != nil {
		return err
	}
	if err := poll(ctx, "the OpenSandbox controller's /readyz", func() error {
		if err := ctl.exited(); err != nil {
			return err
		}
		return httpOK("http://" + probe + "/readyz")
	}); err != nil {
		return w.withLogs(err)
	}

	port, err := freeport.Port()
	if err != nil {
		return err
	}
	// The Ingress reads its kubeconfig from $KUBECONFIG (it has no flag).
	ing, err := w.start(c.id+"-ingress", filepath.Join(w.bin, "opensandbox-ingress"), []string{"KUBECONFIG=" + c.kubeconfig},
		"--mode", "uri", "--port", port)
	if err != nil {
		return err
	}
	c.ingress, c.ingressLog = "http://127.0.0.1:"+port, ing.log
	if err := poll(ctx, "the OpenSandbox Ingress to listen", func() error {
		if err := ing.exited(); err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		return w.withLogs(err)
	}
	return nil
}

// startSandgate starts the gateways (bin/caddy, through the integration
// harness, each cluster's fixed entry its real Ingress) and bin/corectl,
// serving both clusters.
func (w *world) startSandgate() (err error) {
	creds := "credentials:\n"
	for _, c := range []*compute{w.a, w.b} {
		creds += fmt.Sprintf("  - {id: %s, enabled: true, projectNamespace: %s, clusterId: %s}\n", c.credential, c.namespace, c.id)
	}
	// token_target: the Python SDK 2.24's Sandbox.connect() sends no
	// routing headers; the target then comes from the verified token
	// (docs/wire-facts.md §E1.2).
	caddyfile := strings.NewReplacer("cluster cluster-a {{FIXED_ENTRY}}\n",
		"cluster "+w.a.id+" "+w.a.ingress+"\n\t\tcluster "+w.b.id+" "+w.b.ingress+"\n",
		"e2b_dataplane {\n", "e2b_dataplane {\n\t\ttoken_target\n").Replace(harness.DefaultCaddyfile)
	if !strings.Contains(caddyfile, "token_target") || !strings.Contains(caddyfile, w.b.ingress) {
		return errors.New("the harness's Caddyfile has no cluster-a line or e2b_dataplane block to change")
	}
	w.caddyfile = caddyfile
	if w.gateway, err = harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: caddyfile, Credentials: creds}); err != nil {
		return fmt.Errorf("the gateway: %w", err)
	}
	extended := strings.Replace(caddyfile, "\t\ttoken_target\n", "\t\ttoken_target\n\t\textended_operations\n", 1)
	if w.extended, err = harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: extended, CredentialsFile: w.gateway.CredFile,
		KeyFile: w.gateway.KeyFile, KeyID: "primary"}); err != nil {
		return fmt.Errorf("the gateway with extended_operations: %w", err)
	}
	var clusters []cluster.Cluster
	for _, c := range []*compute{w.a, w.b} {
		cc := kubetest.Cluster(c.id, c.ingressNS)
		cc.Kubeconfig, cc.FixedEntry = c.kubeconfig, c.ingress
		if c == w.a {
			// corectl answers domain for cluster-a's sandboxes: getHost
			// names <port>-<id>.sbx.test. The SDKs given a sandbox URL
			// keep using it for envd.
			cc.Domain = testDomain
		}
		clusters = append(clusters, *cc)
	}
	templates := kubetest.SandboxTemplates()
	for i := range templates {
		templates[i].Pod.NodeName = kwokNode
	}
	cfg, err := json.Marshal(cluster.Config{Clusters: clusters,
		Templates: cluster.TemplateStore{ClusterID: w.a.id, Namespace: "templates"}, SandboxTemplates: templates})
	if err != nil {
		return err
	}
	files := map[string]string{
		"clusters.json": string(cfg),
		"keys.yaml": "keys:\n  - {name: peers, sha256: " + apikey.Digest(apiKey) + ", credentialId: cred-peers}\n" +
			"  - {name: sdk-connect, sha256: " + apikey.Digest(connectAPIKey) + ", credentialId: cred-peers}\n" +
			"  - {name: peers-b, sha256: " + apikey.Digest(apiKeyB) + ", credentialId: " + w.b.credential + "}\n",
	}
	w.internalFile = filepath.Join(w.dir, "corectl-internal")
	files["corectl-internal"] = "internal-" + rand.Text()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(w.dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	p, err := w.start("corectl", filepath.Join(w.root, "bin", "corectl"), nil,
		"-config", filepath.Join(w.dir, "clusters.json"), "-credentials", w.gateway.CredFile,
		"-api-keys", filepath.Join(w.dir, "keys.yaml"), "-listen", "127.0.0.1:0", "-leader-elect=false",
		"-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", w.gateway.KeyFile, "-ready-budget", "60s",
		"-internal-token-file", w.internalFile)
	if err != nil {
		return err
	}
	log, err := os.Open(p.log)
	if err != nil {
		return err
	}
	defer log.Close()
	addr := harness.CorectlServingAddr(&followReader{f: log, done: p.done})
	select {
	case a := <-addr:
		w.api = "http://" + a
		return nil
	case <-time.After(90 * time.Second):
		return w.withLogs(errors.New("bin/corectl did not serve within 90 s"))
	}
}

// stop stops everything startWorld started, in reverse order.
func (w *world) stop() {
	if w.stopGC != nil {
		w.stopGC()
		for _, d := range w.gcDone {
			<-d
		}
	}
	for i := len(w.procs) - 1; i >= 0; i-- {
		w.procs[i].stop()
	}
	for _, g := range []*harness.Env{w.extended, w.gateway} {
		if g != nil {
			g.Close()
		}
	}
	for _, c := range []*compute{w.b, w.a} {
		if c != nil && c.kube != nil {
			if err := c.kube.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "realpeers: stop the control plane of", c.id+":", err)
			}
		}
	}
	if w.dir != "" {
		_ = os.RemoveAll(w.dir)
	}
}

// withLogs returns err with the end of every started program's log.
func (w *world) withLogs(err error) error {
	var b strings.Builder
	for _, p := range w.procs {
		fmt.Fprintf(&b, "\n--- %s (%s) ---\n%s", p.name, p.log, p.tail(4096))
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// proc is a program the test started; its output goes to log.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
	// group: the program runs in a process group of its own, and stop
	// signals the whole group (unshare --fork ignores SIGTERM and waits
	// for its child).
	group bool
}

// start starts path with args (env added to the test's environment), its
// output to <dir>/<name>.log, killed if the test process dies.
func (w *world) start(name, path string, env []string, args ...string) (*proc, error) {
	return w.startProc(&proc{name: name, cmd: exec.Command(path, args...)}, env)
}

// startProc starts p.cmd as start does, in a process group of its own when
// p.group.
func (w *world) startProc(p *proc, env []string) (*proc, error) {
	p.log, p.done = filepath.Join(w.dir, p.name+".log"), make(chan struct{})
	name := p.name
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Dir = w.dir
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: p.group}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.done) }()
	w.procs = append(w.procs, p)
	return p, nil
}

// exited returns an error when p has ended (it was expected to run),
// else nil.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.name, p.err)
	default:
		return nil
	}
}

// stop ends p: SIGTERM, then SIGKILL after 15 s.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	pid := p.cmd.Process.Pid
	if p.group {
		pid = -pid
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail returns the last n bytes of p's log.
func (p *proc) tail(n int64) string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return string(b)
}

// followReader reads a log file that is still being written, like
// `tail -f`, until the writing process ends (done closed) and the file's
// end is reached.
type followReader struct {
	f    *os.File
	done <-chan struct{}
}

func (r *followReader) Read(b []byte) (int, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := r.f.Read(b)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		select {
		case <-r.done:
			n, err := r.f.Read(b)
			if n == 0 && err == nil {
				err = io.EOF
			}
			return n, err
		case <-tick.C:
		}
	}
}

// poll calls cond every 50 ms until it returns nil; when ctx ends first it
// returns an error naming what and cond's last error.
func poll(ctx context.Context, what string, cond func() error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// httpOK returns nil when GET url answers 200.
func httpOK(url string) error { return execdPingWithToken(url, "") }

// execdPingWithToken is httpOK for an execd that requires access token
// tok (none when empty).
func execdPingWithToken(url, tok string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if tok != "" {
		req.Header.Set("X-EXECD-ACCESS-TOKEN", tok)
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// startExecd starts the execd build version ("head" or "v1.0.18") in the
// network namespace, listening on :44772 (every Pod IP), in a mount and
// PID namespace of its own with tmpfs on /home (with /home/user) and /tmp; it
// waits until execd answers /ping on a Pod IP and stops it when t ends.
func (w *world) startExecd(t *testing.T, version string) {
	t.Helper()
	w.startExecdArgs(t, version)
}

// startExecdArgs is startExecd with more arguments for execd (e.g.
// --access-token).
func (w *world) startExecdArgs(t *testing.T, version string, args ...string) {
	t.Helper()
	script := `set -e; mount -t tmpfs sandgate-home /home; mkdir -p /home/user; mount -t tmpfs sandgate-tmp /tmp; exec "$0" "$@"`
	// A PID namespace too (execd its first process, under unshare
	// --fork): when execd ends, so does every command it started; stop
	// signals execd through the process group, and when unshare dies with
	// the test, execd gets SIGTERM.
	argv := append([]string{"--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM", "--",
		"sh", "-c", script, filepath.Join(w.bin, "execd-"+version), "--port", "44772"}, args...)
	p, err := w.startProc(&proc{name: "execd-" + version, group: true, cmd: exec.Command("unshare", argv...)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// stop ends when unshare has, after execd; the next execd needs
		// the port, which the kernel frees with the last socket.
		p.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := poll(ctx, "execd "+version+" to release port 44772", func() error {
			c, err := net.DialTimeout("tcp", probeIP+":44772", time.Second)
			if err != nil {
				return nil
			}
			c.Close()
			return errors.New("still accepting")
		}); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := poll(ctx, "execd "+version+" to answer on "+probeIP, func() error {
		if err := p.exited(); err != nil {
			return err
		}
		if i := slices.Index(args, "--access-token"); i >= 0 && i+1 < len(args) {
			return execdPingWithToken("http://"+probeIP+":44772/ping", args[i+1])
		}
		return httpOK("http://" + probeIP + ":44772/ping")
	}); err != nil {
		t.Fatal(w.withLogs(err))
	}
}

// pollFor is poll with a timeout of d.
func pollFor(d time.Duration, what string, cond func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return poll(ctx, what, cond)
}
