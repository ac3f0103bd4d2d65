package rotation

// The execd token secret (docs/runbook.md "Execd token secret"): corectl
// gives each sandbox's execd the token derived from the cluster secret it
// holds when it creates the sandbox, and the execd keeps it for its life;
// the gateway holds the old and the new secret during the rotation and
// sends each sandbox the token its execd accepts.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/corectl/cluster"
	csandbox "github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/execdtoken"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

// execdPeer returns the real OpenSandbox execd (HEAD build) that
// hack/peers/build.sh leaves in its cache: $SANDGATE_PEERS_BIN/execd-head,
// else the newest ~/.cache/sandgate/peers-*/execd-head. With neither it
// returns "" (the test uses the integration/execdstub stand-in and says
// so), unless SANDGATE_PEERS is set: the real-peer tier was asked for, so
// the test fails rather than pass without it.
func execdPeer(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("SANDGATE_PEERS_BIN"); dir != "" {
		p := filepath.Join(dir, "execd-head")
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("SANDGATE_PEERS_BIN=%s has no executable execd-head (%v): run hack/peers/build.sh", dir, err)
		}
		return p
	}
	home, _ := os.UserHomeDir()
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(home, ".cache")
	}
	found, _ := filepath.Glob(filepath.Join(cache, "sandgate", "peers-*", "execd-head"))
	sort.Slice(found, func(i, j int) bool {
		a, _ := os.Stat(found[i])
		b, _ := os.Stat(found[j])
		return a != nil && b != nil && a.ModTime().After(b.ModTime())
	})
	for _, p := range found {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if os.Getenv("SANDGATE_PEERS") != "" {
		t.Fatal("SANDGATE_PEERS is set but no execd-head was found (SANDGATE_PEERS_BIN or ~/.cache/sandgate/peers-*): run hack/peers/build.sh")
	}
	return ""
}

// envExecdNetns names the network namespace a test runs in when
// runInNetns started it; set, the test runs itself.
const envExecdNetns = "SANDGATE_ROTATION_NETNS"

