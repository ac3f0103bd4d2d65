package daemon_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/token"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// startLifecycle starts a leader-electing replica that serves the sandbox
// lifecycle (a token key), so it runs the expiry loop when it leads; m
// receives its metrics. Its renew deadline is longer than corectl's
// default: the test counts on the first leader keeping the Lease until
// it stops (releasing it, so the other takes over within a retry
// period), which a 3 s deadline did not promise on a loaded machine.
func (s *setup) startLifecycle(t *testing.T, m *metrics.Metrics) *replica {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "k1.key")
	if err := os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	sk, err := token.LoadSigningKey("k1", "HS256", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0",
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
		LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 250 * time.Millisecond,
		TokenKey: &sk, OrphanInterval: time.Hour, Metrics: m,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return run(t, d)
}

// expiryReconciles is m's corectl_reconcile_total of the expiry loop for
// cluster, all outcomes, and of outcome alone.
func expiryReconciles(t *testing.T, m *metrics.Metrics, cluster, outcome string) (all, of float64) {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "corectl_reconcile_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["cluster"] == cluster && l["controller"] == "expiry" {
				all += s.GetCounter().GetValue()
				if l["outcome"] == outcome {
					of += s.GetCounter().GetValue()
				}
			}
		}
	}
	return all, of
}

// counter is the sum of m's counter name over the series whose labels
// include want.
func counter(t *testing.T, m *metrics.Metrics, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			for k, v := range want {
				if l[k] != v {
					continue series
				}
			}
			sum += s.GetCounter().GetValue()
		}
	}
	return sum
}

// expiring creates a BatchSandbox of cluster s.id that corectl created
// (managed-by, cluster label, owner) and that ends at end.
func (s *setup) expiring(t *testing.T, end time.Time) string {
	t.Helper()
	id := lifecycle.NewID("sb")
	u := kubetest.NewBatchSandbox(s.ns, id, map[string]string{"allocation-id": lifecycle.NewID("al")})
	u.SetLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: s.id})
	u.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: lifecycle.StateReady,
		v1alpha1.AnnotationEndAt: end.UTC().Format(time.RFC3339Nano), v1alpha1.AnnotationCredential: "cred"})
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	return id
}

func exists(t *testing.T, ns, id string) bool {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, u)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestExpiryLeaderOnly: with two replicas only the leader runs the expiry
// loop. The leader reconciles a sandbox that ends in an hour (Waiting) and
// deletes it once its end is moved into the past (Expired), while the
// follower — whose cache sees the same objects — records no expiry
// reconcile at all. When the leader stops, the follower takes over and
// deletes, from the objects alone, a sandbox that expired while no replica
// led.
func TestExpiryLeaderOnly(t *testing.T) {
	s := newSetup(t, "c-expiry")
	id := s.expiring(t, time.Now().Add(time.Hour))
	ma, mb := metrics.New(), metrics.New()
	a, b := s.startLifecycle(t, ma), s.startLifecycle(t, mb)
	kubetest.Eventually(t, 30*time.Second, "a leader", func() (bool, error) {
		return elected(a, s.id) || elected(b, s.id), nil
	})
	leader, follower, ml, mf := a, b, ma, mb
	if elected(b, s.id) {
		leader, follower, ml, mf = b, a, mb, ma
	}
	kubetest.Eventually(t, 30*time.Second, "the leader to reconcile the sandbox's end", func() (bool, error) {
		_, waiting := expiryReconciles(t, ml, s.id, "Waiting")
		return waiting >= 1, nil
	})
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationEndAt + `":"` + time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano) + `"}}}`)
	u.SetNamespace(s.ns)
	u.SetName(id)
	if err := env.Client.Patch(ctx, u, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "the leader to delete the expired sandbox", func() (bool, error) {
		_, expired := expiryReconciles(t, ml, s.id, "Expired")
		return expired >= 1 && !exists(t, s.ns, id), nil
	})
	if all, _ := expiryReconciles(t, mf, s.id, ""); all != 0 || elected(follower, s.id) {
		t.Fatalf("the follower ran the expiry loop (%g reconciles, elected %v)", all, elected(follower, s.id))
	}
	// The orphan scan runs on the leader too, once at its start
	// (OrphanInterval is an hour), and counts its outcome.
	kubetest.Eventually(t, 30*time.Second, "the leader's orphan scan to be counted", func() (bool, error) {
		return counter(t, ml, "corectl_orphan_scans_total", map[string]string{"cluster": s.id, "outcome": metrics.ScanOK}) == 1, nil
	})
	if n := counter(t, mf, "corectl_orphan_scans_total", map[string]string{"cluster": s.id}); n != 0 {
		t.Fatalf("the follower counted %g orphan scans", n)
	}

	if err := leader.stop(); err != nil {
		t.Fatal(err)
	}
	late := s.expiring(t, time.Now().Add(-time.Minute))
	kubetest.Eventually(t, 30*time.Second, "the new leader to delete the sandbox that expired meanwhile", func() (bool, error) {
		_, expired := expiryReconciles(t, mf, s.id, "Expired")
		return elected(follower, s.id) && expired >= 1 && !exists(t, s.ns, late), nil
	})
}
