package daemon_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/cnicheck"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/internal/scrapetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestCNIGateFollowsTheCluster: with a cniSource, corectl reads the CNI
// DaemonSet's image version and the fingerprint of its ConfigMap from the
// cluster and re-reads them without a restart. A new CNI version, a changed
// configuration, or facts it cannot read close the gate: egress PUTs are
// refused with CNIUnqualified, the CNIQualification condition Qualified
// turns False with the reason, a Warning Event is emitted and
// corectl_cni_gate_open drops to 0; back to the qualified facts, all of it
// reverts.
func TestCNIGateFollowsTheCluster(t *testing.T) {
	s := newSetup(t, "c-cni")
	cniNS := env.Namespace(t)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: cniNS, Name: "calico-node"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "calico-node"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "calico-node"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "install-cni", Image: "registry.example:5000/calico/cni:v3.28.1"},
					{Name: "calico-node", Image: "registry.example:5000/calico/node:v3.28.1"},
				}},
			},
		},
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cniNS, Name: "calico-config"},
		Data: map[string]string{"cni_network_config": `{"type":"calico"}`, "veth_mtu": "1440", "unrelated": "x"}}
	for _, o := range []client.Object{ds, cm} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	src := &cluster.CNISource{Implementation: "calico", DaemonSet: cluster.ObjectRef{Namespace: cniNS, Name: "calico-node"},
		Container: "calico-node", Config: cluster.ObjectRef{Namespace: cniNS, Name: "calico-config"}, Keys: []string{"cni_network_config", "veth_mtu"}}
	fp, err := cnicheck.Fingerprint(cm, src.Keys)
	if err != nil {
		t.Fatal(err)
	}
	c := &s.cfg.Clusters[0]
	c.CNI, c.CNISource = cluster.CNIFacts{}, src
	c.CNIQualification = &cluster.CNIQualification{ClusterID: s.id, CNIFacts: cluster.CNIFacts{Implementation: "calico", Version: "v3.28.1", Fingerprint: fp}}
	if err := s.cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0", ProbeListen: "127.0.0.1:0",
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS, CNICheckInterval: 100 * time.Millisecond,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	r := &replica{d: d}

	gateOpen := func() float64 {
		samples, err := scrapetest.Get(http.DefaultClient, "http://"+d.ProbeAddr()+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return samples.Value("corectl_cni_gate_open", "cluster", s.id)
	}
	condition := func() *metav1.Condition {
		obj := &v1alpha1.CNIQualification{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.leaseNS, Name: cnicheck.ObjectName(s.id)}, obj); err != nil {
			return nil
		}
		return meta.FindStatusCondition(obj.Status.Conditions, cnicheck.ConditionQualified)
	}
	events := func(reason string) int {
		var list eventsv1.EventList
		if err := env.Client.List(ctx, &list, client.InNamespace(s.leaseNS)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range list.Items {
			if e.Regarding.Kind == "CNIQualification" && e.Reason == reason {
				n++
			}
		}
		return n
	}
	const body = `{"defaultAction":"deny","egress":[{"cidr":"203.0.113.10"}]}`
	expect := func(what string, qualified bool, reason string) {
		t.Helper()
		kubetest.Eventually(t, 30*time.Second, what, func() (bool, error) {
			cond := condition()
			want := metav1.ConditionFalse
			if qualified {
				want = metav1.ConditionTrue
			}
			if cond == nil || cond.Status != want || cond.Reason != reason {
				return false, nil
			}
			return (gateOpen() == 1) == qualified, nil
		})
		var f egress.Status
		code := put(t, r, "/sandboxes/sbx/network", body, &f)
		if qualified != (code == http.StatusOK) {
			t.Fatalf("%s: egress PUT = %d", what, code)
		}
	}

	expect("the gate open on the qualified facts", true, cluster.ReasonQualified)
	obj := &v1alpha1.CNIQualification{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.leaseNS, Name: cnicheck.ObjectName(s.id)}, obj); err != nil {
		t.Fatal(err)
	}
	if w := meta.FindStatusCondition(obj.Status.Conditions, cnicheck.ConditionWatching); w == nil || w.Status != metav1.ConditionTrue || w.Reason != cnicheck.ReasonReadFromCluster {
		t.Fatalf("Watching condition with a cniSource = %+v", w)
	}
	if events(cnicheck.EventQualified) < 1 {
		t.Fatal("no Normal Event for the qualified gate")
	}

	// A CNI upgrade: the image's tag changes.
	ds.Spec.Template.Spec.Containers[1].Image = "registry.example:5000/calico/node:v3.29.0"
	if err := env.Client.Update(ctx, ds); err != nil {
		t.Fatal(err)
	}
	expect("the gate closed on a new CNI version", false, cluster.ReasonVersionChanged)
	kubetest.Eventually(t, 10*time.Second, "a Warning Event", func() (bool, error) { return events(cnicheck.EventUnqualified) >= 1, nil })

	// Back to the qualified version; then a configuration change, which an
	// unrelated key does not make.
	ds.Spec.Template.Spec.Containers[1].Image = "registry.example:5000/calico/node:v3.28.1"
	if err := env.Client.Update(ctx, ds); err != nil {
		t.Fatal(err)
	}
	cm.Data["unrelated"] = "changed"
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	expect("the gate open again, an unrelated key changed", true, cluster.ReasonQualified)
	cm.Data["veth_mtu"] = "1500"
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	expect("the gate closed on a configuration change", false, cluster.ReasonFingerprintChanged)

	// Facts that cannot be read close it too.
	if err := env.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	expect("the gate closed on unreadable facts", false, cluster.ReasonFactsUnreadable)
}

