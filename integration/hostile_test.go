package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

// hostileCeiling is the built gateway's documented peak memory (VmHWM)
// under hostile sandboxes that keep every upstream slot they may hold busy
// with the largest answers: docs/dataplane.md "Bounded cost per request
// and per tenant".
const hostileCeiling = 512 << 10 // KiB

// TestHostileExecdBoundedMemory: code in sandboxes answering in execd's
// place (the stand-in's hostile mode: 64 MiB answers to every JSON read, or
// the largest listing the gateway accepts) cannot take the built gateway's
// peak memory past the documented ceiling, however many requests their
// tenants send at once, while an honest sandbox's calls keep being served.
// Before the bounds one Stat cost about 190 MiB and eight concurrent Stat
// calls took the gateway past 1 GiB.
func TestHostileExecdBoundedMemory(t *testing.T) {
	huge := []string{"sbxevil0"}
	listings := []string{"sbxevil1", "sbxevil2"}
	e := startEnv(t, func(c *harness.Config) {
		c.Caddyfile = strings.Replace(harness.DefaultCaddyfile, "user root 0 0 /root", "user root 0 0 /root\n\t\textended_operations", 1)
		for _, id := range append(huge, listings...) {
			c.Grants[id] = harness.Grant{CredentialID: credOK}
		}
	})
	e.mkdir("/home/user")
	serve := func(h *execdstub.Hostile) string {
		x := execdstub.New(execdstub.Config{Root: t.TempDir(), GracefulShutdown: -1, Hostile: h})
		srv := httptest.NewServer(x)
		t.Cleanup(func() { srv.Close(); x.Close() })
		return srv.Listener.Addr().String()
	}
	sb := func(addr string) fixedentry.Sandbox {
		return fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default", Ports: map[int]string{44772: addr}}
	}
	for _, id := range huge {
		e.Ingress.SetSandbox(id, sb(serve(&execdstub.Hostile{})))
	}
	for _, id := range listings {
		e.Ingress.SetSandbox(id, sb(serve(&execdstub.Hostile{ListingEntries: execd.DefaultMaxListingEntries,
			ListingBytes: execd.DefaultMaxListingBytes - 64<<10})))
	}

	ctx := context.Background()
	_, before, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct{ path, body string }{
		{"/filesystem.Filesystem/ListDir", `{"path":"/home/user"}`},
		{"/filesystem.Filesystem/Stat", `{"path":"/home/user"}`},
		{"/process.Process/List", `{}`},
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for _, id := range append(huge, listings...) {
		tok := e.mint(id, harness.Grant{CredentialID: credOK})
		for w := range 8 { // twice the per-sandbox bound
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 6 {
					c := calls[(w+i)%len(calls)]
					r, err := e.do(ctx, envdRequest{method: http.MethodPost, path: c.path, contentType: "application/json",
						body: []byte(c.body), sandboxID: id, port: envdPort, token: tok})
					mu.Lock()
					if err != nil {
						outcomes["error"]++
					} else {
						outcomes[fmt.Sprint(r.status, " ", r.errorCode())]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	honestTok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	honest := 0
	for running := true; running || honest < 5; honest++ {
		select {
		case <-done:
			running = false
		default:
		}
		r, err := e.listDir(ctx, honestTok)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("the honest sandbox's ListDir #%d while hostile sandboxes load the gateway: %v %d %s %.200s",
				honest, err, r.status, r.errorCode(), r.body)
		}
	}
	_, peak, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway VmHWM %d MiB before the hostile load, %d MiB after; %d honest ListDir calls served; hostile outcomes %v",
		before>>10, peak>>10, honest, outcomes)
	if peak > hostileCeiling {
		t.Fatalf("the gateway's peak memory reached %d MiB, over the documented ceiling of %d MiB", peak>>10, hostileCeiling>>10)
	}
}

// TestHostileExecdCommandLinesBoundedMemory: code in a sandbox answering
// execd's /command with output lines of nearly 16 MiB (the longest line the
// gateway relays) cannot take the built gateway's peak memory past the
// documented ceiling, however many commands its tenant starts at once: the
// foreground command streams take no upstream slot, so before their large
// lines were bounded 40 such streams took the gateway to 3,242 MiB (each
// line's buffer, text, bytes and Connect message, and the message's
// buffer, which a stream kept for its whole life). Two sandboxes start 8
// each. Every stream must deliver its line to the client (upstream_wait is
// long enough for them to pass a few at a time); the peak is read once each
// has.
func TestHostileExecdCommandLinesBoundedMemory(t *testing.T) {
	const (
		perSandbox = 8
		line       = 16<<20 - 4<<10 // under the gateway's 16 MiB line bound
	)
	ids := []string{"sbxevil3", "sbxevil4"} // two sandboxes: the gateway-wide bound is reached too
	streams := perSandbox * len(ids)
	e := startEnv(t, func(c *harness.Config) {
		c.Caddyfile = strings.Replace(harness.DefaultCaddyfile, "user root 0 0 /root", "user root 0 0 /root\n\t\tupstream_wait 5m", 1)
		for _, id := range ids {
			c.Grants[id] = harness.Grant{CredentialID: credOK}
		}
	})
	hostile := &execdstub.Hostile{CommandLineBytes: line}
	x := execdstub.New(execdstub.Config{Root: t.TempDir(), GracefulShutdown: -1, Hostile: hostile})
	srv := httptest.NewServer(x)
	t.Cleanup(func() { srv.Close(); x.Close() })
	for _, id := range ids {
		e.Ingress.SetSandbox(id, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default",
			Ports: map[int]string{44772: srv.Listener.Addr().String()}})
	}

	_, before, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","cat big"]},"stdin":false}`)
	outcomes := make(chan string, streams)
	var wg sync.WaitGroup
	for _, id := range ids {
		tok := e.mint(id, harness.Grant{CredentialID: credOK})
		for range perSandbox {
			wg.Add(1)
			go func() {
				defer wg.Done()
				startAndReadOneLine(ctx, e.Gateway, id, tok, body, line, outcomes)
			}()
		}
	}
	counts := map[string]int{}
	for range streams {
		counts[<-outcomes]++
	}
	_, peak, err := gatewayproc.Memory(e.PID())
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway VmHWM %d MiB before, %d MiB once every stream had its line; outcomes %v; lines execd wrote %d",
		before>>10, peak>>10, counts, hostile.LinesWritten())
	if counts["line"] != streams {
		t.Fatalf("%d of %d streams delivered their line: %v", counts["line"], streams, counts)
	}
	if peak > hostileCeiling {
		t.Fatalf("the gateway's peak memory reached %d MiB, over the documented ceiling of %d MiB", peak>>10, hostileCeiling>>10)
	}
}

// startAndReadOneLine starts a command on sandbox id through the gateway
// and reads its Connect stream until a data frame of at least minData bytes
// arrived; it then sends "line" to outcome and holds the stream open until
// ctx ends, so the gateway keeps it. Any other end is described in the
// outcome sent.
func startAndReadOneLine(ctx context.Context, gateway, id, tok string, body []byte, minData int, outcome chan<- string) {
	if s := readOneLine(ctx, gateway, id, tok, body, minData, outcome); s != "" {
		outcome <- s
	}
}

func readOneLine(ctx context.Context, gateway, id, tok string, body []byte, minData int, outcome chan<- string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gateway+"/process.Process/Start", bytes.NewReader(body))
	if err != nil {
		return "request: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", envdPort)
	req.Header.Set("X-Access-Token", tok)
	resp, err := testClient.Do(req)
	if err != nil {
		return "do: " + err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprint("status ", resp.StatusCode, " ", resp.Header.Get("Sandgate-Error-Code"))
	}
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			return "read: " + err.Error()
		}
		n := int64(binary.BigEndian.Uint32(hdr[1:]))
		if hdr[0]&2 != 0 {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, min(n, 4<<10)))
			return "end " + string(b)
		}
		if _, err := io.CopyN(io.Discard, resp.Body, n); err != nil {
			return "read: " + err.Error()
		}
		if n >= int64(minData) {
			outcome <- "line"
			<-ctx.Done()
			return ""
		}
	}
}