// runInNetns runs this test binary again for the tests matching run inside
// a new network namespace sandgate-rotation-<pid> with its loopback up
// (and the default route through it, for kube-apiserver)
// (the inner run starts its own kube-apiserver there), logs the inner run's
// output and fails t when it fails. The namespace is deleted afterwards;
// the inner run dies with this process (parent-death signal). It needs root
// (ip netns), as the real execd's mount and PID namespaces already do.
func runInNetns(t *testing.T, run string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the real execd binds every interface, so this test runs it in a network namespace: that needs root (ip netns)")
	}
	name := fmt.Sprintf("sandgate-rotation-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", name, err, out)
		}
	})
	// The loopback up, with a second address and the default route through
	// it: kube-apiserver refuses to start without a default route and
	// advertises its source address (10.78.0.254). Nothing leaves the
	// namespace by it.
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", "10.78.0.254/24", "dev", "lo"}, {"route", "add", "default", "dev", "lo"}} {
		if out, err := exec.Command("ip", append([]string{"netns", "exec", name, "ip"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v in %s: %v: %s", args, name, err, out)
		}
	}
	cmd := exec.Command("ip", "netns", "exec", name, os.Args[0], "-test.run", run, "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), envExecdNetns+"="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	t.Logf("the run in network namespace %s:\n%s", name, out)
	if err != nil {
		t.Fatalf("the run in network namespace %s failed: %v", name, err)
	}
}

// sandboxExecds plays the kubelet and OpenSandbox's bootstrap for the
// rig's sandboxes: the first time the fixed entry resolves a sandbox it
// starts an execd for it with the EXECD_ACCESS_TOKEN corectl put in the
// BatchSandbox's pod template, as the pod would, and routes port 44772
// there.
type sandboxExecds struct {
	t    *testing.T
	peer string // the real execd, or "" for the stand-in
	mu   sync.Mutex
	by   map[string]*sandboxExecd
}

// sandboxExecd is one sandbox's execd, started once.
type sandboxExecd struct {
	once        sync.Once
	addr, token string
	err         error
}

// get returns sandbox id's execd, nil when it has none yet.
func (x *sandboxExecds) get(id string) *sandboxExecd {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.by[id]
}

// resolve is the fixed entry's resolver.
func (x *sandboxExecds) resolve(id string) (fixedentry.Sandbox, bool) {
	rs, ok := env.Resolve(context.Background(), id)
	if !ok {
		return fixedentry.Sandbox{}, false
	}
	x.mu.Lock()
	e := x.by[id]
	if e == nil {
		e = &sandboxExecd{}
		x.by[id] = e
	}
	x.mu.Unlock()
	e.once.Do(func() {
		if e.token, e.err = podExecdToken(rs.Namespace, id); e.err == nil {
			e.addr, e.err = x.start(e.token)
		}
		if e.err != nil {
			x.t.Errorf("sandbox %s: its execd: %v", id, e.err)
		}
	})
	if e.err != nil {
		return fixedentry.Sandbox{}, false
	}
	return fixedentry.Sandbox{Ready: rs.Ready, Endpoint: rs.Endpoint, Namespace: rs.Namespace, Ports: map[int]string{44772: e.addr}}, true
}

// podExecdToken reads EXECD_ACCESS_TOKEN from the pod template of
// BatchSandbox namespace/id (one entry, on the container "sandbox").
func podExecdToken(namespace, id string) (string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(csandbox.GVK)
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: id}, u); err != nil {
		return "", err
	}
	m, ok, err := unstructured.NestedMap(u.Object, "spec", "template", "spec")
	if !ok || err != nil {
		return "", fmt.Errorf("no pod template (%v)", err)
	}
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		return "", err
	}
	var toks []string
	for _, c := range spec.Containers {
		for _, e := range c.Env {
			if e.Name == cluster.ExecdAccessTokenEnv {
				toks = append(toks, e.Value)
			}
		}
	}
	if len(toks) != 1 {
		return "", fmt.Errorf("the pod template has %d %s entries, want 1", len(toks), cluster.ExecdAccessTokenEnv)
	}
	return toks[0], nil
}

// start runs one execd with token and returns its address once it
// answers /ping with that token. The real execd runs as a pod's would:
// EXECD_ACCESS_TOKEN in its environment, in a mount and PID namespace of
// its own with tmpfs on /home (with /home/user) and /tmp, as
// integration/realpeers runs it; it is stopped with its process group when
// the test ends.
func (x *sandboxExecds) start(token string) (string, error) {
	t := x.t
	if x.peer == "" {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "home", "user"), 0o755); err != nil {
			return "", err
		}
		srv := execdstub.New(execdstub.Config{Root: root, GracefulShutdown: 50 * time.Millisecond, AccessToken: token})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := ln.Addr().String()
		hs := &http.Server{Handler: srv}
		go func() { _ = hs.Serve(ln) }()
		t.Cleanup(func() { _ = hs.Close(); srv.Close() })
		if st, err := pingExecd(context.Background(), addr, ""); err != nil || st != http.StatusUnauthorized {
			return "", fmt.Errorf("the execd stand-in answered a ping without its token %d (%v), want 401", st, err)
		}
		return addr, nil
	}
	// The real execd binds the port itself: picked below the ephemeral
	// range, the only place a separate process can be told one.
	addr, err := freeport.Addr()
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	script := `set -e; mount -t tmpfs sandgate-home /home; mkdir -p /home/user; mount -t tmpfs sandgate-tmp /tmp; exec "$0" "$@"`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM",
		"--", "sh", "-c", script, x.peer, "--port", port)
	cmd.Env = append(os.Environ(), cluster.ExecdAccessTokenEnv+"="+token)
	logf, err := os.Create(filepath.Join(t.TempDir(), "execd.log"))
	if err != nil {
		return "", err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(wait):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	err = kwait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, wait, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			done <- err
			b, _ := os.ReadFile(logf.Name())
			return false, fmt.Errorf("execd exited: %v: %s", err, b)
		default:
		}
		st, err := pingExecd(ctx, addr, token)
		return err == nil && st == http.StatusOK, nil
	})
	if err != nil {
		return "", err
	}
	// The execd checks its token: without it, a ping is refused.
	if st, err := pingExecd(context.Background(), addr, ""); err != nil || st != http.StatusUnauthorized {
		return "", fmt.Errorf("execd answered a ping without its token %d (%v), want 401", st, err)
	}
	return addr, nil
}

