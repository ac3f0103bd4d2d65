package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/nsrights"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/deploy"
	"github.com/sandgate/sandgate/gateway/credential"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	kubetest.Main(m, &env)
}

var ctx = context.Background()

// setup is one cluster ID backed by envtest, a project namespace with
// BatchSandbox "sbx", a lease namespace and an API key "key" for it.
type setup struct {
	id          string
	ns, leaseNS string
	cfg         *cluster.Config
	keys        *apikey.Keys
	src         credential.Static
}

// setups numbers cluster IDs: every setup gets its own, so a daemon never
// reconciles objects another test (or an earlier -count run) left behind.
var setups atomic.Int64

func newSetup(t *testing.T, clusterID string) *setup {
	t.Helper()
	clusterID = fmt.Sprintf("%s-%d", clusterID, setups.Add(1))
	ns, ingNS, leaseNS := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	env.OwnedBatchSandbox(t, ns, "sbx", "cred", map[string]string{"allocation-id": "a1"})
	c := *kubetest.Cluster(clusterID, ingNS)
	c.Ingress.Host = ns + ".example.test"
	keys, err := apikey.Parse([]byte("keys:\n  - {name: k, sha256: " + apikey.Digest("key") + ", credentialId: cred, templateAdmin: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &setup{id: clusterID, ns: ns, leaseNS: leaseNS, keys: keys,
		cfg: &cluster.Config{Clusters: []cluster.Cluster{c}, Templates: cluster.TemplateStore{ClusterID: clusterID, Namespace: ns}},
		src: credential.Static{"cred": {ID: "cred", Enabled: true, ClusterID: clusterID, ProjectNamespace: ns}}}
}

// replica is a running daemon.
type replica struct {
	d      *daemon.Daemon
	cancel context.CancelFunc
	done   chan error
}

func (s *setup) start(t *testing.T, restCfg *rest.Config, grace time.Duration) *replica {
	t.Helper()
	lease, renew, retry := 4*time.Second, 3*time.Second, 250*time.Millisecond
	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0",
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
		LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry,
		EgressGrace: grace, IngressWait: 20 * time.Second,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(restCfg), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return run(t, d)
}

// run runs d as a replica until the test ends, when it is stopped and
// Run's error is reported.
func run(t *testing.T, d *daemon.Daemon) *replica {
	c, cancel := context.WithCancel(ctx)
	r := &replica{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(c) }()
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("replica: %v", err)
		}
	})
	return r
}

// stop stops the replica and returns Run's error (nil when already
// stopped).
func (r *replica) stop() error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	return <-r.done
}

func elected(r *replica, id string) bool {
	select {
	case <-r.d.Elected(id):
		return true
	default:
		return false
	}
}

func put(t *testing.T, r *replica, path, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("PUT", "http://"+r.d.Addr()+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", "key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("PUT %s: %d %s", path, resp.StatusCode, b)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("PUT %s: %d %s", path, resp.StatusCode, b)
	}
	return resp.StatusCode
}

func leaseHolder(t *testing.T, s *setup, id string) string {
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.leaseNS, Name: daemon.LeaseName(id)}, l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestTwoReplicasOneLeader runs two replicas against one apiserver: one
// holds the Lease and reconciles; an ingress PUT through the other replica
// is applied by the leader; when the leader stops, the other takes over
// and applies the next PUT.
func TestTwoReplicasOneLeader(t *testing.T) {
	s := newSetup(t, "c-two")
	a := s.start(t, env.Config, 0)
	b := s.start(t, env.Config, 0)
	kubetest.Eventually(t, 30*time.Second, "a leader", func() (bool, error) {
		return (elected(a, s.id) || elected(b, s.id)) && leaseHolder(t, s, s.id) != "", nil
	})
	if elected(a, s.id) && elected(b, s.id) {
		t.Fatal("both replicas are leaders")
	}
	leader, follower := a, b
	if elected(b, s.id) {
		leader, follower = b, a
	}
	var st ingressallow.Status
	if code := put(t, follower, "/sandboxes/sbx/network/ingress", `{"ingress":[{"cidr":"10.0.0.0/8"}]}`, &st); code != 200 || st.VerificationState != "Verified" {
		t.Fatalf("PUT through the follower = %d %+v", code, st)
	}
	first := leaseHolder(t, s, s.id)
	if err := leader.stop(); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "the follower to take over", func() (bool, error) {
		return elected(follower, s.id) && leaseHolder(t, s, s.id) != first, nil
	})
	if code := put(t, follower, "/sandboxes/sbx/network/ingress", `{"ingress":[{"cidr":"192.0.2.0/24"}]}`, &st); code != 200 || (*st.LastVerified)[0].CIDR != "192.0.2.0/24" {
		t.Fatalf("PUT after failover = %d %+v", code, st)
	}
}

