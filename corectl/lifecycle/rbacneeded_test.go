package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/browser"
	"github.com/sandgate/sandgate/corectl/cnicheck"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/nsrights"
	"github.com/sandgate/sandgate/deploy"
)

// apiRequest is one request corectl sent to the apiserver, in RBAC's
// terms, with the operation that was running and the answer's status.
type apiRequest struct {
	op, verb, group, resource, namespace string
	code                                 int
}

// rbacLog records corectl's apiserver requests (a transport wrapper),
// labelled with the operation the test ran when the request was sent (not
// when its answer came: a watch's answer head can come seconds later on a
// loaded machine, after the test has moved on to another operation).
type rbacLog struct {
	mu   sync.Mutex
	op   string
	reqs []apiRequest
}

func (l *rbacLog) setOp(op string) { l.mu.Lock(); l.op = op; l.mu.Unlock() }

func (l *rbacLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		op := l.op
		l.mu.Unlock()
		resp, err := rt.RoundTrip(r)
		if err != nil {
			return resp, err
		}
		if a, ok := rbacAttributes(r.Method, r.URL); ok {
			l.mu.Lock()
			a.op, a.code = op, resp.StatusCode
			l.reqs = append(l.reqs, a)
			l.mu.Unlock()
		}
		return resp, err
	})
}

// rbacAttributes maps a resource request to RBAC's verb, group, resource
// (with "/subresource") and namespace, as the apiserver's request info
// does; ok is false for non-resource paths (discovery, /version).
func rbacAttributes(method string, u *url.URL) (a apiRequest, ok bool) {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		a.group, parts = parts[1], parts[3:]
	default:
		return a, false
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		a.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 {
		return a, false
	}
	a.resource = parts[0]
	named := len(parts) >= 2
	if len(parts) >= 3 {
		a.resource += "/" + parts[2]
	}
	switch method {
	case http.MethodGet:
		a.verb = "get"
		if !named {
			a.verb = "list"
			if u.Query().Get("watch") == "true" || u.Query().Get("watch") == "1" {
				a.verb = "watch"
			}
		}
	case http.MethodPost:
		a.verb = "create"
	case http.MethodPut:
		a.verb = "update"
	case http.MethodPatch:
		a.verb = "patch"
	case http.MethodDelete:
		a.verb = "delete"
		if !named {
			a.verb = "deletecollection"
		}
	default:
		return a, false
	}
	return a, true
}

// grantedVerb is one verb of one rule of one of corectl's ClusterRoles in
// deploy/compute/rbac.yaml.
type grantedVerb struct {
	role string
	rule int
	verb string
}

func (g grantedVerb) String() string { return fmt.Sprintf("%s rule %d %s", g.role, g.rule, g.verb) }

// computeClusterRoles returns the ClusterRoles of deploy/compute/rbac.yaml
// by name.
func computeClusterRoles(t *testing.T) map[string]*rbacv1.ClusterRole {
	t.Helper()
	objs, err := deploy.RBAC()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*rbacv1.ClusterRole{}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		var cr rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cr); err != nil {
			t.Fatal(err)
		}
		out[cr.Name] = &cr
	}
	return out
}

// saUser is corectl's ServiceAccount as the authorizer names it.
const saUser = "system:serviceaccount:corectl-system:corectl"

// setRuleVerbs gives rule i of ClusterRole role the verbs (none: the rule
// is left out) and waits until the authorizer answers accordingly for each
// verb of all, for the rule's first group and resource in namespace ns.
func setRuleVerbs(t *testing.T, cs kubernetes.Interface, role string, i int, verbs []string, all []string, ns string) {
	t.Helper()
	ctx := context.Background()
	cr, err := cs.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shipped := computeClusterRoles(t)[role]
	rule := shipped.Rules[i]
	cr.Rules = slices.Clone(shipped.Rules)
	if len(verbs) == 0 {
		cr.Rules = slices.Delete(cr.Rules, i, i+1)
	} else {
		cr.Rules[i].Verbs = verbs
	}
	if _, err := cs.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, sub, _ := strings.Cut(rule.Resources[0], "/")
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, v := range all {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: saUser,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: v, Group: rule.APIGroups[0], Resource: res, Subresource: sub}}}
			got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if got.Status.Allowed != slices.Contains(verbs, v) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the authorizer did not take %s rule %d verbs %v: %v", role, i, verbs, err)
	}
}