// pingExecd sends GET /ping to the execd at addr with token.
func pingExecd(ctx context.Context, addr, token string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/ping", nil)
	if token != "" {
		req.Header.Set(execdstub.AccessTokenHeader, token)
	}
	resp, err := dataPlaneClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// errorCode sends one data-plane request for sb and returns its status
// and the gateway's Sandgate-Error-Code.
func (r *rig) errorCode(sb sandbox) (int, string) {
	r.t.Helper()
	req, _ := http.NewRequest("POST", r.h.Gateway+"/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Id", sb.id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", sb.token)
	resp, err := dataPlaneClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Sandgate-Error-Code")
}

// TestExecdTokenSecretRotationUnderTraffic follows docs/runbook.md "Execd
// token secret" with bin/caddy (the data plane, its cluster's
// execd_token_secret lines), two bin/corectl replicas (execdTokenSecretFile,
// which sets each created sandbox's EXECD_ACCESS_TOKEN) and an execd per
// sandbox started with the token corectl gave it: the real OpenSandbox
// execd when hack/peers/build.sh's cache has it, else the stand-in.
// corectl's readiness pings go through bin/caddy's probe relay, which adds
// the execd token from the same secrets as the data plane. Step 1
// adds the new secret to the gateway (a second line, a gateway roll); step
// 2 gives corectl the new secret (a corectl roll), and a sandbox created
// then gets the new secret's token; step 3, once the old sandbox is
// deleted, leaves the gateway the new secret only. Data-plane requests run
// the whole time, to the old sandbox until it is deleted and to the new
// one from its creation: none is refused. At the end an old sandbox still
// running is refused EXECD_UNAUTHORIZED (why step 3 waits for them), and
// neither secret nor any derived token is in a log.
func TestExecdTokenSecretRotationUnderTraffic(t *testing.T) {
	peer := execdPeer(t)
	if peer == "" {
		t.Log("execd: the integration/execdstub stand-in (no hack/peers/build.sh cache)")
	} else {
		t.Logf("execd: the real OpenSandbox execd %s", peer)
		// The real execd has no listen-address flag: it binds every
		// interface. The test therefore runs in a network namespace of
		// its own, where the only interface is its loopback.
		if os.Getenv(envExecdNetns) == "" {
			runInNetns(t, "^TestExecdTokenSecretRotationUnderTraffic$")
			return
		}
	}
	dir := t.TempDir()
	oldSecret, newSecret := "execd-secret-old-0123456789abcdef0123456789", "execd-secret-new-0123456789abcdef0123456789"
	gwOld, gwNew := filepath.Join(dir, "cluster-a-secret"), filepath.Join(dir, "cluster-a-secret-2")
	writeFile(t, gwOld, oldSecret+"\n")
	writeFile(t, gwNew, newSecret+"\n")
	corectlSecret := filepath.Join(dir, "corectl-execd-secret")
	writeFile(t, corectlSecret, oldSecret+"\n")
	keyFile := filepath.Join(dir, "primary.key")
	writeFile(t, keyFile, "rotation-hmac-secret-0123456789abcdef0123456789")
	secrets := map[int][]string{0: {gwOld}, 1: {gwOld, gwNew}, 3: {gwNew}}
	// corectl's readiness pings go through the gateway's probe relay,
	// which adds the execd token as the data plane does.
	const relayToken = "probe-relay-token-0123456789abcdef0123456789"
	relayTokenFile := filepath.Join(dir, "relay.token")
	writeFile(t, relayTokenFile, relayToken+"\n")
	relaySum := sha256.Sum256([]byte(relayToken))
	relayAddr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, func(*rig) []string {
		return []string{"-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", keyFile,
			"-probe-relay-url", "http://" + relayAddr, "-probe-relay-token-file", relayTokenFile, "-probe-relay-wait", "30s"}
	}, func(r *rig, step int) string {
		// The cluster's host is the managed Ingresses' host, which corectl
		// checks through the relay at start.
		block := "cluster cluster-a {{FIXED_ENTRY}} {\n\t\t\thost sandbox.example.test\n"
		for _, f := range secrets[step] {
			block += "\t\t\texecd_token_secret {file." + f + "}\n"
		}
		block += "\t\t}\n\t\t" + authorizerBlock(r.front, r.internal, step)
		return strings.Replace(strings.Replace(harness.DefaultCaddyfile, "token_key primary HS256 {{KEY}}", "token_key primary HS256 "+keyFile, 1),
			"cluster cluster-a {{FIXED_ENTRY}}", block, 1) +
			"\nhttp://" + relayAddr + " {\n\tbind 127.0.0.1\n\tfixed_entry_probe {\n\t\ttoken_sha256 " + hex.EncodeToString(relaySum[:]) + "\n\t}\n\trespond 404\n}\n"
	}, func(_ *rig, c *cluster.Cluster) { c.ExecdTokenSecretFile = corectlSecret })
	x := &sandboxExecds{t: t, peer: peer, by: map[string]*sandboxExecd{}}
	r.h.Ingress.SetResolver(x.resolve)

	// created checks that corectl gave sb's execd secret's token.
	created := func(sb sandbox, secret, which string) {
		t.Helper()
		e := x.get(sb.id)
		if e == nil || e.token != execdtoken.Derive([]byte(secret), sb.id) {
			t.Fatalf("sandbox %s was created with an execd token not derived from the %s secret", sb.id, which)
		}
	}
	old, oldKept := r.create(600), r.create(600)
	created(old, oldSecret, "old")
	created(oldKept, oldSecret, "old")
	var pool tokenPool
	pool.add(old)
	r.startTraffic(pool.pick)
	r.answered("before the rotation", 20, r.live...)

	r.rollGateway("step 1", 1) // 1. the gateway holds old and new
	writeFile(t, corectlSecret, newSecret+"\n")
	r.rollCorectl("step 2") // 2. corectl creates with the new one
	nw := r.create(600)
	created(nw, newSecret, "new")
	pool.add(nw)
	r.answered("step 2: old and new sandboxes", 40, r.live...)
	// 3. once the sandboxes of the old secret are gone.
	pool.reset(nw)
	if err := kwait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, wait, true, func(context.Context) (bool, error) {
		return r.flying(old.id) == 0, nil
	}); err != nil {
		t.Fatalf("requests to the old sandbox still under way: %v", err)
	}
	if st := r.api("DELETE", "/sandboxes/"+old.id, "", nil); st != http.StatusNoContent {
		t.Fatalf("DELETE old sandbox = %d", st)
	}
	r.rollGateway("step 3", 3)
	r.endTraffic()

	if st, code := r.errorCode(nw); st != http.StatusOK {
		t.Errorf("the new sandbox after the rotation: %d %s", st, code)
	}
	if st, code := r.errorCode(oldKept); code != "EXECD_UNAUTHORIZED" {
		t.Errorf("an old sandbox after step 3: %d %q, want EXECD_UNAUTHORIZED (the gateway no longer holds the old secret)", st, code)
	}
	// Neither secret nor a derived token reached a log.
	logs := []string{r.gatewayLog}
	for _, p := range r.all {
		logs = append(logs, p.log)
	}
	secretsAndTokens := []string{oldSecret, newSecret}
	for _, sb := range []sandbox{old, oldKept, nw} {
		secretsAndTokens = append(secretsAndTokens, x.get(sb.id).token)
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secretsAndTokens {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds a secret or an execd token", filepath.Base(l))
			}
		}
	}
}
