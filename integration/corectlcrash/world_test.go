package corectlcrash_test

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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	coordinationv1 "k8s.io/api/coordination/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// testClient is the tests' HTTP client: http.DefaultClient's transport
// with a bound on every request, its response body read included, so a
// peer that hangs fails the request instead of holding the test until the
// package's -timeout. No request here is meant to take that long.
var testClient = &http.Client{Timeout: 2 * time.Minute}

var env *kubetest.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	kubetest.Main(m, &env)
}

// clusters numbers the tests' compute clusters: each test has its own
// cluster ID, since a leader reconciles every allowlist of its cluster ID
// in the apiserver, which all tests here share.
var clusters atomic.Int64

// world is one test's compute cluster: namespaces, corectl's files, and
// the fixed entry stand-in with ingress-nginx's emulation (per-path
// whitelist and the probe-echo snippet, read from the real Ingress
// objects), so every replica's probe-source discovery works as against a
// real fixed entry (the sources it finds are 127.0.0.1/32).
type world struct {
	t                    *testing.T
	bin, dir             string
	clusterID            string
	ns, ingNS, leNS      string
	cluster              *cluster.Cluster
	clusters, creds, key string
	keys                 string

	// entry is the fixed entry stand-in.
	entry *fixedentry.Ingress
	// nat, when set, is the address the fixed entry's nginx sees as every
	// request's source (a NAT); unset, the peer's IP (loopback).
	nat atomic.Pointer[string]
}

// natSource is the fixed entry's Nginx.Source: w.nat, or the peer's IP.
func (w *world) natSource(remoteAddr string) string {
	if s := w.nat.Load(); s != nil {
		return *s
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}

func newWorld(t *testing.T) *world {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, bin: filepath.Join(root, "bin", "corectl"), dir: t.TempDir(),
		ns: env.Namespace(t), ingNS: env.Namespace(t), leNS: env.Namespace(t), clusterID: fmt.Sprintf("crash%d", clusters.Add(1))}
	clusterID := w.clusterID
	if fi, err := os.Stat(w.bin); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("bin/corectl is missing (%v): run make build", err)
	}
	entry := fixedentry.New()
	w.entry = entry
	entry.SetNginx(&fixedentry.Nginx{Source: w.natSource, Route: func(path string) (fixedentry.NginxRoute, bool) {
		var list networkingv1.IngressList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(w.ingNS)); err != nil {
			return fixedentry.NginxRoute{}, false
		}
		return fixedentry.IngressRoute(list.Items, "", path)
	}})
	srv := httptest.NewServer(entry)
	t.Cleanup(srv.Close)

	w.cluster = kubetest.Cluster(clusterID, w.ingNS)
	w.cluster.FixedEntry = srv.URL
	w.cluster.Kubeconfig = w.write("kubeconfig", string(env.KubeConfig))
	tplNS := env.Namespace(t)
	cfg, err := json.Marshal(cluster.Config{Clusters: []cluster.Cluster{*w.cluster},
		Templates: cluster.TemplateStore{ClusterID: clusterID, Namespace: tplNS}, SandboxTemplates: kubetest.SandboxTemplates()})
	if err != nil {
		t.Fatal(err)
	}
	w.clusters = w.write("clusters.json", string(cfg))
	w.creds = w.write("credentials.yaml", "credentials:\n  - {id: cred-a, enabled: true, projectNamespace: "+w.ns+", clusterId: "+clusterID+"}\n")
	w.keys = w.write("keys.yaml", "keys:\n  - {name: a, sha256: "+apikey.Digest("key-a")+", credentialId: cred-a}\n")
	w.key = w.write("primary.key", "crash-test-hmac-secret-0123456789abcdef0123456789")
	return w
}