// rbacSandboxes are the sandboxes an operation acts on, made with every
// right granted before the operation runs: restricted (network updates,
// connect, timeout, delete) and open, with a running pod and its
// PodMetrics (logs, metrics, the Native Browser).
type rbacSandboxes struct{ restricted, open string }

// rbacEnv is what the operations run against: corectl's API (w), and
// corectl's service account for the parts of corectl the test calls
// directly (the Native Browser's resync, the CNI report, the informers).
type rbacEnv struct {
	w   *world
	sa  client.Client
	cfg *rest.Config
	at  time.Time // the PodMetrics' timestamp
}

// rbacOp is a corectl operation, run through its API or by calling the
// corectl code that runs it as its service account; err says how it
// failed.
type rbacOp struct {
	name string
	run  func(e *rbacEnv, sb rbacSandboxes) error
}

// status turns an API answer into an error unless it is want.
func status(what string, got, want int, raw []byte) error {
	if got != want {
		return fmt.Errorf("%s = %d %s", what, got, raw)
	}
	return nil
}

var rbacTemplates atomic.Int64

// nativeEndpoint asks for the open sandbox's Native Browser binding.
func nativeEndpoint(e *rbacEnv, id string) error {
	st, raw := e.w.do("GET", "/api/v1/sandbox/instances/"+id+"/endpoint?port=6080", "key-a", "", nil)
	return status("native browser", st, 200, raw)
}

// movePod gives the open sandbox's pod another IP, as a restart would.
func movePod(e *rbacEnv, id, ip string) error {
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: e.w.nsA, Name: id + "-0"}, p); err != nil {
		return err
	}
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	return env.Client.Status().Update(context.Background(), p)
}

// informerSync starts an informer cache as corectl's service account for
// obj's kind (controller-runtime's, as corectl's manager uses) and waits
// until it has synced, or returns the first error its list or watch met.
func informerSync(e *rbacEnv, obj client.Object) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := make(chan error, 1)
	// A watch the apiserver accepted: the sync alone does not show it,
	// because without the watch verb client-go falls back from its
	// streaming list to a plain list, syncs, and only then sends the watch
	// that is refused.
	watching := make(chan struct{})
	var once sync.Once
	cfg := rest.CopyConfig(e.cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && r.URL.Query().Get("watch") == "true" && resp.StatusCode == http.StatusOK {
				once.Do(func() { close(watching) })
			}
			return resp, err
		})
	})
	c, err := cache.New(cfg, cache.Options{Scheme: env.Scheme,
		DefaultWatchErrorHandler: func(_ context.Context, _ *toolscache.Reflector, err error) {
			select {
			case failed <- err:
			default:
			}
		}})
	if err != nil {
		return err
	}
	if _, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	synced := make(chan bool, 1)
	go func() { synced <- c.WaitForCacheSync(ctx) }()
	select {
	case err := <-failed:
		return err
	case ok := <-synced:
		if !ok {
			return errors.New("the cache did not sync")
		}
		// A watch refused after the list: the reflector reports it.
		select {
		case err := <-failed:
			return err
		case <-watching:
			return nil
		}
	}
}

