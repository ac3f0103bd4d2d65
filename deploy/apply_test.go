package deploy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/sandgate/sandgate/internal/kubeenv"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/enrolment/enrolmenttest"
	"github.com/sandgate/sandgate/nodecore/kubestore"
	"github.com/sandgate/sandgate/nodecore/placement"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/presence"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// warnings collects the apiserver's warnings (Pod Security among them).
// startApplyEnv starts a real kube-apiserver for the apply tests (stopped
// at the test's end) and returns it with a client of the core and
// apiextensions kinds whose warnings (Pod Security among them) are
// collected in w.
func startApplyEnv(t *testing.T) (*kubeenv.Env, client.Client, *warnings) {
	t.Helper()
	env, err := kubeenv.Start(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, c, w
}

type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.list
	w.list = nil
	return l
}

// TestManifestsApply renders every kustomization under deploy/ with
// kustomize's Go API and applies every object to a real kube-apiserver
// (envtest; the binaries hack/kube/build.sh builds): the bases are
// created, then the example overlays are applied over them with
// server-side apply, as an operator moving from the base to an overlay
// would (example-secrets with its Secrets generated from fake files; the
// edge overlays after the CRDs of Gateway API and cert-manager).
// deploy/monitoring is not applied: its kinds need the Prometheus
// Operator's CRDs (TestMonitoringManifests checks it). Each object must be accepted without a warning: the namespace
// sandgate warns on pods below the "restricted" Pod Security Standard, so
// a Deployment that fell short would show here. Then the gateway's node
// presence (package nodecore/presence) and the node stores (package
// nodecore/kubestore) run as the gateway's ServiceAccount: what its Role
// grants is what they need, and no more.
func TestManifestsApply(t *testing.T) {
	env, c, w := startApplyEnv(t)
	ctx := context.Background()

	// The edge components' kinds (Gateway API, cert-manager) come from
	// CRDs an operator installs with those projects: installed here before
	// the overlays that use them.
	for _, crd := range edgeCRDs(t) {
		if err := c.Create(ctx, crd); err != nil {
			t.Fatalf("CRD %s: %v", crd.GetName(), err)
		}
		waitEstablished(t, c, crd.GetName())
	}
	dirs := append([]string{"compute", "portal", "portal-flowcontrol", "overlays/example-compute", "overlays/example", "overlays/example-e2b-domain", "overlays/example-secrets"},
		edgeOverlays...)
	for _, dir := range dirs {
		var r *rendered
		if dir == "overlays/example-secrets" {
			// Its Secrets from fake files (TestSecretsRollPods).
			r = renderWithSecrets(t, nil)
		} else {
			r = render(t, dir)
		}
		base := !strings.HasPrefix(dir, "overlays/")
		kinds := map[string]int{}
		// Namespaces and CRDs first: the rest lives in them.
		for _, first := range []bool{true, false} {
			for _, o := range r.objs {
				o := o.DeepCopy()
				isFirst := o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition"
				if isFirst != first {
					continue
				}
				var err error
				if base {
					err = c.Create(ctx, o)
				} else {
					// kubectl apply --server-side: the overlay over what
					// the base created.
					o.SetManagedFields(nil)
					err = c.Patch(ctx, o, client.Apply, client.FieldOwner("sandgate-deploy-test"), client.ForceOwnership)
				}
				if err != nil {
					t.Errorf("%s: %s %s/%s refused: %v", dir, o.GetKind(), o.GetNamespace(), o.GetName(), err)
				} else {
					kinds[o.GetKind()]++
				}
				if base && o.GetKind() == "CustomResourceDefinition" {
					waitEstablished(t, c, o.GetName())
				}
				if base && o.GetKind() == "Namespace" && o.GetLabels()["pod-security.kubernetes.io/enforce"] != "" {
					waitPodSecurity(t, c, o.GetName())
				}
			}
		}
		if ws := w.take(); len(ws) > 0 {
			t.Errorf("%s: the apiserver warned:\n%s", dir, strings.Join(ws, "\n"))
		}
		t.Logf("%s: %d objects accepted %v", dir, len(r.objs), kinds)
	}
	for _, want := range []struct{ kind, ns, name string }{{"Deployment", "sandgate", "gateway"}, {"Deployment", "sandgate", "corectl"},
		{"ClusterRole", "", "corectl"}, {"Role", "kube-system", "corectl-cni"}, {"Secret", "corectl-system", "corectl-token"},
		{"FlowSchema", "", "sandgate-node-leases"}, {"PriorityLevelConfiguration", "", "sandgate-node-leases"},
		{"FlowSchema", "", "corectl-leader-election"}} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: groupOf(want.kind), Version: "v1", Kind: want.kind})
		if err := c.Get(ctx, client.ObjectKey{Namespace: want.ns, Name: want.name}, u); err != nil {
			t.Errorf("%s %s/%s after applying the bases: %v", want.kind, want.ns, want.name, err)
		}
	}

	// The FlowSchemas name priority levels that exist: ours, and the
	// built-in leader-election the apiserver creates (its suggested
	// configuration).
	for _, fs := range []string{"sandgate-node-leases", "corectl-leader-election"} {
		waitFlowSchemaBound(t, c, fs)
	}
	plUID := func(name string) string {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Kind: "PriorityLevelConfiguration"})
		if err := c.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
			t.Fatalf("PriorityLevelConfiguration %s: %v", name, err)
		}
		return string(u.GetUID())
	}
	nodeLeasesLevel := plUID("sandgate-node-leases")

	t.Run("gateway-presence-as-its-service-account", func(t *testing.T) {
		sa := rest.CopyConfig(env.Config)
		sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:sandgate:gateway"}
		// API Priority and Fairness names the priority level that served
		// each request in a response header: every Lease request of the
		// gateway must be served at sandgate-node-leases.
		levels := &priorityLevels{}
		sa.WrapTransport = levels.wrap
		cs, err := kubernetes.NewForConfig(sa)
		if err != nil {
			t.Fatal(err)
		}
		l, err := presence.New(presence.Config{Leases: cs.CoordinationV1(), Namespace: "sandgate", ReplicaID: "gateway-0",
			Address: "http://10.0.0.10:30086"})
		if err != nil {
			t.Fatal(err)
		}
		node := uuid.NewString()
		claim, err := l.Acquire(ctx, node, 1)
		if err != nil {
			t.Fatalf("Acquire as the gateway: %v", err)
		}
		if err := claim.Renew(ctx); err != nil {
			t.Fatalf("Renew as the gateway: %v", err)
		}
		if p, ok, err := l.Holder(ctx, node, true); err != nil || !ok || p.ID != "gateway-0" {
			t.Fatalf("Holder as the gateway = %+v %v %v", p, ok, err)
		}
		if ps, err := l.Replicas(ctx); err != nil || len(ps) != 1 {
			t.Fatalf("Replicas as the gateway = %+v %v", ps, err)
		}
		if err := claim.Release(ctx); err != nil {
			t.Fatalf("Release as the gateway: %v", err)
		}
		got := levels.of("/leases")
		if len(got) == 0 {
			t.Error("no Lease request of the gateway was seen")
		}
		for _, l := range got {
			if l != nodeLeasesLevel {
				t.Errorf("the gateway's Lease requests were served at priority levels %v, want all at sandgate-node-leases (%s)", got, nodeLeasesLevel)
				break
			}
		}
		// Nothing beyond: no deleting Leases, no Leases elsewhere, no Secrets.
		if err := cs.CoordinationV1().Leases("sandgate").Delete(ctx, presence.LeaseName(node), metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("deleting a Lease as the gateway = %v, want Forbidden", err)
		}
		if _, err := cs.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing Leases in another namespace as the gateway = %v, want Forbidden", err)
		}
		if _, err := cs.CoreV1().Secrets("sandgate").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing Secrets as the gateway = %v, want Forbidden", err)
		}
	})

	t.Run("gateway-node-stores-as-its-service-account", func(t *testing.T) {
		sa := rest.CopyConfig(env.Config)
		sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:sandgate:gateway"}
		s, err := kubestore.Open(kubestore.Config{REST: sa, Namespace: "sandgate"})
		if err != nil {
			t.Fatalf("opening the node stores as the gateway: %v", err)
		}
		defer s.Close()
		pools, err := s.Pools()
		if err != nil {
			t.Fatal(err)
		}
		d := strings.Repeat("7a", 32)
		if _, err := pools.Configure(map[string]pool.Spec{"default": {Bindings: []pool.Binding{{Generation: 7, SpecificationDigest: d}}, Target: 7}}); err != nil {
			t.Fatalf("configuring a pool as the gateway: %v", err)
		}
		e := s.Enrolment()
		tok, _, err := e.Issue("default", time.Hour)
		if err != nil {
			t.Fatalf("issuing a token as the gateway: %v", err)
		}
		enrolled, err := e.Enrol(tok, enrolmenttest.Request(), enrolmenttest.Resolve7)
		if err != nil {
			t.Fatalf("enrolling as the gateway: %v", err)
		}
		id := enrolled.Node.NodeID
		if _, err := e.Authenticate(id, credential.Sum(enrolled.Credential)); err != nil {
			t.Fatal(err)
		}
		pl := placement.Placement{NodeID: id, Generation: 7, Reference: proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: "a"}}
		if err := s.Placements().Place(pl); err != nil {
			t.Fatalf("placing as the gateway: %v", err)
		}
		if ok, err := s.Placements().Release(pl); !ok || err != nil {
			t.Fatalf("releasing as the gateway: %v %v", ok, err)
		}
		if ok, err := e.SetEnabled(id, false); !ok || err != nil {
			t.Fatalf("disabling as the gateway: %v %v", ok, err)
		}
		if ok, err := e.Remove(id); !ok || err != nil {
			t.Fatalf("removing as the gateway: %v %v", ok, err)
		}
		// Not in another namespace.
		if _, err := kubestore.Open(kubestore.Config{REST: sa, Namespace: "default", SyncTimeout: 5 * time.Second}); !errors.Is(err, kubestore.ErrSync) {
			t.Errorf("opening the node stores in another namespace as the gateway = %v, want ErrSync (forbidden)", err)
		}
	})

	t.Run("corectl-native-browser-rights", func(t *testing.T) { checkNativeBrowserRights(t, env.Config) })
	t.Run("corectl-leader-election-verbs-needed", func(t *testing.T) { checkLeaderElectionVerbsNeeded(t, env.Config) })
}

