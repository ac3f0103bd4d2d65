package lifecycle_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

// probe GETs path on the daemon's probe listener.
func (w *world) probe(path string) (int, string) {
	w.t.Helper()
	resp, err := http.Get("http://" + w.d.ProbeAddr() + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (w *world) metrics() scrapetest.Samples {
	w.t.Helper()
	s, err := scrapetest.Get(nil, "http://"+w.d.ProbeAddr()+"/metrics")
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// TestProbesAndMetrics runs a create, an ingress PUT, a failed create and
// a delete through the API and reads the probe listener: /healthz and
// /readyz (every check named) answer 200, and /metrics counts each route,
// each create, compensation and delete step with its outcome, the
// reconciler's outcomes and the CNI gate, beside controller-runtime's own
// metrics.
func TestProbesAndMetrics(t *testing.T) {
	w := start(t)
	id := w.cluster.ID
	kubetest.Eventually(t, 30*time.Second, "/readyz", func() (bool, error) {
		st, _ := w.probe("/readyz")
		return st == 200, nil
	})
	st, body := w.probe("/readyz?verbose")
	if st != 200 || !strings.Contains(body, "[+]api ok") || !strings.Contains(body, "[+]cluster-"+id+" ok") {
		t.Fatalf("/readyz?verbose = %d %s", st, body)
	}
	if st, body := w.probe("/healthz"); st != 200 {
		t.Fatalf("/healthz = %d %s", st, body)
	}

	sb := w.create(restricted)
	if st, raw := w.do("PUT", "/sandboxes/"+sb.SandboxID+"/network/ingress", "key-a", `{"ingress":[{"cidr":"192.0.2.0/24"}]}`, nil); st != 200 {
		t.Fatalf("ingress PUT = %d %s", st, raw)
	}
	w.fail(lifecycle.StepPolicy)
	if st, raw := w.do("POST", "/sandboxes", "key-a", restricted, nil); st != 500 {
		t.Fatalf("failing create = %d %s", st, raw)
	}
	w.fail()
	if st, raw := w.do("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", "", nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	w.do("GET", "/no/such/route", "key-a", "", nil)

	m := w.metrics()
	check := func(want float64, name string, labels ...string) {
		t.Helper()
		if got := m.Value(name, labels...); got != want {
			t.Errorf("%s%v = %g, want %g\n%s", name, labels, got, want, m)
		}
	}
	check(1, "corectl_http_requests_total", "route", "POST /v2/sandboxes", "code", "201")
	check(1, "corectl_http_requests_total", "route", "POST /sandboxes", "code", "500")
	check(1, "corectl_http_requests_total", "route", "PUT /sandboxes/{sandboxID}/network/ingress", "code", "200")
	check(1, "corectl_http_requests_total", "route", "DELETE /sandboxes/{sandboxID}", "code", "204")
	check(1, "corectl_http_requests_total", "route", "unmatched", "code", "404")
	check(1, "corectl_http_request_duration_seconds_count", "route", "POST /v2/sandboxes")
	// Two creates: the second passed cni-gate and ingress and failed at
	// policy.
	for _, s := range lifecycle.CreateSteps {
		ok, ran := 1.0, 1.0
		switch s {
		case lifecycle.StepCNIGate, lifecycle.StepIngress:
			ok, ran = 2, 2
		case lifecycle.StepPolicy:
			ran = 2
		}
		check(ok, "corectl_lifecycle_steps_total", "cluster", id, "operation", "create", "step", string(s), "outcome", "ok")
		check(ran, "corectl_lifecycle_step_duration_seconds_count", "cluster", id, "operation", "create", "step", string(s))
	}
	check(1, "corectl_lifecycle_steps_total", "cluster", id, "operation", "create", "step", "policy", "outcome", "failed")
	check(1, "corectl_lifecycle_steps_total", "cluster", id, "operation", "compensate", "step", "delete-ingress", "outcome", "ok")
	for _, s := range []lifecycle.Step{lifecycle.StepDeleteIngress, lifecycle.StepDeleteDesired, lifecycle.StepDeletePolicy, lifecycle.StepDeleteBatchSandbox} {
		check(1, "corectl_lifecycle_steps_total", "cluster", id, "operation", "delete", "step", string(s), "outcome", "ok")
	}
	if v := m.Value("corectl_reconcile_total", "cluster", id, "controller", "ingress", "outcome", "Verified"); v < 1 {
		t.Errorf("no Verified ingress reconcile counted\n%s", m)
	}
	check(1, "corectl_cni_gate_open", "cluster", id)
	if _, ok := m.Sum("controller_runtime_reconcile_total", "controller", "sandboxingressallowlist-"+id); !ok {
		t.Errorf("controller-runtime's reconcile metrics are not served")
	}
	if _, ok := m.Sum("go_goroutines"); !ok {
		t.Errorf("the Go collector is not served")
	}
}

// TestGracefulShutdown ends Run while a create is in flight: /readyz
// fails at once, new API connections are refused, and the create in
// flight still gets its answer (201, its objects complete) before Run
// returns.
func TestGracefulShutdown(t *testing.T) {
	w := start(t)
	release := w.holdAt(lifecycle.StepToken)
	type answer struct {
		status int
		body   string
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", w.url+"/v2/sandboxes", strings.NewReader(restricted))
		req.Header.Set("X-API-Key", "key-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{0, err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- answer{resp.StatusCode, string(b)}
	}()
	kubetest.Eventually(t, 30*time.Second, "the create to reach its token step", func() (bool, error) {
		return w.metrics().Value("corectl_lifecycle_steps_total", "step", "readiness", "outcome", "ok") == 1, nil
	})
	stopped := make(chan error, 1)
	go func() { stopped <- w.stop() }()
	kubetest.Eventually(t, 10*time.Second, "/readyz to fail", func() (bool, error) {
		st, body := w.probe("/readyz/api")
		return st == 500 && strings.Contains(body, "shutting down"), nil
	})
	kubetest.Eventually(t, 10*time.Second, "new API connections to be refused", func() (bool, error) {
		resp, err := http.Get(w.url + "/openapi.json")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil, nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) with a create in flight", err)
	default:
	}
	close(release)
	a := <-answered
	if a.status != 201 || !strings.Contains(a.body, "envdAccessToken") {
		t.Fatalf("the create in flight = %d %s", a.status, a.body)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
