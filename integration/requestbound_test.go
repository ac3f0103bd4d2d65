package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

// credOther is a second enabled credential in cluster-a, and sbxOther its
// sandbox, for the tests of max_requests_per_credential.
const (
	credOther = "cred-b"
	sbxOther  = "sbxother"
)

// withCredOther adds credOther and sbxOther to the environment, and opt
// to the e2b_dataplane block (e.g. "max_requests_per_credential 4").
func withCredOther(opt string) envOption {
	return func(c *harness.Config) {
		c.Credentials += fmt.Sprintf("  - id: %s\n    enabled: true\n    resourceSpecId: spec-small\n    resourceGroupId: group-1\n"+
			"    projectNamespace: team-a\n    clusterId: cluster-a\n", credOther)
		c.Grants[sbxOther] = harness.Grant{CredentialID: credOther}
		c.Sandboxes = append(c.Sandboxes, sbxOther)
		c.Caddyfile = strings.Replace(harness.DefaultCaddyfile, "user root 0 0 /root", "user root 0 0 /root\n\t\t"+opt, 1)
	}
}

// requestsInProgress is the gateway's sandgate_dataplane_requests_in_progress.
func requestsInProgress(t *testing.T, admin string) int {
	t.Helper()
	return int(adminMetric(t, admin, "sandgate_dataplane_requests_in_progress"))
}

// waitInProgress polls the gauge until it reads want (30 s at most).
func waitInProgress(t *testing.T, admin string, want int) {
	t.Helper()
	got := -1
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = requestsInProgress(t, admin); got == want {
			return
		}
	}
	t.Fatalf("requests in progress: %d, want %d", got, want)
}

// waitFile polls until path exists (60 s at most).
func waitFile(t *testing.T, path string, sdk <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case err := <-sdk:
			t.Fatalf("the SDK ended before %s: %v", filepath.Base(path), err)
		default:
		}
	}
	t.Fatalf("%s never appeared", path)
}

