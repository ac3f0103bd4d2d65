package daemon_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/internal/freeport"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
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
	return clusterCounter(t, r, "corectl_cluster_manager_restarts_total", id)
}

// clusterCounter reads the counter name{cluster=id}, 0 when absent.
func clusterCounter(t *testing.T, r *replica, name, id string) float64 {
	t.Helper()
	mfs, err := r.d.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
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

// TestAManagerThatCannotBeBuiltIsCounted: a cluster whose apiserver
// refuses connections when corectl starts has no manager: Run builds it
// in the cluster's own goroutine and tries again after each restart pause,
// which before showed only in /readyz and the log. Each failed attempt is
// counted in corectl_cluster_manager_build_failures_total{cluster}, served
// on /metrics, while the live cluster, built at its first attempt, has no
// failure and leads.
func TestAManagerThatCannotBeBuiltIsCounted(t *testing.T) {
	s := newSetup(t, "built")
	refusedID := fmt.Sprintf("refused-%d", setups.Add(1))
	rc := *kubetest.Cluster(refusedID, env.Namespace(t))
	rc.Ingress.Host = refusedID + ".example.test"
	s.cfg.Clusters = append(s.cfg.Clusters, rc)
	refused, held, err := freeport.Refusing() // connections there are refused
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0",
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 250 * time.Millisecond,
		EgressGrace: time.Minute, IngressWait: 20 * time.Second,
		RESTConfig: func(c *cluster.Cluster) (*rest.Config, error) {
			if c.ID == refusedID {
				return &rest.Config{Host: "http://" + refused}, nil
			}
			return rest.CopyConfig(env.Config), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, d)

	// The first attempt and at least one retry (after the 1 s pause).
	kubetest.Eventually(t, time.Minute, "two failed builds of the refused cluster's manager counted", func() (bool, error) {
		return clusterCounter(t, r, "corectl_cluster_manager_build_failures_total", refusedID) >= 2, nil
	})
	kubetest.Eventually(t, time.Minute, "the live cluster's leader", func() (bool, error) { return elected(r, s.id), nil })
	if n := clusterCounter(t, r, "corectl_cluster_manager_build_failures_total", s.id); n != 0 {
		t.Errorf("the live cluster's build failures: %g, want 0", n)
	}
	if n := restarts(t, r, refusedID); n != 0 {
		t.Errorf("a manager never built was counted as restarted: %g", n)
	}
	rec := httptest.NewRecorder()
	d.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	want := `corectl_cluster_manager_build_failures_total{cluster="` + refusedID + `"}`
	if rec.Code != http.StatusOK || !strings.Contains(string(body), want) {
		t.Fatalf("/metrics: %d, no series %s", rec.Code, want)
	}
}
