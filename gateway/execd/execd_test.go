package execd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/memtest"
)

func TestTargetURL(t *testing.T) {
	fe, _ := url.Parse("http://10.0.0.5:8080/prefix/")
	u := Target{FixedEntry: fe, SandboxID: "sbx1"}.URL("/files/info", url.Values{"path": {"/home/user/a b?c"}})
	if u.String() != "http://10.0.0.5:8080/prefix/sbx1/44772/files/info?path=%2Fhome%2Fuser%2Fa+b%3Fc" {
		t.Fatal(u)
	}
}

// TestListDirectoryRequest: the listing's request is what url.Values
// encodes and the URL built from the Target, sent to the fixed entry with
// the Target's Host, token and the default User-Agent.
func TestListDirectoryRequest(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		_, _ = io.WriteString(w, "[]")
	}))
	defer srv.Close()
	fe, _ := url.Parse(srv.URL + "/prefix/")
	p := "/home/user/a b?c&d=é%"
	tg := Target{FixedEntry: fe, SandboxID: "sbx1", Host: "entry.example", AccessToken: "tok"}
	if _, err := (&Client{}).ListDirectory(context.Background(), tg, p, 2); err != nil {
		t.Fatal(err)
	}
	want := "/prefix/sbx1/44772/directories/list?" + url.Values{"path": {p}, "depth": {"2"}}.Encode()
	if got.RequestURI != want || got.Host != "entry.example" || got.Header.Get(AccessTokenHeader) != "tok" || got.UserAgent() != "sandgate" {
		t.Fatalf("request %s host %s token %q agent %q, want %s", got.RequestURI, got.Host, got.Header.Get(AccessTokenHeader), got.UserAgent(), want)
	}
}

// TestClassify pins how each documented answer of the ingress and of execd
// is recognised (docs/wire-facts.md §X1.2, §X1.3, §X2.6).
func TestClassify(t *testing.T) {
	cases := []struct {
		status int
		body   string
		kind   Kind
		code   string
	}{
		{404, "OpenSandbox Ingress: sandbox not found: nosuch\n", KindSandboxNotFound, ""},
		{503, "OpenSandbox Ingress: sandbox not ready: default/sbx (ready: 0/1)\n", KindSandboxNotReady, ""},
		{503, "OpenSandbox Ingress: sandbox not ready: default/sbx: missing sandbox.opensandbox.io/endpoints annotation\n", KindSandboxNotReady, ""},
		{400, "OpenSandbox Ingress: invalid ingress route: invalid port format: invalid port \"abc\"\n", KindBadRoute, ""},
		{502, "OpenSandbox Ingress: ambiguous sandbox id sbx\n", KindSandboxUnreachable, ""},
		{502, "", KindSandboxUnreachable, ""},
		{401, `{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}`, KindUnauthorized, ""},
		{404, "404 page not found", KindNoRoute, ""},
		{404, `{"code":"FILE_NOT_FOUND","message":"file not found"}`, KindNotFound, "FILE_NOT_FOUND"},
		{400, `{"code":"INVALID_REQUEST_BODY","message":"bad"}`, KindExecd, "INVALID_REQUEST_BODY"},
		{500, `{"code":"RUNTIME_ERROR","message":"boom"}`, KindExecd, "RUNTIME_ERROR"},
		{500, "<html>", KindUnexpected, ""},
	}
	for _, tc := range cases {
		e := classify(tc.status, []byte(tc.body))
		if e.Kind != tc.kind || e.Code != tc.code || e.Status != tc.status {
			t.Errorf("%d %q: %+v", tc.status, tc.body, e)
		}
	}
}