func (w *world) write(name, content string) string {
	w.t.Helper()
	p := filepath.Join(w.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// corectlProc is bin/corectl running as its own process.
type corectlProc struct {
	name string
	cmd  *exec.Cmd
	api  string // http://<API address>
	log  string // its output, a file

	exited  chan struct{}
	waitErr error
}

func (p *corectlProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *corectlProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	<-p.exited
}

// start runs bin/corectl as replica name, reaching the apiserver through
// proxy (nil: directly), with leader election on short timings (a 2 s
// Lease, so a standby takes over 2 s after the leader stopped renewing),
// the lifecycle on (the token key) and extra flags; it returns once the
// process logs "corectl serving".
func (w *world) start(name string, proxy *apiProxy, extra ...string) *corectlProc {
	t := w.t
	t.Helper()
	cfg := w.clusters
	if proxy != nil {
		// The same configuration with the proxy's kubeconfig.
		c := *w.cluster
		c.Kubeconfig = w.write(name+".kubeconfig", proxy.kubeconfig())
		b, err := os.ReadFile(w.clusters)
		if err != nil {
			t.Fatal(err)
		}
		var whole cluster.Config
		if err := json.Unmarshal(b, &whole); err != nil {
			t.Fatal(err)
		}
		whole.Clusters = []cluster.Cluster{c}
		out, err := json.Marshal(whole)
		if err != nil {
			t.Fatal(err)
		}
		cfg = w.write(name+".clusters.json", string(out))
	}
	args := append([]string{"-config", cfg, "-credentials", w.creds, "-api-keys", w.keys, "-listen", "127.0.0.1:0",
		"-leader-elect=true", "-leader-election-namespace", w.leNS,
		"-leader-election-lease-duration", "2s", "-leader-election-renew-deadline", "1500ms", "-leader-election-retry-period", "200ms",
		"-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", w.key}, extra...)
	p := &corectlProc{name: name, cmd: exec.Command(w.bin, args...), log: filepath.Join(w.dir, name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	p.cmd.Stderr = io.MultiWriter(pw, logf)
	p.cmd.Stdout = logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		pw.Close()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.exited:
			case <-time.After(20 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.logText())
		}
	})
	addr := harness.CorectlServingAddr(pr)
	select {
	case a := <-addr:
		p.api = "http://" + a
	case <-p.exited:
		t.Fatalf("%s exited while starting: %v\n%s", name, p.waitErr, p.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start within 60s:\n%s", name, p.logText())
	}
	return p
}

// leader returns the holder of the cluster's Lease ("" when none).
func (w *world) leader() string {
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.leNS, Name: daemon.LeaseName(w.clusterID)}, l); err != nil {
		return ""
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// awaitLeader waits until the Lease is held by someone other than not
// and returns the holder.
func (w *world) awaitLeader(not string) string {
	w.t.Helper()
	var h string
	kubetest.Eventually(w.t, 30*time.Second, "a leader other than "+fmt.Sprintf("%q", not), func() (bool, error) {
		h = w.leader()
		return h != "" && h != not, nil
	})
	return h
}

// do sends an API request as key-a; the status, and the body decoded into
// out when out is not nil. It may run in any goroutine (it never fails t).
func do(_ *testing.T, base, method, path, body string, out any) (int, string, error) {
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("X-API-Key", "key-a")
	req.Header.Set("Content-Type", "application/json")
	resp, err := testClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		_ = json.Unmarshal(b, out)
	}
	return resp.StatusCode, string(b), nil
}

// eventLog records every version of the objects of one kind in one
// namespace that a watch, started before the scenario, reports and its
// filter keeps: everything the test can observe of what was written.
type eventLog struct {
	mu     sync.Mutex
	events []watch.Event
}

// watchObjects starts recording the objects of list's kind in ns that
// keep accepts; the watch stops when the test ends.
func (w *world) watchObjects(list client.ObjectList, ns string, keep func(runtime.Object) bool) *eventLog {
	w.t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		w.t.Fatal(err)
	}
	wi, err := wc.Watch(context.Background(), list, client.InNamespace(ns))
	if err != nil {
		w.t.Fatal(err)
	}
	l := &eventLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			if !keep(ev.Object) {
				continue
			}
			l.mu.Lock()
			l.events = append(l.events, ev)
			l.mu.Unlock()
		}
	}()
	w.t.Cleanup(func() { wi.Stop(); <-done })
	return l
}