// rbacOps are the operations whose apiserver requests are matched against
// the granted verbs, and rerun with a verb removed.
var rbacOps = []rbacOp{
	{"create", func(e *rbacEnv, _ rbacSandboxes) error {
		st, raw := e.w.do("POST", "/v2/sandboxes", "key-a", restricted, nil)
		return status("create", st, http.StatusCreated, raw)
	}},
	{"get", func(e *rbacEnv, sb rbacSandboxes) error {
		st, raw := e.w.do("GET", "/sandboxes/"+sb.restricted, "key-a", "", nil)
		return status("get", st, 200, raw)
	}},
	{"list", func(e *rbacEnv, _ rbacSandboxes) error {
		st, raw := e.w.do("GET", "/v2/sandboxes", "key-a", "", nil)
		return status("list", st, 200, raw)
	}},
	{"egress update", func(e *rbacEnv, sb rbacSandboxes) error {
		st, raw := e.w.do("PUT", "/sandboxes/"+sb.restricted+"/network", "key-a", `{"defaultAction":"deny","egress":[{"cidr":"10.0.0.0/8"}]}`, nil)
		return status("egress PUT", st, 200, raw)
	}},
	{"ingress update", func(e *rbacEnv, sb rbacSandboxes) error {
		st, raw := e.w.do("PUT", "/sandboxes/"+sb.restricted+"/network/ingress", "key-a", `{"ingress":[{"cidr":"10.0.0.0/8"}]}`, nil)
		return status("ingress PUT", st, 200, raw)
	}},
	{"connect", func(e *rbacEnv, sb rbacSandboxes) error {
		st, raw := e.w.do("POST", "/sandboxes/"+sb.restricted+"/connect", "key-a", `{"timeout":600}`, nil)
		return status("connect", st, 200, raw)
	}},
	{"set timeout", func(e *rbacEnv, sb rbacSandboxes) error {
		st, raw := e.w.do("POST", "/sandboxes/"+sb.restricted+"/timeout", "key-a", `{"timeout":900}`, nil)
		return status("timeout", st, 204, raw)
	}},
	{"logs", func(e *rbacEnv, sb rbacSandboxes) error {
		st, _, raw := e.w.call("GET", "/v2/sandboxes/"+sb.open+"/logs", "key-a", "")
		return status("logs", st, 200, raw)
	}},
	{"metrics", func(e *rbacEnv, sb rbacSandboxes) error {
		st, _, raw := e.w.call("GET", "/sandboxes/"+sb.open+"/metrics", "key-a", "")
		var got []lifecycle.Metric
		if err := status("metrics", st, 200, raw); err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &got); err != nil || len(got) != 1 {
			return fmt.Errorf("metrics %s (%v), want one sample", raw, err)
		}
		return nil
	}},
	{"native browser", func(e *rbacEnv, sb rbacSandboxes) error {
		return nativeEndpoint(e, sb.open)
	}},
	{"native browser re-bind", func(e *rbacEnv, sb rbacSandboxes) error {
		if err := nativeEndpoint(e, sb.open); err != nil {
			return fmt.Errorf("first bind: %w", err)
		}
		if err := movePod(e, sb.open, "10.244.0.10"); err != nil {
			return err
		}
		return nativeEndpoint(e, sb.open)
	}},
	{"native browser resync", func(e *rbacEnv, sb rbacSandboxes) error {
		if err := nativeEndpoint(e, sb.open); err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		if err := movePod(e, sb.open, "10.244.0.11"); err != nil {
			return err
		}
		// The leader's Keeper runs this every resync interval.
		n, err := (&browser.Binder{Client: e.sa, Cluster: e.w.cluster}).SyncAll(context.Background())
		if err == nil && n == 0 {
			err = errors.New("no carrier synced")
		}
		return err
	}},
	{"delete with a Native Browser carrier", func(e *rbacEnv, sb rbacSandboxes) error {
		if err := nativeEndpoint(e, sb.open); err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		st, raw := e.w.do("DELETE", "/sandboxes/"+sb.open, "key-a", "", nil)
		return status("delete", st, 204, raw)
	}},
	{"template defaults", func(e *rbacEnv, _ rbacSandboxes) error {
		id := fmt.Sprintf("rbac-%d", rbacTemplates.Add(1))
		for i := range 2 { // create, then update
			st, raw := e.w.do("PUT", "/sandbox-templates/"+id+"/network", "key-admin", `{"ingress":[{"cidr":"10.0.0.0/8"}],"egress":[]}`, nil)
			if err := status(fmt.Sprintf("template PUT %d", i+1), st, 200, raw); err != nil {
				return err
			}
		}
		return nil
	}},
	{"delete", func(e *rbacEnv, sb rbacSandboxes) error {
		st, raw := e.w.do("DELETE", "/sandboxes/"+sb.restricted, "key-a", "", nil)
		return status("delete", st, 204, raw)
	}},
	{"orphan scan", func(e *rbacEnv, _ rbacSandboxes) error {
		rep, err := e.w.orch.Scan(context.Background())
		if err == nil && len(rep.Failed) != 0 {
			err = fmt.Errorf("scan failed on %v", rep.Failed)
		}
		return err
	}},
	{"CNI gate report", func(e *rbacEnv, _ rbacSandboxes) error {
		// Every replica writes the CNIQualification status object at
		// start (creating it the first time) and at each check.
		obj := &v1alpha1.CNIQualification{ObjectMeta: metav1.ObjectMeta{Namespace: "corectl-system", Name: cnicheck.ObjectName(e.w.cluster.ID)}}
		if err := env.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		k := &cnicheck.Checker{Cluster: e.w.cluster, Client: e.sa, Reader: e.sa, Namespace: "corectl-system"}
		if err := k.Report(context.Background()); err != nil {
			return fmt.Errorf("first report: %w", err)
		}
		return k.Report(context.Background())
	}},
}