func TestCommandStream(t *testing.T) {
	body := `{"type":"init","text":"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b","timestamp":1}

{"type":"ping","text":"pong"}

data: {"type":"stdout","text":"hi"}

{"type":"stderr","text":"\n"}

{"type":"error","error":{"ename":"CommandExecError","evalue":"3","traceback":["exit status 3"]}}

`
	s := NewCommandStream(io.NopCloser(strings.NewReader(body)))
	var types []string
	for {
		ev, err := s.Next()
		if errors.Is(err, ErrStreamEnded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type+":"+ev.Text)
		if ev.Terminal() {
			if code, ok := ev.ExitCode(); !ok || code != 3 {
				t.Fatalf("exit %d %v", code, ok)
			}
		}
	}
	if strings.Join(types, ",") != "init:9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b,ping:pong,stdout:hi,stderr:\n,error:" {
		t.Fatalf("%q", types)
	}
	bad := NewCommandStream(io.NopCloser(strings.NewReader("{not json}\n\n")))
	var xe *Error
	if _, err := bad.Next(); !errors.As(err, &xe) || xe.Kind != KindUnexpected {
		t.Fatalf("bad event: %v", err)
	}
	long := NewCommandStream(io.NopCloser(strings.NewReader(`{"type":"stdout","text":"` + strings.Repeat("a", maxEventLine) + `"}`)))
	if _, err := long.Next(); !errors.As(err, &xe) || xe.Kind != KindUnexpected {
		t.Fatalf("oversized event: %v", err)
	}
}

func TestExitCode(t *testing.T) {
	if c, ok := (Event{Type: EventExecutionComplete}).ExitCode(); !ok || c != 0 {
		t.Fatal("complete")
	}
	if _, ok := (Event{Type: EventError, Error: &CommandError{EValue: "x"}}).ExitCode(); ok {
		t.Fatal("non-numeric evalue accepted")
	}
	if _, ok := (Event{Type: EventStdout}).ExitCode(); ok {
		t.Fatal("stdout is not terminal")
	}
}

func TestPerm(t *testing.T) {
	if p, err := (FileInfo{Mode: 644}).Perm(); err != nil || p != 0o644 {
		t.Fatal(p, err)
	}
	if _, err := (FileInfo{Mode: 698}).Perm(); err == nil {
		t.Fatal("8 accepted as an octal digit")
	}
	// The same answers as reading the decimal string as octal, at the
	// edges too: negative, 0, past 32 bits, the largest ints.
	ref := func(mode int) (uint32, bool) {
		n, err := strconv.ParseUint(strconv.Itoa(mode), 8, 32)
		if err != nil || mode < 0 {
			return 0, false
		}
		return uint32(n) & 0o7777, true
	}
	modes := []int{0, 7, 8, 10, 644, 755, 777, 1777, 4755, 7777, 17777, -1, -644, 37777777777, 40000000000,
		77777777777, 1<<63 - 1, -1 << 63, 777777777777777777, 7777777777777777777}
	for i := range 100000 {
		modes = append(modes, i)
	}
	for _, m := range modes {
		want, wantOK := ref(m)
		got, err := (FileInfo{Mode: m}).Perm()
		if got != want || (err == nil) != wantOK {
			t.Fatalf("mode %d: %o, %v; want %o, %v", m, got, err, want, wantOK)
		}
	}
}

