package daemon_test

import (
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestLostLeaseReplacesTheClusterManager: a cluster's manager that loses
// its leader election (here another holder takes the Lease, as when the
// cluster's apiserver stops answering for longer than the renew
// deadline) stops; before, that ended Run and with it corectl, every
// cluster's API included. Now only that cluster's manager is replaced:
// Run goes on, the restart is counted, the API still answers, /readyz
// stays ready, and the new manager leads again once the other holder's
// Lease has expired.
func TestLostLeaseReplacesTheClusterManager(t *testing.T) {
	s := newSetup(t, "relect")
	r := s.start(t, env.Config, time.Minute)
	kubetest.Eventually(t, 30*time.Second, "the first election", func() (bool, error) { return elected(r, s.id), nil })
	first := r.d.Elected(s.id)

	// Another holder takes the Lease for 3 s without renewing it.
	key := client.ObjectKey{Namespace: s.leaseNS, Name: daemon.LeaseName(s.id)}
	kubetest.Eventually(t, 10*time.Second, "the Lease taken over", func() (bool, error) {
		var l coordinationv1.Lease
		if err := env.Client.Get(ctx, key, &l); err != nil {
			return false, err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To("another-replica"), ptr.To[int32](3)
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		return env.Client.Update(ctx, &l) == nil, nil
	})
	kubetest.Eventually(t, 60*time.Second, "the manager replaced and leading again", func() (bool, error) {
		select {
		case err := <-r.done:
			t.Fatalf("Run ended when one cluster's manager lost its lease: %v", err)
		default:
		}
		cur := r.d.Elected(s.id)
		if cur == first {
			return false, nil
		}
		select {
		case <-cur:
			return true, nil
		default:
			return false, nil
		}
	})
	if got := restarts(t, r, s.id); got < 1 {
		t.Fatalf("corectl_cluster_manager_restarts_total = %g, want ≥ 1", got)
	}
	var l coordinationv1.Lease
	if err := env.Client.Get(ctx, key, &l); err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "another-replica" {
		t.Fatalf("Lease after the restart: %v %+v", err, l.Spec)
	}
	// The new manager's reconciler applies an ingress PUT.
	var st ingressallow.Status
	if code := put(t, r, "/sandboxes/sbx/network/ingress", `{"ingress":[{"cidr":"10.0.0.0/8"}]}`, &st); code != 200 || st.VerificationState != "Verified" {
		t.Fatalf("PUT after the restart = %d %+v", code, st)
	}
}

// restarts reads corectl_cluster_manager_restarts_total{cluster=id}.
func restarts(t *testing.T, r *replica, id string) float64 {
	t.Helper()
	mfs, err := r.d.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "corectl_cluster_manager_restarts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == id {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
