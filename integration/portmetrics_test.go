package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

// TestPortMetrics: the built gateway's /metrics counts host routing's port
// requests by outcome and the ones in progress, so an operator tells the
// gateway's own refusals (429 TOO_MANY_PORT_REQUESTS, 503 GATEWAY_BUSY, a
// refused token, a Host it does not serve) from a sandbox server's own 429,
// which is relayed, and from a fixed entry that cannot be reached. With
// both bounds at 1, a request held by sbxa's server makes the next one to
// sbxa TOO_MANY_PORT_REQUESTS and one to sbxb GATEWAY_BUSY. No series has
// the sandbox ID as a label value.
func TestPortMetrics(t *testing.T) {
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	closed, closedPort, err := freeport.Refusing() // cluster-raw's fixed entry refuses connections
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closedPort.Close() })
	rig := startPortRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hold" {
			w.WriteHeader(http.StatusTooManyRequests) // the sandbox server's own 429
			return
		}
		held <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}), closed, "max_port_requests_per_sandbox 1", "max_port_requests 1")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	metricsURL := "http://" + rig.env.Admin + "/metrics"
	// answer is the status and Sandgate-Error-Code of req.
	answer := func(req *http.Request) string {
		t.Helper()
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Sandgate-Error-Code"))
	}
	// settled waits until no port request is in progress (a request's
	// outcome is counted before its place is given back).
	settled := func(step string) {
		t.Helper()
		ok, why := waitUntil(time.Now().Add(waitLimit), func(context.Context) (bool, string) {
			m, err := scrapetest.Get(nil, metricsURL)
			if err != nil {
				return false, err.Error()
			}
			n, found := m.Sum("sandgate_dataplane_port_requests_in_progress")
			return found && n == 0, fmt.Sprintf("in progress %g (found %v)", n, found)
		})
		if !ok {
			t.Fatalf("%s: port requests still in progress: %s", step, why)
		}
	}

	if got := answer(rig.request(t, ctx, "GET", "sbxa", "/own")); got != "429 " {
		t.Fatalf("sbxa's own 429: got %q", got)
	}
	settled("after sbxa's own 429")
	if got := answer(rig.request(t, ctx, "GET", "rawx", "/")); !strings.HasPrefix(got, "502") {
		t.Fatalf("a port behind an unreachable fixed entry: got %q, want 502", got)
	}
	settled("after the unreachable fixed entry")
	bad := rig.request(t, ctx, "GET", "sbxa", "/")
	bad.Header.Set("E2b-Traffic-Access-Token", "not-a-token")
	if got := answer(bad); got != "403 TRAFFIC_TOKEN_INVALID" {
		t.Fatalf("a bad traffic token: got %q", got)
	}
	unserved := rig.request(t, ctx, "GET", "sbxa", "/")
	unserved.Host = "no-sandbox-here." + portDomain
	if got := answer(unserved); got != "404 HOST_NOT_SERVED" {
		t.Fatalf("a Host not served: got %q", got)
	}

	heldDone := make(chan string, 1)
	hold := rig.request(t, ctx, "GET", "sbxa", "/hold")
	go func() {
		resp, err := testClient.Do(hold)
		if err != nil {
			heldDone <- err.Error()
			return
		}
		resp.Body.Close()
		heldDone <- fmt.Sprint(resp.StatusCode)
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("sbxa's server never got the request to hold")
	}
	ok, why := waitUntil(time.Now().Add(waitLimit), func(context.Context) (bool, string) {
		m, err := scrapetest.Get(nil, metricsURL)
		if err != nil {
			return false, err.Error()
		}
		n := m.Value("sandgate_dataplane_port_requests_in_progress")
		return n == 1, fmt.Sprintf("in progress %g", n)
	})
	if !ok {
		t.Fatalf("the held request is not in progress: %s", why)
	}
	if got := answer(rig.request(t, ctx, "GET", "sbxa", "/")); got != "429 TOO_MANY_PORT_REQUESTS" {
		t.Errorf("sbxa past its bound: got %q", got)
	}
	if got := answer(rig.request(t, ctx, "GET", "sbxb", "/")); got != "503 GATEWAY_BUSY" {
		t.Errorf("sbxb past the gateway's bound: got %q", got)
	}
	close(release)
	if got := <-heldDone; got != "200" {
		t.Errorf("the held request ended with %s, want 200", got)
	}
	settled("after the held request")

	m, err := scrapetest.Get(nil, metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	for outcome, want := range map[string]float64{
		"relayed": 2, "upstream_error": 1, "TRAFFIC_TOKEN_INVALID": 1, "HOST_NOT_SERVED": 1,
		"TOO_MANY_PORT_REQUESTS": 1, "GATEWAY_BUSY": 1,
	} {
		if got := m.Value("sandgate_dataplane_port_requests_total", "outcome", outcome); got != want {
			t.Errorf("port requests with outcome %s: %g, want %g", outcome, got, want)
		}
	}
	if got, want := m.Value("sandgate_dataplane_port_requests_total"), 7.0; got != want {
		t.Errorf("port requests over all outcomes: %g, want %g\n%s", got, want, m)
	}
	if n := m.Value("sandgate_dataplane_requests_total"); n != 0 {
		t.Errorf("port requests were counted as envd calls: sandgate_dataplane_requests_total %g", n)
	}
	for _, s := range m {
		for _, v := range s.Labels {
			if strings.Contains(v, "sbxa") || strings.Contains(v, "sbxb") || strings.Contains(v, "rawx") {
				t.Errorf("a series names a sandbox: %s %v", s.Name, s.Labels)
			}
		}
	}
}