// leaseEvent waits for the events.k8s.io Event a replica's leader election
// records on cluster id's Lease ("<identity> became leader"), through the
// cluster's recorder "corectl" (the manager starts no broadcaster of its
// own for it).
func leaseEvent(t *testing.T, s *setup, id string) {
	t.Helper()
	kubetest.Eventually(t, 30*time.Second, "the Lease's LeaderElection Event", func() (bool, error) {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(s.leaseNS)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Lease" && e.Regarding.Name == daemon.LeaseName(id) && e.Reason == "LeaderElection" &&
				e.ReportingController == "corectl" && strings.HasSuffix(e.Note, "became leader") {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestLeaderElectionEventOnTheLease: the Lease's "became leader" Event is
// recorded (events.k8s.io, reason LeaderElection, controller corectl), and
// building the Lease lock left the cluster's REST configuration, the
// informers' watches' and the reconcilers', as it was (controller-runtime's
// NewResourceLock sets a client timeout of half the renew deadline and its
// user agent on the configuration it is given: on the cluster's own, every
// watch would be cut after that timeout).
func TestLeaderElectionEventOnTheLease(t *testing.T) {
	s := newSetup(t, "c-lease-event")
	var given *rest.Config
	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0",
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 250 * time.Millisecond,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) {
			given = rest.CopyConfig(env.Config)
			return given, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if given.Timeout != 0 || given.UserAgent != env.Config.UserAgent {
		t.Fatalf("the cluster's REST configuration after New: timeout %s, user agent %q; want 0 and %q", given.Timeout, given.UserAgent, env.Config.UserAgent)
	}
	c, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	r := &replica{d: d}
	kubetest.Eventually(t, 30*time.Second, "leadership", func() (bool, error) { return elected(r, s.id), nil })
	leaseEvent(t, s, s.id)
}

// TestRestartPicksUpStateFromObjects leaves work behind as a stopped
// corectl would — an ingress desired version never applied and an egress
// policy written but never verified — then starts a replica and waits for
// both to converge from the objects alone. It also checks the Events an
// admin sees with kubectl describe.
func TestRestartPicksUpStateFromObjects(t *testing.T) {
	s := newSetup(t, "c-restart")
	c := &s.cfg.Clusters[0]
	in := &ingressallow.Engine{Client: env.Client, Cluster: c}
	if _, err := in.SetDesired(ctx, s.ns, "sbx", []v1alpha1.IngressRule{{CIDR: "10.0.0.0/8"}}); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.Get(ctx, env.Client, s.ns, "sbx", "allocation-id")
	if err != nil {
		t.Fatal(err)
	}
	spec := egress.Compile(c, "allocation-id", "a1", []string{"198.51.100.0/24"})
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-egress-a1", Namespace: s.ns,
			Labels: map[string]string{v1alpha1.LabelManagedBy: "corectl", v1alpha1.LabelClusterID: s.id, v1alpha1.LabelSandboxID: "sbx",
				v1alpha1.LabelSandboxNamespace: s.ns, v1alpha1.LabelAllocationID: "a1"},
			Annotations: map[string]string{egress.AnnotationVerificationState: "Verifying", egress.AnnotationVerificationErrorCode: "",
				v1alpha1.AnnotationVerifyingSince: time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), v1alpha1.AnnotationOwner: sb.OwnerAnnotation()},
			OwnerReferences: []metav1.OwnerReference{sb.OwnerReference()}},
		Spec: spec,
	}
	if err := env.Client.Create(ctx, np); err != nil {
		t.Fatal(err)
	}

	s.start(t, env.Config, time.Minute)
	kubetest.Eventually(t, 30*time.Second, "the ingress allowlist to be verified", func() (bool, error) {
		al := &v1alpha1.SandboxIngressAllowlist{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "sbx"}, al)
		return err == nil && al.Status.VerificationState == "Verified" && al.Status.ObservedGeneration == al.Generation, err
	})
	kubetest.Eventually(t, 30*time.Second, "the interrupted egress update to be verified", func() (bool, error) {
		got := &networkingv1.NetworkPolicy{}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(np), got)
		return err == nil && got.Annotations[egress.AnnotationVerificationState] == "Verified" &&
			got.Annotations[egress.AnnotationLastVerifiedSpec] == egress.Canonical(&spec), err
	})
	kubetest.Eventually(t, 30*time.Second, "Events on the BatchSandbox and the allowlist", func() (bool, error) {
		var list eventsv1.EventList
		if err := env.Client.List(ctx, &list, client.InNamespace(s.ns)); err != nil {
			return false, err
		}
		var onSandbox, onAllowlist bool
		for _, e := range list.Items {
			onSandbox = onSandbox || (e.Regarding.Kind == "BatchSandbox" && e.Reason == "EgressVerified" && e.ReportingController == "corectl")
			onAllowlist = onAllowlist || (e.Regarding.Kind == "SandboxIngressAllowlist" && e.Reason == "IngressVerified")
		}
		return onSandbox && onAllowlist, nil
	})
}

