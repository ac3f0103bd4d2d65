package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"k8s.io/client-go/rest"
)

// TestABuildThatFailsIsVisible: a cluster whose apiserver refuses
// corectl's credentials (the test apiserver, sent a bearer token it does
// not know instead of the test's client certificate) never gets a manager:
// its API discovery is refused; runCluster tries the build again
// and again. An operator sees it without reading the log: each failed
// build is counted in corectl_cluster_manager_build_failures_total, and
// the cluster's /readyz check says why its manager is not built (the
// discovery's own error, not "has not answered"). The other cluster is
// served meanwhile.
func TestABuildThatFailsIsVisible(t *testing.T) {
	s := newSetup(t, "live")
	refusedID := fmt.Sprintf("refused-%d", setups.Add(1))
	rc := *kubetest.Cluster(refusedID, env.Namespace(t))
	rc.Ingress.Host = refusedID + ".example.test"
	s.cfg.Clusters = append(s.cfg.Clusters, rc)
	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0", ProbeListen: "127.0.0.1:0",
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 250 * time.Millisecond,
		EgressGrace: time.Minute, IngressWait: 20 * time.Second,
		RESTConfig: func(c *cluster.Cluster) (*rest.Config, error) {
			if c.ID == refusedID {
				rc := rest.AnonymousClientConfig(env.Config)
				rc.BearerToken = "not-a-token-of-this-apiserver"
				return rc, nil
			}
			return rest.CopyConfig(env.Config), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &replica{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(rctx) }()
	defer func() {
		cancel()
		<-r.done
	}()
	kubetest.Eventually(t, time.Minute, "the live cluster's leader", func() (bool, error) {
		return elected(r, s.id), nil
	})
	failures := regexp.MustCompile(`(?m)^corectl_cluster_manager_build_failures_total\{cluster="` + refusedID + `"\} (\d+)$`)
	kubetest.Eventually(t, time.Minute, "two failed builds of the refused cluster counted", func() (bool, error) {
		rec := httptest.NewRecorder()
		d.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		m := failures.FindStringSubmatch(rec.Body.String())
		if m == nil {
			return false, fmt.Errorf("no corectl_cluster_manager_build_failures_total for %s", refusedID)
		}
		n, _ := strconv.Atoi(m[1])
		return n >= 2, fmt.Errorf("%d failed builds counted", n)
	})
	rec := httptest.NewRecorder()
	d.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz/cluster-"+refusedID, nil))
	if rec.Code == http.StatusOK || !strings.Contains(rec.Body.String(), "could not be built") || !strings.Contains(rec.Body.String(), "provide credentials") ||
		strings.Contains(rec.Body.String(), "not-a-token") {
		t.Errorf("/readyz/cluster-%s = %d %q, want a failure that gives the discovery's refusal (401) and not the token", refusedID, rec.Code, rec.Body.String())
	}
	kubetest.Eventually(t, time.Minute, "the live cluster ready", func() (bool, error) {
		rec := httptest.NewRecorder()
		d.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz/cluster-"+s.id, nil))
		return rec.Code == http.StatusOK, fmt.Errorf("/readyz/cluster-%s = %d %q", s.id, rec.Code, rec.Body.String())
	})
}
