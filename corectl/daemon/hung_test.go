package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"k8s.io/client-go/rest"
)

// hungAPIServer is a stand-in for a cluster's kube-apiserver that has
// stopped answering (as under SIGSTOP): a loopback listener that accepts
// every connection, reads what is sent and never writes a byte. It returns
// the listener's URL; the listener and its connections close at the end
// of the test.
func hungAPIServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// TestAClusterHungFromTheStartCostsTheOthersNothing: corectl starts (a
// new replica, a restart, a rolling update) while one cluster's apiserver
// accepts connections and never answers. The other cluster's API must be
// served: New and Run must not wait for the hung cluster, the other
// cluster's manager leads and applies an ingress PUT, the gateway's
// Locate question finds a sandbox of the other cluster (its cache is
// asked alongside the hung cluster's, which has none yet), /metrics
// answers, and Run returns on shutdown. Before, New built every cluster's
// manager, and controller-runtime's manager reads the API discovery while
// it is built, with no timeout: New never returned, and corectl served no
// cluster at all.
func TestAClusterHungFromTheStartCostsTheOthersNothing(t *testing.T) {
	s := newSetup(t, "live")
	// A sandbox of the live cluster as a create leaves it (managed by
	// corectl, so its informer cache holds it), for the Locate question.
	located := lifecycle.NewID("sb")
	u := kubetest.NewBatchSandbox(s.ns, located, nil)
	u.SetLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: s.id})
	(&sandbox.Sandbox{Owner: "cred"}).MarkOwner(u)
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	hungID := fmt.Sprintf("hung-%d", setups.Add(1))
	hc := *kubetest.Cluster(hungID, env.Namespace(t))
	hc.Ingress.Host = hungID + ".example.test"
	s.cfg.Clusters = append(s.cfg.Clusters, hc)
	hung := hungAPIServer(t)
	const internalToken = "internal-token-for-the-locate-question"
	built := make(chan error, 1)
	var d *daemon.Daemon
	go func() {
		var err error
		d, err = daemon.New(daemon.Options{
			Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0", ProbeListen: "127.0.0.1:0",
			LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 250 * time.Millisecond,
			EgressGrace: time.Minute, IngressWait: 20 * time.Second, InternalToken: internalToken,
			RESTConfig: func(c *cluster.Cluster) (*rest.Config, error) {
				if c.ID == hungID {
					return &rest.Config{Host: hung}, nil
				}
				return rest.CopyConfig(env.Config), nil
			},
		})
		built <- err
	}()
	select {
	case err := <-built:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a bound on a wait that never ends, not a speed
		t.Fatal("daemon.New has not returned a minute after it was called: it waits for the hung cluster's apiserver")
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &replica{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(rctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
		}
	}()

	kubetest.Eventually(t, time.Minute, "the live cluster's leader", func() (bool, error) {
		select {
		case err := <-r.done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
		return elected(r, s.id), nil
	})
	var st ingressallow.Status
	if code := put(t, r, "/sandboxes/sbx/network/ingress", `{"ingress":[{"cidr":"10.0.0.0/8"}]}`, &st); code != 200 || st.VerificationState != "Verified" {
		t.Fatalf("PUT on the live cluster while the other hangs = %d %+v", code, st)
	}
	var a authorizer.Answer
	kubetest.Eventually(t, 30*time.Second, "the Locate question answered from the live cluster", func() (bool, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+d.Addr()+"/internal/v1/authorize?sandbox="+located, nil)
		req.Header.Set("Authorization", "Bearer "+internalToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("HTTP %d %s", resp.StatusCode, b)
		}
		return json.Unmarshal(b, &a) == nil && a.Allowed, nil
	})
	if a.Cluster != s.id {
		t.Fatalf("Locate answered %+v, want the sandbox in cluster %s", a, s.id)
	}
	rec := httptest.NewRecorder()
	d.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics while a cluster hangs: %d", rec.Code)
	}
	cancel()
	stopped = true
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute): // a bound on a wait that never ends, not a speed
		t.Fatal("Run has not returned a minute after its context ended: it waits for the hung cluster")
	}
}