// TestRequestsPerCredentialBounded: with max_requests_per_credential 4,
// the E2B JS SDK (2.25.0 and 2.51.0) holds four background commands, each
// its stream at the gateway; its fifth is refused at once with
// GATEWAY_BUSY, which the SDK raises as a TimeoutError naming the bound,
// as it does files.read, files.write and files.list (REST 502, Connect
// unavailable), and isRunning() raises a SandboxError; meanwhile a unary call of the same credential is refused alike, and
// another credential's call is served. Once one handle disconnects, its
// place is given back and the next command starts; at the end no request
// is counted, the refusals are logged as GATEWAY_BUSY and no token is in
// the gateway's log.
func TestRequestsPerCredentialBounded(t *testing.T) {
	e := startEnv(t, withCredOther("max_requests_per_credential 4"))
	e.mkdir("/home/user")
	ctx := context.Background()
	for _, pkg := range sdkPackages {
		dir := t.TempDir()
		ready, goFile, stop := filepath.Join(dir, "ready"), filepath.Join(dir, "go"), filepath.Join(dir, "stop")
		done := make(chan error, 1)
		var res json.RawMessage
		go func() {
			var err error
			res, err = e.sdk(pkg, "heldCommands", sbxOK, "HELD=4", "READY_FILE="+ready, "GO_FILE="+goFile, "STOP_FILE="+stop)
			done <- err
		}()
		waitFile(t, ready+".1", done)
		if n := requestsInProgress(t, e.Admin); n != 4 {
			t.Fatalf("%s: %d requests in progress while the SDK holds 4 commands", pkg, n)
		}
		r, err := e.listDir(ctx, e.mint(sbxOK, harness.Grant{CredentialID: credOK}))
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusServiceUnavailable || r.errorCode() != "GATEWAY_BUSY" || !strings.Contains(string(r.body), "max_requests_per_credential") {
			t.Fatalf("%s: a ListDir of the credential at its bound: %d %s %s", pkg, r.status, r.errorCode(), r.body)
		}
		r, err = e.listDirAs(ctx, sbxOther, e.mint(sbxOther, harness.Grant{CredentialID: credOther}))
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK {
			t.Fatalf("%s: another credential's ListDir while the first is at its bound: %d %s", pkg, r.status, r.body)
		}
		if err := os.WriteFile(goFile+".1", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		waitFile(t, ready+".2", done)
		waitInProgress(t, e.Admin, 3) // the disconnected handle's stream has ended at the gateway
		if err := os.WriteFile(goFile+".2", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%v\ngateway log:\n%s", err, e.log.String())
		}
		t.Logf("%s heldCommands: %s", pkg, res)
		var got struct {
			Over, Running, After attempt
			Read, Write, List    attempt
			Ends                 []bool
		}
		if err := json.Unmarshal(res, &got); err != nil {
			t.Fatal(err)
		}
		if got.Over.OK || got.Over.Error == nil || got.Over.Error.Name != "TimeoutError" || !strings.Contains(got.Over.Error.Message, "max_requests_per_credential") {
			t.Errorf("%s: the fifth command: %+v, want a TimeoutError naming max_requests_per_credential", pkg, got.Over.Error)
		}
		if got.Running.OK || got.Running.Error == nil || got.Running.Error.Name != "SandboxError" {
			t.Errorf("%s: isRunning() at the bound: %s %+v, want a SandboxError", pkg, got.Running.Value, got.Running.Error)
		}
		for _, c := range []struct {
			name string
			a    attempt
		}{{"files.read", got.Read}, {"files.write", got.Write}, {"files.list", got.List}} {
			if c.a.OK || c.a.Error == nil || c.a.Error.Name != "TimeoutError" || !strings.Contains(c.a.Error.Message, "max_requests_per_credential") {
				t.Errorf("%s: %s at the bound: %+v, want a TimeoutError naming max_requests_per_credential", pkg, c.name, c.a.Error)
			}
		}
		if !got.After.OK {
			t.Errorf("%s: the command after a handle disconnected: %+v", pkg, got.After.Error)
		}
		if len(got.Ends) != 4 || strings.Contains(fmt.Sprint(got.Ends), "false") {
			t.Errorf("%s: the held commands' ends: %v, want 4 that ended", pkg, got.Ends)
		}
		waitInProgress(t, e.Admin, 0)
	}
	// The refusals are logged with their outcome, and no token is.
	if !strings.Contains(e.log.String(), `"outcome":"GATEWAY_BUSY"`) {
		t.Errorf("no GATEWAY_BUSY outcome in the gateway log")
	}
	assertNoTokens(t, e, nil)
}

// TestHostileHeldStreamsBoundedPerCredential: a tenant whose sandbox's code
// answers every command with its start and then part of a 60 KiB output
// line, which it never ends, holds the gateway's line buffer in every
// stream its clients keep open. With max_requests_per_credential 200 the
// tenant holds 200 such streams, each costing the built gateway a bounded
// part of its heap, and its 201st is refused with GATEWAY_BUSY, so the
// tenant's whole cost is the bound times that part; another credential
// is still served. A reload to a bound of 201 admits one more stream and
// refuses the next: the count outlives the configuration.
func TestHostileHeldStreamsBoundedPerCredential(t *testing.T) {
	const (
		held = 200
		// What one held stream may cost the gateway's live heap, in KiB:
		// the 64 KiB its partial line fills (gathered past the stream's
		// 4 KiB read buffer), and 64 KiB for the request's and its
		// connections' own state.
		bound = 64 + 64
	)
	id := "sbxevil8"
	e := startEnv(t, withCredOther(fmt.Sprintf("max_requests_per_credential %d", held)), func(c *harness.Config) {
		c.Grants[id] = harness.Grant{CredentialID: credOK}
	})
	e.mkdir("/home/user")
	e.sandboxCode(t, id, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || r.URL.Path != "/command" {
			http.NotFound(w, r)
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`{"type":"init","text":"0123456789abcdef0123456789abcdef","timestamp":1}` + "\n\n" +
			`{"type":"stdout","text":"` + strings.Repeat("x", 60<<10)))
		w.(http.Flusher).Flush()
		return true
	})
	per, open, cancel := holdStreams(t, e, id, held)
	if per >= bound {
		t.Fatalf("each held stream costs %d KiB of the gateway's heap; want under %d", per, bound)
	}
	if n := requestsInProgress(t, e.Admin); n != held {
		t.Fatalf("%d requests in progress, want %d", n, held)
	}
	if got := open(); !strings.Contains(got, "GATEWAY_BUSY") || !strings.Contains(got, "max_requests_per_credential") {
		t.Fatalf("stream %d, past the bound: %s", held+1, got)
	}
	r, err := e.listDirAs(context.Background(), sbxOther, e.mint(sbxOther, harness.Grant{CredentialID: credOther}))
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusOK {
		t.Fatalf("another credential's ListDir while the tenant holds its bound: %d %s", r.status, r.body)
	}

	// A reload to a bound of one more: the streams the replaced
	// configuration still runs count against it, so it admits one stream,
	// not another full bound.
	caddyfile := strings.Replace(harness.DefaultCaddyfile, "user root 0 0 /root",
		fmt.Sprintf("user root 0 0 /root\n\t\tmax_requests_per_credential %d", held+1), 1)
	if err := e.Reload(context.Background(), e.Expand(caddyfile)); err != nil {
		t.Fatal(err)
	}
	// The reload closes the replaced server's idle connections; a POST
	// sent on one as it closes fails with EOF, and Go's client does not
	// send a POST again. The streams below go on new connections.
	testClient.CloseIdleConnections()
	for try := 1; ; try++ {
		got := open()
		if droppedAtReload(got) && try < 3 {
			// No handler saw it: the count is still the held streams.
			if n := requestsInProgress(t, e.Admin); n != held {
				t.Fatalf("stream %d dropped at the reload (%s) with %d requests in progress, want %d", held+1, got, n, held)
			}
			t.Logf("stream %d: %s (the connection dropped at the reload), sent again", held+1, got)
			continue
		}
		if got != "line" {
			t.Fatalf("stream %d, after a reload to a bound of %d: %s", held+1, held+1, got)
		}
		break
	}
	if got := open(); !strings.Contains(got, "GATEWAY_BUSY") || !strings.Contains(got, "max_requests_per_credential") {
		t.Fatalf("stream %d, past the reloaded bound: %s", held+2, got)
	}
	cancel()
	waitInProgress(t, e.Admin, 0)
}

