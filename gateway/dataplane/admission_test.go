package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/execdtoken"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
)

// TestUpstreamCallsBounded: while a sandbox has max_upstream_calls_per_sandbox
// unary calls in progress (its execd holding the answer), one more waits
// for a slot: it is refused with GATEWAY_BUSY (unavailable, which the
// Connect protocol sends as 503) when its wait (here 20 ms) ends
// first, and served once a slot is free (admission's TestAcquireWaits: a
// slot freed during the wait is taken). The same holds for the
// credential's process lists.
func TestUpstreamCallsBounded(t *testing.T) {
	e := newTestEnv(t, extended, func(c *Config, _ *execdstub.Config) {
		c.MaxUpstreamCallsPerSandbox = 1
		c.MaxProcessCallsPerCredential = 1
		c.UpstreamWait = 20 * time.Millisecond
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
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"unavailable"`) ||
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

// TestExecdTokenPerSandbox: with a cluster's execd token secret, the
// gateway sends each sandbox's execd the token derived for that sandbox
// (execdtoken.Derive), which an execd started with it accepts; an execd
// holding another sandbox's token refuses it (EXECD_UNAUTHORIZED).
func TestExecdTokenPerSandbox(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	for _, c := range []struct {
		execdToken string
		status     int
	}{
		{execdtoken.Derive(secret, testSandbox), http.StatusOK},
		{execdtoken.Derive(secret, "another-sandbox"), http.StatusInternalServerError},
	} {
		e := newTestEnvDeps(t, func(d *Deps) {
			cl := d.Clusters.(fakeClusters)["cluster-a"]
			cl.ExecdTokenSecrets = [][]byte{secret}
			d.Clusters = fakeClusters{"cluster-a": cl}
		}, func(_ *Config, x *execdstub.Config) { x.AccessToken = c.execdToken })
		resp, body := e.unary("ListDir", `{"path":"/home/user"}`)
		if resp.StatusCode != c.status || (c.status != 200 && resp.Header.Get("Sandgate-Error-Code") != string(CodeExecdUnauthorized)) {
			t.Fatalf("execd holding %.8s…: %d %s", c.execdToken, resp.StatusCode, body)
		}
	}
}

// TestExecdTokenSecretsDuringRotation: with two secrets (a rotation),
// a sandbox whose execd was started with either secret's token is served,
// each request sending the token its execd accepts; a sandbox whose execd
// holds neither is refused EXECD_UNAUTHORIZED, as with one secret.
func TestExecdTokenSecretsDuringRotation(t *testing.T) {
	oldSecret, newSecret := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	for _, c := range []struct {
		name       string
		execdToken string
		status     int
	}{
		{"old", execdtoken.Derive(oldSecret, testSandbox), http.StatusOK},
		{"new", execdtoken.Derive(newSecret, testSandbox), http.StatusOK},
		{"neither", execdtoken.Derive(newSecret, "another-sandbox"), http.StatusInternalServerError},
	} {
		e := newTestEnvDeps(t, func(d *Deps) {
			cl := d.Clusters.(fakeClusters)["cluster-a"]
			cl.ExecdTokenSecrets = [][]byte{oldSecret, newSecret}
			d.Clusters = fakeClusters{"cluster-a": cl}
		}, func(_ *Config, x *execdstub.Config) { x.AccessToken = c.execdToken })
		for range 3 {
			resp, body := e.unary("ListDir", `{"path":"/home/user"}`)
			if resp.StatusCode != c.status || (c.status != 200 && resp.Header.Get("Sandgate-Error-Code") != string(CodeExecdUnauthorized)) {
				t.Fatalf("execd started with the %s secret's token: %d %s", c.name, resp.StatusCode, body)
			}
		}
	}
}