// TestHostileExecdDownloadsBoundedMemory: code in sandboxes answering
// execd's downloads with large bodies, or with a Content-Length larger
// than what it sends, costs the built gateway a bounded amount of memory
// however many downloads its tenant runs at once (downloads take no slot
// and are streamed, never held), every large body arrives whole, and every
// short one arrives broken, never as a clean end.
func TestHostileExecdDownloadsBoundedMemory(t *testing.T) {
	const (
		perSandbox = 16
		size       = 64 << 20
		sent       = 1 << 20
	)
	huge, short := "sbxevil5", "sbxevil6"
	e := startEnv(t, func(c *harness.Config) {
		for _, id := range []string{huge, short} {
			c.Grants[id] = harness.Grant{CredentialID: credOK}
		}
	})
	serve := func(h *execdstub.Hostile) string {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "home/user"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "home/user/big"), []byte("small"), 0o644); err != nil {
			t.Fatal(err)
		}
		x := execdstub.New(execdstub.Config{Root: root, GracefulShutdown: -1, Hostile: h})
		srv := httptest.NewServer(x)
		t.Cleanup(func() { srv.Close(); x.Close() })
		return srv.Listener.Addr().String()
	}
	for id, h := range map[string]*execdstub.Hostile{
		huge:  {DownloadBytes: size},
		short: {DownloadBytes: sent, DownloadDeclared: size},
	} {
		e.Ingress.SetSandbox(id, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default",
			Ports: map[int]string{44772: serve(h)}})
	}

	_, before, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for _, id := range []string{huge, short} {
		tok := e.mint(id, harness.Grant{CredentialID: credOK})
		for range perSandbox {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got := download(ctx, e.Gateway, id, tok, "/home/user/big")
				mu.Lock()
				outcomes[id+" "+got]++
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	_, peak, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway VmHWM %d MiB before, %d MiB after %d downloads; outcomes %v", before>>10, peak>>10, 2*perSandbox, outcomes)
	wantWhole := fmt.Sprintf("%s 200 whole %d", huge, size)
	if outcomes[wantWhole] != perSandbox {
		t.Fatalf("%d of %d large downloads arrived whole: %v", outcomes[wantWhole], perSandbox, outcomes)
	}
	broken := 0
	for k, n := range outcomes {
		if strings.HasPrefix(k, short+" 200 broken ") {
			broken += n
		}
	}
	if broken != perSandbox {
		t.Fatalf("%d of %d short downloads arrived broken: %v", broken, perSandbox, outcomes)
	}
	if peak > before+128<<10 {
		t.Fatalf("the gateway's peak memory grew from %d to %d MiB over %d streamed downloads", before>>10, peak>>10, 2*perSandbox)
	}
}

// TestHostileStalledDownloadsBoundedMemory: a tenant whose clients open
// many downloads from its sandbox, whose code answers them as fast as it
// can, and then read no more, pins at most a copy buffer per download in
// the built gateway (gateway/dataplane downloadBuffer, 32 KiB). When the
// buffer was 256 KiB every such download held that much the sandbox had
// filled, and a budget of large ones (64) bounded it.
func TestHostileStalledDownloadsBoundedMemory(t *testing.T) {
	const (
		stalled = 200
		size    = 16 << 20  // more than the client's side holds (its small receive buffer, the gateway's send buffer), so every copy blocks
		read    = 512 << 10 // what each client reads before it stalls
		// What one stalled download may hold of the gateway's heap, in
		// KiB: its copy buffer (32 KiB) and 64 KiB for the request's and
		// its connections' own state.
		bound = 32 + 64
	)
	id := "sbxevil7"
	e := startEnv(t, func(c *harness.Config) { c.Grants[id] = harness.Grant{CredentialID: credOK} })
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "home/user"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "home/user/big"), []byte("small"), 0o644); err != nil {
		t.Fatal(err)
	}
	x := execdstub.New(execdstub.Config{Root: root, GracefulShutdown: -1, Hostile: &execdstub.Hostile{DownloadBytes: size}})
	srv := httptest.NewServer(x)
	t.Cleanup(func() { srv.Close(); x.Close() })
	e.Ingress.SetSandbox(id, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default",
		Ports: map[int]string{44772: srv.Listener.Addr().String()}})
	tok := e.mint(id, harness.Grant{CredentialID: credOK})

	// One download first, read to its stall, so that what every request
	// costs once (the route, the pools, the client to the fixed entry) is
	// in the baseline.
	// The clients' sockets take little, so that the stalled downloads'
	// bytes wait in the gateway's and the sandbox's side, not in this
	// process's receive buffers.
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
		return errors.Join(err, serr)
	}}
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DialContext: dialer.DialContext}}
	t.Cleanup(client.CloseIdleConnections)
	open := func() *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, e.Gateway+"/files?path=/home/user/big", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", envdPort)
		req.Header.Set("X-Access-Token", tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("download: %s", resp.Status)
		}
		if _, err := io.CopyN(io.Discard, resp.Body, read); err != nil {
			t.Fatalf("download's first %d bytes: %v", read, err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	open()
	rssBefore, _, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	heapBefore := liveHeap(t, e.Admin)
	start := time.Now()
	for range stalled {
		open()
	}
	opened := time.Since(start)
	rssAfter, _, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	heapAfter := liveHeap(t, e.Admin)
	per := (heapAfter - heapBefore) / stalled >> 10
	t.Logf("%d more stalled downloads (opened in %v): the gateway's live heap %d → %d MiB, %d KiB each; VmRSS %d → %d MiB",
		stalled, opened.Round(time.Millisecond), heapBefore>>20, heapAfter>>20, per, rssBefore>>10, rssAfter>>10)
	if per >= bound {
		t.Fatalf("each stalled download holds %d KiB of the gateway's heap (%d → %d MiB over %d); want under %d", per, heapBefore>>20, heapAfter>>20, stalled, bound)
	}
}

// TestHostileStalledWritesBoundedMemory: a tenant whose clients send
// many writes to its sandbox, whose code answers in execd's place and reads
// none of them, pins at most a small copy buffer per write in the built
// gateway beyond the process-wide budget of large ones (gateway/dataplane
// maxLargeUploadBuffers: 16 of 1 MiB), for the writes that stream chunked
// to execd: a multipart body (what the SDKs send) and an octet-stream one
// without a length. Before the budget every such write held a 1 MiB buffer
// the client had filled. (An octet-stream write with a length goes
// through the upstream transport's own 32 KiB copy.)
func TestHostileStalledWritesBoundedMemory(t *testing.T) {
	const (
		stalled = 200
		size    = 8 << 20 // more than the buffers between the client and the sandbox hold, so every write blocks
		// What one stalled write may hold of the gateway's heap, in KiB:
		// its share of the 16 large buffers (16 MiB over 200), a small
		// buffer (64 KiB), and 64 KiB for the request's and its
		// connections' own state. Without the budget each held 1 MiB.
		bound = 16<<10/stalled + 64 + 64
	)
	id := "sbxevil9"
	e := startEnv(t, func(c *harness.Config) { c.Grants[id] = harness.Grant{CredentialID: credOK} })
	// The sandbox's code: it takes every upload's head and reads none of
	// its body until the test ends.
	var arrived atomic.Int64
	e.sandboxCode(t, id, func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/files/upload") {
			http.NotFound(w, r)
			return false
		}
		arrived.Add(1)
		return true
	})
	tok := e.mint(id, harness.Grant{CredentialID: credOK})

	content := bytes.Repeat([]byte("w"), size)
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, err := mw.CreateFormFile("file", "/home/user/w")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(content)
	_ = mw.Close()
	for _, c := range []struct {
		name, contentType string
		body              func() io.Reader
	}{
		{"multipart", mw.FormDataContentType(), func() io.Reader { return bytes.NewReader(form.Bytes()) }},
		// A reader without a length: the request goes chunked.
		{"octet-stream without a length", "application/octet-stream", func() io.Reader { return struct{ io.Reader }{bytes.NewReader(content)} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{}}
			defer func() { cancel(); wg.Wait(); client.CloseIdleConnections() }()
			// write starts one write and returns once the sandbox has its
			// head: the gateway's copy buffer is then taken (and filled
			// from the client before the first byte of the body leaves).
			write := func() {
				t.Helper()
				want := arrived.Load() + 1
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Gateway+"/files?path=/home/user/w", c.body())
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", c.contentType)
				req.Header.Set("E2b-Sandbox-Id", id)
				req.Header.Set("E2b-Sandbox-Port", envdPort)
				req.Header.Set("X-Access-Token", tok)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if resp, err := client.Do(req); err == nil {
						_ = resp.Body.Close()
					}
				}()
				for deadline := time.Now().Add(30 * time.Second); arrived.Load() < want; {
					if time.Now().After(deadline) {
						t.Fatalf("write %d did not reach the sandbox within 30 s", want)
					}
					time.Sleep(time.Millisecond) // polling the sandbox's count
				}
			}
			write()
			heapBefore := liveHeap(t, e.Admin)
			start := time.Now()
			for range stalled {
				write()
			}
			opened := time.Since(start)
			heapAfter := liveHeap(t, e.Admin)
			per := (heapAfter - heapBefore) / stalled >> 10
			t.Logf("%d more stalled writes (opened in %v): the gateway's live heap %d → %d MiB, %d KiB each",
				stalled, opened.Round(time.Millisecond), heapBefore>>20, heapAfter>>20, per)
			if per >= bound {
				t.Fatalf("each stalled write holds %d KiB of the gateway's heap (%d → %d MiB over %d); want under %d", per, heapBefore>>20, heapAfter>>20, stalled, bound)
			}
		})
	}
}

