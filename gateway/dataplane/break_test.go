package dataplane

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/token"
)

// fakeUpstream is a fixed entry + execd stand-in written per test: the
// gateway's cluster points straight at it, so paths arrive as
// /<sandbox>/44772/<execd path>.
type fakeUpstream struct {
	mu          sync.Mutex
	interrupted []string
	interruptCh chan string
}

// newFakeGateway returns the gateway URL in front of upstream and a valid
// token for testSandbox.
func newFakeGateway(t *testing.T, upstream http.Handler) (string, string) {
	gw, tok, _ := newFakeGatewayOutcomes(t, upstream)
	return gw, tok
}

func newFakeGatewayOutcomes(t *testing.T, upstream http.Handler) (string, string, chan Outcome) {
	t.Helper()
	h, tok, outcomes := newFakeHandler(t, upstream)
	gw := httptest.NewServer(h)
	t.Cleanup(gw.Close)
	return gw.URL, tok, outcomes
}

// newFakeHandler is a Handler whose cluster-a fixed entry is upstream,
// with a token of cred-a for testSandbox and the outcomes it reports.
func newFakeHandler(t *testing.T, upstream http.Handler) (*Handler, string, chan Outcome) {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	fe, _ := url.Parse(up.URL)
	e := newTestEnv(t) // for its key and credentials
	outcomes := make(chan Outcome, 16)
	verifier, err := token.NewVerifier([]token.Key{e.key.Public()}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{}, Deps{
		Tokens: verifier, Credentials: e.creds,
		Clusters: fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: fe}},
		Execd:    &execd.Client{},
		Observe:  func(o Outcome) { outcomes <- o },
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, e.mint("cred-a", testSandbox), outcomes
}

func gwRequest(t *testing.T, gw, tok, method, target string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, gw+target, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(HeaderSandboxID, testSandbox)
	req.Header.Set(HeaderSandboxPort, "49983")
	req.Header.Set(HeaderAccessToken, tok)
	return req
}

// TestBreakDownloadCutOffChunked: a download whose upstream has no
// Content-Length (chunked through the fixed entry) and is cut off half-way
// must not reach the SDK as a clean, complete (but truncated) file.
func TestBreakDownloadCutOffChunked(t *testing.T) {
	const p = "/home/user/big.bin"
	mux := http.NewServeMux()
	prefix := "/" + testSandbox + "/44772"
	mux.HandleFunc(prefix+"/files/info", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{p: map[string]any{"path": p, "type": "file", "size": 1 << 20, "mode": 644}})
	})
	mux.HandleFunc(prefix+"/files/download", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(bytes.Repeat([]byte("a"), 1<<20))
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the connection breaks mid-body
	})
	gw, tok := newFakeGateway(t, mux)
	resp, err := testClient.Do(gwRequest(t, gw, tok, http.MethodGet, "/files?path="+p, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("a cut-off download reached the client as a complete %d-byte file (status %d)", len(b), resp.StatusCode)
	}
}

// commandUpstream answers POST /command with init and then a broken event
// (or a too long line), and records DELETE /command.
func commandUpstream(t *testing.T, afterInit string) (http.Handler, chan string) {
	interrupted := make(chan string, 4)
	mux := http.NewServeMux()
	prefix := "/" + testSandbox + "/44772"
	mux.HandleFunc(prefix+"/command", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			interrupted <- r.URL.Query().Get("id")
			w.WriteHeader(http.StatusOK)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {\"type\":\"init\",\"text\":\"0c1d0c1d0c1d4c1d8c1d0c1d0c1d0c1d\"}\n\n")
		_, _ = io.WriteString(w, "data: {\"type\":\"stdout\",\"text\":\"hello\"}\n\n")
		_, _ = io.WriteString(w, afterInit)
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the command is still running
	})
	return mux, interrupted
}