// holdStreams starts n command streams of sandbox id (credOK's) through
// the gateway, each held open once its start has arrived, and returns what
// each costs the gateway's live heap (KiB, the first stream's once-only
// costs left out), a function that starts one more and describes how it
// went ("line" once its start arrived and it is held), and one that ends
// them all. It logs what each costs in goroutine stacks too.
func holdStreams(t *testing.T, e *testEnv, id string, n int) (perKiB int64, open func() string, end func()) {
	t.Helper()
	tok := e.mint(id, harness.Grant{CredentialID: credOK})
	body := envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","true"]},"stdin":false}`)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	end = func() { cancel(); wg.Wait() }
	t.Cleanup(end)
	outcome := make(chan string, 1)
	open = func() string {
		wg.Add(1)
		go func() { defer wg.Done(); startAndReadOneLine(ctx, e.Gateway, id, tok, body, 1, outcome) }()
		return <-outcome
	}
	// One stream first, so that what every request costs once is in
	// the baseline.
	if got := open(); got != "line" {
		t.Fatalf("the first stream: %s", got)
	}
	heapBefore := liveHeap(t, e.Admin)
	stacksBefore := adminMetric(t, e.Admin, "go_memstats_stack_inuse_bytes")
	for i := 1; i < n; i++ {
		if got := open(); got != "line" {
			t.Fatalf("stream %d within the bound: %s", i+1, got)
		}
	}
	heapAfter := liveHeap(t, e.Admin)
	stacks := (adminMetric(t, e.Admin, "go_memstats_stack_inuse_bytes") - stacksBefore) / float64(n-1) / 1024
	perKiB = (heapAfter - heapBefore) / int64(n-1) >> 10
	t.Logf("%d held streams: the gateway's live heap %d → %d MiB, %d KiB each, and %.0f KiB of goroutine stacks each",
		n, heapBefore>>20, heapAfter>>20, perKiB, stacks)
	return perKiB, open, end
}