// TestImageVersionAndFingerprint: the version an image reference names,
// and a fingerprint that depends on exactly the selected entries.
func TestImageVersionAndFingerprint(t *testing.T) {
	for image, want := range map[string]string{
		"calico/node:v3.28.1":                          "v3.28.1",
		"registry.example:5000/calico/node:v3.28.1":    "v3.28.1",
		"registry.example:5000/calico/node":            "latest",
		"calico/node@sha256:abc":                       "sha256:abc",
		"calico/node:v3.28.1@sha256:abc":               "v3.28.1",
		"registry.example:5000/calico/node@sha256:abc": "sha256:abc",
	} {
		if got := cnicheck.ImageVersion(image); got != want {
			t.Errorf("ImageVersion(%q) = %q, want %q", image, got, want)
		}
	}
	cm := &corev1.ConfigMap{Data: map[string]string{"a": "1", "b": "2"}, BinaryData: map[string][]byte{"c": {3}}}
	all, _ := cnicheck.Fingerprint(cm, nil)
	onlyA, _ := cnicheck.Fingerprint(cm, []string{"a"})
	cm.Data["b"] = "changed"
	all2, _ := cnicheck.Fingerprint(cm, nil)
	onlyA2, _ := cnicheck.Fingerprint(cm, []string{"a"})
	if all == all2 || onlyA != onlyA2 || all == onlyA {
		t.Fatalf("fingerprints %s %s %s %s", all, all2, onlyA, onlyA2)
	}
	if _, err := cnicheck.Fingerprint(cm, []string{"missing"}); err == nil {
		t.Fatal("a missing key gave a fingerprint")
	}
}

// TestCNIGateStaticFactsAreNotWatched: with the CNI facts written in the
// configuration (cni:), corectl warns at start and the leader writes the
// CNIQualification object with the Watching condition False
// (StaticFacts), beside Qualified (issue 30 item 10). Before, a static
// cluster got no object at all and no warning: the gate could never
// drift and nothing said so.
func TestCNIGateStaticFactsAreNotWatched(t *testing.T) {
	s := newSetup(t, "c-static")
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		lines = append(lines, prefix+" "+args)
		mu.Unlock()
	}, funcr.Options{})
	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0",
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS, CNICheckInterval: 100 * time.Millisecond, Log: log,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	mu.Lock()
	warned := slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, cnicheck.StaticFactsWarning) && strings.Contains(l, s.id)
	})
	mu.Unlock()
	if !warned {
		t.Fatalf("no start-up warning for the static CNI facts in %q", lines)
	}
	kubetest.Eventually(t, 30*time.Second, "the CNIQualification object says the gate is not watching", func() (bool, error) {
		obj := &v1alpha1.CNIQualification{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.leaseNS, Name: cnicheck.ObjectName(s.id)}, obj); err != nil {
			return false, nil
		}
		w := meta.FindStatusCondition(obj.Status.Conditions, cnicheck.ConditionWatching)
		q := meta.FindStatusCondition(obj.Status.Conditions, cnicheck.ConditionQualified)
		return w != nil && w.Status == metav1.ConditionFalse && w.Reason == cnicheck.ReasonStaticFacts && w.Message == cnicheck.StaticFactsWarning &&
			q != nil && q.Status == metav1.ConditionTrue && obj.Status.Observed != nil, nil
	})
}
