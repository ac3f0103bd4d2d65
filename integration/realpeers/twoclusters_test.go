package realpeers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestTwoComputeClusters runs the JS SDK's "peers" session once with a
// credential of each compute cluster, through the one corectl and the one
// gateway that serve both: each sandbox is made by its own cluster's
// controller, gets a Pod IP of its own cluster's kwok, and its traffic
// (corectl's readiness ping and the SDK's calls) goes through its own
// cluster's Ingress and never through the other's.
func TestTwoComputeClusters(t *testing.T) {
	requireTier(t)
	w.startExecd(t, "head")
	pkg := jsPackages[0]
	ids := map[*compute]string{}
	for _, run := range []struct {
		c   *compute
		key string
	}{{w.b, apiKeyB}, {w.a, apiKey}} {
		t.Run(run.c.id, func(t *testing.T) {
			seen := run.c.watchSandboxes(t)
			dir := "/home/user/two-" + run.c.id
			var r peersResult
			runScenario(t, w.gateway, "node", []string{"sdk.mjs", "peers"}, filepath.Join(w.root, "integration/js"), &r,
				"E2B_PACKAGE="+pkg, "SCENARIO_DIR="+dir, "E2B_API_KEY="+run.key)
			run.c.checkSession(t, r, dir, seen)
			ids[run.c] = r.SandboxID
		})
	}
	for c, id := range ids {
		other := w.a
		if c == w.a {
			other = w.b
		}
		if ping, data := other.ingressSaw(t, id, ""); ping || data {
			t.Errorf("%s's sandbox %s reached %s's Ingress (ping %v, data %v)", c.id, id, other.id, ping, data)
		}
	}
}

// TestComputeClusterOutage stops cluster-b's kube-apiserver (every
// connection to it refused, by a rule in the test's network namespace)
// while a sandbox runs in each cluster: a create with cluster-b's
// credential fails with a typed error, cluster-b's running sandbox keeps
// serving through the data plane (its token and its Ingress's cache need
// no apiserver), and cluster-a's creates, data plane and deletes carry on.
// When the apiserver returns, cluster-b's creates work again.
func TestComputeClusterOutage(t *testing.T) {
	requireTier(t)
	w.startExecd(t, "head")
	idA, tokA := w.createSandboxAs(t, apiKey)
	idB, tokB := w.createSandboxAs(t, apiKeyB)
	for id, tok := range map[string]string{idA: tokA, idB: tokB} {
		if status, body := listDir(t, id, tok); status != http.StatusOK {
			t.Fatalf("before the outage, ListDir in %s: %d %s", id, status, body)
		}
	}

	u, err := url.Parse(w.b.kube.Config.Host)
	if err != nil || u.Port() == "" {
		t.Fatalf("cluster-b's apiserver address %q: %v", w.b.kube.Config.Host, err)
	}
	port := u.Port()
	rule := []string{"INPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", port, "-j", "REJECT", "--reject-with", "tcp-reset"}
	iptables(t, append([]string{"-I"}, rule...)...)
	restored := false
	restore := func() {
		if !restored {
			restored = true
			iptables(t, append([]string{"-D"}, rule...)...)
		}
	}
	t.Cleanup(restore)

	start := time.Now()
	r := apiCall(t, apiKeyB, "POST", w.api+"/sandboxes", `{"templateID":"base","timeout":300}`)
	var e struct {
		Code  int    `json:"code"`
		Error string `json:"error"`
	}
	if r.status < 500 || json.Unmarshal(r.body, &e) != nil || e.Code != r.status || e.Error == "" {
		t.Errorf("a create in cluster-b without its apiserver: %d %s, want a typed 5xx error", r.status, r.body)
	}
	t.Logf("cluster-b create without its apiserver: %d %s after %v", r.status, r.body, time.Since(start).Round(time.Millisecond))
	if status, body := listDir(t, idB, tokB); status != http.StatusOK {
		t.Errorf("cluster-b's running sandbox during the outage: ListDir %d %s", status, body)
	}
	idA2, tokA2 := w.createSandboxAs(t, apiKey)
	for id, tok := range map[string]string{idA: tokA, idA2: tokA2} {
		if status, body := listDir(t, id, tok); status != http.StatusOK {
			t.Errorf("cluster-a's sandbox %s during cluster-b's outage: ListDir %d %s", id, status, body)
		}
	}

	restore()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := poll(ctx, "cluster-b's apiserver to answer again", func() error {
		return w.b.client.Get(ctx, client.ObjectKey{Name: kwokNode}, &corev1.Node{})
	}); err != nil {
		t.Fatal(err)
	}
	idB2, tokB2 := w.createSandboxAs(t, apiKeyB)
	if status, body := listDir(t, idB2, tokB2); status != http.StatusOK {
		t.Errorf("cluster-b's new sandbox after the outage: ListDir %d %s", status, body)
	}
}

// listDir sends envd's filesystem ListDir of /home/user for sandbox id
// with token through the gateway (the SDK's Connect unary call) and
// returns the status and body.
func listDir(t *testing.T, id, token string) (int, string) {
	t.Helper()
	status, b := listDirOf(t, id, token, "/home/user")
	return status, string(b)
}

// iptables runs iptables with args in the test's network namespace.
func iptables(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