// watchCarriers starts recording the managed carriers of w.ingNS.
func (w *world) watchCarriers() *eventLog {
	return w.watchObjects(&networkingv1.IngressList{}, w.ingNS, func(o runtime.Object) bool {
		ing, ok := o.(*networkingv1.Ingress)
		return ok && ing.Namespace == w.ingNS && strings.HasPrefix(ing.Name, ingressallow.IngressNamePrefix)
	})
}

// seen returns the events recorded so far.
func (l *eventLog) seen() []watch.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]watch.Event(nil), l.events...)
}

// deletedLast waits (up to 10 s) until every log's last event is a
// deletion, and fails if any log shows an event after a deletion: the
// object never came back.
func deletedLast(t *testing.T, logs ...*eventLog) {
	t.Helper()
	kubetest.Eventually(t, 10*time.Second, "the watches to see the deletions", func() (bool, error) {
		for _, l := range logs {
			ev := l.seen()
			if len(ev) == 0 || ev[len(ev)-1].Type != watch.Deleted {
				return false, nil
			}
		}
		return true, nil
	})
	for _, l := range logs {
		events := l.seen()
		for i, ev := range events {
			if ev.Type == watch.Deleted && i != len(events)-1 {
				t.Fatalf("%T came back after its deletion: %v", ev.Object, events[i+1].Type)
			}
		}
	}
}

// removed waits (up to 30 s) until the BatchSandbox bs of sandbox id and,
// when policy is not empty, its egress policy are gone (wait names the
// wait; the policy goes after the BatchSandbox, once no pod it selects is
// left, spec §5.3), then checks that its carrier and its allowlist, which
// go before the BatchSandbox, are gone too, and that GET on survivor
// answers 404.
func (w *world) removed(t *testing.T, survivor *corectlProc, bs *unstructured.Unstructured, id, policy, wait string) {
	t.Helper()
	ctx := context.Background()
	gone := func(obj client.Object, ns, name string) bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj))
	}
	kubetest.Eventually(t, 30*time.Second, wait, func() (bool, error) {
		return gone(bs.DeepCopy(), w.ns, id) && (policy == "" || gone(&networkingv1.NetworkPolicy{}, w.ns, policy)), nil
	})
	type ref struct {
		obj      client.Object
		ns, name string
	}
	for _, k := range []ref{{&networkingv1.Ingress{}, w.ingNS, ingressallow.IngressName(id)}, {&v1alpha1.SandboxIngressAllowlist{}, w.ns, id}} {
		if !gone(k.obj, k.ns, k.name) {
			t.Fatalf("%s/%s outlived the BatchSandbox", k.ns, k.name)
		}
	}
	if code, body, err := do(t, survivor.api, "GET", "/sandboxes/"+id, "", nil); err != nil || code != 404 {
		t.Fatalf("GET the removed sandbox = %d %s %v", code, body, err)
	}
}

// neverWider checks every carrier version the watch saw: each carries a
// whitelist-source-range, and every entry of it is one of allowed (the
// union of the rule sets the test asked for and the probe sources): no
// version was ever unrestricted or wider. It returns the versions that
// were not deletions.
func neverWider(t *testing.T, events []watch.Event, allowed []string) []*networkingv1.Ingress {
	t.Helper()
	var versions []*networkingv1.Ingress
	for _, ev := range events {
		ing := ev.Object.(*networkingv1.Ingress)
		if ev.Type == watch.Deleted {
			continue
		}
		v, ok := ing.Annotations[fixedentry.AnnotationWhitelist]
		if !ok {
			t.Fatalf("carrier %s version %s (%s) has no whitelist-source-range: unrestricted", ing.Name, ing.ResourceVersion, ev.Type)
		}
		got, _, err := cidr.ParseAnnotation(v)
		if err != nil {
			t.Fatalf("carrier %s version %s: whitelist %q: %v", ing.Name, ing.ResourceVersion, v, err)
		}
		for _, c := range got {
			if !slices.Contains(allowed, c) {
				t.Fatalf("carrier %s/%s version %s (%s) allows %s, beyond %v: widened (labels %v)", ing.Namespace, ing.Name, ing.ResourceVersion, ev.Type, c, allowed, ing.Labels)
			}
		}
		versions = append(versions, ing)
	}
	return versions
}