// TestSmallBodiesChunked: the request bodies execd answers at once
// (/command, /files/mv, /directories, the small-file upload) are sent
// chunked, without a Content-Length, so that the OpenSandbox ingress's
// reverse proxy has read the end of its inbound body before execd can
// answer (see unsized; golang/go#40747). Each body arrives whole.
func TestSmallBodiesChunked(t *testing.T) {
	type seen struct {
		path     string
		length   int64
		encoding []string
		body     string
	}
	got := make(chan seen, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{strings.TrimPrefix(r.URL.Path, "/sb1/44772"), r.ContentLength, r.TransferEncoding, string(b)}
		if r.URL.Path == "/sb1/44772/command" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `{"type":"init","text":"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b"}`+"\n\n"+`{"type":"execution_complete"}`+"\n\n")
		}
	}))
	defer srv.Close()
	fe, _ := url.Parse(srv.URL)
	c, tgt, ctx := &Client{}, Target{FixedEntry: fe, SandboxID: "sb1"}, context.Background()
	s, err := c.RunCommand(ctx, tgt, CommandRequest{Command: "echo hi"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := c.Move(ctx, tgt, "/a", "/b"); err != nil {
		t.Fatal(err)
	}
	if err := c.MakeDirs(ctx, tgt, "/d", Permission{Mode: 755}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFiles(ctx, tgt, []SmallFile{{Path: "/f", Data: []byte("hello")}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ path, body string }{
		{"/command", `"command":"echo hi"`}, {"/files/mv", `"dest":"/b"`}, {"/directories", `"/d"`}, {"/files/upload", "hello"},
	} {
		s := <-got
		if s.path != want.path || s.length != -1 || len(s.encoding) != 1 || s.encoding[0] != "chunked" || !strings.Contains(s.body, want.body) {
			t.Errorf("%s: arrived as %s with Content-Length %d, Transfer-Encoding %v, body %q", want.path, s.path, s.length, s.encoding, s.body)
		}
	}
}

// TestTargetHost: a Target's Host is the Host header of every request to
// the fixed entry (the managed Ingresses' host, docs/deploy.md
// "Restricted sandboxes"); without it the fixed entry URL's host is sent.
func TestTargetHost(t *testing.T) {
	hosts := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	fe, _ := url.Parse(srv.URL)
	c := &Client{}
	for _, tc := range []struct{ host, want string }{{"sandbox.cluster-a.example", "sandbox.cluster-a.example"}, {"", fe.Host}} {
		resp, err := c.Do(context.Background(), Target{FixedEntry: fe, SandboxID: "sb1", Host: tc.host}, http.MethodGet, "/ping", nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := <-hosts; got != tc.want {
			t.Errorf("Host %q: the fixed entry saw Host %q, want %q", tc.host, got, tc.want)
		}
	}
}

// TestCommandStatusEscapesIDOnce: execd's status route takes the id as one
// path segment, escaped once (a "/" as %2F, "%" as %25), never twice.
func TestCommandStatusEscapesIDOnce(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.RequestURI
		_, _ = io.WriteString(w, `{"id":"x","running":true,"started_at":"2026-01-01T00:00:00Z"}`)
	}))
	defer srv.Close()
	fe, _ := url.Parse(srv.URL + "/prefix%20dir")
	c := &Client{}
	if _, err := c.CommandStatus(context.Background(), Target{FixedEntry: fe, SandboxID: "sbx1"}, "a/b c%d", StatusLimit(0)); err != nil {
		t.Fatal(err)
	}
	if uri, want := <-got, "/prefix%20dir/sbx1/44772/command/status/a%2Fb%20c%25d"; uri != want {
		t.Fatalf("request URI %q, want %q", uri, want)
	}
}

// TestAnswersBoundedByOperation: a file info answer larger than the paths
// asked for can need, and a status larger than the command sent can need,
// are refused (KindUnexpected, saying so) whether or not they declare their
// length; an answer within its limit decodes.
func TestAnswersBoundedByOperation(t *testing.T) {
	big := `{"/a":{"path":"/a","owner":"` + strings.Repeat("x", 64<<10) + `"}}`
	for _, declared := range []bool{true, false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !declared {
				w.(http.Flusher).Flush() // chunked: no Content-Length
			}
			if strings.Contains(r.URL.Path, "/command/status/") {
				_, _ = io.WriteString(w, `{"id":"x","running":true,"content":"`+strings.Repeat("y", 64<<10)+`"}`)
				return
			}
			_, _ = io.WriteString(w, big)
		}))
		fe, _ := url.Parse(srv.URL)
		tg := Target{FixedEntry: fe, SandboxID: "sbx1"}
		c := &Client{}
		_, err := c.Stat(context.Background(), tg, "/a")
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, "larger than") {
			t.Errorf("declared %v: an oversized info answer: %v", declared, err)
		}
		_, err = c.CommandStatus(context.Background(), tg, "x", StatusLimit(100))
		if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, "larger than") {
			t.Errorf("declared %v: an oversized status: %v", declared, err)
		}
		if st, err := c.CommandStatus(context.Background(), tg, "x", StatusLimit(64<<10)); err != nil || !st.Running {
			t.Errorf("declared %v: a status within its limit: %+v %v", declared, st, err)
		}
		srv.Close()
	}
}

