package dataplane

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/execdstub"
)

// startMsg is a Process/Start message as JS SDKs send it.
func startMsg(cmd string) string {
	b, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmd}}, "stdin": false})
	return string(b)
}

// collect decodes a finished Start stream into stdout, stderr, the end event
// and the end-stream payload, checking the frame order envd uses.
type started struct {
	pid            float64
	stdout, stderr string
	end            map[string]any
	eos            map[string]any
	keepalives     int
}

func collect(t *testing.T, frames []frame) started {
	t.Helper()
	var s started
	if len(frames) == 0 {
		t.Fatal("no frames")
	}
	last := frames[len(frames)-1]
	if last.flags != connect.FlagEndStream {
		t.Fatalf("last frame flags %#x, want end-stream; frames %+v", last.flags, frames)
	}
	s.eos = last.json
	for i, f := range frames[:len(frames)-1] {
		if f.flags != 0 {
			t.Fatalf("frame %d flags %#x before the end-stream frame", i, f.flags)
		}
		ev, _ := f.json["event"].(map[string]any)
		switch {
		case ev["start"] != nil:
			if i != 0 {
				t.Fatalf("start is frame %d, want 0", i)
			}
			s.pid, _ = ev["start"].(map[string]any)["pid"].(float64)
		case ev["data"] != nil:
			d := ev["data"].(map[string]any)
			for k, v := range d {
				b, err := base64.StdEncoding.DecodeString(v.(string))
				if err != nil {
					t.Fatalf("data %s is not base64: %v", k, err)
				}
				if k == "stdout" {
					s.stdout += string(b)
				} else {
					s.stderr += string(b)
				}
			}
		case ev["end"] != nil:
			s.end = ev["end"].(map[string]any)
		case ev["keepalive"] != nil:
			s.keepalives++
		default:
			t.Fatalf("unknown event %s", f.raw)
		}
	}
	return s
}