// sandboxCode serves sandbox id's execd port (44772) through the fixed
// entry with answer, the sandbox's own code in execd's place: answer
// writes what it sends and reports whether to hold the request, which
// then stays open until its client goes or the test ends.
func (e *testEnv) sandboxCode(t *testing.T, id string, answer func(w http.ResponseWriter, r *http.Request) (hold bool)) {
	t.Helper()
	release := make(chan struct{})
	sandbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !answer(w, r) {
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(sandbox.Close)
	t.Cleanup(func() { close(release) }) // before the server's Close
	e.Ingress.SetSandbox(id, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default",
		Ports: map[int]string{44772: sandbox.Listener.Addr().String()}})
}

// liveHeap returns the built gateway's live heap in bytes: it asks
// Caddy's admin endpoint at admin for a heap profile with a collection
// first (/debug/pprof/heap?gc=1), then reads go_memstats_heap_alloc_bytes
// from its /metrics.
func liveHeap(t *testing.T, admin string) int64 {
	t.Helper()
	resp, err := testClient.Get("http://" + admin + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("heap profile: %s", resp.Status)
	}
	return int64(adminMetric(t, admin, "go_memstats_heap_alloc_bytes"))
}

// adminMetric is the sum of metric name's series on the gateway's admin
// endpoint's /metrics; a missing metric fails t.
func adminMetric(t *testing.T, admin, name string) float64 {
	t.Helper()
	m, err := scrapetest.Get(nil, "http://"+admin+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.Sum(name)
	if !ok {
		t.Fatalf("no %s on the admin endpoint's /metrics", name)
	}
	return v
}

// download reads GET /files?path=p of sandbox id through the gateway and
// describes it: the status, "whole" or "broken" and the bytes read.
func download(ctx context.Context, gateway, id, tok, p string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gateway+"/files?path="+p, nil)
	if err != nil {
		return "request: " + err.Error()
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", envdPort)
	req.Header.Set("X-Access-Token", tok)
	resp, err := testClient.Do(req)
	if err != nil {
		return "do: " + err.Error()
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return fmt.Sprintf("%d broken %d", resp.StatusCode, n)
	}
	return fmt.Sprintf("%d whole %d", resp.StatusCode, n)
}

// TestHostileExecdEarlyOutputBoundedMemory: code in a sandbox answering
// execd's /command with nearly 4 MiB of output and never the command's
// init event (the gateway holds output that comes before init, up to
// max_message_size, to send after it) in many streams at once cannot take
// the built gateway past the documented ceiling. The gateway's memory is
// read until every stream but one (the one a sandbox may have hold its
// early output at a time) has been ended by the gateway.
func TestHostileExecdEarlyOutputBoundedMemory(t *testing.T) {
	const (
		id      = "sbxevil7"
		streams = 300
		early   = 4<<20 - 64<<10 // under the 4 MiB max_message_size
	)
	e := startEnv(t, func(c *harness.Config) {
		c.Caddyfile = strings.Replace(harness.DefaultCaddyfile, "user root 0 0 /root", "user root 0 0 /root\n\t\tupstream_wait 3s", 1)
		c.Grants[id] = harness.Grant{CredentialID: credOK}
	})
	hostile := &execdstub.Hostile{EarlyOutputBytes: early}
	x := execdstub.New(execdstub.Config{Root: t.TempDir(), GracefulShutdown: -1, Hostile: hostile})
	srv := httptest.NewServer(x)
	t.Cleanup(func() { srv.Close(); x.Close() })
	e.Ingress.SetSandbox(id, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default",
		Ports: map[int]string{44772: srv.Listener.Addr().String()}})
	tok := e.mint(id, harness.Grant{CredentialID: credOK})

	_, before, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","cat big"]},"stdin":false}`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	endings := map[string]int{}
	ended := 0
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Only the gateway ends such a stream (execd never sends
			// init), or the cancel below.
			s := readOneLine(ctx, e.Gateway, id, tok, body, 1<<30, nil)
			if ctx.Err() == nil {
				mu.Lock()
				endings[s]++
				ended++
				mu.Unlock()
			}
		}()
	}
	deadline := time.Now().Add(4 * time.Minute)
	poll := time.NewTicker(20 * time.Millisecond) // a poll period
	defer poll.Stop()
	var peak int64
	for {
		if _, peak, err = gatewayproc.Memory(e.PID()); err != nil {
			t.Fatal(err)
		}
		if peak > hostileCeiling {
			t.Fatalf("the gateway's peak memory reached %d MiB (from %d), over the documented ceiling of %d MiB; execd wrote %d streams' output",
				peak>>10, before>>10, hostileCeiling>>10, hostile.LinesWritten())
		}
		mu.Lock()
		n := ended
		mu.Unlock()
		if n >= streams-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 4 minutes %d of %d streams had ended; VmHWM %d MiB", n, streams, peak>>10)
		}
		<-poll.C
	}
	cancel()
	wg.Wait()
	t.Logf("gateway VmHWM %d MiB before, %d MiB once %d streams were ended by the gateway: %v", before>>10, peak>>10, ended, endings)
}

