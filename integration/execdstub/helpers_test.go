package execdstub_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/execdstub"
)

// testClient is the tests' HTTP client: http.DefaultClient's transport
// with a bound on every request, its response body read included, so a
// peer that hangs fails the request instead of holding the test until the
// package's -timeout. No request here is meant to take that long.
var testClient = &http.Client{Timeout: 2 * time.Minute}

const testToken = "s3cret"

// waitLimit bounds every blocking wait of these tests.
const waitLimit = 15 * time.Second

type env struct {
	t    *testing.T
	s    *execdstub.Server
	ts   *httptest.Server
	root string
	cfg  execdstub.Config
}

// newEnv starts a stub (token testToken, short delays) on 127.0.0.1.
func newEnv(t *testing.T, mod func(*execdstub.Config)) *env {
	t.Helper()
	cfg := execdstub.Config{
		Root:             t.TempDir(),
		AccessToken:      testToken,
		GracefulShutdown: 50 * time.Millisecond,
		PollInterval:     10 * time.Millisecond,
		KillGrace:        time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	s := execdstub.New(cfg)
	ts := httptest.NewServer(s)
	// Cleanups run last-in first-out: the stub is closed (killing
	// commands) before the HTTP server waits for its handlers.
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close)
	return &env{t: t, s: s, ts: ts, root: s.Root(), cfg: cfg}
}

// host returns the host path of sandbox path p.
func (e *env) host(p string) string { return filepath.Join(e.root, p) }

func (e *env) request(method, path string, body io.Reader, hdr http.Header) *http.Request {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if e.cfg.AccessToken != "" && req.Header.Get(execdstub.AccessTokenHeader) == "" && hdr.Get("X-No-Token") == "" {
		req.Header.Set(execdstub.AccessTokenHeader, e.cfg.AccessToken)
	}
	req.Header.Del("X-No-Token")
	return req
}

// noRedirect is a client that reports redirects instead of following them.
var noRedirect = &http.Client{Timeout: 2 * time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends a request and returns the response with its body read fully.
func (e *env) do(method, path string, body io.Reader, hdr http.Header) (*http.Response, []byte) {
	e.t.Helper()
	resp, err := noRedirect.Do(e.request(method, path, body, hdr))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp, b
}

// expectJSONError asserts execd's error response byte for byte.
func expectJSONError(t *testing.T, resp *http.Response, body []byte, status int, code, message string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status = %d, want %d (body %s)", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	want, _ := json.Marshal(map[string]string{"code": code, "message": message})
	if string(body) != string(want) {
		t.Errorf("body = %s\nwant   %s", body, want)
	}
}

// expectEmpty200 asserts execd's success without payload: 200, empty body,
// no Content-Type.
func expectEmpty200(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != http.StatusOK || len(body) != 0 {
		t.Errorf("got %d %q, want 200 with empty body", resp.StatusCode, body)
	}
	if ct, ok := resp.Header["Content-Type"]; ok {
		t.Errorf("unexpected Content-Type %q", ct)
	}
}

// stream reads the bare-JSON event stream of POST /command and checks the
// framing of every event: one JSON object on one line, then a blank line.
type stream struct {
	t      *testing.T
	resp   *http.Response
	br     *bufio.Reader
	cancel context.CancelFunc
}

func (e *env) run(body string) *stream {
	e.t.Helper()
	return e.runCtx(context.Background(), body)
}

func (e *env) runCtx(parent context.Context, body string) *stream {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(parent, waitLimit)
	req := e.request(http.MethodPost, "/command", strings.NewReader(body), http.Header{
		// execd decodes the body whatever the Content-Type says.
		"Content-Type": {"text/plain"},
	}).WithContext(ctx)
	resp, err := testClient.Do(req)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		cancel()
		e.t.Fatalf("POST /command: %d %s", resp.StatusCode, b)
	}
	st := &stream{t: e.t, resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
	e.t.Cleanup(func() { cancel(); resp.Body.Close() })
	return st
}

// next returns the next event, or ok=false at a clean EOF.
func (st *stream) next() (ev execdstub.Event, raw string, ok bool) {
	st.t.Helper()
	line, err := st.br.ReadString('\n')
	if errors.Is(err, io.EOF) && line == "" {
		return ev, "", false
	}
	if err != nil {
		st.t.Fatalf("reading event: %v (partial %q)", err, line)
	}
	blank, err := st.br.ReadString('\n')
	if err != nil || blank != "\n" {
		st.t.Fatalf("event %q not followed by a blank line: %q, %v", line, blank, err)
	}
	if !strings.HasPrefix(line, "{") || !strings.HasSuffix(line, "}\n") {
		st.t.Fatalf("event line is not a bare JSON object: %q", line)
	}
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		st.t.Fatalf("decoding %q: %v", line, err)
	}
	return ev, strings.TrimSuffix(line, "\n"), true
}

// until reads events until pred matches one, returning all read so far.
func (st *stream) until(pred func(execdstub.Event) bool) []execdstub.Event {
	st.t.Helper()
	var evs []execdstub.Event
	for {
		ev, _, ok := st.next()
		if !ok {
			st.t.Fatalf("stream ended before the awaited event; got %+v", evs)
		}
		evs = append(evs, ev)
		if pred(ev) {
			return evs
		}
	}
}

func isTerminal(ev execdstub.Event) bool {
	return ev.Type == "execution_complete" || ev.Type == "error"
}

// rest reads to EOF and returns the events, excluding pings after init.
func (st *stream) all() []execdstub.Event {
	st.t.Helper()
	var evs []execdstub.Event
	for {
		ev, _, ok := st.next()
		if !ok {
			return evs
		}
		evs = append(evs, ev)
	}
}

// summary renders events as "type:text" plus the error triple, dropping
// pings other than the one right after init (later pings are timing).
func summary(evs []execdstub.Event) []string {
	var out []string
	for i, ev := range evs {
		if ev.Type == "ping" && !(i == 1 && evs[0].Type == "init") {
			continue
		}
		switch {
		case ev.Type == "init":
			out = append(out, "init")
		case ev.Error != nil:
			out = append(out, ev.Type+":"+ev.Error.EName+"/"+ev.Error.EValue+"/"+strings.Join(ev.Error.Traceback, "|"))
		case ev.Type == "execution_complete":
			out = append(out, ev.Type)
		default:
			out = append(out, ev.Type+":"+ev.Text)
		}
	}
	return out
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// mkfifo creates a FIFO in the sandbox; commands block on it so that tests
// can synchronise with them without sleeping.
func (e *env) mkfifo(name string) string {
	e.t.Helper()
	p := e.host(name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// openFIFO completes within waitLimit: writing releases a command blocked
// in `cat fifo`, reading waits for a command's `echo > fifo`.
func openFIFO(t *testing.T, p string, write bool) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		if write {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				done <- err
				return
			}
			_, err = f.Write([]byte("go\n"))
			f.Close()
			done <- err
			return
		}
		_, err := os.ReadFile(p)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("FIFO %s: no peer within %v", p, waitLimit)
	}
}

func waitDone(t *testing.T, rec execdstub.CommandRecord) {
	t.Helper()
	select {
	case <-rec.Done:
	case <-time.After(waitLimit):
		t.Fatalf("command %s did not end within %v", rec.ID, waitLimit)
	}
}

func ctxLimit(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func bytesReader(s string) io.Reader { return bytes.NewReader([]byte(s)) }