// TestCommandStreamLargeLineGate: a line past LargeLineBytes is read only
// after the gate let it, the gate is held until the next Next (or Close),
// short lines never ask it, the last line needs no newline, and the
// gate's refusal ends the stream with the gate's own error.
func TestCommandStreamLargeLineGate(t *testing.T) {
	big := strings.Repeat("b", 3*LargeLineBytes)
	body := `{"type":"init","text":"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b"}` + "\n\n" + `{"type":"stdout","text":"` + big + `"}` + "\n\n" +
		`{"type":"stdout","text":"small"}` + "\n" + `{"type":"execution_complete"}`
	s := NewCommandStream(io.NopCloser(strings.NewReader(body)))
	asked, held := 0, 0
	s.SetLargeLineGate(func() (func(), error) {
		asked++
		held++
		return func() { held-- }, nil
	})
	var got []string
	for {
		ev, err := s.Next()
		if errors.Is(err, ErrStreamEnded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if s.HoldsLargeLine() != (held == 1) || held > 1 {
			t.Fatalf("after %s: HoldsLargeLine %v with %d held", ev.Type, s.HoldsLargeLine(), held)
		}
		if ev.Type == EventStdout && ev.Text == big {
			if held != 1 {
				t.Fatalf("the large line's event came with %d gates held, want 1", held)
			}
			got = append(got, "stdout:big")
			continue
		}
		got = append(got, ev.Type+":"+ev.Text)
	}
	if strings.Join(got, ",") != "init:9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b,stdout:big,stdout:small,execution_complete:" || asked != 1 || held != 0 {
		t.Fatalf("events %q, gate asked %d times, %d held at the end", got, asked, held)
	}

	refused := errors.New("no room for a large line")
	s = NewCommandStream(io.NopCloser(strings.NewReader(`{"type":"stdout","text":"` + big + `"}` + "\n")))
	s.SetLargeLineGate(func() (func(), error) { return nil, refused })
	for range 2 {
		if _, err := s.Next(); err != refused {
			t.Fatalf("Next after the gate refused: %v, want the gate's error", err)
		}
	}

	s = NewCommandStream(io.NopCloser(strings.NewReader(`{"type":"stdout","text":"` + big + `"}` + "\n")))
	s.SetLargeLineGate(func() (func(), error) { held++; return func() { held-- }, nil })
	if _, err := s.Next(); err != nil || held != 1 {
		t.Fatalf("%v, %d held", err, held)
	}
	_ = s.Close()
	if held != 0 {
		t.Fatalf("Close left %d gates held", held)
	}
}

// TestCommandStreamLineLengths: lines longer than the stream's own 4 KiB
// buffer and up to LargeLineBytes (newline included) arrive whole without
// asking the large-line gate; one byte more asks it once; and a stream
// costs its 4 KiB buffer, not a LargeLineBytes one, until a long line
// comes.
func TestCommandStreamLineLengths(t *testing.T) {
	// event is a stdout event line of exactly n bytes, newline included.
	event := func(n int) (line, text string) {
		const frame = len(`{"type":"stdout","text":""}` + "\n")
		text = strings.Repeat("x", n-frame)
		return `{"type":"stdout","text":"` + text + `"}` + "\n", text
	}
	for _, c := range []struct {
		n     int
		gated bool
	}{
		{streamBufferBytes - 1, false}, {streamBufferBytes, false}, {streamBufferBytes + 1, false},
		{30 << 10, false}, {LargeLineBytes, false}, {LargeLineBytes + 1, true}, {3 * LargeLineBytes, true},
	} {
		line, text := event(c.n)
		s := NewCommandStream(io.NopCloser(strings.NewReader(line + `{"type":"stdout","text":"next"}` + "\n")))
		asked := 0
		s.SetLargeLineGate(func() (func(), error) { asked++; return func() {}, nil })
		ev, err := s.Next()
		if err != nil || ev.Text != text {
			t.Fatalf("a %d-byte line: %v, %d bytes of text, want %d", c.n, err, len(ev.Text), len(text))
		}
		if (asked == 1) != c.gated || asked > 1 {
			t.Fatalf("a %d-byte line asked the gate %d times, want gated %v", c.n, asked, c.gated)
		}
		if ev, err := s.Next(); err != nil || ev.Text != "next" {
			t.Fatalf("the line after a %d-byte one: %+v %v", c.n, ev, err)
		}
	}
	// The process's allocations meanwhile: the 4 KiB buffer and a few
	// KiB of the test's other goroutines, far from the LargeLineBytes a
	// stream allocated before.
	if n := memtest.AllocatedDuring(func() { _ = NewCommandStream(io.NopCloser(strings.NewReader(""))) }); n > LargeLineBytes/4 {
		t.Fatalf("a new stream allocated %d bytes, want about its %d-byte buffer", n, streamBufferBytes)
	}
}

// BenchmarkCommandStreamNext reads a stream of 1,000 short stdout events
// (one op is the whole stream).
func BenchmarkCommandStreamNext(b *testing.B) {
	var sb strings.Builder
	for range 1000 {
		sb.WriteString(`{"type":"stdout","text":"a line of a command's output, about sixty bytes","timestamp":1}` + "\n\n")
	}
	body := sb.String()
	b.ReportAllocs()
	for b.Loop() {
		s := NewCommandStream(io.NopCloser(strings.NewReader(body)))
		for {
			if _, err := s.Next(); err != nil {
				break
			}
		}
	}
}

// TestCommandStreamInitID: an init event whose text is not a command id
// as execd gives it (32 lowercase hex digits) ends the stream with
// KindUnexpected, whatever the shape: its text names no command the
// gateway could record, select, interrupt or ask about. The error does not
// echo the text. Before, any non-empty text (up to 16 MiB) was the id.
func TestCommandStreamInitID(t *testing.T) {
	const good = "9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b"
	for name, text := range map[string]string{
		"empty":                  ``,
		"31 digits":              good[:31],
		"33 digits":              good + "0",
		"65 digits":              strings.Repeat("a", 65),
		"1 MiB":                  strings.Repeat("a", 1<<20),
		"a UUID with its dashes": "9f1c2e4b-7a6d-4e0f-8b3c-5d2a1e0f7c6b",
		"uppercase":              strings.ToUpper(good),
		"not hex":                "g" + good[1:],
		"a path":                 "../../files/download?path=%2Fx" + good[:2],
		"a space":                " " + good[1:],
		"a NUL":                  `\u0000` + good[1:],
		"a newline":              `\n` + good[1:],
		"not ASCII":              "é" + good[2:],
	} {
		t.Run(name, func(t *testing.T) {
			body := `{"type":"init","text":"` + text + `"}` + "\n\n" + `{"type":"execution_complete"}` + "\n\n"
			s := NewCommandStream(io.NopCloser(strings.NewReader(body)))
			defer s.Close()
			_, err := s.Next()
			var e *Error
			if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, "not a command id") {
				t.Fatalf("Next: %v; want KindUnexpected naming no command id", err)
			}
			if len(text) > 8 && strings.Contains(e.Message, text[1:]) {
				t.Fatalf("the error echoes execd's text: %s", e.Message)
			}
			if _, again := s.Next(); again != err {
				t.Fatalf("the next Next: %v; want the same error (the stream ended)", again)
			}
		})
	}
	s := NewCommandStream(io.NopCloser(strings.NewReader(`{"type":"init","text":"` + good + `"}` + "\n\n")))
	if ev, err := s.Next(); err != nil || ev.Text != good {
		t.Fatalf("execd's own id: %+v, %v", ev, err)
	}
}

