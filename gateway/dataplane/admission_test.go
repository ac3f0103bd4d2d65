package dataplane

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/drain"
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
		select {
		case <-rel:
		case <-time.After(10 * time.Second): // a bound on the test, not a measure
		}
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
		// bound: the refusal's Outcome.Bound.
		bound Bound
	}{
		{"ListDir", func() (*http.Response, []byte) { return e.unary("ListDir", `{"path":"/home/user"}`) }, true, BoundUpstreamCallsPerSandbox},
		// A message over 64 KiB takes the slot before it is read.
		{"ListDir of a large message", func() (*http.Response, []byte) {
			return e.unary("ListDir", `{"path":"/home/user"`+strings.Repeat(" ", smallMessage)+`}`)
		}, false, BoundUpstreamCallsPerSandbox},
		{"Process/List", func() (*http.Response, []byte) { return e.processCall("List", `{}`) }, false, BoundProcessCallsPerCredential},
	} {
		first := make(chan int, 1)
		go func() {
			resp, _ := call.send()
			first <- resp.StatusCode
		}()
		select {
		case <-entered:
		case code := <-first:
			t.Fatalf("%s: the first call answered %d before it reached execd", call.name, code)
		}
		if call.refusedAtExecd {
			// execd has sent the first call's head, but the gateway takes
			// the slot when that head has arrived (execd.Target.Admit): on
			// a loaded machine the second call's head could otherwise
			// arrive first, take the slot, and wait on execd for ever.
			e.waitFor("the first "+call.name+" to hold its slot", func() bool {
				_, held := e.handler.upstream.Held(testSandbox)
				return held == 1
			})
		}
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
		// The three calls' outcomes: two served, the refusal naming its
		// bound.
		var bounds []Bound
		for range 3 {
			if o := <-e.outcomes; o.Code == CodeGatewayBusy {
				bounds = append(bounds, o.Bound)
			} else if o.Code != "" || o.Bound != "" {
				t.Fatalf("%s: outcome %+v, want success or GATEWAY_BUSY", call.name, o)
			}
		}
		if len(bounds) != 1 || bounds[0] != call.bound {
			t.Fatalf("%s: GATEWAY_BUSY outcomes' bounds %q, want [%s]", call.name, bounds, call.bound)
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

// TestRequestsInProgressBounded: a credential's requests in progress are
// bounded (max_requests_per_credential) and so are the gateway's
// (max_requests): with bounds of 2 and 3 and every download held open by
// its sandbox, a credential's third download is refused at once with
// GATEWAY_BUSY naming its bound and never reaches execd, while another
// credential's is served until the gateway's bound is reached, which
// refuses it naming that bound; a place given back is taken by the next
// request, and once every request has ended none is counted.
func TestRequestsInProgressBounded(t *testing.T) {
	e := newTestEnv(t, func(c *Config, _ *execdstub.Config) {
		c.MaxRequestsPerCredential = 2
		c.MaxRequests = 3
	})
	e.creds.set(credential.Credential{ID: "cred-b", Enabled: true, ProjectNamespace: "ns", ClusterID: "cluster-a"})
	var arrived atomic.Int64
	release := make(chan struct{})
	e.writeFile("/home/user/f", "x")
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/files/download" {
			e.execd.ServeHTTP(w, r) // the download's Stat
			return
		}
		arrived.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		// More than the gateway's response buffer, so that its head
		// and first bytes reach the client before the sandbox holds the
		// rest back.
		_, _ = w.Write(bytes.Repeat([]byte("x"), 64<<10))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hold.Close()
	defer close(release) // before hold.Close
	e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{execd.DefaultPort: hold.Listener.Addr().String()}})

	var open []*http.Response
	defer func() {
		for _, r := range open {
			_ = r.Body.Close()
		}
	}()
	// download sends a download as cred; a held one is kept open.
	download := func(cred string) (*http.Response, []byte) {
		t.Helper()
		req := e.request(http.MethodGet, "/files?path=/home/user/f", nil)
		req.Header.Set(HeaderAccessToken, e.mint(cred, testSandbox))
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			b := make([]byte, 1)
			if _, err := io.ReadFull(resp.Body, b); err != nil {
				t.Fatalf("%s's download: %v", cred, err)
			}
			open = append(open, resp)
			return resp, b
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	refused := func(cred, bound string) {
		t.Helper()
		before := arrived.Load()
		resp, body := download(cred)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Sandgate-Error-Code") != "GATEWAY_BUSY" ||
			!strings.Contains(string(body), "("+bound+":") && !strings.Contains(string(body), "("+bound+")") {
			t.Fatalf("%s's download past %s: %d %s", cred, bound, resp.StatusCode, body)
		}
		if arrived.Load() != before {
			t.Fatalf("%s's refused download reached execd", cred)
		}
	}
	for range 2 {
		if resp, _ := download("cred-a"); resp.StatusCode != http.StatusOK {
			t.Fatalf("cred-a's download within its bound: %d", resp.StatusCode)
		}
	}
	// busyOutcome is the next outcome, a refusal's: the downloads held
	// meanwhile report none until they end.
	busyOutcome := func() Outcome {
		t.Helper()
		o := <-e.outcomes
		if o.Code != CodeGatewayBusy {
			t.Fatalf("outcome %+v, want GATEWAY_BUSY", o)
		}
		return o
	}
	refused("cred-a", "max_requests_per_credential")
	if o := busyOutcome(); !o.OwnBound() || o.Bound != BoundRequestsPerCredential {
		t.Fatalf("the refusal at the credential's bound: own bound %v, bound %q", o.OwnBound(), o.Bound)
	}
	if resp, _ := download("cred-b"); resp.StatusCode != http.StatusOK {
		t.Fatalf("cred-b's first download while cred-a holds its bound: %d", resp.StatusCode)
	}
	refused("cred-b", "max_requests")
	if o := busyOutcome(); o.OwnBound() || o.Bound != BoundRequests {
		t.Fatalf("the refusal at the gateway's bound: own bound %v, bound %q", o.OwnBound(), o.Bound)
	}
	h := e.handler
	if all, a := h.RequestsInProgress("cred-a"); all != 3 || a != 2 {
		t.Fatalf("in progress: %d in all, %d of cred-a; want 3 and 2", all, a)
	}

	// cred-a's first download ends: its place goes to the next request.
	_ = open[0].Body.Close()
	open = open[1:]
	for {
		if _, a := h.RequestsInProgress("cred-a"); a == 1 {
			break
		}
		<-e.outcomes // the ended download's outcome, then its place is given back
	}
	if resp, _ := download("cred-a"); resp.StatusCode != http.StatusOK {
		t.Fatalf("cred-a's download after one of its own ended: %d", resp.StatusCode)
	}
	for _, r := range open {
		_ = r.Body.Close()
	}
	open = nil
	for {
		if all, _ := h.RequestsInProgress(""); all == 0 {
			break
		}
		<-e.outcomes
	}
}

