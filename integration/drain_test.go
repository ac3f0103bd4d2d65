package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

// drainCaddyfile is the harness gateway with a drain grace well below
// Caddy's grace_period, so the drain ends the long stream before the
// connections are closed.
const drainCaddyfile = `{
	admin {{ADMIN}}
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	grace_period 50s
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{FIXED_ENTRY}}
	}
}

http://{{ADDR}} {
	e2b_dataplane {
		home_dir /home/user
		user root 0 0 /root
		drain_grace 10s
	}
}
`

// TestDrainEndsLongStreams runs both JS SDKs against the built gateway,
// each with two commands streaming, the first SDK's on a configuration
// that a reload then replaces, the second's on the new one, and sends
// SIGTERM: the reload drains nothing; at the exit the command that ends
// within the drain grace (its gate opens once the drain has begun)
// finishes with all its output, and the one still running when the grace
// is over ends with the documented GATEWAY_DRAINING, which each SDK
// raises as TimeoutError (docs/errors.md), while the command keeps running
// in execd. The gateway then exits 0.
func TestDrainEndsLongStreams(t *testing.T) {
	e := startEnv(t, func(c *harness.Config) { c.Caddyfile = drainCaddyfile })
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	type run struct {
		pkg                 string
		goFile, stop, ready string
		res                 chan json.RawMessage
		err                 chan error
	}
	var runs []*run
	for i, pkg := range sdkPackages {
		if i == 1 {
			// The first SDK's streams stay on the replaced configuration.
			if err := e.Reload(ctx, e.Expand(strings.Replace(drainCaddyfile, "drain_grace 10s", "drain_grace 11s", 1))); err != nil {
				t.Fatal(err)
			}
		}
		r := &run{pkg: pkg, goFile: filepath.Join(e.Dir, "drain-go-"+pkg), stop: filepath.Join(e.Dir, "drain-stop-"+pkg),
			ready: filepath.Join(e.Dir, "drain-ready-"+pkg), res: make(chan json.RawMessage, 1), err: make(chan error, 1)}
		runs = append(runs, r)
		go func() {
			res, err := e.sdk(r.pkg, "drain", sbxOK, "GO_FILE="+r.goFile, "STOP_FILE="+r.stop, "READY_FILE="+r.ready)
			r.res <- res
			r.err <- err
		}()
		ok, why := waitUntil(time.Now().Add(waitLimit), func(context.Context) (bool, string) {
			_, err := os.Stat(r.ready)
			return err == nil, "no READY_FILE from " + r.pkg
		})
		if !ok {
			t.Fatal(why)
		}
	}

	if err := e.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := e.log.waitFor(ctx, 0, `"reloaded_configurations":1`); err != nil {
		t.Fatalf("the gateway never began to drain: %v\n%s", err, e.log.String())
	}
	for _, r := range runs {
		if err := os.WriteFile(r.goFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for _, r := range runs {
		res, err := <-r.res, <-r.err
		if err != nil {
			t.Fatalf("%s: %v", r.pkg, err)
		}
		var got struct {
			Short attempt           `json:"short"`
			Long  attempt           `json:"long"`
			Seen  map[string]string `json:"seen"`
		}
		if err := json.Unmarshal(res, &got); err != nil {
			t.Fatal(err)
		}
		wantCommand(t, r.pkg+" short stream across the drain", got.Short, commandResult{Stdout: "first\nfinished\n"})
		if got.Long.OK || got.Long.Error == nil {
			t.Fatalf("%s: the long stream ended without an error: %s", r.pkg, got.Long.Value)
		}
		if got.Long.Error.Name != "TimeoutError" || !strings.Contains(got.Long.Error.Message, "GATEWAY_DRAINING: ") {
			t.Errorf("%s: the long stream ended with %s %q, want TimeoutError with GATEWAY_DRAINING", r.pkg, got.Long.Error.Name, got.Long.Error.Message)
		}
		if got.Seen["long"] != "first\n" {
			t.Errorf("%s: the long stream's output before the drain = %q, want first", r.pkg, got.Seen["long"])
		}
	}

	// The drained commands run on in the sandbox until their own end.
	for _, r := range runs {
		rec, err := e.Execd.WaitCommand(ctx, func(c execdstub.CommandRecord) bool { return strings.Contains(c.Request.Command, r.stop) })
		if err != nil {
			t.Fatal(err)
		}
		if rec, _ = e.Execd.Command(rec.ID); !rec.Running || rec.Interrupted {
			t.Fatalf("%s: the drained command did not run on: running=%v interrupted=%v", r.pkg, rec.Running, rec.Interrupted)
		}
		if err := os.WriteFile(r.stop, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Execd.WaitCommand(ctx, func(c execdstub.CommandRecord) bool { return c.ID == rec.ID && !c.Running }); err != nil {
			t.Fatalf("%s: the drained command did not end after STOP_FILE: %v", r.pkg, err)
		}
	}
	exitErr, exited := e.WaitExit(waitLimit)
	if !exited {
		t.Fatal("the gateway did not exit")
	}
	if exitErr != nil {
		t.Fatalf("the gateway exited with %v\n%s", exitErr, e.log.String())
	}
}

// TestDrainEndsStalledUpload sends an upload through the built gateway
// whose client sends its first 64 KiB and then nothing more, its body left
// open, and sends SIGTERM: when the drain grace is over the upload is
// answered 502 GATEWAY_DRAINING (docs/errors.md) although the gateway was
// waiting for the client's next bytes, nothing is written, and the gateway
// exits 0.
func TestDrainEndsStalledUpload(t *testing.T) {
	e := startEnv(t, func(c *harness.Config) { c.Caddyfile = drainCaddyfile })
	const target = "/home/user/stalled.bin"
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.CloseWithError(io.ErrClosedPipe) })
	mw := multipart.NewWriter(pw)
	req, err := http.NewRequest(http.MethodPost, e.Gateway+"/files?path="+target, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("E2b-Sandbox-Id", sbxOK)
	req.Header.Set("E2b-Sandbox-Port", envdPort)
	req.Header.Set("X-Access-Token", e.mint(sbxOK, harness.Grant{CredentialID: credOK}))
	go func() {
		part, err := mw.CreateFormFile("file", "stalled.bin")
		if err == nil {
			_, err = part.Write(bytes.Repeat([]byte("x"), 64<<10))
		}
		if err != nil {
			pw.CloseWithError(err)
		}
		// The body stays open: the client has stopped sending.
	}()
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := testClient.Do(req)
		got <- result{resp, err}
	}()
	ok, why := waitUntil(time.Now().Add(waitLimit), func(context.Context) (bool, string) {
		m, err := scrapetest.Get(nil, "http://"+e.Admin+"/metrics")
		if err != nil {
			return false, err.Error()
		}
		n, _ := m.Sum("sandgate_dataplane_streams_in_flight", "kind", "transfer")
		return n == 1, fmt.Sprintf("transfers in flight %g", n)
	})
	if !ok {
		t.Fatalf("the upload never became a transfer in flight: %s", why)
	}

	if err := e.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-got:
	case <-time.After(waitLimit):
		t.Fatalf("the stalled upload got no answer within %s of SIGTERM (drain_grace 10s)\n%s", waitLimit, e.log.String())
	}
	if res.err != nil {
		t.Fatalf("the stalled upload: %v\n%s", res.err, e.log.String())
	}
	b, _ := io.ReadAll(res.resp.Body)
	res.resp.Body.Close()
	if res.resp.StatusCode != http.StatusBadGateway || res.resp.Header.Get("Sandgate-Error-Code") != "GATEWAY_DRAINING" {
		t.Fatalf("the stalled upload: %d %s %s", res.resp.StatusCode, res.resp.Header.Get("Sandgate-Error-Code"), b)
	}
	if _, err := os.Stat(e.host(target)); err == nil {
		t.Fatal("the cut upload was written")
	}
	exitErr, exited := e.WaitExit(waitLimit)
	if !exited {
		t.Fatal("the gateway did not exit")
	}
	if exitErr != nil {
		t.Fatalf("the gateway exited with %v\n%s", exitErr, e.log.String())
	}
}

