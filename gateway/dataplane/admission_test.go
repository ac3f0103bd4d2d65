package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/execdtoken"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
)

// TestUpstreamCallsBounded: while a sandbox has max_upstream_calls_per_sandbox
// unary calls reading execd's answer (its execd holding the rest of the
// body), one more whose answer has arrived waits for a slot: it is refused
// with GATEWAY_BUSY (unavailable, which the Connect protocol sends as 503)
// when its wait (here 20 ms) ends first, and served once a slot is free
// (admission's TestAcquireWaits: a slot freed during the wait is taken).
// A call whose request message is over 64 KiB waits, and is refused,
// before its message is read; the credential's process lists are bounded
// likewise (their bound taken before any execd call).
func TestUpstreamCallsBounded(t *testing.T) {
	e := newTestEnv(t, extended, func(c *Config, _ *execdstub.Config) {
		c.MaxUpstreamCallsPerSandbox = 1
		c.MaxProcessCallsPerCredential = 1
		c.UpstreamWait = 20 * time.Millisecond
	})
	var mu sync.Mutex
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		rel := release
		mu.Unlock()
		// The head and the first byte of an empty listing (or of no
		// process records), the rest held back. Chunked, so the fixed
		// entry's ReverseProxy passes each part on at once.
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[`))
		w.(http.Flusher).Flush()
		entered <- struct{}{}
		<-rel
		_, _ = w.Write([]byte(`]`))
	}))
	defer hold.Close()
	e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{execd.DefaultPort: hold.Listener.Addr().String()}})

	for _, call := range []struct {
		name string
		send func() (*http.Response, []byte)
		// refusedAtExecd: the refused call reached execd (its slot is
		// taken when its answer arrives), not the process-list bound's
		// (taken before).
		refusedAtExecd bool
	}{
		{"ListDir", func() (*http.Response, []byte) { return e.unary("ListDir", `{"path":"/home/user"}`) }, true},
		// A message over 64 KiB takes the slot before it is read.
		{"ListDir of a large message", func() (*http.Response, []byte) {
			return e.unary("ListDir", `{"path":"/home/user"`+strings.Repeat(" ", smallMessage)+`}`)
		}, false},
		{"Process/List", func() (*http.Response, []byte) { return e.processCall("List", `{}`) }, false},
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
		if call.refusedAtExecd {
			<-entered
		} else if len(entered) != 0 {
			t.Fatalf("%s: the refused call reached execd", call.name)
		}
		mu.Lock()
		close(release) // every held answer, the refused call's too
		release = make(chan struct{})
		mu.Unlock()
		if code := <-first; code != http.StatusOK {
			t.Fatalf("%s: the call holding the slot answered %d", call.name, code)
		}
		go func() {
			<-entered
			mu.Lock()
			close(release)
			release = make(chan struct{})
			mu.Unlock()
		}()
		if resp, body := call.send(); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s after the slot was freed: %d %s", call.name, resp.StatusCode, body)
		}
	}
}

// TestWaitingForExecdHoldsNoSlot: a unary call whose execd has not
// answered yet holds no slot of max_upstream_calls_per_sandbox, so with a
// bound of 1 two calls to one sandbox are at execd at once (each execd
// handler waits for the other to arrive), and both are served.
func TestWaitingForExecdHoldsNoSlot(t *testing.T) {
	e := newTestEnv(t, func(c *Config, _ *execdstub.Config) {
		c.MaxUpstreamCallsPerSandbox = 1
		c.UpstreamWait = time.Hour
	})
	var arrived sync.WaitGroup
	arrived.Add(2)
	both := make(chan struct{})
	go func() { arrived.Wait(); close(both) }()
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		select {
		case <-both:
		case <-time.After(10 * time.Second): // a bound on the test, not a measure
			http.Error(w, "the other call never reached execd", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`))
	}))
	defer hold.Close()
	e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{execd.DefaultPort: hold.Listener.Addr().String()}})
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			resp, _ := e.unary("ListDir", `{"path":"/home/user"}`)
			codes <- resp.StatusCode
		}()
	}
	for range 2 {
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("a ListDir answered %d", code)
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