// TestHostileExecdBackgroundLinesBoundedMemory: code in a sandbox answering
// execd's /command for a background start (extended_operations: the
// gateway reads that stream itself for the command's id) with an output
// line of nearly 16 MiB cannot take the built gateway's peak memory past
// the documented ceiling, however many processes its tenant starts at
// once: Process/Start takes no upstream slot, and execd's stream of a
// background start carries only init and execution_complete, so the
// gateway reads no line of it past 64 KiB. Two sandboxes start 20 each;
// every start must end with EXECD_PROTOCOL, none of the 16 MiB lines read
// to its end. Before, such lines were read with a large-line slot each,
// and the collector, behind them, let the gateway reach 365 to 540 MiB.
func TestHostileExecdBackgroundLinesBoundedMemory(t *testing.T) {
	const (
		perSandbox = 20
		line       = 16<<20 - 4<<10 // under the gateway's 16 MiB line bound
	)
	ids := []string{"sbxevil8", "sbxevil9"}
	streams := perSandbox * len(ids)
	e := startEnv(t, func(c *harness.Config) {
		c.Caddyfile = strings.Replace(harness.DefaultCaddyfile, "user root 0 0 /root",
			"user root 0 0 /root\n\t\textended_operations", 1)
		for _, id := range ids {
			c.Grants[id] = harness.Grant{CredentialID: credOK}
		}
	})
	hostile := &execdstub.Hostile{BackgroundLineBytes: line}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "home", "user"), 0o755); err != nil {
		t.Fatal(err)
	}
	x := execdstub.New(execdstub.Config{Root: root, GracefulShutdown: -1, Hostile: hostile})
	srv := httptest.NewServer(x)
	t.Cleanup(func() { srv.Close(); x.Close() })
	for _, id := range ids {
		e.Ingress.SetSandbox(id, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default",
			Ports: map[int]string{44772: srv.Listener.Addr().String()}})
	}

	_, before, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	body := envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","sleep 1"]},"stdin":false}`)
	outcomes := make(chan string, streams)
	for _, id := range ids {
		tok := e.mint(id, harness.Grant{CredentialID: credOK})
		for range perSandbox {
			go func() {
				// Never a start event (a data frame of any size would
				// be "line"): the start is refused.
				outcomes <- readOneLine(ctx, e.Gateway, id, tok, body, 0, nil)
			}()
		}
	}
	counts := map[string]int{}
	for range streams {
		counts[<-outcomes]++
	}
	_, peak, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway VmHWM %d MiB before, %d MiB once every start had ended; outcomes %v; lines execd wrote %d",
		before>>10, peak>>10, counts, hostile.LinesWritten())
	if peak > hostileCeiling {
		t.Fatalf("the gateway's peak memory reached %d MiB, over the documented ceiling of %d MiB", peak>>10, hostileCeiling>>10)
	}
	if n := hostile.LinesWritten(); n != 0 {
		t.Fatalf("the gateway read %d of the %d starts' 16 MiB lines to their end", n, streams)
	}
	for s, n := range counts {
		if !strings.Contains(s, "EXECD_PROTOCOL") || !strings.Contains(s, "sent a line over 64 KiB") {
			t.Fatalf("%d starts ended with %q, not the refusal of the line: %v", n, s, counts)
		}
	}
}