// TestRequestsInProgressCountExecdPing: while a cluster's execd token
// secrets rotate, a request asks its sandbox's execd (/ping) which secret
// is its before the operation; that is an execd call like any other, which
// the sandbox's code can hold, so the request holds its place while it
// waits: with max_requests_per_credential 2 and two requests held at the
// ping, both are counted and the third is refused with GATEWAY_BUSY
// without reaching execd. Once the pings are answered both requests end
// and none is counted.
func TestRequestsInProgressCountExecdPing(t *testing.T) {
	oldSecret, newSecret := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	e := newTestEnvDeps(t, func(d *Deps) {
		cl := d.Clusters.(fakeClusters)["cluster-a"]
		cl.ExecdTokenSecrets = [][]byte{oldSecret, newSecret}
		d.Clusters = fakeClusters{"cluster-a": cl}
	}, func(c *Config, x *execdstub.Config) {
		c.MaxRequestsPerCredential = 2
		// execd accepts neither secret's token: nothing is remembered.
		x.AccessToken = execdtoken.Derive(newSecret, "another-sandbox")
	})
	pinged := make(chan struct{}, 8)
	release := make(chan struct{})
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ping" {
			pinged <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		e.execd.ServeHTTP(w, r)
	}))
	defer hold.Close()
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open() // before hold.Close
	e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{execd.DefaultPort: hold.Listener.Addr().String()}})

	codes := make(chan string, 2)
	for range 2 {
		req := e.request(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		go func() {
			resp, err := testClient.Do(req)
			if err != nil {
				codes <- err.Error()
				return
			}
			_ = resp.Body.Close()
			codes <- resp.Header.Get("Sandgate-Error-Code")
		}()
	}
	for range 2 {
		select {
		case <-pinged:
		case c := <-codes:
			t.Fatalf("a request answered %q before it reached execd's /ping", c)
		}
	}
	if all, a := e.handler.RequestsInProgress("cred-a"); all != 2 || a != 2 {
		t.Fatalf("two requests held at execd's /ping: %d in progress in all, %d of cred-a; want 2 and 2", all, a)
	}
	resp, body := e.unary("ListDir", `{"path":"/home/user"}`)
	if resp.Header.Get("Sandgate-Error-Code") != string(CodeGatewayBusy) || !strings.Contains(string(body), "max_requests_per_credential") {
		t.Fatalf("a third request while two are held at the ping: %d %s", resp.StatusCode, body)
	}
	select {
	case <-pinged:
		t.Fatal("the refused request reached execd")
	default:
	}
	open()
	for range 2 {
		if c := <-codes; c != string(CodeExecdUnauthorized) {
			t.Fatalf("a held request once its pings were answered: %q, want %s", c, CodeExecdUnauthorized)
		}
	}
	for {
		if all, _ := e.handler.RequestsInProgress(""); all == 0 {
			break
		}
		<-e.outcomes
	}
}