func TestProcessStartTranslation(t *testing.T) {
	e := newTestEnv(t)
	cases := []struct {
		name, cmd      string
		stdout, stderr string
		end            string
	}{
		{"echo", "echo hi", "hi\n", "", `{"exited":true,"status":"exit status 0"}`},
		{"stderr and exit 3", "echo out; echo err >&2; exit 3", "out\n", "err\n", `{"error":"exit status 3","exitCode":3,"exited":true,"status":"exit status 3"}`},
		{"no final newline, empty line kept", `printf 'a\n\nb'; printf 'x\ny\n' >&2`, "a\n\nb", "x\ny\n", `{"exited":true,"status":"exit status 0"}`},
		{"trailing empty lines", `printf 'a\n\n\n'`, "a\n\n\n", "", `{"exited":true,"status":"exit status 0"}`},
		{"only a partial line", `printf 'no newline'`, "no newline", "", `{"exited":true,"status":"exit status 0"}`},
		{"no output", "true", "", "", `{"exited":true,"status":"exit status 0"}`},
		{"unicode", `printf 'héllo ✓\n'`, "héllo ✓\n", "", `{"exited":true,"status":"exit status 0"}`},
		{"killed by a signal", `kill -KILL $$`, "", "", `{"error":"signal: killed","exitCode":-1,"status":"signal: killed"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.do(e.startRequest(startMsg(tc.cmd)))
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
				t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			s := collect(t, readFrames(t, body))
			if s.stdout != tc.stdout || s.stderr != tc.stderr {
				t.Fatalf("stdout %q stderr %q, want %q %q", s.stdout, s.stderr, tc.stdout, tc.stderr)
			}
			end, _ := json.Marshal(s.end)
			if string(end) != tc.end {
				t.Fatalf("end %s, want %s", end, tc.end)
			}
			if len(s.eos) != 0 {
				t.Fatalf("end-stream %v, want {}", s.eos)
			}
			if s.pid <= 0 {
				t.Fatalf("pid %v", s.pid)
			}
			if o := e.waitOutcome(); o.Code != "" || o.Operation != OpProcessStart || o.ClusterID != "cluster-a" || o.CredentialID != "cred-a" {
				t.Fatalf("outcome %+v", o)
			}
		})
	}
}

// TestProcessStartRequestShapes: the command line, quoting, envs, cwd and
// user reach execd as the SDK asked; Python's pretty-printed JSON works.
func TestProcessStartRequestShapes(t *testing.T) {
	e := newTestEnv(t, func(c *Config, _ *execdstub.Config) { c.HomeDir = "/home/user" })
	if err := os.MkdirAll(e.hostPath("/root/work dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	python := "{\n  \"process\": {\n    \"cmd\": \"/bin/bash\",\n    \"args\": [\n      \"-l\",\n      \"-c\",\n      \"printf '%s|' \\\"$A\\\" \\\"$(basename \\\"$PWD\\\")\\\" \\\"it's\\\"\"\n    ],\n    \"envs\": {\n      \"A\": \"x y\"\n    },\n    \"cwd\": \"work dir\"\n  },\n  \"stdin\": false\n}"
	req := e.startRequest(python)
	req.Header.Set("Authorization", "Basic cm9vdDo=") // root:
	_, body := e.do(req)
	s := collect(t, readFrames(t, body))
	if s.stdout != "x y|work dir|it's|" {
		t.Fatalf("stdout %q stderr %q end %v eos %v", s.stdout, s.stderr, s.end, s.eos)
	}
	cmds := e.execd.Commands()
	if len(cmds) != 1 {
		t.Fatalf("commands %+v", cmds)
	}
	got := cmds[0].Request
	if got.Cwd != "/root/work dir" || got.Envs["A"] != "x y" || got.Uid == nil || *got.Uid != 0 || got.Gid == nil || *got.Gid != 0 {
		t.Fatalf("execd request %+v", got)
	}
	if !strings.HasPrefix(got.Command, `{ '/bin/bash' '-l' '-c' 'printf '\''%s|'\''`) {
		t.Fatalf("command %q", got.Command)
	}
	if got.TimeoutMs != 0 {
		t.Fatalf("timeout %d without Connect-Timeout-Ms", got.TimeoutMs)
	}
}

// TestProcessStartBadRequests: every malformed Start call is refused with
// invalid_argument (or unimplemented for PTY) in an end-stream frame before
// any command runs.
func TestProcessStartBadRequests(t *testing.T) {
	e := newTestEnv(t)
	good := []byte(startMsg("echo hi"))
	cases := []struct {
		name   string
		body   []byte
		mutate func(*http.Request)
		code   string
		sg     Code
	}{
		{"compressed flag", envelope(connect.FlagCompressed, good), nil, "invalid_argument", CodeBadRequest},
		{"end-stream flag", envelope(connect.FlagEndStream, good), nil, "invalid_argument", CodeBadRequest},
		{"undefined flag 0x80", envelope(0x80, good), nil, "invalid_argument", CodeBadRequest},
		{"undefined flags 0x30", envelope(0x30, good), nil, "invalid_argument", CodeBadRequest},
		{"undefined flag 0x04", envelope(0x04, good), nil, "invalid_argument", CodeBadRequest},
		{"truncated envelope", envelope(0, good)[:20], nil, "invalid_argument", CodeBadRequest},
		{"empty body", nil, nil, "invalid_argument", CodeBadRequest},
		{"two envelopes", append(envelope(0, good), envelope(0, good)...), nil, "invalid_argument", CodeBadRequest},
		{"declared length over the limit", []byte{0, 0x7f, 0xff, 0xff, 0xff}, nil, "invalid_argument", CodeBadRequest},
		{"not JSON", envelope(0, []byte("{nope")), nil, "invalid_argument", CodeBadRequest},
		{"no process", envelope(0, []byte(`{"stdin":false}`)), nil, "invalid_argument", CodeBadRequest},
		{"empty cmd", envelope(0, []byte(`{"process":{"cmd":""}}`)), nil, "invalid_argument", CodeBadRequest},
		{"pty", envelope(0, []byte(`{"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":80,"rows":24}}}`)), nil, "unimplemented", CodeUnsupportedOperation},
		{"unknown user", envelope(0, good), func(r *http.Request) { r.Header.Set("Authorization", "Basic bm9ib2R5Og==") }, "invalid_argument", CodeUserUnknown},
		{"bad basic auth", envelope(0, good), func(r *http.Request) { r.Header.Set("Authorization", "Basic !!!") }, "invalid_argument", CodeBadRequest},
		{"bad timeout header", envelope(0, good), func(r *http.Request) { r.Header.Set("Connect-Timeout-Ms", "12s") }, "invalid_argument", CodeBadRequest},
		{"proto codec", envelope(0, good), func(r *http.Request) { r.Header.Set("Content-Type", "application/connect+proto") }, "invalid_argument", CodeBadRequest},
		{"compressed stream", envelope(0, good), func(r *http.Request) { r.Header.Set("Connect-Content-Encoding", "gzip") }, "invalid_argument", CodeBadRequest},
		{"missing cwd", envelope(0, []byte(`{"process":{"cmd":"true","cwd":"/does/not/exist"}}`)), nil, "invalid_argument", CodeExecdRejected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := e.startRequest("")
			req.Body = io.NopCloser(strings.NewReader(string(tc.body)))
			req.ContentLength = int64(len(tc.body))
			if tc.mutate != nil {
				tc.mutate(req)
			}
			resp, body := e.do(req)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d, want 200 with an end-stream error", resp.StatusCode)
			}
			frames := readFrames(t, body)
			if len(frames) != 1 || frames[0].flags != connect.FlagEndStream {
				t.Fatalf("frames %+v, want one end-stream frame", frames)
			}
			errObj, _ := frames[0].json["error"].(map[string]any)
			if errObj["code"] != tc.code || !strings.HasPrefix(errObj["message"].(string), string(tc.sg)+": ") {
				t.Fatalf("end-stream %s", frames[0].raw)
			}
		})
	}
	if n := len(e.execd.Commands()); n != 0 {
		t.Fatalf("%d commands ran for refused requests", n)
	}
}

// TestProcessStartTimeout: Connect-Timeout-Ms is the command's lifetime, as
// in envd: the stream ends with deadline_exceeded and execd, given the same
// timeout, kills the command (SIGKILL) at that deadline.
func TestProcessStartTimeout(t *testing.T) {
	e := newTestEnv(t)
	req := e.startRequest(startMsg("echo begun; sleep 30"))
	req.Header.Set("Connect-Timeout-Ms", "300")
	_, body := e.do(req)
	frames := readFrames(t, body)
	s := collect(t, frames)
	// How much output arrives before the deadline depends on execd's
	// polling and the machine's load; whatever arrived is exact.
	if !strings.HasPrefix("begun\n", s.stdout) {
		t.Fatalf("stdout %q", s.stdout)
	}
	errObj, _ := s.eos["error"].(map[string]any)
	if errObj["code"] != "deadline_exceeded" || s.end != nil {
		t.Fatalf("end %v end-stream %v", s.end, s.eos)
	}
	rec, err := waitEnded(e, func(r execdstub.CommandRecord) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if rec.Interrupted || rec.Signal != syscall.SIGKILL || rec.Request.TimeoutMs != 300 {
		t.Fatalf("record %+v, want execd's own timeout (300 ms, SIGKILL)", rec)
	}
}

func waitEnded(e *testEnv, pred func(execdstub.CommandRecord) bool) (execdstub.CommandRecord, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return e.execd.WaitCommand(ctx, func(r execdstub.CommandRecord) bool { return !r.Running && pred(r) })
}

// TestProcessStartKeepalive: with no output, keepalive frames arrive every
// Keepalive-Ping-Interval seconds. The command waits until the test has
// seen one.
func TestProcessStartKeepalive(t *testing.T) {
	e := newTestEnv(t)
	gate := filepath.Join(t.TempDir(), "go")
	req := e.startRequest(startMsg("while [ ! -f '" + gate + "' ]; do sleep 0.05; done; echo done"))
	req.Header.Set("Keepalive-Ping-Interval", "1")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var kinds []string
	for {
		f, err := readFrame(t, r)
		if err != nil {
			t.Fatalf("stream ended early: %v (saw %v)", err, kinds)
		}
		if f.flags == connect.FlagEndStream {
			break
		}
		ev := f.json["event"].(map[string]any)
		for k := range ev {
			kinds = append(kinds, k)
			if k == "keepalive" {
				if err := os.WriteFile(gate, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if len(kinds) < 4 || kinds[0] != "start" || kinds[1] != "keepalive" || kinds[len(kinds)-1] != "end" {
		t.Fatalf("events %v", kinds)
	}
}

// TestProcessStartOutlivesClient: a command's lifetime does not depend on
// its stream (envd keeps a process whose client went away): the gateway
// ends the stream and leaves the command running in execd, as execd's
// status API shows, until it ends by itself.
func TestProcessStartOutlivesClient(t *testing.T) {
	e := newTestEnv(t)
	gate := filepath.Join(t.TempDir(), "go")
	done := filepath.Join(t.TempDir(), "done")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := e.startRequest(startMsg("echo started; while [ ! -f '" + gate + "' ]; do sleep 0.05; done; echo finished > '" + done + "'")).WithContext(ctx)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
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
	cancel()
	resp.Body.Close()
	if o := e.waitOutcome(); o.Code != CodeCanceled {
		t.Fatalf("outcome %+v", o)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer wcancel()
	rec, err := e.execd.WaitCommand(wctx, func(r execdstub.CommandRecord) bool { return r.ClientDisconnected })
	if err != nil {
		t.Fatalf("execd never saw the stream go: %v", err)
	}
	// The gateway's request is finished (its outcome is in): had it
	// interrupted the command, it would have done so by now.
	if rec, _ = e.execd.Command(rec.ID); !rec.Running || rec.Interrupted {
		t.Fatalf("the command did not outlive its stream: %+v", rec)
	}
	st, err := newClient().CommandStatus(wctx, execd.Target{FixedEntry: e.fixedEntryURL(), SandboxID: testSandbox}, rec.ID, execd.StatusLimit(len(rec.Request.Command)))
	if err != nil || !st.Running || st.ExitCode != nil {
		t.Fatalf("execd status %+v, %v; want running", st, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err = waitEnded(e, func(r execdstub.CommandRecord) bool { return r.ID == rec.ID })
	if err != nil {
		t.Fatal(err)
	}
	if rec.ExitCode != 0 || rec.Interrupted {
		t.Fatalf("record %+v, want a clean exit", rec)
	}
	if b, err := os.ReadFile(done); err != nil || string(b) != "finished\n" {
		t.Fatalf("the command did not run to its end: %q %v", b, err)
	}
}

// TestProcessStartExecdFailsMidStream: when the fixed entry goes away
// after start, the stream still ends with an end-stream error, never a bare
// EOF (the JS SDK would report "missing EndStreamResponse").
func TestProcessStartExecdFailsMidStream(t *testing.T) {
	e := newTestEnv(t)
	gate := filepath.Join(t.TempDir(), "go")
	req := e.startRequest(startMsg("echo up; while [ ! -f '" + gate + "' ]; do sleep 0.05; done"))
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		f, err := readFrame(t, r)
		if err != nil {
			t.Fatal(err)
		}
		if ev, _ := f.json["event"].(map[string]any); ev["data"] != nil {
			break
		}
	}
	e.execd.Close() // kills the command and the stream mid-way
	var last frame
	for {
		f, err := readFrame(t, r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = f
	}
	if last.flags != connect.FlagEndStream {
		t.Fatalf("last frame %+v", last)
	}
	_ = os.WriteFile(gate, nil, 0o644)
}

// TestProcessStartLineDelivered: a line reaches the SDK with its
// terminator as soon as execd reports it, while the command still runs
// (envd sends "start\n" as one chunk); the command prints its second line
// only after the test has seen the first one whole.
func TestProcessStartLineDelivered(t *testing.T) {
	e := newTestEnv(t)
	gate := filepath.Join(t.TempDir(), "go")
	req := e.startRequest(startMsg("echo start; while [ ! -f '" + gate + "' ]; do sleep 0.05; done; printf 'end'"))
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var chunks []string
	for {
		f, err := readFrame(t, r)
		if err != nil {
			t.Fatalf("stream ended early: %v (chunks %q)", err, chunks)
		}
		if f.flags == connect.FlagEndStream {
			break
		}
		ev := f.json["event"].(map[string]any)
		d, _ := ev["data"].(map[string]any)
		if d == nil {
			continue
		}
		b, _ := base64.StdEncoding.DecodeString(d["stdout"].(string))
		chunks = append(chunks, string(b))
		if len(chunks) == 1 {
			if chunks[0] != "start\n" {
				t.Fatalf("first chunk %q, want \"start\\n\" while the command waits", chunks[0])
			}
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The last line has no newline and comes back without one.
	if strings.Join(chunks, "") != "start\nend" || len(chunks) != 2 {
		t.Fatalf("chunks %q, want [\"start\\n\" \"end\"]", chunks)
	}
}

// TestProcessStartUserEnvironment: a command run as a mapped user gets
// envd's HOME (the user's home), USER and LOGNAME (its name), in both
// modes, and the request's envs win over them; a command without a user
// (execd's own identity) gets none of them from the gateway.
func TestProcessStartUserEnvironment(t *testing.T) {
	const show = `printf '%s|' "$HOME" "$USER" "$LOGNAME"`
	withEnvs := func(envs map[string]string) string {
		b, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", show}, "envs": envs}})
		return string(b)
	}
	for _, mode := range []struct {
		name string
		opts []envOption
	}{{"six-operation", nil}, {"extended_operations", []envOption{extended}}} {
		t.Run(mode.name, func(t *testing.T) {
			e := newTestEnv(t, mode.opts...)
			run := func(msg, user string) (string, map[string]string) {
				t.Helper()
				before := len(e.execd.Commands())
				req := e.startRequest(msg)
				if user != "" {
					req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
				}
				_, body := e.do(req)
				s := collect(t, readFrames(t, body))
				var envs map[string]string
				for _, c := range e.execd.Commands()[before:] {
					if strings.Contains(c.Request.Command, "printf") {
						envs = c.Request.Envs
					}
				}
				return s.stdout, envs
			}
			if out, _ := run(startMsg(show), "root"); out != "/root|root|root|" {
				t.Errorf("as root: %q, want /root|root|root|", out)
			}
			if out, _ := run(withEnvs(map[string]string{"HOME": "/elsewhere", "USER": "me"}), "root"); out != "/elsewhere|me|root|" {
				t.Errorf("as root with HOME and USER asked for: %q, want /elsewhere|me|root|", out)
			}
			_, envs := run(withEnvs(map[string]string{"A": "b"}), "")
			if len(envs) != 1 || envs["A"] != "b" {
				t.Errorf("without a user execd got envs %v, want only the request's", envs)
			}
		})
	}
}