// TestDrainEndsStalledDownload sends a download of 64 MiB through the
// built gateway whose client reads nothing (its connection left open, the
// gateway's writes blocked once the socket buffers are full), and sends
// SIGTERM: when the drain grace (10 s) is over the download is ended as a
// broken body, as the runbook's shutdown table says, and its request ends
// (its log line is written) before the gateway exits; the gateway exits 0.
// A gateway that only cancelled the download's context left its handler
// blocked in the write to the client until the process exited at the end
// of Caddy's grace_period (50 s here), its request never logged.
func TestDrainEndsStalledDownload(t *testing.T) {
	e := startEnv(t, func(c *harness.Config) { c.Caddyfile = drainCaddyfile })
	const target = "/home/user/large.bin"
	if err := os.WriteFile(e.host(target), bytes.Repeat([]byte("y"), 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	drainUnreadStream(t, e, "transfer", fmt.Sprintf("GET /files?path=%s HTTP/1.1\r\n", target), nil, OpFilesRead)
}

// TestDrainEndsStalledCommandStream: as TestDrainEndsStalledDownload, a
// command stream (64 MiB of output in 2-byte lines, so that no line limit
// ends it first) whose client reads nothing ends, and
// its request with it, when the drain grace is over, not when the process
// exits at the end of Caddy's grace_period.
func TestDrainEndsStalledCommandStream(t *testing.T) {
	e := startEnv(t, func(c *harness.Config) { c.Caddyfile = drainCaddyfile })
	body := envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","yes | head -c 67108864"]},"stdin":false}`)
	drainUnreadStream(t, e, "command", "POST /process.Process/Start HTTP/1.1\r\nContent-Type: application/connect+json\r\n"+
		"Connect-Protocol-Version: 1\r\n"+fmt.Sprintf("Content-Length: %d\r\n", len(body)), body, OpProcessStart)
}

// The operation names of the data plane's log lines.
const (
	OpFilesRead    = "files.read"
	OpProcessStart = "process.Start"
)

// drainUnreadStream sends head (request line and header fields, the
// sandbox's routing and token added) and body over a connection of its own
// and reads nothing from it; once the gateway counts a stream of kind in
// flight it sends SIGTERM, and requires the gateway to exit 0 having
// logged the end of the request of operation op.
func drainUnreadStream(t *testing.T, e *testEnv, kind, head string, body []byte, op string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.Gateway, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%sHost: %s\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %s\r\nX-Access-Token: %s\r\n\r\n%s",
		head, strings.TrimPrefix(e.Gateway, "http://"), sbxOK, envdPort, e.mint(sbxOK, harness.Grant{CredentialID: credOK}), body)
	// The client reads nothing from here on.
	ok, why := waitUntil(time.Now().Add(waitLimit), func(context.Context) (bool, string) {
		m, err := scrapetest.Get(nil, "http://"+e.Admin+"/metrics")
		if err != nil {
			return false, err.Error()
		}
		n, _ := m.Sum("sandgate_dataplane_streams_in_flight", "kind", kind)
		return n == 1, fmt.Sprintf("%ss in flight %g", kind, n)
	})
	if !ok {
		t.Fatalf("the request never became a %s in flight: %s\n%s", kind, why, e.log.String())
	}
	if err := e.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exitErr, exited := e.WaitExit(waitLimit + 10*time.Second)
	if !exited {
		t.Fatal("the gateway did not exit")
	}
	if exitErr != nil {
		t.Fatalf("the gateway exited with %v\n%s", exitErr, e.log.String())
	}
	var logged bool
	for _, line := range strings.Split(e.log.String(), "\n") {
		if strings.Contains(line, `"e2b data plane request"`) && strings.Contains(line, `"operation":"`+op+`"`) {
			logged = true
			if !strings.Contains(line, `"outcome":"GATEWAY_DRAINING"`) {
				t.Errorf("the stalled %s ended, but not by the drain: %s", kind, line)
			}
		}
	}
	if !logged {
		t.Fatalf("the stalled %s's request never ended before the gateway exited\n%s", kind, e.log.String())
	}
}