// informerOps are the informers of corectl's manager, by the resource
// their list and watch name.
var informerOps = map[string]rbacOp{}

func init() {
	for res, obj := range map[string]func() client.Object{
		"batchsandboxes":           func() client.Object { return kubetest.NewBatchSandbox("x", "x", nil) },
		"networkpolicies":          func() client.Object { return &networkingv1.NetworkPolicy{} },
		"ingresses":                func() client.Object { return &networkingv1.Ingress{} },
		"sandboxingressallowlists": func() client.Object { return &v1alpha1.SandboxIngressAllowlist{} },
		"sandboxtemplatenetworks":  func() client.Object { return &v1alpha1.SandboxTemplateNetwork{} },
	} {
		informerOps[res] = rbacOp{"informer of " + res, func(e *rbacEnv, _ rbacSandboxes) error { return informerSync(e, obj()) }}
	}
}

// rbacSetup makes the sandboxes of one round with every right granted.
func rbacSetup(t *testing.T, e *rbacEnv) rbacSandboxes {
	t.Helper()
	w := e.w
	sb := rbacSandboxes{restricted: w.create(restricted).SandboxID, open: w.create(`{"templateID":"base"}`).SandboxID}
	u, alloc := allocationOf(t, w.nsA, sb.open)
	runningPod(t, u, sb.open+"-0", alloc, "10.244.0.9")
	podMetrics(t, w.nsA, sb.open+"-0", e.at, []any{
		map[string]any{"name": "sandbox", "usage": map[string]any{"cpu": "500000000n", "memory": "262144Ki"}},
	})
	return sb
}

// unexercised are granted verbs no operation of this test can show in use,
// each with the reason it is granted; the test fails if one is used after
// all (the entry is then out of date).
var unexercised = map[string]string{
	// client-go's informers list through a watch (streaming lists) where
	// the apiserver serves them, as envtest's does; against one that does
	// not, they fall back to a plain list.
	"corectl rule 5 list": "the informers' initial list on apiservers without streaming lists",
	// client-go's events.k8s.io recorder folds a repeated Event into a
	// series and patches it minutes later (isomorphic events).
	"corectl rule 9 patch": "the events recorder's series updates",
}

// asynchronous are granted verbs the test shows in use but does not remove:
// without them no operation fails, because what uses them runs beside the
// operations and drops a refused write after logging it.
var asynchronous = map[string]string{
	"corectl rule 9 create": "the events recorder writes Events in the background and drops a refused one (TestRBACManifestIsSufficient sees the Events)",
}