// rightsMissing is r's corectl_namespace_rights_missing by "namespace role".
func rightsMissing(t *testing.T, r *replica) map[string]float64 {
	t.Helper()
	mfs, err := r.d.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "corectl_namespace_rights_missing" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["namespace"]+" "+l["role"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestRBACManifestIsSufficient installs rbac.yaml, runs corectl as its
// service account (impersonation), and drives egress, ingress and template
// writes through the API; then checks a verb the manifest does not grant
// is refused. The RoleBindings are those `corectl rbac` prints; a
// credential whose namespace has none is reported by the rights check
// (corectl_namespace_rights_missing).
func TestRBACManifestIsSufficient(t *testing.T) {
	s := newSetup(t, "c-rbac")
	objs, err := deploy.RBAC()
	if err != nil {
		t.Fatal(err)
	}
	saNS := "corectl-system"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: saNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
		if err := env.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if !kinds[k] {
			t.Fatalf("rbac.yaml has no %s", k)
		}
	}
	// corectl's writes in the ingress and project namespaces: the
	// RoleBindings `corectl rbac` prints.
	for _, b := range nsrights.Bindings(nsrights.Needed(&s.cfg.Clusters[0], s.src), nsrights.DefaultServiceAccount) {
		if err := env.Client.Create(ctx, &b); err != nil {
			t.Fatalf("RoleBinding %s/%s: %v", b.Namespace, b.Name, err)
		}
	}
	// A credential for a namespace nobody bound: the rights check reports
	// it (and only it) missing.
	unbound := "unbound-" + s.id
	s.src["unbound"] = credential.Credential{ID: "unbound", Enabled: true, ClusterID: s.id, ProjectNamespace: unbound}
	// The leader-election Role lives in corectl-system.
	s.leaseNS = saNS
	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:corectl-system:corectl"}
	r := s.start(t, sa, 0)
	kubetest.Eventually(t, 30*time.Second, "leadership as the service account", func() (bool, error) { return elected(r, s.id), nil })
	leaseEvent(t, s, s.id)
	ingNS := s.cfg.Clusters[0].Ingress.Namespace
	kubetest.Eventually(t, 30*time.Second, "corectl_namespace_rights_missing", func() (bool, error) {
		g := rightsMissing(t, r)
		return len(g) == 3 && g[s.ns+" corectl-project-namespace"] == 0 && g[ingNS+" corectl-ingress-namespace"] == 0 &&
			g[unbound+" corectl-project-namespace"] == 1, nil
	})

	var eg egress.Status
	if code := put(t, r, "/sandboxes/sbx/network", `{"defaultAction":"deny","egress":[{"cidr":"10.0.0.0/8"}]}`, &eg); code != 200 || !eg.NetworkReady {
		t.Fatalf("egress PUT as the service account = %d %+v", code, eg)
	}
	var in ingressallow.Status
	if code := put(t, r, "/sandboxes/sbx/network/ingress", `{"ingress":[{"cidr":"10.0.0.0/8"}]}`, &in); code != 200 || !in.Ready {
		t.Fatalf("ingress PUT as the service account = %d %+v", code, in)
	}
	var tv struct {
		Version int64 `json:"version"`
	}
	if code := put(t, r, "/sandbox-templates/base/network", `{"ingress":[{"cidr":"10.0.0.0/8"}],"egress":[]}`, &tv); code != 200 || tv.Version != 1 {
		t.Fatalf("template PUT as the service account = %d %+v", code, tv)
	}
	saClient, err := client.New(sa, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "sbx"}}
	if err := saClient.Delete(ctx, pod); !apierrors.IsForbidden(err) {
		t.Fatalf("deleting a pod as corectl = %v, want Forbidden", err)
	}
	if err := saClient.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "escalate"}}); !apierrors.IsForbidden(err) {
		t.Fatalf("creating RBAC as corectl = %v, want Forbidden", err)
	}
}