// TestBreakStreamErrorLeavesCommand: when execd's event stream breaks
// after the command started, the gateway ends the Process/Start stream with
// an end-stream error and leaves the command alone: its lifetime does not
// depend on the stream (issue 13 item 4), only its own timeout ends it.
func TestBreakStreamErrorLeavesCommand(t *testing.T) {
	for name, after := range map[string]string{
		"malformed event": "data: {not json}\n\n",
		"line too long":   "data: {\"type\":\"stdout\",\"text\":\"" + strings.Repeat("a", 17<<20) + "\"}\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			up, interrupted := commandUpstream(t, after)
			gw, tok, outcomes := newFakeGatewayOutcomes(t, up)
			req := gwRequest(t, gw, tok, http.MethodPost, "/process.Process/Start",
				bytes.NewReader(envelope(0, []byte(startMsg("sleep 30")))))
			req.Header.Set("Content-Type", "application/connect+json")
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			frames := readFrames(t, body)
			if len(frames) == 0 || frames[len(frames)-1].flags != connect.FlagEndStream {
				t.Fatalf("no end-stream frame: %q", body)
			}
			if o := <-outcomes; o.Code != CodeExecdProtocol {
				t.Fatalf("outcome %+v", o)
			}
			// The request is finished: any DELETE it sent has arrived.
			select {
			case id := <-interrupted:
				t.Fatalf("the gateway interrupted the command (%q) because its stream broke", id)
			default:
			}
		})
	}
}

// TestBreakRepeatedQueryPath: /files?path=a&path=b is ambiguous; envd's
// generated binding refuses a repeated single-value parameter. The gateway
// must not silently act on one of them.
func TestBreakRepeatedQueryPath(t *testing.T) {
	e := newTestEnv(t)
	e.writeFile("home/user/a.txt", "A")
	e.writeFile("home/user/b.txt", "B")
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		resp, body := e.do(e.request(m, "/files?path=a.txt&path=b.txt", nil))
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(ErrorHeader) != string(CodeBadRequest) {
			t.Fatalf("%s with two paths: %d %s %q", m, resp.StatusCode, resp.Header.Get(ErrorHeader), body)
		}
		e.waitOutcome()
	}
	for _, f := range []string{"a.txt", "b.txt"} {
		if _, err := os.Stat(e.hostPath("home/user/" + f)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	req := e.request(http.MethodPost, "/files?path=a.txt&path=b.txt", strings.NewReader("new"))
	req.Header.Set("Content-Type", "application/octet-stream")
	if resp, body := e.do(req); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("write with two paths: %d %q", resp.StatusCode, body)
	}
	e.waitOutcome()
	resp, body := e.do(e.request(http.MethodGet, "/files?path=a.txt&username=root&username=nobody", nil))
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("two usernames: %d %q", resp.StatusCode, body)
	}
	e.waitOutcome()
	if b, _ := os.ReadFile(e.hostPath("home/user/a.txt")); string(b) != "A" {
		t.Fatalf("a.txt = %q", b)
	}
}

// TestBreakMultipartBadPartLosesNothing: a multipart write whose second
// part is broken is refused and the first file's old content survives.
func TestBreakMultipartBadPartLosesNothing(t *testing.T) {
	e := newTestEnv(t)
	e.writeFile("home/user/keep.txt", "old")
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "/home/user/keep.txt")
	_, _ = fw.Write(bytes.Repeat([]byte("new"), 100000))
	pw, _ := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"text/plain"}}) // no Content-Disposition
	_, _ = pw.Write([]byte("x"))
	_ = mw.Close()
	req := e.request(http.MethodPost, "/files", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, body := e.do(req)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	e.waitOutcome()
	if b, _ := os.ReadFile(e.hostPath("home/user/keep.txt")); string(b) != "old" {
		t.Fatalf("keep.txt was changed by a refused write: %d bytes", len(b))
	}
}

