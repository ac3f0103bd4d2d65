package dataplane

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/drain"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/fixedentry"
)

// drainEnv is the test environment with a Drainer whose in-flight changes
// are reported on tracked.
func drainEnv(t *testing.T, grace time.Duration) (*testEnv, *drain.Drainer, chan string) {
	tracked := make(chan string, 16)
	d := drain.New(grace, func(k drain.Kind, delta int) { tracked <- fmt.Sprintf("%s%+d", k, delta) })
	t.Cleanup(d.Close)
	e := newTestEnvDeps(t, func(deps *Deps) { deps.Drain = d })
	return e, d, tracked
}

func wantTracked(t *testing.T, tracked chan string, want string) {
	t.Helper()
	select {
	case got := <-tracked:
		if got != want {
			t.Fatalf("in-flight change %s, want %s", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no in-flight change %s within 10s", want)
	}
}

// TestDrainEndsCommandStream: a command stream still running when the
// drain's grace is over ends with an end-stream error unavailable,
// GATEWAY_DRAINING (the SDKs' TimeoutError), and the command keeps running
// in execd; after the drain began, a new stream is refused the same way.
func TestDrainEndsCommandStream(t *testing.T) {
	e, d, tracked := drainEnv(t, time.Hour)
	gate := filepath.Join(t.TempDir(), "go")
	resp, err := testClient.Do(e.startRequest(startMsg("echo up; while [ ! -f '" + gate + "' ]; do sleep 0.05; done")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantTracked(t, tracked, "command+1")
	r := bufio.NewReader(resp.Body)
	for {
		f, err := readFrame(t, r)
		if err != nil {
			t.Fatalf("stream ended before output: %v", err)
		}
		if ev, _ := f.json["event"].(map[string]any); ev["data"] != nil {
			break
		}
	}
	d.Begin()
	_, body := e.do(e.startRequest(startMsg("echo never")))
	s := collect(t, readFrames(t, body))
	if errObj, _ := s.eos["error"].(map[string]any); errObj["code"] != "deadline_exceeded" ||
		!strings.HasPrefix(errObj["message"].(string), "GATEWAY_DRAINING: ") {
		t.Fatalf("a stream after Begin: %v", s.eos)
	}
	if o := e.waitOutcome(); o.Code != CodeGatewayDraining {
		t.Fatalf("outcome %+v", o)
	}

	d.Close() // the grace is over
	var last frame
	for {
		f, err := readFrame(t, r)
		if err != nil {
			t.Fatalf("no end-stream frame: %v", err)
		}
		if last = f; f.flags == connect.FlagEndStream {
			break
		}
	}
	errObj, _ := last.json["error"].(map[string]any)
	if errObj["code"] != "unavailable" || !strings.HasPrefix(errObj["message"].(string), "GATEWAY_DRAINING: ") ||
		!strings.Contains(errObj["message"].(string), "keeps running") {
		t.Fatalf("end-stream %s", last.raw)
	}
	if o := e.waitOutcome(); o.Code != CodeGatewayDraining {
		t.Fatalf("outcome %+v", o)
	}
	wantTracked(t, tracked, "command-1")
	cmds := e.execd.Commands()
	if len(cmds) != 1 {
		t.Fatalf("execd ran %d commands, want 1", len(cmds))
	}
	if rec, _ := e.execd.Command(cmds[0].ID); !rec.Running || rec.Interrupted {
		t.Fatalf("the command did not outlive its drained stream: %+v", rec)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestDrainStreamWithinGrace: a stream that ends within the grace is not
// touched by the drain: it ends with its exit.
func TestDrainStreamWithinGrace(t *testing.T) {
	e, d, tracked := drainEnv(t, time.Hour)
	gate := filepath.Join(t.TempDir(), "go")
	resp, err := testClient.Do(e.startRequest(startMsg("echo up; while [ ! -f '" + gate + "' ]; do sleep 0.05; done; echo done")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantTracked(t, tracked, "command+1")
	d.Begin()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	s := collect(t, readFrames(t, b))
	if s.stdout != "up\ndone\n" || s.end == nil || s.eos["error"] != nil {
		t.Fatalf("stdout %q end %v end-stream %v", s.stdout, s.end, s.eos)
	}
	wantTracked(t, tracked, "command-1")
	if err := d.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestDrainEndsUpload: an upload still running when the grace is over is
// answered 502 GATEWAY_DRAINING (the SDKs' TimeoutError) and writes
// nothing. The drain comes while the upload streams to execd and the
// client sends nothing more, so the gateway waits on the client's body:
// the drain must end that wait too.
func TestDrainEndsUpload(t *testing.T) {
	e, d, tracked := drainEnv(t, time.Hour)
	const sent = 64 << 10
	// execd behind a front that says when the gateway has passed on as
	// many bytes as the client sent (the upload is streaming to execd).
	streaming := make(chan struct{})
	var upstream atomic.Int64
	var once sync.Once
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/files/upload" {
			r.Body = reportingBody{r.Body, func(n int) {
				if upstream.Add(int64(n)) >= sent {
					once.Do(func() { close(streaming) })
				}
			}}
		}
		e.execd.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{execd.DefaultPort: front.Listener.Addr().String()}})

	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.CloseWithError(io.ErrClosedPipe) }) // before the servers close, should the test fail
	mw := multipart.NewWriter(pw)
	req := e.request(http.MethodPost, "/files?path=/home/user/big.bin", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	go func() {
		part, err := mw.CreateFormFile("file", "big.bin")
		if err == nil {
			_, err = part.Write(bytes.Repeat([]byte("x"), sent))
		}
		if err != nil {
			pw.CloseWithError(err)
		}
		// The body stays open: the upload is in flight until the drain.
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
	wantTracked(t, tracked, "transfer+1")
	select {
	case <-streaming:
	case <-time.After(10 * time.Second):
		t.Fatalf("execd got %d bytes of the upload within 10s, want %d or more", upstream.Load(), sent)
	}
	d.Close()
	wantTracked(t, tracked, "transfer-1")
	o := e.waitOutcome()
	if o.Code != CodeGatewayDraining {
		t.Fatalf("outcome %+v", o)
	}
	// The client is still sending (its body open): it gets the answer.
	res := <-got
	if res.err != nil {
		t.Fatalf("the client got no answer: %v", res.err)
	}
	b, _ := io.ReadAll(res.resp.Body)
	res.resp.Body.Close()
	if re := decodeRESTError(t, b); res.resp.StatusCode != 502 || !strings.HasPrefix(re.Message, "GATEWAY_DRAINING: ") {
		t.Fatalf("status %d body %s", res.resp.StatusCode, b)
	}
	if _, err := os.Stat(e.hostPath("/home/user/big.bin")); err == nil {
		t.Fatal("the cut upload was written")
	}
}

// reportingBody is a request body that reports the size of each read.
type reportingBody struct {
	io.ReadCloser
	read func(n int)
}

func (c reportingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.read(n)
	return n, err
}
