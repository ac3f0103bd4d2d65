package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/fairshare"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/nsrights"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/corectl/sandboxlogs"
	"github.com/sandgate/sandgate/deploy"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	kubetest.Main(m, &env)
}

var clusters atomic.Int64

// internalToken is the world's corectl internal token (the gateway
// authorizer's).
const internalToken = "internal-token-for-tests-0123456789abcdef"

// world is corectl (the daemon, over HTTP) in front of the real apiserver,
// with a stand-in OpenSandbox controller, a fixed entry that resolves
// sandboxes from BatchSandbox objects, and an execd stand-in behind it.
type world struct {
	t        testing.TB
	url      string
	nsA, nsB string
	ingNS    string
	cluster  *cluster.Cluster
	entry    *fixedentry.Ingress
	entryURL string
	execd    string
	verifier *token.Verifier
	orch     *lifecycle.Orchestrator
	keyFile  string
	d        *daemon.Daemon
	stop     func() error // ends Run and returns its error

	clusterID string
	// skew is added to the orchestrator's clock (nanoseconds).
	skew atomic.Int64

	mu      sync.Mutex
	failAt  map[lifecycle.Step]bool
	blockAt map[lifecycle.Step]chan struct{} // a step waits until the channel is closed
	held    chan string                      // the IDs of the creates that wait at a blockAt step
	source  string                           // the NAT'd source nginx sees
	noEcho  bool                             // nginx ignores the echo snippet
	ports   map[int]string                   // business ports of every sandbox → the address dialled
}

// fail makes every create or compensation step in steps fail until
// cleared with fail().
func (w *world) fail(steps ...lifecycle.Step) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failAt = map[lifecycle.Step]bool{}
	for _, s := range steps {
		w.failAt[s] = true
	}
}

// holdAt makes every create wait at step s until the returned channel is
// closed.
func (w *world) holdAt(s lifecycle.Step) (release chan struct{}) {
	release, _ = w.hold(s)
	return release
}

// hold is holdAt that also tells, on held, the sandbox ID of each create
// that reaches step s, as it begins to wait (the first 8; later ones are
// not told).
func (w *world) hold(s lifecycle.Step) (release chan struct{}, held <-chan string) {
	release = make(chan struct{})
	ids := make(chan string, 8)
	w.mu.Lock()
	w.blockAt = map[lifecycle.Step]chan struct{}{s: release}
	w.held = ids
	w.mu.Unlock()
	return release, ids
}

func start(t *testing.T) *world { t.Helper(); return startWith(t, env.Config, false) }

// startAs starts the world with corectl reaching the apiserver with cfg.
func startAs(t *testing.T, cfg *rest.Config) *world { t.Helper(); return startWith(t, cfg, false) }

// startWith starts the world; probe turns on probe-source discovery and
// the fixed entry's nginx emulation (source allowlists, the echo snippet,
// and a NAT: every request appears to come from w.source).
func startWith(t *testing.T, cfg *rest.Config, probe bool) *world {
	t.Helper()
	return startWorld(t, cfg, worldOptions{probe: probe})
}

// worldOptions are startWorld's choices.
type worldOptions struct {
	// probe: see startWith.
	probe bool
	// limits are the cluster's client limits (zero: the defaults).
	limits cluster.ClientLimits
	// apiShare is each credential's share of the apiserver requests
	// (zero: the defaults).
	apiShare fairshare.Config
	// productionTimers keeps the orchestrator's default readiness
	// interval instead of the tests' short one (benchmarks).
	productionTimers bool
	// onStep, when set, is called as each create or compensation step of
	// sandbox id begins (benchmarks time the steps with it).
	onStep func(id string, s lifecycle.Step)
	// maxTimeout is the orchestrator's MaxTimeout (0: its default).
	maxTimeout time.Duration
	// before runs once the namespaces and the cluster ID are chosen,
	// before corectl starts.
	before func(w *world)
	// wrap, when set, wraps corectl's transport to the apiserver (tests
	// count the requests with it).
	wrap func(http.RoundTripper) http.RoundTripper
	// logs, when set, replaces corectl's pods/log reader.
	logs sandboxlogs.Source
	// execdTokenSecretFile, when set, is the cluster's
	// execdTokenSecretFile (read by the daemon at start).
	execdTokenSecretFile string
	// execdWrap, when set, wraps the execd stand-in's handler (tests see
	// the requests that reach execd with it).
	execdWrap func(http.Handler) http.Handler
}