// TestBreakBodyNeverEndsClientGoes: an octet-stream write whose client goes
// away half-way leaves the old file as it was.
func TestBreakBodyNeverEndsClientGoes(t *testing.T) {
	e := newTestEnv(t)
	e.writeFile("home/user/keep.txt", "old")
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := e.request(http.MethodPost, "/files?path=keep.txt", pr).WithContext(ctx)
	req.Header.Set("Content-Type", "application/octet-stream")
	done := make(chan error, 1)
	go func() {
		resp, err := testClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if _, err := pw.Write(bytes.Repeat([]byte("n"), 1<<20)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = pw.CloseWithError(io.ErrUnexpectedEOF)
	<-done
	o := e.waitOutcome()
	if o.Code == "" {
		t.Fatalf("outcome %+v", o)
	}
	if b, _ := os.ReadFile(e.hostPath("home/user/keep.txt")); string(b) != "old" {
		t.Fatalf("keep.txt was changed by an aborted write: %d bytes", len(b))
	}
}

// TestBreakPathEdges: odd paths resolve or fail cleanly.
func TestBreakPathEdges(t *testing.T) {
	e := newTestEnv(t)
	h := &Handler{cfg: Config{HomeDir: "/home/user"}}
	for in, want := range map[string]string{
		"../../etc/passwd": "/etc/passwd",
		"/..":              "/",
		"~":                "/home/user",
		"~/":               "/home/user",
		"~root/x":          "/home/user/~root/x",
		"a/b/":             "/home/user/a/b",
		"%2e%2e":           "/home/user/%2e%2e",
		"//x//y":           "/x/y",
	} {
		got, err := h.resolvePath(in, sdkUser{})
		if err != nil || got != want {
			t.Errorf("resolvePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"a\x00b", strings.Repeat("a", 5000)} {
		if _, err := h.resolvePath(bad, sdkUser{}); err == nil || err.Code != CodeBadRequest {
			t.Errorf("resolvePath(%q...) = %v", truncate(bad, 10), err)
		}
	}
	// NUL through the wire: 400, nothing reaches execd.
	resp, body := e.do(e.request(http.MethodGet, "/files?path=a%00b", nil))
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	e.waitOutcome()
	resp, body = e.unary("ListDir", `{"path":"`+strings.Repeat("a", 5000)+`"}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	e.waitOutcome()
}

// TestBreakTimeoutHeaderEdges: Connect-Timeout-Ms at its limits.
func TestBreakTimeoutHeaderEdges(t *testing.T) {
	for v, ok := range map[string]bool{"0": true, "9999999999": true, "0000000001": true,
		"99999999999": false, "-1": false, "+5": false, " 5": false, "1e3": false, "５": false} {
		d, err := parseTimeout(v)
		if (err == nil) != ok || d < 0 {
			t.Errorf("parseTimeout(%q) = %v, %v", v, d, err)
		}
	}
	for _, v := range []string{"garbage", "-5", "0", "99999999999999999999", "1.5"} {
		if got := parseKeepalive(v, time.Minute); got != time.Minute {
			t.Errorf("parseKeepalive(%q) = %v", v, got)
		}
	}
}

// TestBreakLyingEnvelope: an envelope that promises more than it sends,
// or more than the limit, is a BAD_REQUEST end-stream; nothing runs.
func TestBreakLyingEnvelope(t *testing.T) {
	e := newTestEnv(t)
	for name, body := range map[string][]byte{
		"short":    append([]byte{0, 0, 0, 1, 0}, []byte(`{"process":{"cmd":"true"}}`)...),
		"huge":     {0, 0xff, 0xff, 0xff, 0xff},
		"header":   {0, 0},
		"trailing": append(envelope(0, []byte(startMsg("true"))), 0),
		"endflag":  envelope(connect.FlagEndStream, []byte(startMsg("true"))),
	} {
		req := e.request(http.MethodPost, "/process.Process/Start", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/connect+json")
		resp, b := e.do(req)
		fr := readFrames(t, b)
		if resp.StatusCode != 200 || len(fr) != 1 || fr[0].flags != connect.FlagEndStream || !strings.Contains(fr[0].raw, "BAD_REQUEST") {
			t.Fatalf("%s: %d %q", name, resp.StatusCode, b)
		}
		e.waitOutcome()
	}
	if n := len(e.execd.Commands()); n != 0 {
		t.Fatalf("%d commands ran", n)
	}
}

// phasedUpstream is an execd /command that waits for release before its
// init event, then sends output and, if end, the terminal event.
func phasedUpstream(started, release chan struct{}, end bool) (http.Handler, chan string) {
	interrupted := make(chan string, 4)
	prefix := "/" + testSandbox + "/44772"
	mux := http.NewServeMux()
	mux.HandleFunc(prefix+"/command", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			interrupted <- r.URL.Query().Get("id")
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		close(started)
		<-release
		_, _ = io.WriteString(w, "data: {\"type\":\"init\",\"text\":\"0c1d0c1d0c1d4c1d8c1d0c1d0c1d0c1d\"}\n\n")
		_, _ = io.WriteString(w, "data: {\"type\":\"stdout\",\"text\":\"one\"}\n\n")
		if end {
			_, _ = io.WriteString(w, "data: {\"type\":\"execution_complete\"}\n\n")
			return
		}
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	return mux, interrupted
}

// TestBreakDisconnectPhases: a client that goes away before execd's init
// event, or after the end event, interrupts nothing: the command's lifetime
// does not depend on its stream.
func TestBreakDisconnectPhases(t *testing.T) {
	t.Run("before init", func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		up, interrupted := phasedUpstream(started, release, false)
		gw, tok, outcomes := newFakeGatewayOutcomes(t, up)
		ctx, cancel := context.WithCancel(context.Background())
		req := gwRequest(t, gw, tok, http.MethodPost, "/process.Process/Start",
			bytes.NewReader(envelope(0, []byte(startMsg("sleep 30"))))).WithContext(ctx)
		req.Header.Set("Content-Type", "application/connect+json")
		errc := make(chan error, 1)
		go func() {
			resp, err := testClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errc <- err
		}()
		select {
		case <-started:
		case err := <-errc:
			t.Fatalf("the stream ended (%v) before execd's /command was entered", err)
		}
		cancel()
		<-errc
		if o := <-outcomes; o.Code != CodeCanceled {
			t.Fatalf("outcome %+v", o)
		}
		close(release)
		select {
		case id := <-interrupted:
			t.Fatalf("a command whose client left before init was interrupted (%q)", id)
		default:
		}
	})
	t.Run("after end", func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		close(release)
		up, interrupted := phasedUpstream(started, release, true)
		gw, tok, outcomes := newFakeGatewayOutcomes(t, up)
		req := gwRequest(t, gw, tok, http.MethodPost, "/process.Process/Start",
			bytes.NewReader(envelope(0, []byte(startMsg("true")))))
		req.Header.Set("Content-Type", "application/connect+json")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		for {
			f, err := readFrame(t, r)
			if err != nil {
				t.Fatal(err)
			}
			if f.flags == connect.FlagEndStream {
				break
			}
		}
		resp.Body.Close()
		if o := <-outcomes; o.Code != "" {
			t.Fatalf("outcome %+v", o)
		}
		select {
		case id := <-interrupted:
			t.Fatalf("a finished command was interrupted (%q)", id)
		default:
		}
	})
}

// TestBreakGzipCorruptLosesNothing: an octet-stream write whose gzip body
// fails its checksum (or is cut short) at the very end is refused and the
// old file survives, although its bytes were already streamed upstream.
func TestBreakGzipCorruptLosesNothing(t *testing.T) {
	e := newTestEnv(t)
	e.writeFile("home/user/keep.txt", "old")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(bytes.Repeat([]byte("new content "), 200000))
	_ = zw.Close()
	good := gz.Bytes()
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-8] ^= 0xff // CRC-32
	for name, body := range map[string][]byte{"crc": corrupt, "short": good[:len(good)-4]} {
		req := e.request(http.MethodPost, "/files?path=keep.txt", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Content-Encoding", "gzip")
		resp, b := e.do(req)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: %d %q", name, resp.StatusCode, b)
		}
		e.waitOutcome()
		if got, _ := os.ReadFile(e.hostPath("home/user/keep.txt")); string(got) != "old" {
			t.Fatalf("%s: keep.txt changed by a refused write: %d bytes", name, len(got))
		}
	}
}

// TestBreakNULInCommand: a NUL byte in cmd, args or envs cannot reach a
// program; it is the caller's bad input (BAD_REQUEST), not an internal
// EXECD_PROTOCOL failure, and nothing runs.
func TestBreakNULInCommand(t *testing.T) {
	e := newTestEnv(t)
	for name, proc := range map[string]map[string]any{
		"cmd":       {"cmd": "/bin/ec\x00ho"},
		"arg":       {"cmd": "/bin/echo", "args": []string{"a\x00b"}},
		"env value": {"cmd": "/bin/echo", "envs": map[string]string{"A": "x\x00y"}},
		"env key":   {"cmd": "/bin/echo", "envs": map[string]string{"A\x00": "x"}},
	} {
		b, _ := json.Marshal(map[string]any{"process": proc})
		resp, body := e.do(e.startRequest(string(b)))
		fr := readFrames(t, body)
		if resp.StatusCode != 200 || len(fr) != 1 || fr[0].flags != connect.FlagEndStream || !strings.Contains(fr[0].raw, "invalid_argument") {
			t.Fatalf("%s: %d %q", name, resp.StatusCode, body)
		}
		if o := e.waitOutcome(); o.Code != CodeBadRequest {
			t.Fatalf("%s: outcome %+v", name, o)
		}
	}
	if n := len(e.execd.Commands()); n != 0 {
		t.Fatalf("%d commands ran", n)
	}
}

// TestBreakOutputBeforeInit: execd starts its output tailers before the
// process and sends init just after it, so a poll in between can report a
// line before init. The line is held and sent after the start event.
func TestBreakOutputBeforeInit(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/"+testSandbox+"/44772/command", sseEvents(`{"type":"stdout","text":"early"}`, `{"type":"init","text":"0c1d0c1d0c1d4c1d8c1d0c1d0c1d0c1d"}`,
		`{"type":"ping","text":"pong"}`, `{"type":"stdout","text":"later"}`, `{"type":"execution_complete"}`))
	gw, tok := newFakeGateway(t, mux)
	resp := postStart(t, gw, tok)
	body, _ := io.ReadAll(resp.Body)
	s := collect(t, readFrames(t, body))
	if s.stdout != "early\nlater\n" || s.end == nil || len(s.eos) != 0 {
		t.Fatalf("stdout %q end %v eos %v", s.stdout, s.end, s.eos)
	}
}

// TestBreakBackgroundStartStreamCut: with extended operations, a background
// start whose event stream is cut after init (a reverse proxy in front of
// execd does this now and then) is a start when execd's status knows the
// command: the stream goes on from the command's files and status. execd
// sends init before it has started the command and stores the command for
// its status only once started, in a goroutine, so its status may answer
// "command not found" for a moment after init, and even after
// execution_complete: that is not yet a failure.
func TestBreakBackgroundStartStreamCut(t *testing.T) {
	for _, c := range []struct {
		name  string
		known bool
		late  int // status answers 404 to this many calls first
		cut   bool
	}{
		{"execd knows the command", true, 0, true},
		{"execd does not", false, 0, true},
		{"execd stores the command after the cut", true, 3, true},
		{"execd stores the command after execution_complete", true, 3, false},
	} {
		known, late := c.known, c.late
		t.Run(c.name, func(t *testing.T) {
			prefix := "/" + testSandbox + "/44772"
			var mu sync.Mutex
			files := map[string][]byte{}
			mux := http.NewServeMux()
			mux.HandleFunc(prefix+"/files/info", func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				m := map[string]any{}
				for _, p := range r.URL.Query()["path"] {
					b, ok := files[p]
					if !ok && p == "/home/user" {
						m[p] = map[string]any{"path": p, "type": "directory", "mode": 755}
						continue
					}
					m[p] = map[string]any{"path": p, "type": "file", "size": len(b), "mode": 644}
				}
				_ = json.NewEncoder(w).Encode(m)
			})
			mux.HandleFunc(prefix+"/files/upload", func(w http.ResponseWriter, r *http.Request) {
				mr, _ := r.MultipartReader()
				var meta struct{ Path string }
				for {
					p, err := mr.NextPart()
					if err != nil {
						break
					}
					b, _ := io.ReadAll(p)
					if p.FormName() == "metadata" {
						_ = json.Unmarshal(b, &meta)
					} else {
						mu.Lock()
						files[meta.Path] = b
						mu.Unlock()
					}
				}
			})
			mux.HandleFunc(prefix+"/command", func(w http.ResponseWriter, r *http.Request) {
				var creq struct{ Background bool }
				_ = json.NewDecoder(r.Body).Decode(&creq)
				w.WriteHeader(http.StatusOK)
				if !creq.Background { // the script creating the output files
					_, _ = io.WriteString(w, `{"type":"init","text":"0e0e0e0e0e0e4e0e8e0e0e0e0e0e0e0e"}`+"\n\n"+`{"type":"execution_complete","execution_time":1}`+"\n\n")
					return
				}
				_, _ = io.WriteString(w, `{"type":"init","text":"0c1d0c1d0c1d4c1d8c1d0c1d0c1d0c1d"}`+"\n\n")
				http.NewResponseController(w).Flush()
				if c.cut {
					panic(http.ErrAbortHandler) // the stream is cut after init
				}
				_, _ = io.WriteString(w, `{"type":"execution_complete","execution_time":1}`+"\n\n")
			})
			statusCalls := 0
			mux.HandleFunc(prefix+"/command/status/0c1d0c1d0c1d4c1d8c1d0c1d0c1d0c1d", func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				statusCalls++
				n := statusCalls
				mu.Unlock()
				if !known || n <= late {
					w.WriteHeader(http.StatusNotFound)
					_, _ = io.WriteString(w, `{"code":"INVALID_REQUEST_BODY","message":"command not found: 0c1d0c1d0c1d4c1d8c1d0c1d0c1d0c1d"}`)
					return
				}
				_, _ = io.WriteString(w, `{"id":"0c1d0c1d0c1d4c1d8c1d0c1d0c1d0c1d","running":false,"exit_code":0}`)
			})
			mux.HandleFunc(prefix+"/files", func(w http.ResponseWriter, r *http.Request) {})
			up := httptest.NewServer(mux)
			t.Cleanup(up.Close)
			fe, _ := url.Parse(up.URL)
			e := newTestEnv(t)
			verifier, _ := tokenVerifier(e)
			h, err := New(Config{ExtendedOperations: true}, Deps{Tokens: verifier, Credentials: e.creds,
				Clusters: fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: fe}}, Execd: newClient()})
			if err != nil {
				t.Fatal(err)
			}
			gw := httptest.NewServer(h)
			t.Cleanup(gw.Close)
			req := gwRequest(t, gw.URL, e.mint("cred-a", testSandbox), http.MethodPost, "/process.Process/Start",
				bytes.NewReader(envelope(0, []byte(startMsg("true")))))
			req.Header.Set("Content-Type", "application/connect+json")
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			frames := readFrames(t, body)
			if known {
				s := collect(t, frames)
				if s.pid <= 0 || s.end == nil || len(s.eos) != 0 {
					t.Fatalf("start %v end %v eos %v", s.pid, s.end, s.eos)
				}
				return
			}
			if len(frames) != 1 || !strings.Contains(frames[0].raw, "EXECD_FAILED") {
				t.Fatalf("frames %q", body)
			}
		})
	}
}

// TestBreakInitWithoutID: an init event that names no command is not one
// execd sends (its text is the 32-hex command id). It ends the stream with
// EXECD_PROTOCOL before any start event. The gateway took it for the start
// (a pid derived from ""), went on holding output as if there had been no
// init, and sent a second start event when a later init named a command.
func TestBreakInitWithoutID(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/"+testSandbox+"/44772/command", sseEvents(`{"type":"init","text":""}`, `{"type":"stdout","text":"a"}`,
		`{"type":"init","text":"0c1d0c1d0c1d4c1d8c1d0c1d0c1d0c1d"}`, `{"type":"execution_complete"}`))
	gw, tok := newFakeGateway(t, mux)
	resp := postStart(t, gw, tok)
	body, _ := io.ReadAll(resp.Body)
	frames := readFrames(t, body)
	if len(frames) != 1 || frames[0].flags != connect.FlagEndStream || !strings.Contains(frames[0].raw, string(CodeExecdProtocol)) {
		t.Fatalf("frames %+v; want only an end-stream with %s", frames, CodeExecdProtocol)
	}
}

// TestBreakStreamResetShowsNoAddress: a command stream whose connection to
// the fixed entry is reset after init ends with EXECD_PROTOCOL and a
// message that names no address. The read error's own text went to the
// SDK ("read tcp 10.0.3.4:43210->10.0.9.1:80: read: connection reset by
// peer"): the gateway's and the fixed entry's internal addresses, where
// every other failure on the way to the fixed entry is a fixed sentence.
func TestBreakStreamResetShowsNoAddress(t *testing.T) {
	started := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/"+testSandbox+"/44772/command", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		ev := `{"type":"init","text":"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b"}` + "\n\n"
		_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n")
		_ = bw.Flush()
		<-started // the gateway has read init: the next read meets the reset
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	})
	gw, tok := newFakeGateway(t, mux)
	resp := postStart(t, gw, tok)
	first, err := readFrame(t, resp.Body)
	if err != nil || !strings.Contains(first.raw, `"start"`) {
		t.Fatalf("first frame %q, %v", first.raw, err)
	}
	close(started)
	last, err := readFrame(t, resp.Body)
	if err != nil || last.flags != connect.FlagEndStream || !strings.Contains(last.raw, string(CodeExecdProtocol)) {
		t.Fatalf("last frame %q, %v; want an end-stream with %s", last.raw, err, CodeExecdProtocol)
	}
	if strings.Contains(last.raw, "127.0.0.1") || strings.Contains(last.raw, "tcp") {
		t.Fatalf("the SDK's message names addresses: %s", last.raw)
	}
}

// postStart sends process.Process/Start (command "x", Connect JSON) to
// the gateway with token tok and returns the response; its body is closed
// when the test ends.
func postStart(t *testing.T, gw, tok string) *http.Response {
	t.Helper()
	req := gwRequest(t, gw, tok, http.MethodPost, "/process.Process/Start", bytes.NewReader(envelope(0, []byte(startMsg("x")))))
	req.Header.Set("Content-Type", "application/connect+json")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseEvents is execd's POST /command answering 200 with events, each a
// JSON event line followed by a blank line, as execd streams them.
func sseEvents(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
		for _, ev := range events {
			_, _ = io.WriteString(w, ev+"\n\n")
		}
	}
}

// TestBreakInitNotCommandID: a foreground command stream whose init names
// the command with what is not a command id (each shape of
// malformedInitIDs) ends with EXECD_PROTOCOL before any start event. Before,
// any non-empty text was the id: the pid came from it, and the stream held
// it (up to 16 MiB, read with a large-line slot released once init was
// handled) for its whole life.
func TestBreakInitNotCommandID(t *testing.T) {
	for name, text := range malformedInitIDs {
		t.Run(name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("/"+testSandbox+"/44772/command", sseEvents(`{"type":"init","text":"`+text+`"}`,
				`{"type":"stdout","text":"a"}`, `{"type":"execution_complete"}`))
			gw, tok := newFakeGateway(t, mux)
			body, _ := io.ReadAll(postStart(t, gw, tok).Body)
			frames := readFrames(t, body)
			if len(frames) != 1 || frames[0].flags != connect.FlagEndStream || !strings.Contains(frames[0].raw, string(CodeExecdProtocol)) ||
				!strings.Contains(frames[0].raw, "not a command id") {
				t.Fatalf("frames %+v; want only an end-stream with %s naming no command id", frames, CodeExecdProtocol)
			}
		})
	}
}