// panicTransport panics in place of every execd call: an operation that
// panics (a bug), which net/http recovers.
type panicTransport struct{}

func (panicTransport) RoundTrip(*http.Request) (*http.Response, error) { panic("an operation's bug") }

// TestPanickingOperationGivesBack: a download whose operation panics
// (net/http recovers the panic and drops the connection) gives back its
// place among the requests in progress and its drain tracking, each once:
// neither the count nor the drain's in-flight transfers (the in-flight
// gauge, what a shutdown waits for) stays taken.
func TestPanickingOperationGivesBack(t *testing.T) {
	d := drain.New(time.Second, nil)
	e := newTestEnvDeps(t, func(deps *Deps) {
		deps.Drain = d
		deps.Execd = &execd.Client{Transport: panicTransport{}, Unary: panicTransport{}}
	})
	e.gateway.Config.ErrorLog = log.New(io.Discard, "", 0) // the recovered panic's stack
	req := e.request(http.MethodGet, "/files?path=/home/user/f", nil)
	if resp, err := testClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a download whose operation panicked: %d, want the connection dropped", resp.StatusCode)
	}
	if all, _ := e.handler.RequestsInProgress(""); all != 0 {
		t.Fatalf("%d requests in progress after the panic, want 0", all)
	}
	if n := d.InFlight(drain.KindTransfer); n != 0 {
		t.Fatalf("%d transfers tracked by the drain after the panic, want 0", n)
	}
}

// TestDrainingRefusalGivesBack: a download that took its place and is then
// refused by the drain (GATEWAY_DRAINING: the server is shutting down)
// gives the place back: with max_requests_per_credential 1, two such
// refusals in a row are both GATEWAY_DRAINING, never GATEWAY_BUSY, and
// none is counted after.
func TestDrainingRefusalGivesBack(t *testing.T) {
	d := drain.New(time.Second, nil)
	e := newTestEnvDeps(t, func(deps *Deps) { deps.Drain = d }, func(c *Config, _ *execdstub.Config) { c.MaxRequestsPerCredential = 1 })
	e.writeFile("/home/user/f", "x")
	d.Begin()
	for i := range 2 {
		resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/f", nil))
		if resp.Header.Get("Sandgate-Error-Code") != string(CodeGatewayDraining) {
			t.Fatalf("download %d while draining: %d %s", i+1, resp.StatusCode, body)
		}
	}
	if all, _ := e.handler.RequestsInProgress(""); all != 0 {
		t.Fatalf("%d requests in progress after the drain's refusals, want 0", all)
	}
}

// TestDrainingAtTheBoundIsDraining: while the gateway drains, a download
// of a credential at its max_requests_per_credential is answered
// GATEWAY_DRAINING (its retry reaches another replica), not GATEWAY_BUSY;
// a unary call at the bound, which the drain does not refuse, stays
// GATEWAY_BUSY; and the place held is the only one counted after.
func TestDrainingAtTheBoundIsDraining(t *testing.T) {
	d := drain.New(time.Second, nil)
	e := newTestEnvDeps(t, func(deps *Deps) { deps.Drain = d }, func(c *Config, _ *execdstub.Config) { c.MaxRequestsPerCredential = 1 })
	e.writeFile("/home/user/f", "x")
	held, why := e.handler.deps.Requests.TryAcquireWithin("cred-a", e.handler.cfg.MaxRequests, 1)
	if why != admission.Admitted {
		t.Fatalf("holding cred-a's one place: %v", why)
	}
	defer held()
	resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/f", nil))
	if got := resp.Header.Get("Sandgate-Error-Code"); got != string(CodeGatewayBusy) {
		t.Fatalf("download at the bound before the drain: %d %s %s, want GATEWAY_BUSY", resp.StatusCode, got, body)
	}
	d.Begin()
	resp, body = e.do(e.request(http.MethodGet, "/files?path=/home/user/f", nil))
	if got := resp.Header.Get("Sandgate-Error-Code"); got != string(CodeGatewayDraining) {
		t.Fatalf("download at the bound while draining: %d %s %s, want GATEWAY_DRAINING", resp.StatusCode, got, body)
	}
	resp, body = e.unary("ListDir", `{"path":"/home/user"}`)
	if got := resp.Header.Get("Sandgate-Error-Code"); got != string(CodeGatewayBusy) {
		t.Fatalf("ListDir at the bound while draining: %d %s %s, want GATEWAY_BUSY", resp.StatusCode, got, body)
	}
	if all, own := e.handler.RequestsInProgress("cred-a"); all != 1 || own != 1 {
		t.Fatalf("requests in progress %d (cred-a %d), want only the held place", all, own)
	}
	if n := d.InFlight(drain.KindTransfer); n != 0 {
		t.Fatalf("%d transfers tracked, want 0", n)
	}
}