// TestIdleStreamsHoldLittle: a command stream waiting for its command's
// output (a background command's, for as long as it runs) holds the
// stream's 4 KiB read buffer, not a 64 KiB one: 200 of them cost the built
// gateway under 64 KiB each of its live heap (46–51 KiB measured; before,
// each held a 64 KiB line buffer from its start, about 102 KiB).
func TestIdleStreamsHoldLittle(t *testing.T) {
	const held = 200
	id := "sbxidle8"
	e := startEnv(t, func(c *harness.Config) { c.Grants[id] = harness.Grant{CredentialID: credOK} })
	e.sandboxCode(t, id, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || r.URL.Path != "/command" {
			http.NotFound(w, r)
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`{"type":"init","text":"0123456789abcdef0123456789abcdef","timestamp":1}` + "\n\n"))
		w.(http.Flusher).Flush()
		return true
	})
	if per, _, _ := holdStreams(t, e, id, held); per >= 64 {
		t.Fatalf("each idle stream costs %d KiB of the gateway's heap; want under 64", per)
	}
}

// TestRequestsInProgressCountExecdPing: while a cluster's execd token
// secrets rotate (two execd_token_secret lines), the built gateway asks a
// sandbox's execd (/ping) which secret is its before the first operation;
// a sandbox whose code holds that /ping holds the request there. With
// max_requests_per_credential 2 and two requests held so, the gauge counts
// both and the tenant's third request is refused with GATEWAY_BUSY without
// reaching the sandbox; once the pings are answered both requests end and
// none is counted.
func TestRequestsInProgressCountExecdPing(t *testing.T) {
	dir := t.TempDir()
	var lines string
	for _, s := range []string{"execd-secret-old-0123456789abcdef0123456789", "execd-secret-new-0123456789abcdef0123456789"} {
		f := filepath.Join(dir, s)
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		lines += "\t\t\texecd_token_secret {file." + f + "}\n"
	}
	id := "sbxevil9"
	e := startEnv(t, withCredOther("max_requests_per_credential 2"), func(c *harness.Config) {
		c.Grants[id] = harness.Grant{CredentialID: credOK}
		c.Caddyfile = strings.Replace(c.Caddyfile, "cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}} {\n"+lines+"\t\t}", 1)
	})
	pinged := make(chan struct{}, 8)
	release := make(chan struct{})
	sandbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ping" {
			pinged <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		// Every token refused as execd refuses one, so nothing is
		// remembered.
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}`))
	}))
	t.Cleanup(sandbox.Close)
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the server's Close
	e.Ingress.SetSandbox(id, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default",
		Ports: map[int]string{44772: sandbox.Listener.Addr().String()}})
	tok := e.mint(id, harness.Grant{CredentialID: credOK})

	codes := make(chan string, 2)
	for range 2 {
		go func() {
			r, err := e.listDirAs(context.Background(), id, tok)
			if err != nil {
				codes <- err.Error()
				return
			}
			codes <- r.errorCode()
		}()
	}
	<-pinged
	<-pinged
	if n := requestsInProgress(t, e.Admin); n != 2 {
		t.Fatalf("%d requests in progress while two are held at the sandbox's /ping, want 2", n)
	}
	r, err := e.listDirAs(context.Background(), id, tok)
	if err != nil {
		t.Fatal(err)
	}
	if r.errorCode() != "GATEWAY_BUSY" || !strings.Contains(string(r.body), "max_requests_per_credential") {
		t.Fatalf("a third request while two are held at the ping: %d %s %s", r.status, r.errorCode(), r.body)
	}
	select {
	case <-pinged:
		t.Fatal("the refused request reached the sandbox")
	default:
	}
	open()
	for range 2 {
		if c := <-codes; c != "EXECD_UNAUTHORIZED" {
			t.Fatalf("a held request once its pings were answered: %s, want EXECD_UNAUTHORIZED", c)
		}
	}
	waitInProgress(t, e.Admin, 0)
}

// TestRequestsInProgressGivenBackWithHostRouting: with host routing
// (hosts), envd's port of a sandbox host (49983-<id>.<domain>) is served by
// the same data plane and counted alike. With max_requests_per_credential
// 2, a command stream and a download that the sandbox's code holds open
// take the tenant's two places (the gauge reads 2), a third call is
// refused with GATEWAY_BUSY naming the bound; a client that goes away
// mid-stream, and one that goes away mid-download, each give their place
// back (the gauge reads 1, then 0), and the next call is served. The
// refusal is counted with its outcome, and no stream or transfer stays in
// flight.
func TestRequestsInProgressGivenBackWithHostRouting(t *testing.T) {
	rig := startPortRig(t, http.NotFoundHandler(), "", "max_requests_per_credential 2")
	if err := os.WriteFile(filepath.Join(rig.env.Root, "home/user/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	sandbox := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/command":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(`{"type":"init","text":"0123456789abcdef0123456789abcdef","timestamp":1}` + "\n\n"))
		case "/files/download":
			w.Header().Set("Content-Type", "application/octet-stream")
			// More than the gateway's buffers, so that the head and the
			// first bytes reach the client before the rest is held back.
			_, _ = w.Write(bytes.Repeat([]byte("x"), 64<<10))
		default:
			rig.env.Execd.ServeHTTP(w, r) // the download's Stat, a ListDir
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) }) // before the server's Close
	rig.env.Ingress.SetSandbox("sbxa", fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Ports: map[int]string{44772: sandbox}})
	tok, err := rig.env.Key.Mint(token.Target{CredentialID: "cred-a", SandboxID: "sbxa", Port: 49983}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// call sends an envd call to sbxa's envd host, without the routing
	// headers (the Host names the sandbox and port).
	call := func(ctx context.Context, method, path, ctype string, body []byte) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, rig.env.Gateway+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "49983-sbxa." + portDomain
		req.Header.Set("X-Access-Token", tok)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
			req.Header.Set("Connect-Protocol-Version", "1")
		}
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	listDir := func() *http.Response {
		resp := call(context.Background(), http.MethodPost, "/filesystem.Filesystem/ListDir", "application/json", []byte(`{"path":"/home/user"}`))
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}

	streamCtx, cutStream := context.WithCancel(context.Background())
	defer cutStream()
	stream := call(streamCtx, http.MethodPost, "/process.Process/Start", "application/connect+json",
		envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","true"]},"stdin":false}`))
	var hdr [5]byte
	if _, err := io.ReadFull(stream.Body, hdr[:]); stream.StatusCode != http.StatusOK || err != nil || hdr[0] != 0 {
		t.Fatalf("the held command stream: %d %v %v", stream.StatusCode, err, hdr)
	}
	downloadCtx, cutDownload := context.WithCancel(context.Background())
	defer cutDownload()
	download := call(downloadCtx, http.MethodGet, "/files?path=/home/user/f", "", nil)
	if _, err := io.ReadFull(download.Body, make([]byte, 1)); download.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("the held download: %d %v", download.StatusCode, err)
	}
	if n := requestsInProgress(t, rig.env.Admin); n != 2 {
		t.Fatalf("%d requests in progress with a stream and a download held, want 2", n)
	}
	if r := listDir(); r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Sandgate-Error-Code") != "GATEWAY_BUSY" {
		t.Fatalf("a ListDir at the bound: %d %s", r.StatusCode, r.Header.Get("Sandgate-Error-Code"))
	}
	cutStream()
	_ = stream.Body.Close()
	waitInProgress(t, rig.env.Admin, 1)
	cutDownload()
	_ = download.Body.Close()
	waitInProgress(t, rig.env.Admin, 0)
	if r := listDir(); r.StatusCode != http.StatusOK {
		t.Fatalf("a ListDir once the held calls were cut: %d %s", r.StatusCode, r.Header.Get("Sandgate-Error-Code"))
	}
	waitInProgress(t, rig.env.Admin, 0)
	m, err := scrapetest.Get(nil, "http://"+rig.env.Admin+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if n := m.Value("sandgate_dataplane_requests_total", "operation", "filesystem.ListDir", "outcome", "GATEWAY_BUSY"); n != 1 {
		t.Errorf("%v ListDir calls counted GATEWAY_BUSY, want 1", n)
	}
	if n := m.Value("sandgate_dataplane_streams_in_flight"); n != 0 {
		t.Errorf("%v streams and transfers in flight once all ended, want 0", n)
	}
}