func TestValidCommandID(t *testing.T) {
	for id, want := range map[string]bool{
		"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b": true,
		"00000000000000000000000000000000": true,
		"9F1C2E4B7A6D4E0F8B3C5D2A1E0F7C6B": false,
		"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6":  false,
		"":                                 false,
		"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6z": false,
	} {
		if got := ValidCommandID(id); got != want {
			t.Errorf("ValidCommandID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestShellLargeLineRefused: a Shell of a few KiB answered with an output
// line of 16 MiB (what answers for execd in a hostile sandbox) is refused
// with the script's too-much error as soon as the event line passes 64
// KiB; execd's writer sees the gateway stop reading well before the line's
// end. Before, the line was read and decoded whole (about 48 MiB) before
// its length was checked, in every Process/Start with extended operations
// (its output files' script), which takes no upstream slot. A Shell whose
// bound allows large lines still reads them (a listing's).
func TestShellLargeLineRefused(t *testing.T) {
	const line = 16<<20 - 4<<10 // under the 16 MiB event line bound
	written := make(chan int64, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		n, _ := io.WriteString(w, `{"type":"init","text":"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b"}`+"\n\n"+`{"type":"stdout","text":"`)
		total := int64(n)
		chunk := strings.Repeat("x", 64<<10)
		for left := line; left > 0; left -= len(chunk) {
			n, err := io.WriteString(w, chunk[:min(len(chunk), left)])
			total += int64(n)
			if err != nil {
				break
			}
		}
		if total >= line+int64(len(`{"type":"init","text":"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b"}`+"\n\n"+`{"type":"stdout","text":"`)) {
			_, _ = io.WriteString(w, `"}`+"\n\n"+`{"type":"execution_complete"}`+"\n\n")
		}
		written <- total
	}))
	defer srv.Close()
	fe, _ := url.Parse(srv.URL)
	c, tgt := &Client{}, Target{FixedEntry: fe, SandboxID: "sb1"}
	_, err := c.Shell(context.Background(), tgt, 4<<10, "/", "true")
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, "printed more than 4096 bytes") {
		t.Fatalf("Shell: %v; want the too-much error", err)
	}
	if n := <-written; n >= line/2 {
		t.Fatalf("execd's writer wrote the whole line (%d bytes): the gateway read it", n)
	}
	res, err := c.Shell(context.Background(), tgt, 32<<20, "/", "true")
	if err != nil || len(res.Stdout) != line+1 {
		t.Fatalf("a Shell whose bound allows the line: %d bytes, %v", len(res.Stdout), err)
	}
	<-written
}

// TestShellLineOverTheBoundNotCopied: a Shell whose bound lets event lines
// of 16 MiB through (a listing's, 4 MiB: its honest output is one line,
// each NUL escaped to six bytes) answered with a 16 MiB line costs the
// line's read (its buffer, grown by doubling: under twice its length) and
// its decoded text, which is refused before it is copied into the output:
// at most 3 × 16 MiB + 1 MiB allocated. Before, the text was copied first
// and then measured, 64 MiB in all, for each listing with a symlink (or on
// execd v1.0.18) a sandbox answers so, four at once per sandbox.
func TestShellLineOverTheBoundNotCopied(t *testing.T) {
	answer := []byte(`{"type":"init","text":"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b"}` + "\n\n" +
		`{"type":"stdout","text":"` + strings.Repeat("a", 16<<20-64) + `"}` + "\n\n" + `{"type":"execution_complete"}` + "\n\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write(answer)
	}))
	defer srv.Close()
	fe, _ := url.Parse(srv.URL)
	c, tgt := &Client{}, Target{FixedEntry: fe, SandboxID: "sb1"}
	var err error
	n := memtest.AllocatedDuring(func() { _, err = c.Shell(context.Background(), tgt, DefaultMaxListingBytes, "/", "true") })
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, "printed more than") {
		t.Fatalf("Shell: %v; want the too-much error", err)
	}
	t.Logf("a 16 MiB line over a 4 MiB bound: %d MiB allocated", n>>20)
	if n > 3*16<<20+1<<20 {
		t.Fatalf("a 16 MiB line over a 4 MiB bound allocated %d MiB", n>>20)
	}
}