// startWorld starts the world as o says.
func startWorld(t testing.TB, cfg *rest.Config, o worldOptions) *world {
	t.Helper()
	probe := o.probe
	w := &world{t: t, nsA: env.Namespace(t), nsB: env.Namespace(t), ingNS: env.Namespace(t)}
	id := fmt.Sprintf("lc%d", clusters.Add(1))
	w.clusterID = id

	// execd behind the fixed entry.
	ex := execdstub.New(execdstub.Config{Root: t.TempDir()})
	var exH http.Handler = ex
	if o.execdWrap != nil {
		exH = o.execdWrap(ex)
	}
	exSrv := httptest.NewServer(exH)
	t.Cleanup(func() { exSrv.Close(); ex.Close() })
	w.execd = strings.TrimPrefix(exSrv.URL, "http://")

	// The fixed entry resolves sandboxes from BatchSandboxes like the real
	// OpenSandbox ingress (docs/wire-facts.md §X2.4).
	w.entry = fixedentry.New()
	w.entry.SetResolver(w.resolve)
	entrySrv := httptest.NewServer(w.entry)
	t.Cleanup(entrySrv.Close)
	w.entryURL = entrySrv.URL

	if probe {
		w.source = "10.9.9.9"
		w.entry.SetNginx(&fixedentry.Nginx{Source: w.natSource, Route: w.nginxRoute})
	}
	c := kubetest.Cluster(id, w.ingNS)
	c.FixedEntry = w.entryURL
	c.Ingress.Host = w.nsA + ".example.test"
	c.Client = o.limits
	c.ExecdTokenSecretFile = o.execdTokenSecretFile
	w.cluster = c

	// The gateway's HS256 key.
	w.keyFile = filepath.Join(t.TempDir(), "k1.key")
	if err := os.WriteFile(w.keyFile, []byte("0123456789abcdef0123456789abcdef-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	sk, err := token.LoadSigningKey("k1", "HS256", w.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := token.LoadKey("k1", "HS256", w.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if w.verifier, err = token.NewVerifier([]token.Key{pk}, 0); err != nil {
		t.Fatal(err)
	}

	keys, err := apikey.Parse([]byte("keys:\n" +
		"  - {name: key-a, sha256: " + apikey.Digest("key-a") + ", credentialId: a}\n" +
		"  - {name: key-b, sha256: " + apikey.Digest("key-b") + ", credentialId: b}\n" +
		"  - {name: key-a2, sha256: " + apikey.Digest("key-a2") + ", credentialId: a2}\n" +
		"  - {name: key-wide, sha256: " + apikey.Digest("key-wide") + ", credentialId: wide}\n" +
		"  - {name: key-admin, sha256: " + apikey.Digest("key-admin") + ", credentialId: a, templateAdmin: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	src := credential.Static{
		"a": {ID: "a", Enabled: true, ProjectNamespace: w.nsA, ClusterID: id},
		"b": {ID: "b", Enabled: true, ProjectNamespace: w.nsB, ClusterID: id},
		// a2 shares a's namespace but not its sandboxes; wide is the
		// project-wide credential of that namespace.
		"a2":   {ID: "a2", Enabled: true, ProjectNamespace: w.nsA, ClusterID: id},
		"wide": {ID: "wide", Enabled: true, ProjectNamespace: w.nsA, ClusterID: id, ProjectWide: true},
	}
	tplNS := env.Namespace(t)
	// corectl's writes in the ingress and project namespaces: the
	// RoleBindings `corectl rbac` prints (a world run as the admin does
	// not need them; they do no harm).
	grantNamespaces(t, nsrights.Needed(c, src)...)
	if o.before != nil {
		o.before(w)
	}
	d, err := daemon.New(daemon.Options{
		MaxTimeout: o.maxTimeout, InternalToken: internalToken,
		Config: &cluster.Config{Clusters: []cluster.Cluster{*c}, Templates: cluster.TemplateStore{ClusterID: id, Namespace: tplNS},
			SandboxTemplates: kubetest.SandboxTemplates()},
		Keys: keys, Credentials: src, Listen: "127.0.0.1:0", IngressWait: 20 * time.Second, APIShare: o.apiShare,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) {
			rc := rest.CopyConfig(cfg)
			if o.wrap != nil {
				rc.Wrap(o.wrap)
			}
			return rc, nil
		},
		TokenKey: &sk, ReadyBudget: 30 * time.Second, OrphanInterval: time.Hour, NativeResync: time.Hour, LogSource: o.logs,
		ProbeSourceDiscovery: probe, ProbeListen: "127.0.0.1:0", ShutdownGrace: 20 * time.Second,
		Lifecycle: func(lo *lifecycle.Orchestrator) {
			lo.Now = func() time.Time { return time.Now().Add(time.Duration(w.skew.Load())) }
			if !o.productionTimers {
				lo.ReadyInterval = 20 * time.Millisecond
			}
			if lo.Probe != nil {
				lo.Probe.Interval, lo.Probe.Budget = 20*time.Millisecond, 3*time.Second
			}
			lo.Fault = func(id string, s lifecycle.Step) error {
				if o.onStep != nil {
					o.onStep(id, s)
				}
				w.mu.Lock()
				block, held := w.blockAt[s], w.held
				w.mu.Unlock()
				if block != nil {
					select {
					case held <- id:
					default:
					}
					<-block
				}
				w.mu.Lock()
				defer w.mu.Unlock()
				if w.failAt[s] {
					return errors.New("fault at " + string(s))
				}
				return nil
			}
			w.orch = lo
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	wait, err := env.RunSandboxController(ctx, "127.0.0.1", func(err error) { t.Errorf("controller: %v", err) }, w.nsA, w.nsB)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var stopOnce sync.Once
	var runErr error
	w.stop = func() error {
		stopOnce.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() {
		cancel()
		wait()
		if err := w.stop(); err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	w.url = "http://" + d.Addr()
	w.d = d
	return w
}

// markReady sets status.ready and the endpoints annotation as
// OpenSandbox's controller does.
func (w *world) markReady(ctx context.Context, ns, id string, ready int) {
	if err := env.MarkReady(ctx, ns, id, ready, "127.0.0.1"); err != nil {
		w.t.Errorf("mark ready: %v", err)
	}
}

// resolve is the fixed entry's view of a sandbox: the BatchSandbox named
// id in any namespace, its status.ready and endpoints annotation.
func (w *world) resolve(id string) (fixedentry.Sandbox, bool) {
	r, ok := env.Resolve(context.Background(), id)
	ports := map[int]string{lifecycle.ExecdPort: w.execd}
	w.mu.Lock()
	for p, a := range w.ports {
		ports[p] = a
	}
	w.mu.Unlock()
	return fixedentry.Sandbox{Ready: r.Ready, Endpoint: r.Endpoint, Namespace: r.Namespace, Ports: ports}, ok
}

// natSource is the address nginx sees.
func (w *world) natSource(string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.source
}

// nginxRoute is ingress-nginx's decision for path from the Ingresses in
// the ingress namespace (fixedentry.IngressRoute); with noEcho an echo
// Ingress is not served yet.
func (w *world) nginxRoute(path string) (fixedentry.NginxRoute, bool) {
	var list networkingv1.IngressList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(w.ingNS)); err != nil {
		return fixedentry.NginxRoute{}, false
	}
	w.mu.Lock()
	noEcho := w.noEcho
	w.mu.Unlock()
	r, ok := fixedentry.IngressRoute(list.Items, "", path)
	if r.Echo && noEcho {
		return fixedentry.NginxRoute{}, true
	}
	return r, ok
}

// do sends a request with key and decodes a JSON answer into out.
func (w *world) do(method, path, key, body string, out any) (int, []byte) {
	w.t.Helper()
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			w.t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, b
}

// send sends a request with key and returns its status, closing the body
// unread (a log stream need not end). Unlike do it returns the error
// instead of failing the test, so goroutines other than the test's may
// call it.
func (w *world) send(method, path, key, body string) (int, error) {
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// sandboxBody is the E2B Sandbox object, decoded strictly enough to see
// every field.
type sandboxBody struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	Domain             *string `json:"domain"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

const restricted = `{"templateID":"base","timeout":300,"metadata":{},"envVars":{},"secure":true,
 "network":{"ingress":[{"cidr":"203.0.113.0/24","description":"office"}],"allowOut":["198.51.100.7"]}}`

func (w *world) create(body string) sandboxBody {
	w.t.Helper()
	var sb sandboxBody
	st, raw := w.do("POST", "/v2/sandboxes", "key-a", body, &sb)
	if st != http.StatusCreated {
		w.t.Fatalf("create = %d %s", st, raw)
	}
	return sb
}

func (w *world) checkToken(tok, id string) {
	w.t.Helper()
	tg, err := w.verifier.Verify(tok)
	if err != nil {
		w.t.Fatalf("token does not verify with the gateway's key: %v", err)
	}
	if tg != (token.Target{CredentialID: "a", SandboxID: id, Port: lifecycle.EnvdPort}) {
		w.t.Fatalf("token target = %+v", tg)
	}
}

func get(obj client.Object, ns, name string) error {
	return env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

func bs(ns, id string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	if err := get(u, ns, id); err != nil {
		return nil
	}
	return u
}

// bsRef is an empty BatchSandbox to read into.
func bsRef() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	return u
}

func policyOf(t *testing.T, ns string, u *unstructured.Unstructured) string {
	t.Helper()
	l, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "labels")
	return egress.PolicyName(l["allocation-id"])
}

// TestCreateConnectGetDelete is the main path: create with a network
// object (ingress carrier, egress policy, BatchSandbox, owners, desired,
// readiness through the fixed entry, token), GET, connect (v1 and v2),
// another credential's 404, and the fail-closed delete.
func TestCreateConnectGetDelete(t *testing.T) {
	w := start(t)
	sb := w.create(restricted)
	if sb.TemplateID != "base" || sb.ClientID == "" || sb.EnvdVersion != lifecycle.DefaultEnvdVersion || sb.Domain != nil || sb.TrafficAccessToken != nil {
		t.Fatalf("create body = %+v", sb)
	}
	id := sb.SandboxID
	if sandbox.ValidateID(id) != nil {
		t.Fatalf("sandbox ID %q", id)
	}
	w.checkToken(sb.EnvdAccessToken, id)

	// The readiness ping went through the fixed entry to execd's /ping.
	var pinged bool
	for _, r := range w.entry.Requests() {
		if r.Path == "/"+id+"/44772/ping" && r.Status == 200 && r.UpstreamPath == "/ping" {
			pinged = true
		}
	}
	if !pinged {
		t.Fatalf("no successful readiness ping in %+v", w.entry.Requests())
	}

	// Objects: the carrier with the allowlist and the owner annotation,
	// the policy owned by the BatchSandbox, the desired state Verified.
	u := bs(w.nsA, id)
	if u == nil || u.GetAnnotations()[v1alpha1.AnnotationLifecycle] != lifecycle.StateReady {
		t.Fatalf("BatchSandbox = %v", u)
	}
	ing := &networkingv1.Ingress{}
	if err := get(ing, w.ingNS, ingressallow.IngressName(id)); err != nil {
		t.Fatal(err)
	}
	if ing.Annotations[ingressallow.AnnotationWhitelist] != "203.0.113.0/24" ||
		ing.Annotations[v1alpha1.AnnotationOwner] != w.nsA+"/"+id+"/"+string(u.GetUID()) {
		t.Fatalf("Ingress annotations %v", ing.Annotations)
	}
	np := &networkingv1.NetworkPolicy{}
	if err := get(np, w.nsA, policyOf(t, w.nsA, u)); err != nil {
		t.Fatal(err)
	}
	if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != u.GetUID() {
		t.Fatalf("policy owners %v", np.OwnerReferences)
	}

	var info lifecycle.Info
	if st, raw := w.do("GET", "/sandboxes/"+id, "key-a", "", &info); st != 200 {
		t.Fatalf("GET = %d %s", st, raw)
	}
	if info.LifecycleState != lifecycle.StateReady || info.State != "running" || info.Egress == nil || !info.Egress.NetworkReady ||
		info.Ingress == nil || !info.Ingress.Ready || info.Endpoints.NoVNC != w.entryURL+"/"+id+"/6080/" ||
		info.Endpoints.CDP != w.entryURL+"/"+id+"/9222/" || info.Endpoints.URITemplate != "/{sandboxID}/{port}/{upstreamPath}" ||
		info.Endpoints.BaseURL != w.entryURL || info.CPUCount != 2 || info.MemoryMB != 2048 || info.DiskSizeMB != 10240 ||
		info.Lifecycle.OnTimeout != "kill" || info.Lifecycle.AutoResume {
		t.Fatalf("GET = %+v", info)
	}
	if got := *info.Egress.ConfiguredEgress; len(got) != 1 || got[0].CIDR != "198.51.100.7/32" {
		t.Fatalf("egress %v", got)
	}

	for _, p := range []string{"/sandboxes/" + id + "/connect", "/v2/sandboxes/" + id + "/connect"} {
		var c sandboxBody
		if st, raw := w.do("POST", p, "key-a", `{"timeout":300}`, &c); st != 200 {
			t.Fatalf("connect %s = %d %s", p, st, raw)
		}
		if c.SandboxID != id || c.EnvdVersion != lifecycle.DefaultEnvdVersion || c.TemplateID != "base" {
			t.Fatalf("connect body %+v", c)
		}
		w.checkToken(c.EnvdAccessToken, id)
	}
	// Another credential's sandbox does not exist for key-b.
	for _, r := range [][2]string{{"POST", "/v2/sandboxes/" + id + "/connect"}, {"GET", "/sandboxes/" + id}, {"DELETE", "/sandboxes/" + id}} {
		if st, raw := w.do(r[0], r[1], "key-b", "{}", nil); st != 404 {
			t.Fatalf("key-b %s %s = %d %s", r[0], r[1], st, raw)
		}
	}

	if st, raw := w.do("DELETE", "/sandboxes/"+id, "key-a", "", nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	w.assertGone(id, policyOf(t, w.nsA, u))
	for _, r := range [][2]string{{"POST", "/v2/sandboxes/" + id + "/connect"}, {"GET", "/sandboxes/" + id}, {"DELETE", "/sandboxes/" + id},
		{"GET", "/sandboxes/" + id + "/network"}, {"GET", "/sandboxes/" + id + "/network/ingress"}} {
		if st, raw := w.do(r[0], r[1], "key-a", "", nil); st != 404 {
			t.Fatalf("after delete %s %s = %d %s", r[0], r[1], st, raw)
		}
	}
}

// assertGone checks that none of sandbox id's objects exist.
func (w *world) assertGone(id, policy string) {
	w.t.Helper()
	if err := get(&networkingv1.Ingress{}, w.ingNS, ingressallow.IngressName(id)); !apierrors.IsNotFound(err) {
		w.t.Fatalf("Ingress still there (%v)", err)
	}
	if bs(w.nsA, id) != nil {
		w.t.Fatalf("BatchSandbox still there")
	}
	if err := get(&v1alpha1.SandboxIngressAllowlist{}, w.nsA, id); !apierrors.IsNotFound(err) {
		w.t.Fatalf("SandboxIngressAllowlist still there (%v)", err)
	}
	if policy != "" {
		if err := get(&networkingv1.NetworkPolicy{}, w.nsA, policy); !apierrors.IsNotFound(err) {
			w.t.Fatalf("NetworkPolicy %s still there (%v)", policy, err)
		}
	}
}

// nothingLeft checks that the namespace holds no sandbox object at all.
func (w *world) nothingLeft() {
	w.t.Helper()
	ctx := context.Background()
	var ings networkingv1.IngressList
	var nps networkingv1.NetworkPolicyList
	var als v1alpha1.SandboxIngressAllowlistList
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
	for _, l := range []struct {
		obj client.ObjectList
		ns  string
	}{{&ings, w.ingNS}, {&nps, w.nsA}, {&als, w.nsA}, {list, w.nsA}} {
		if err := env.Client.List(ctx, l.obj, client.InNamespace(l.ns)); err != nil {
			w.t.Fatal(err)
		}
	}
	if len(ings.Items)+len(nps.Items)+len(als.Items)+len(list.Items) != 0 {
		w.t.Fatalf("left behind: %d Ingresses, %d policies, %d allowlists, %d BatchSandboxes", len(ings.Items), len(nps.Items), len(als.Items), len(list.Items))
	}
}

// TestCreateUnrestricted: without ingress rules no carrier is written (an
// unrestricted sandbox stays unrestricted), the egress policy still is.
func TestCreateUnrestricted(t *testing.T) {
	w := start(t)
	sb := w.create(`{"templateID":"base"}`)
	w.checkToken(sb.EnvdAccessToken, sb.SandboxID)
	if err := get(&networkingv1.Ingress{}, w.ingNS, ingressallow.IngressName(sb.SandboxID)); !apierrors.IsNotFound(err) {
		t.Fatalf("an unrestricted sandbox got a carrier (%v)", err)
	}
	var info lifecycle.Info
	if st, raw := w.do("GET", "/sandboxes/"+sb.SandboxID, "key-a", "", &info); st != 200 || info.LifecycleState != lifecycle.StateReady || info.Ingress != nil {
		t.Fatalf("GET = %d %s", st, raw)
	}
	if st, raw := w.do("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", "", nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	w.nothingLeft()
}

// TestCreateFaultAtEveryStep injects a failure before each create step and
// checks the answer (no token anywhere in it), the compensation order
// (Ingress first, then desired state, BatchSandbox, policy; only what was
// written, the desired state also once the BatchSandbox was, since a PUT
// may have written it from then on; the Ingress and the policy are
// written side by side, so a fault at either leaves the other written)
// and that nothing is left in the cluster.
func TestCreateFaultAtEveryStep(t *testing.T) {
	w := start(t)
	// Each compensation step runs once this create step has run.
	after := map[lifecycle.Step]lifecycle.Step{
		lifecycle.StepDeleteIngress: lifecycle.StepIngress, lifecycle.StepDeleteDesired: lifecycle.StepBatchSandbox,
		lifecycle.StepDeleteBatchSandbox: lifecycle.StepBatchSandbox, lifecycle.StepDeletePolicy: lifecycle.StepPolicy,
	}
	order := []lifecycle.Step{lifecycle.StepDeleteIngress, lifecycle.StepDeleteDesired, lifecycle.StepDeleteBatchSandbox, lifecycle.StepDeletePolicy}
	for i, step := range lifecycle.CreateSteps {
		t.Run(string(step), func(t *testing.T) {
			w.t = t
			w.fail(step)
			before := w.entry.Received()
			var fb struct {
				Code    int      `json:"code"`
				Error   string   `json:"error"`
				Message string   `json:"message"`
				Step    string   `json:"step"`
				Cleanup []string `json:"cleanup"`
			}
			st, raw := w.do("POST", "/sandboxes", "key-a", restricted, &fb)
			wantStatus, wantCode := 500, lifecycle.CodeCreateFailed
			switch step {
			case lifecycle.StepCNIGate:
				wantStatus, wantCode = 409, lifecycle.CodeCNIUnqualified
			case lifecycle.StepReadiness:
				wantStatus, wantCode = 503, lifecycle.CodeNotReady
			}
			if st != wantStatus || fb.Code != wantStatus || fb.Error != wantCode || fb.Step != string(step) {
				t.Fatalf("answer %d %s", st, raw)
			}
			if bytes.Contains(raw, []byte("envdAccessToken")) || bytes.Contains(raw, []byte("eyJ")) {
				t.Fatalf("a token leaked: %s", raw)
			}
			// The ingress and policy steps run side by side, each to its
			// end: a fault at one still lets the other write.
			side := func(s lifecycle.Step) bool { return s == lifecycle.StepIngress || s == lifecycle.StepPolicy }
			var want []string
			for _, c := range order {
				if slices.Index(lifecycle.CreateSteps, after[c]) < i || (side(step) && side(after[c]) && after[c] != step) {
					want = append(want, string(c))
				}
			}
			if !slices.Equal(fb.Cleanup, want) {
				t.Fatalf("cleanup %v, want %v", fb.Cleanup, want)
			}
			w.nothingLeft()
			// The readiness ping is attempted only from its own step on.
			var pings int
			for _, r := range w.entry.RequestsAfter(before) {
				if strings.HasSuffix(r.Path, "/44772/ping") {
					pings++
				}
			}
			if (pings > 0) != (i > slices.Index(lifecycle.CreateSteps, lifecycle.StepReadiness)) {
				t.Fatalf("%d readiness pings", pings)
			}
		})
	}
}

// TestCreateIngressPendingCleanup: when the Ingress deletion of the
// compensation cannot be confirmed the answer is "create failed, ingress
// pending cleanup", the sandbox is CleanupFailed and refuses access, and
// the orphan scan converges it.
func TestCreateIngressPendingCleanup(t *testing.T) {
	w := start(t)
	w.waitStartupScan(t)
	w.fail(lifecycle.StepReadiness, lifecycle.StepDeleteIngress)
	var fb struct {
		Error   string   `json:"error"`
		Cleanup []string `json:"cleanup"`
	}
	st, raw := w.do("POST", "/sandboxes", "key-a", restricted, &fb)
	if st != 500 || fb.Error != lifecycle.CodeIngressPendingCleanup || !slices.Equal(fb.Cleanup, []string{"delete-ingress:unconfirmed"}) ||
		bytes.Contains(raw, []byte("envdAccessToken")) {
		t.Fatalf("answer %d %s", st, raw)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
	if err := env.Client.List(context.Background(), list, client.InNamespace(w.nsA)); err != nil || len(list.Items) != 1 {
		t.Fatalf("BatchSandboxes %v %v", list.Items, err)
	}
	id := list.Items[0].GetName()
	w.goneForE2B(id, lifecycle.StateCleanupFailed)
	w.refused(id)
	w.fail()
	rep, err := w.orch.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failed) != 0 || len(rep.Deleted) != 1 {
		t.Fatalf("scan %+v", rep)
	}
	w.nothingLeft()
}

// goneForE2B checks that sandbox id, in lifecycle state state (Deleting
// or CleanupFailed), is answered on E2B's read routes as E2B answers a
// sandbox that is gone: GET, its metrics and logs, pause and fork are 404
// sandbox_not_found (GET's message names the state), and the lists and
// GET /sandboxes/metrics leave it out.
func (w *world) goneForE2B(id, state string) {
	w.t.Helper()
	var e struct{ Error, Message string }
	if st, raw := w.do("GET", "/sandboxes/"+id, "key-a", "", &e); st != http.StatusNotFound || e.Error != "sandbox_not_found" || !strings.Contains(e.Message, state) {
		w.t.Fatalf("%s: GET = %d %s", state, st, raw)
	}
	for _, r := range [][2]string{{"GET", "/sandboxes/" + id + "/metrics"}, {"GET", "/sandboxes/" + id + "/logs"}, {"GET", "/v2/sandboxes/" + id + "/logs"},
		{"POST", "/sandboxes/" + id + "/pause"}, {"POST", "/sandboxes/" + id + "/fork"}} {
		if st, raw := w.do(r[0], r[1], "key-a", "", nil); st != http.StatusNotFound || !bytes.Contains(raw, []byte("sandbox_not_found")) {
			w.t.Fatalf("%s: %s %s = %d %s", state, r[0], r[1], st, raw)
		}
	}
	for _, p := range []string{"/sandboxes", "/v2/sandboxes", "/sandboxes/metrics?sandbox_ids=" + id} {
		if st, raw := w.do("GET", p, "key-a", "", nil); st != http.StatusOK || bytes.Contains(raw, []byte(id)) {
			w.t.Fatalf("%s: GET %s = %d %s", state, p, st, raw)
		}
	}
}

// refused checks that connect and every network route refuse sandbox id
// with 409 (Deleting / CleanupFailed in spec §5.3).
func (w *world) refused(id string) {
	w.t.Helper()
	for _, r := range [][3]string{
		{"POST", "/v2/sandboxes/" + id + "/connect", "{}"},
		{"GET", "/sandboxes/" + id + "/network", ""},
		{"PUT", "/sandboxes/" + id + "/network", `{"defaultAction":"deny","egress":[{"cidr":"0.0.0.0/0"}]}`},
		{"GET", "/sandboxes/" + id + "/network/ingress", ""},
		{"PUT", "/sandboxes/" + id + "/network/ingress", `{"ingress":[{"cidr":"0.0.0.0/0"}]}`},
	} {
		if st, raw := w.do(r[0], r[1], "key-a", r[2], nil); st != 409 || bytes.Contains(raw, []byte("envdAccessToken")) {
			w.t.Fatalf("%s %s = %d %s", r[0], r[1], st, raw)
		}
	}
}

// TestDeleteFailClosed: a delete whose Ingress removal cannot be confirmed
// leaves the sandbox CleanupFailed: connect and the network API refuse it,
// the carrier is neither reopened nor widened; a later delete finishes.
func TestDeleteFailClosed(t *testing.T) {
	w := start(t)
	sb := w.create(restricted)
	id := sb.SandboxID
	pol := policyOf(t, w.nsA, bs(w.nsA, id))
	w.fail(lifecycle.StepDeleteIngress)
	var eb struct {
		Error string `json:"error"`
	}
	if st, raw := w.do("DELETE", "/sandboxes/"+id, "key-a", "", &eb); st != 500 || eb.Error != lifecycle.CodeDeletePending {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	w.goneForE2B(id, lifecycle.StateCleanupFailed)
	w.refused(id)
	ing := &networkingv1.Ingress{}
	if err := get(ing, w.ingNS, ingressallow.IngressName(id)); err != nil || ing.Annotations[ingressallow.AnnotationWhitelist] != "203.0.113.0/24" {
		t.Fatalf("carrier changed: %v %v", err, ing.Annotations)
	}
	w.fail()
	if st, raw := w.do("DELETE", "/sandboxes/"+id, "key-a", "", nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	w.assertGone(id, pol)
}

// TestDeleteOutlivesItsCaller: a delete whose caller goes away once it
// has begun (the DELETE's client disconnects, so the request's context is
// cancelled) still finishes: it is not left Deleting half-way, the pod
// running and the carrier in place, until the orphan scan's grace.
func TestDeleteOutlivesItsCaller(t *testing.T) {
	w := start(t)
	sb := w.create(restricted)
	id := sb.SandboxID
	pol := policyOf(t, w.nsA, bs(w.nsA, id))
	release, held := w.hold(lifecycle.StepDeleteIngress)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.orch.Delete(ctx, w.nsA, id, nil) }()
	select {
	case got := <-held:
		if got != id {
			t.Fatalf("held the delete of %s, want %s", got, id)
		}
	case err := <-done:
		t.Fatalf("the delete returned (%v) before its %s step", err, lifecycle.StepDeleteIngress)
	}
	// The sandbox is marked Deleting; its caller goes away before the
	// carrier's removal.
	cancel()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Delete after its caller went away: %v", err)
	}
	w.assertGone(id, pol)
}

// TestLifecycleMatrix walks the states of spec §5.3 and checks connect,
// GET /network and PUT /network in each.
func TestLifecycleMatrix(t *testing.T) {
	w := start(t)
	sb := w.create(restricted)
	id := sb.SandboxID
	u := bs(w.nsA, id)
	pol := policyOf(t, w.nsA, u)
	ctx := context.Background()
	setLifecycle := func(s string) {
		t.Helper()
		p := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationLifecycle, s)
		if err := env.Client.Patch(ctx, bs(w.nsA, id), client.RawPatch(types.MergePatchType, []byte(p))); err != nil {
			t.Fatal(err)
		}
	}
	putEgress := `{"defaultAction":"deny","egress":[{"cidr":"198.51.100.7"}]}`
	check := func(state string, connect, getNet, putNet int) {
		t.Helper()
		if lifecycle.Gone(state) {
			w.goneForE2B(id, state)
		} else {
			var info lifecycle.Info
			if st, raw := w.do("GET", "/sandboxes/"+id, "key-a", "", &info); st != 200 || info.LifecycleState != state {
				t.Fatalf("%s: GET = %d %s", state, st, raw)
			}
		}
		var c sandboxBody
		if st, raw := w.do("POST", "/v2/sandboxes/"+id+"/connect", "key-a", "{}", &c); st != connect || (st != 200 && c.EnvdAccessToken != "") {
			t.Fatalf("%s: connect = %d %s", state, st, raw)
		}
		if st, raw := w.do("GET", "/sandboxes/"+id+"/network", "key-a", "", nil); st != getNet {
			t.Fatalf("%s: GET /network = %d %s", state, st, raw)
		}
		if st, raw := w.do("PUT", "/sandboxes/"+id+"/network", "key-a", putEgress, nil); st != putNet {
			t.Fatalf("%s: PUT /network = %d %s", state, st, raw)
		}
	}
	check(lifecycle.StateReady, 200, 200, 200)

	setLifecycle(lifecycle.StateCreating)
	check(lifecycle.StateCreating, 409, 200, 200)
	setLifecycle(lifecycle.StateReady)

	w.markReady(ctx, w.nsA, id, 0)
	check(lifecycle.StatePodUnavailable, 409, 200, 200)
	w.markReady(ctx, w.nsA, id, 1)
	check(lifecycle.StateReady, 200, 200, 200)

	// Someone edits the policy: the spec drifts from the LKG.
	np := &networkingv1.NetworkPolicy{}
	if err := get(np, w.nsA, pol); err != nil {
		t.Fatal(err)
	}
	np.Spec.Egress = np.Spec.Egress[:1]
	if err := env.Client.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	var info lifecycle.Info
	if w.do("GET", "/sandboxes/"+id, "key-a", "", &info); info.LifecycleState != lifecycle.StateUnverifiedSpec {
		t.Fatalf("drifted policy: %+v", info)
	}
	if st, _ := w.do("POST", "/v2/sandboxes/"+id+"/connect", "key-a", "{}", nil); st != 409 {
		t.Fatalf("connect with a drifted policy = %d", st)
	}
	// The exact PUT restores a verified policy.
	check(lifecycle.StateUnverifiedSpec, 409, 200, 200)
	check(lifecycle.StateReady, 200, 200, 200)

	// A non-platform policy widening the sandbox's egress.
	wide := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "user-wide", Namespace: w.nsA},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}},
		},
	}
	if err := env.Client.Create(ctx, wide); err != nil {
		t.Fatal(err)
	}
	check(lifecycle.StatePolicyConflict, 409, 200, 409)
	if err := env.Client.Delete(ctx, wide); err != nil {
		t.Fatal(err)
	}
	// The failed PUT's state stays until a PUT verifies again.
	check(lifecycle.StatePolicyConflict, 409, 200, 200)
	check(lifecycle.StateReady, 200, 200, 200)

	setLifecycle(lifecycle.StateDeleting)
	check(lifecycle.StateDeleting, 409, 409, 409)
	setLifecycle(lifecycle.StateReady)

	if st, raw := w.do("DELETE", "/sandboxes/"+id, "key-a", "", nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	for _, r := range [][3]string{{"POST", "/v2/sandboxes/" + id + "/connect", "{}"}, {"GET", "/sandboxes/" + id + "/network", ""},
		{"PUT", "/sandboxes/" + id + "/network", putEgress}, {"GET", "/sandboxes/" + id, ""}} {
		if st, raw := w.do(r[0], r[1], "key-a", r[2], nil); st != 404 {
			t.Fatalf("deleted: %s %s = %d %s", r[0], r[1], st, raw)
		}
	}
}

// TestCreateBadNetwork: an invalid CIDR is a 400 with the createnet code
// and nothing is written.
func TestCreateBadNetwork(t *testing.T) {
	w := start(t)
	for body, code := range map[string]string{
		`{"templateID":"base","network":{"allowOut":["300.1.1.1"]}}`:    "network_cidr_invalid",
		`{"templateID":"base","network":{"ingress":[{"cidr":"x/33"}]}}`: "ingress_cidr_invalid",
		`{"templateID":"base","network":{"allowOut":"not-a-list"}}`:     "bad_request",
		`{"templateID":"Not A Template!"}`:                              "bad_request",
		`[1,2]`:                                                         "bad_request",
	} {
		var eb struct {
			Error string `json:"error"`
		}
		if st, raw := w.do("POST", "/sandboxes", "key-a", body, &eb); st != 400 || eb.Error != code {
			t.Fatalf("%s → %d %s", body, st, raw)
		}
	}
	if st, _ := w.do("POST", "/sandboxes", "nope", "{}", nil); st != 401 {
		t.Fatalf("unknown key = %d", st)
	}
	w.nothingLeft()
}

// TestOrphanScan creates leftovers the way interrupted creates leave them
// and checks that the scan removes exactly those, and only once they are
// older than the grace.
func TestOrphanScan(t *testing.T) {
	w := start(t)
	w.waitStartupScan(t)
	ctx := context.Background()
	// The live sandbox outlives the scan's clock (10 minutes ahead).
	live := w.create(strings.Replace(restricted, `"timeout":300`, `"timeout":3000`, 1))
	liveU := bs(w.nsA, live.SandboxID)
	livePol := policyOf(t, w.nsA, liveU)

	mk := func(obj client.Object) {
		t.Helper()
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	ident := func(id string) map[string]string {
		return (&sandbox.Sandbox{ID: id, Namespace: w.nsA}).IdentityLabels(w.cluster.ID)
	}
	// A carrier whose BatchSandbox never appeared.
	prov := &sandbox.Sandbox{ID: "gone1", Namespace: w.nsA}
	mk(ingressallow.Carrier(w.cluster, prov, []string{"203.0.113.0/24"}))
	// A policy whose BatchSandbox never appeared.
	pol := func(name, id string, owners []metav1.OwnerReference) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.nsA, Labels: ident(id), OwnerReferences: owners},
			Spec:       egress.Compile(w.cluster, "allocation-id", "x", nil),
		}
	}
	mk(pol("sandbox-egress-gone2", "gone2", nil))
	// A policy of an existing BatchSandbox that lost its owner reference.
	mk(pol("sandbox-egress-stray", live.SandboxID, nil))
	// A probe-echo Ingress.
	echo := ingressallow.Carrier(w.cluster, &sandbox.Sandbox{ID: "echo", Namespace: w.nsA}, []string{"10.0.0.0/8"})
	echo.Name = "sandbox-probe-echo-abc"
	echo.Labels[v1alpha1.LabelProbeEcho] = "true"
	mk(echo)
	// Someone else's Ingress and policy: never touched.
	foreign := ingressallow.Carrier(w.cluster, prov, []string{"203.0.113.0/24"})
	foreign.Name, foreign.Labels = "foreign", map[string]string{"app": "x"}
	mk(foreign)
	mk(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: w.nsA}, Spec: egress.Compile(w.cluster, "a", "b", nil)})
	// An abandoned create: its corectl died between the BatchSandbox and
	// the owner back-fill, leaving the CR Creating (no end time, so the
	// expiry never takes it), its carrier without the owner's UID and its
	// policy without the owner reference.
	abandoned := kubetest.NewBatchSandbox(w.nsA, "abandoned1", map[string]string{"allocation-id": "alabandoned1"})
	abandoned.SetLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: w.cluster.ID})
	abandoned.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: lifecycle.StateCreating})
	mk(abandoned)
	mk(ingressallow.Carrier(w.cluster, &sandbox.Sandbox{ID: "abandoned1", Namespace: w.nsA}, []string{"198.51.100.0/24"}))
	mk(pol(egress.PolicyName("alabandoned1"), "abandoned1", nil))
	// A delete cut off after its Deleting mark (its corectl died, or its
	// client went away), before the carrier went.
	halfDeleted := kubetest.NewBatchSandbox(w.nsA, "halfdeleted1", map[string]string{"allocation-id": "alhalfdeleted1"})
	halfDeleted.SetLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: w.cluster.ID})
	halfDeleted.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: lifecycle.StateDeleting})
	mk(halfDeleted)
	mk(ingressallow.Carrier(w.cluster, &sandbox.Sandbox{ID: "halfdeleted1", Namespace: w.nsA}, []string{"198.51.100.0/24"}))
	mk(pol(egress.PolicyName("alhalfdeleted1"), "halfdeleted1", nil))

	// Young: nothing goes (a create or discovery may be in flight).
	rep, err := w.orch.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 0 || len(rep.Failed) != 0 {
		t.Fatalf("young scan %+v", rep)
	}
	// Old (past the 5 minute grace): the leftovers go.
	w.skew.Store(int64(10 * time.Minute)) // the orchestrator's clock (lo.Now reads it; the expiry reconciler shares it)
	rep, err = w.orch.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.Deleted)
	want := []string{"BatchSandbox " + w.nsA + "/abandoned1", "BatchSandbox " + w.nsA + "/halfdeleted1", "Ingress " + w.ingNS + "/" + ingressallow.IngressName("gone1"), "Ingress " + w.ingNS + "/sandbox-probe-echo-abc",
		"NetworkPolicy " + w.nsA + "/sandbox-egress-gone2", "NetworkPolicy " + w.nsA + "/sandbox-egress-stray"}
	if !slices.Equal(rep.Deleted, want) || len(rep.Failed) != 0 {
		t.Fatalf("scan %+v, want %v", rep, want)
	}
	// The abandoned create and the half-deleted sandbox went whole,
	// through the fail-closed delete.
	for _, k := range []struct {
		obj      client.Object
		ns, name string
	}{{&networkingv1.Ingress{}, w.ingNS, ingressallow.IngressName("abandoned1")}, {&networkingv1.NetworkPolicy{}, w.nsA, egress.PolicyName("alabandoned1")},
		{bsRef(), w.nsA, "abandoned1"}, {&networkingv1.Ingress{}, w.ingNS, ingressallow.IngressName("halfdeleted1")},
		{&networkingv1.NetworkPolicy{}, w.nsA, egress.PolicyName("alhalfdeleted1")}, {bsRef(), w.nsA, "halfdeleted1"}} {
		if err := get(k.obj, k.ns, k.name); !apierrors.IsNotFound(err) {
			t.Fatalf("%s/%s of the abandoned create: %v", k.ns, k.name, err)
		}
	}
	for _, k := range []struct {
		obj      client.Object
		ns, name string
	}{{&networkingv1.Ingress{}, w.ingNS, "foreign"}, {&networkingv1.NetworkPolicy{}, w.nsA, "foreign"},
		{&networkingv1.Ingress{}, w.ingNS, ingressallow.IngressName(live.SandboxID)}, {&networkingv1.NetworkPolicy{}, w.nsA, livePol}} {
		if err := get(k.obj, k.ns, k.name); err != nil {
			t.Fatalf("%s/%s removed: %v", k.ns, k.name, err)
		}
	}
	var info lifecycle.Info
	if st, _ := w.do("GET", "/sandboxes/"+live.SandboxID, "key-a", "", &info); st != 200 || info.LifecycleState != lifecycle.StateReady {
		t.Fatalf("live sandbox after the scan: %d %+v", st, info)
	}
}

// TestLifecycleAsServiceAccount runs create, connect, a failed create's
// compensation, delete and the orphan scan as corectl's service account
// with deploy/compute/rbac.yaml installed.
func TestLifecycleAsServiceAccount(t *testing.T) {
	ctx := context.Background()
	w := startAs(t, serviceAccount(t))
	w.waitStartupScan(t)
	sb := w.create(restricted)
	w.checkToken(sb.EnvdAccessToken, sb.SandboxID)
	if st, raw := w.do("POST", "/sandboxes/"+sb.SandboxID+"/connect", "key-a", "{}", nil); st != 200 {
		t.Fatalf("connect = %d %s", st, raw)
	}
	w.fail(lifecycle.StepReadiness)
	if st, raw := w.do("POST", "/sandboxes", "key-a", restricted, nil); st != 503 {
		t.Fatalf("failed create = %d %s", st, raw)
	}
	w.fail()
	if st, raw := w.do("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", "", nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	if rep, err := w.orch.Scan(ctx); err != nil || len(rep.Failed) != 0 {
		t.Fatalf("scan as the service account: %+v %v", rep, err)
	}
	w.nothingLeft()
}

// grantNamespaces creates the RoleBindings of grants (package nsrights)
// for corectl's service account, as `corectl rbac | kubectl apply -f -`.
func grantNamespaces(t testing.TB, grants ...nsrights.Grant) {
	t.Helper()
	for _, b := range nsrights.Bindings(grants, nsrights.DefaultServiceAccount) {
		if err := env.Client.Create(context.Background(), &b); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("RoleBinding %s/%s: %v", b.Namespace, b.Name, err)
		}
	}
}

// serviceAccount installs corectl's RBAC (package deploy) and returns a
// configuration that reaches the apiserver as corectl's service account.
func serviceAccount(t *testing.T) *rest.Config {
	t.Helper()
	ctx := context.Background()
	objs, err := deploy.RBAC()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "corectl-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:corectl-system:corectl"}
	return sa
}

// TestProbeSourceDiscovery exercises spec §5.2.2 through the fixed entry's
// nginx emulation (per-path source allowlists, the echo snippet, a NAT'd
// source): discovery and merge (U ∪ P written, P self-described, GET shows
// U), an unrestricted sandbox stays unrestricted, a user CIDR that is also
// a probe source stays visible, no false drift without the cache, the 403
// retry after NAT drift, and fail-closed discovery failure.
func TestProbeSourceDiscovery(t *testing.T) {
	w := startWith(t, env.Config, true)
	ctx := context.Background()
	carrier := func(id string) *networkingv1.Ingress {
		t.Helper()
		ing := &networkingv1.Ingress{}
		if err := get(ing, w.ingNS, ingressallow.IngressName(id)); err != nil {
			t.Fatal(err)
		}
		return ing
	}
	noEchoLeft := func() {
		t.Helper()
		var list networkingv1.IngressList
		if err := env.Client.List(ctx, &list, client.InNamespace(w.ingNS), client.HasLabels{v1alpha1.LabelProbeEcho}); err != nil || len(list.Items) != 0 {
			t.Fatalf("echo Ingresses left: %v %v", list.Items, err)
		}
	}

	// 1. Discovery and merge.
	sb := w.create(restricted)
	ing := carrier(sb.SandboxID)
	if ing.Annotations[ingressallow.AnnotationWhitelist] != "10.9.9.9/32,203.0.113.0/24" ||
		ing.Annotations[ingressallow.AnnotationProbeSources] != `["10.9.9.9/32"]` {
		t.Fatalf("carrier annotations %v", ing.Annotations)
	}
	var echoes int
	for _, r := range w.entry.Requests() {
		if strings.HasPrefix(r.Path, probesource.EchoPathPrefix) && r.Status == 200 {
			echoes++
		}
	}
	if echoes != 20 {
		var seen []string
		for _, r := range w.entry.Requests() {
			seen = append(seen, fmt.Sprintf("%s %d", r.Path, r.Status))
		}
		t.Fatalf("%d echo answers, want 20: %v", echoes, seen)
	}
	noEchoLeft()
	var st ingressallow.Status
	if code, raw := w.do("GET", "/sandboxes/"+sb.SandboxID+"/network/ingress", "key-a", "", &st); code != 200 || !st.Ready ||
		len(*st.Configured) != 1 || (*st.Configured)[0].CIDR != "203.0.113.0/24" ||
		len(*st.LastVerified) != 1 || len(*st.Applied) != 1 {
		t.Fatalf("GET ingress = %d %s", code, raw)
	}
	// No false drift from the object alone (a restarted corectl has no
	// cache): a fresh engine without discovery sees it Ready.
	fresh := &ingressallow.Engine{Client: env.Client, Cluster: w.cluster}
	if fs, err := fresh.Get(ctx, w.nsA, sb.SandboxID); err != nil || !fs.Ready {
		t.Fatalf("fresh engine: %+v %v", fs, err)
	}
	if res, err := fresh.Reconcile(ctx, w.nsA, sb.SandboxID); err != nil || res.Outcome != ingressallow.OutcomeNoChange {
		t.Fatalf("fresh reconcile: %+v %v", res, err)
	}

	// 2. Unrestricted stays unrestricted.
	un := w.create(`{"templateID":"base"}`)
	if err := get(&networkingv1.Ingress{}, w.ingNS, ingressallow.IngressName(un.SandboxID)); !apierrors.IsNotFound(err) {
		t.Fatalf("unrestricted sandbox got a carrier: %v", err)
	}

	// 3. A user CIDR that is also a probe source stays visible.
	both := w.create(`{"templateID":"base","network":{"ingress":[{"cidr":"10.9.9.9"},{"cidr":"203.0.113.0/24"}]}}`)
	if code, raw := w.do("GET", "/sandboxes/"+both.SandboxID+"/network/ingress", "key-a", "", &st); code != 200 || len(*st.Configured) != 2 {
		t.Fatalf("GET ingress = %d %s", code, raw)
	}

	// 4. NAT drift: the cached source is stale, readiness gets 403, the
	// cache is invalidated, the source rediscovered and the carrier
	// rewritten within the budget.
	w.mu.Lock()
	w.source = "10.9.9.10"
	w.mu.Unlock()
	before := w.entry.Received()
	drift := w.create(restricted)
	if ing := carrier(drift.SandboxID); ing.Annotations[ingressallow.AnnotationWhitelist] != "10.9.9.10/32,203.0.113.0/24" ||
		ing.Annotations[ingressallow.AnnotationProbeSources] != `["10.9.9.10/32"]` {
		t.Fatalf("carrier after drift %v", ing.Annotations)
	}
	var forbidden bool
	for _, r := range w.entry.RequestsAfter(before) {
		forbidden = forbidden || (r.Path == "/"+drift.SandboxID+"/44772/ping" && r.Status == 403)
	}
	if !forbidden {
		t.Fatal("the stale probe source was never refused")
	}
	noEchoLeft()

	// 5. Discovery failure fails restricted creates closed; unrestricted
	// ones still work.
	w.orch.Probe.Invalidate()
	w.mu.Lock()
	w.noEcho = true
	w.mu.Unlock()
	var fb struct {
		Error string `json:"error"`
		Step  string `json:"step"`
	}
	if code, raw := w.do("POST", "/sandboxes", "key-a", restricted, &fb); code != 500 || fb.Step != string(lifecycle.StepIngress) ||
		!strings.Contains(string(raw), ingressallow.CodeProbeSourceUnknown) || bytes.Contains(raw, []byte("envdAccessToken")) {
		t.Fatalf("create without discovery = %d %s", code, raw)
	}
	noEchoLeft()
	w.create(`{"templateID":"base"}`)
}

// waitStartupScan waits until the daemon's start-up orphan scan has ended
// (corectl_orphan_scans_total counts it, whatever its outcome). A test
// that runs scans of its own (w.orch.Scan) calls it before it creates the
// objects those scans judge: the start-up scan waits for the replay, so
// it can otherwise run in the middle of the test and delete (or keep) an
// object before the test's own scan looks at it.
func (w *world) waitStartupScan(t *testing.T) {
	t.Helper()
	kubetest.Eventually(t, 4*time.Minute, "the daemon's start-up orphan scan to end", func() (bool, error) {
		mfs, err := w.d.Metrics().Registry.Gather()
		if err != nil {
			return false, err
		}
		for _, mf := range mfs {
			if mf.GetName() != "corectl_orphan_scans_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				if s.GetCounter().GetValue() > 0 {
					return true, nil
				}
			}
		}
		return false, nil
	})
}