// TestRequestsInProgressGivenBackOverHTTP2: over HTTP/2 (h2c), command
// streams are counted as over HTTP/1: with max_requests_per_credential 2,
// two streams the sandbox's code holds open on one connection take the
// tenant's places, a third stream on it is refused with GATEWAY_BUSY
// (deadline_exceeded before the start), and a stream the client resets
// (RST_STREAM, its connection staying open) gives its place back.
func TestRequestsInProgressGivenBackOverHTTP2(t *testing.T) {
	id := "sbxevila"
	e := startEnv(t, withCredOther("max_requests_per_credential 2"), func(c *harness.Config) {
		c.Grants[id] = harness.Grant{CredentialID: credOK}
		c.Caddyfile = strings.Replace(c.Caddyfile, "\tauto_https off\n", "\tauto_https off\n\tservers {\n\t\tprotocols h1 h2c\n\t}\n", 1)
	})
	e.sandboxCode(t, id, func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`{"type":"init","text":"0123456789abcdef0123456789abcdef","timestamp":1}` + "\n\n"))
		w.(http.Flusher).Flush()
		return true
	})
	tok := e.mint(id, harness.Grant{CredentialID: credOK})
	var dials atomic.Int32
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	// start opens a command stream and reads its first message.
	start := func(ctx context.Context) (*http.Response, byte, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Gateway+"/process.Process/Start",
			bytes.NewReader(envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","true"]},"stdin":false}`)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", envdPort)
		req.Header.Set("X-Access-Token", tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ProtoMajor != 2 {
			t.Fatalf("answered over %s, want HTTP/2", resp.Proto)
		}
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			t.Fatalf("the stream's first message: %v", err)
		}
		msg := make([]byte, min(binary.BigEndian.Uint32(hdr[1:]), 4<<10))
		if _, err := io.ReadFull(resp.Body, msg); err != nil {
			t.Fatalf("the stream's first message: %v", err)
		}
		return resp, hdr[0], string(msg)
	}
	ctx1, cut1 := context.WithCancel(context.Background())
	defer cut1()
	ctx2, cut2 := context.WithCancel(context.Background())
	defer cut2()
	for _, ctx := range []context.Context{ctx1, ctx2} {
		resp, flags, msg := start(ctx)
		defer resp.Body.Close()
		if flags != 0 || !strings.Contains(msg, `"start"`) {
			t.Fatalf("a held stream's first message: flags %d %s", flags, msg)
		}
	}
	waitInProgress(t, e.Admin, 2)
	resp, flags, msg := start(context.Background())
	_ = resp.Body.Close()
	if flags&2 == 0 || !strings.Contains(msg, "deadline_exceeded") || !strings.Contains(msg, "GATEWAY_BUSY") || !strings.Contains(msg, "max_requests_per_credential") {
		t.Fatalf("a third stream at the bound: flags %d %s", flags, msg)
	}
	cut1()
	waitInProgress(t, e.Admin, 1)
	cut2()
	waitInProgress(t, e.Admin, 0)
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections, want the streams on one", n)
	}
}