// probeSource is what the fixed entry's nginx sees of every replica's
// discovery dials: loopback.
const probeSource = "127.0.0.1/32"

// putAnswer is the answer to a PUT /sandboxes/{id}/network/ingress made
// by putAsync: status code, body, transport error, decoded status.
type putAnswer struct {
	code int
	body string
	err  error
	st   ingressallow.Status
}

// putAsync sends PUT /sandboxes/{id}/network/ingress with rules to the
// replica at api on its own goroutine; its answer arrives on the channel
// (buffered, so nobody has to take it).
func putAsync(t *testing.T, api, id string, rules []string) <-chan putAnswer {
	put := make(chan putAnswer, 1)
	go func() {
		var a putAnswer
		a.code, a.body, a.err = do(t, api, "PUT", "/sandboxes/"+id+"/network/ingress", rulesBody(rules), &a.st)
		put <- a
	}()
	return put
}

// backfillScene is a create held at its owner back-fill (createAtBackfill).
type backfillScene struct {
	// survivor is the leader, its orphan scan fast (-orphan-grace 5s,
	// -ready-budget 1s, every 500 ms); killed serves the create, through
	// proxy.
	survivor, killed *corectlProc
	proxy            *apiProxy
	// log records the carriers from before the create.
	log *eventLog
	// created delivers the create's transport error (nil: answered).
	created <-chan error
	// backfill is the held owner back-fill (the create's first update of
	// its carrier), id the sandbox, u the create's ingress rules.
	backfill *heldRequest
	id       string
	u        []string
}

// createAtBackfill starts the scene of a create killed at or after its
// owner back-fill: a survivor that leads, a replica behind a proxy, and
// on that replica a create of 198.51.100.0/24 whose back-fill (the first
// PUT of a managed carrier) the proxy holds when it returns.
func createAtBackfill(t *testing.T, w *world) backfillScene {
	t.Helper()
	sc := backfillScene{u: []string{"198.51.100.0/24"}}
	sc.survivor = w.start("survivor", nil, "-orphan-interval", "500ms", "-orphan-grace", "5s", "-ready-budget", "1s")
	w.awaitLeader("")
	sc.proxy = newAPIProxy(t, env.Config)
	sc.killed = w.start("killed", sc.proxy)
	prefix := "/apis/networking.k8s.io/v1/namespaces/" + w.ingNS + "/ingresses/" + ingressallow.IngressNamePrefix
	sc.proxy.setHold(func(r *http.Request) bool { return r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, prefix) })
	sc.log = w.watchCarriers()
	created := make(chan error, 1)
	go func() {
		_, _, err := do(t, sc.killed.api, "POST", "/sandboxes",
			`{"templateID":"base","timeout":300,"network":{"ingress":[{"cidr":"198.51.100.0/24"}]}}`, nil)
		created <- err
	}()
	sc.created = created
	sc.backfill = awaitHeld(t, sc.proxy, sc.created, "its owner back-fill")
	sc.id = strings.TrimPrefix(sc.backfill.URL.Path, prefix)
	return sc
}

// batchSandbox reads sandbox id's BatchSandbox and fails the test unless
// its lifecycle is state; at names the moment in the failure.
func (w *world) batchSandbox(t *testing.T, id, state, at string) *unstructured.Unstructured {
	t.Helper()
	bs := &unstructured.Unstructured{}
	bs.SetGroupVersionKind(sandbox.GVK)
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: id}, bs); err != nil {
		t.Fatalf("the BatchSandbox at %s: %v", at, err)
	}
	if st := bs.GetAnnotations()[v1alpha1.AnnotationLifecycle]; st != state {
		t.Fatalf("lifecycle %q at %s, want %s", st, at, state)
	}
	return bs
}