// TestComputeRBACEachVerbNeeded is the necessity test of corectl's RBAC in
// a compute cluster. It runs corectl as its service account with
// deploy/compute/rbac.yaml installed and the RoleBindings `corectl rbac`
// prints, and records every apiserver request of each named operation
// (create, get, list, the network updates, connect, timeout, logs,
// metrics, the Native Browser's bind, re-bind, resync and removal,
// template defaults, delete, the orphan scan, the CNI report, corectl's
// informers). Each verb of the ClusterRoles corectl, corectl-ingress-namespace
// and corectl-project-namespace must be used by one (or be listed in
// unexercised with its reason). Then each verb is removed in turn and the
// operation that used it is run again: it must fail, and succeed again
// once the verb is back.
func TestComputeRBACEachVerbNeeded(t *testing.T) {
	servePodMetrics(t)
	log := &rbacLog{}
	log.setOp("start")
	saCfg := serviceAccount(t)
	w := startWorld(t, saCfg, worldOptions{wrap: log.wrap})
	saLogged := rest.CopyConfig(saCfg)
	saLogged.Wrap(log.wrap)
	sa, err := client.New(saLogged, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	e := &rbacEnv{w: w, sa: sa, cfg: saLogged, at: time.Now().Add(-5 * time.Second).Truncate(time.Second)}
	byName := map[string]rbacOp{}
	for _, op := range rbacOps {
		byName[op.name] = op
		log.setOp("setup")
		sb := rbacSetup(t, e)
		log.setOp(op.name)
		if err := op.run(e, sb); err != nil {
			t.Fatalf("%s with every right: %v", op.name, err)
		}
	}
	log.setOp("idle")
	log.mu.Lock()
	reqs := slices.Clone(log.reqs)
	log.mu.Unlock()
	for _, r := range reqs {
		if r.code == http.StatusForbidden {
			t.Errorf("%s: %s %s/%s in %q Forbidden with every right", r.op, r.verb, r.group, r.resource, r.namespace)
		}
	}

	// Which operation needs which verb: the first named operation whose
	// request the verb authorized (any answer but 403: a 404 or a 409 was
	// let through too).
	roles := computeClusterRoles(t)
	type need struct {
		g   grantedVerb
		ops []rbacOp // the operations that used it, in order
		ns  string   // a namespace of the request, for the authorizer check
	}
	var needs []need
	for _, name := range []string{"corectl", nsrights.IngressRole, nsrights.ProjectRole} {
		cr := roles[name]
		if cr == nil {
			t.Fatalf("no ClusterRole %s", name)
		}
		for i, rule := range cr.Rules {
			for _, v := range rule.Verbs {
				g := grantedVerb{name, i, v}
				reason, exempt := unexercised[g.String()]
				var ops []rbacOp
				ns := ""
				// Every group and resource of the rule, with this verb.
				for _, group := range rule.APIGroups {
					for _, res := range rule.Resources {
						var by []string
						for _, r := range reqs {
							if r.code != http.StatusForbidden && r.code != http.StatusUnauthorized && r.verb == v && r.group == group && r.resource == res {
								if !slices.Contains(by, r.op) {
									by = append(by, r.op)
								}
								if ns == "" {
									ns = r.namespace
								}
							}
						}
						switch {
						case len(by) == 0 && exempt:
							t.Logf("%s %s/%s: not exercised (%s)", g, group, res, reason)
							continue
						case len(by) == 0:
							t.Errorf("%s grants %s on %q %s, which no operation used", g, v, group, res)
							continue
						case exempt:
							t.Errorf("%s %s/%s is listed as not exercised (%s) but %v used it", g, group, res, reason, by)
						}
						t.Logf("%s %s/%s: used by %v", g, group, res, by)
						for _, o := range by {
							if o != "setup" && o != "start" && !slices.ContainsFunc(ops, func(op rbacOp) bool { return op.name == o }) {
								ops = append(ops, byName[o])
							}
						}
						// A verb corectl's informers use (at start, or lazily
						// at their first read): an informer of that resource,
						// started alone. A watch is only ever an informer's,
						// whichever operation ran when it was sent (the
						// informers start beside the first operations, later
						// on a loaded machine).
						if io, ok := informerOps[res]; ok && (v == "watch" || v == "list" && slices.ContainsFunc(by, func(o string) bool { return o == "setup" || o == "start" })) {
							ops = append(ops, io)
						}
					}
				}
				if exempt {
					continue
				}
				if reason, ok := asynchronous[g.String()]; ok {
					t.Logf("%s: not removed (%s)", g, reason)
					continue
				}
				if len(ops) == 0 {
					t.Errorf("%s: no operation the test can run again uses it", g)
					continue
				}
				needs = append(needs, need{g, ops, ns})
			}
		}
	}
	if t.Failed() {
		return
	}

	// Each verb removed in turn: its operation fails.
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range needs {
		rule := roles[n.g.role].Rules[n.g.rule]
		var kept []string
		for _, v := range rule.Verbs {
			if v != n.g.verb {
				kept = append(kept, v)
			}
		}
		// The operations that used it, each on fresh sandboxes, until one
		// fails.
		var failed string
		for _, op := range n.ops {
			log.setOp("setup")
			sb := rbacSetup(t, e)
			setRuleVerbs(t, admin, n.g.role, n.g.rule, kept, rule.Verbs, n.ns)
			log.setOp(op.name)
			err := op.run(e, sb)
			setRuleVerbs(t, admin, n.g.role, n.g.rule, rule.Verbs, rule.Verbs, n.ns)
			if err != nil {
				failed = fmt.Sprintf("%s fails: %.200v", op.name, err)
				break
			}
		}
		if failed == "" {
			t.Errorf("without %s (%v %v) every operation that used it still succeeds: a verb nothing needs", n.g, rule.APIGroups, rule.Resources)
		} else {
			t.Logf("without %s: %s", n.g, failed)
		}
	}
}
