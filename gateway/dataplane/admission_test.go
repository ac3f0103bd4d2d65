package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
)

// TestUpstreamCallsBounded: while a sandbox has max_upstream_calls_per_sandbox
// unary calls in progress (its execd holding the answer), one more is
// refused at once with GATEWAY_BUSY (resource_exhausted, which the Connect
// protocol sends as 429), and served again once a slot is free. The same
// holds for the credential's process lists.
func TestUpstreamCallsBounded(t *testing.T) {
	e := newTestEnv(t, extended, func(c *Config, _ *execdstub.Config) {
		c.MaxUpstreamCallsPerSandbox = 1
		c.MaxProcessCallsPerCredential = 1
	})
	entered, release := make(chan struct{}, 8), make(chan struct{})
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`)) // an empty listing, or no process records
	}))
	defer hold.Close()
	e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{execd.DefaultPort: hold.Listener.Addr().String()}})

	for _, call := range []struct {
		name string
		send func() (*http.Response, []byte)
	}{
		{"ListDir", func() (*http.Response, []byte) { return e.unary("ListDir", `{"path":"/home/user"}`) }},
		{"Process/List", func() (*http.Response, []byte) { return e.processCall("List", `{}`) }},
	} {
		first := make(chan int, 1)
		go func() {
			resp, _ := call.send()
			first <- resp.StatusCode
		}()
		<-entered
		resp, body := call.send()
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"code":"resource_exhausted"`) ||
			!strings.Contains(string(body), "GATEWAY_BUSY") || resp.Header.Get("Sandgate-Error-Code") != "GATEWAY_BUSY" {
			t.Fatalf("%s while one is in progress: %d %s", call.name, resp.StatusCode, body)
		}
		release <- struct{}{}
		if code := <-first; code != http.StatusOK {
			t.Fatalf("%s: the call holding the slot answered %d", call.name, code)
		}
		go func() { <-entered; release <- struct{}{} }()
		if resp, body := call.send(); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s after the slot was freed: %d %s", call.name, resp.StatusCode, body)
		}
	}
}