// groupOf is the API group of the kinds TestManifestsApply reads back.
func groupOf(kind string) string {
	switch kind {
	case "Deployment":
		return "apps"
	case "ClusterRole", "Role":
		return "rbac.authorization.k8s.io"
	case "FlowSchema", "PriorityLevelConfiguration":
		return "flowcontrol.apiserver.k8s.io"
	}
	return ""
}

// priorityLevels records the API Priority and Fairness priority level
// (X-Kubernetes-PF-PriorityLevel-UID) of each response, by request path.
type priorityLevels struct {
	mu   sync.Mutex
	seen []struct{ path, level string }
}

func (p *priorityLevels) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil {
			p.mu.Lock()
			p.seen = append(p.seen, struct{ path, level string }{r.URL.Path, resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")})
			p.mu.Unlock()
		}
		return resp, err
	})
}

// of returns the levels of the responses to paths containing part.
func (p *priorityLevels) of(part string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, s := range p.seen {
		if strings.Contains(s.path, part) {
			out = append(out, s.level)
		}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// waitFlowSchemaBound waits until the apiserver's priority-and-fairness
// controller reports the FlowSchema name not Dangling: its priority level
// exists.
func waitFlowSchemaBound(t *testing.T, c client.Client, name string) {
	t.Helper()
	var last any
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Kind: "FlowSchema"})
		if err := c.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		last = conds
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Dangling" {
				return m["status"] == "False", nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("FlowSchema %s: not bound to its priority level (conditions %v): %v", name, last, err)
	}
}

// waitPodSecurity waits until Pod Security admission enforces the labels
// of the namespace just created (it reads namespaces from a cache): until
// a privileged pod is refused there (server-side dry run, nothing is
// created).
func waitPodSecurity(t *testing.T, c client.Client, ns string) {
	t.Helper()
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod-security-check"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x", SecurityContext: &corev1.SecurityContext{Privileged: &yes}}}}}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, pod.DeepCopy(), client.DryRunAll)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PodSecurity"), nil
	})
	if err != nil {
		t.Fatalf("namespace %s: a privileged pod is not refused by Pod Security admission: %v", ns, err)
	}
}

// waitEstablished waits until the CRD name is Established, so objects of
// its kind can be created.
func waitEstablished(t *testing.T, c client.Client, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(fmt.Errorf("CRD %s not established: %w", name, err))
	}
}
