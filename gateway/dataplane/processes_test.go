package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
)

func extended(c *Config, _ *execdstub.Config) { c.ExtendedOperations = true }

// processCall sends a Process unary call.
func (e *testEnv) processCall(method, msg string) (*http.Response, []byte) {
	e.t.Helper()
	req := e.request(http.MethodPost, "/process.Process/"+method, strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	return e.do(req)
}

// openStream starts a Process stream call and returns a frame reader.
func (e *testEnv) openStream(ctx context.Context, method, msg string, hdr map[string]string) (*http.Response, *bufio.Reader) {
	e.t.Helper()
	return e.openStreamAt(ctx, "/process.Process/"+method, msg, hdr)
}

// openStreamAt starts the server-stream call at route with message msg and
// headers hdr, and returns a frame reader.
func (e *testEnv) openStreamAt(ctx context.Context, route, msg string, hdr map[string]string) (*http.Response, *bufio.Reader) {
	e.t.Helper()
	req := e.request(http.MethodPost, route, bytes.NewReader(envelope(0, []byte(msg)))).WithContext(ctx)
	req.Header.Set("Content-Type", "application/connect+json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewReader(resp.Body)
}

// nextEvent reads frames until one whose event has kind (start, data, end)
// or the end-stream frame, which it returns with kind "eos".
func nextEvent(t *testing.T, r *bufio.Reader, kinds ...string) (string, map[string]any) {
	t.Helper()
	for {
		f, err := readFrame(t, r)
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		if f.flags == connect.FlagEndStream {
			return "eos", f.json
		}
		ev := f.json["event"].(map[string]any)
		for _, k := range kinds {
			if v, ok := ev[k]; ok {
				return k, v.(map[string]any)
			}
		}
	}
}

func b64(t *testing.T, v any) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(v.(string))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExtendedStart: with extended operations Process/Start runs an execd
// background command whose output files are followed: exact bytes on both
// streams ("\r" and a last line without a newline kept, which execd's line
// events cannot give), envd's end event, and the process's files removed
// once its end was delivered.
func TestExtendedStart(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newTestEnv(t, extended, func(_ *Config, x *execdstub.Config) { x.Version = version })
			cases := []struct {
				cmd, stdout, stderr, end string
			}{
				{`printf 'a\r\nb\n\nc'; printf 'e1\ne2' >&2`, "a\r\nb\n\nc", "e1\ne2", `{"exited":true,"status":"exit status 0"}`},
				{`echo out; exit 3`, "out\n", "", `{"error":"exit status 3","exitCode":3,"exited":true,"status":"exit status 3"}`},
				{`kill -KILL $$`, "", "", `{"error":"signal: killed","exitCode":-1,"status":"signal: killed"}`},
				{`printf '%s' "$PWD|$A"`, "", "", `{"exited":true,"status":"exit status 0"}`},
			}
			for i, c := range cases {
				msg := startMsg(c.cmd)
				if i == 3 {
					if err := os.MkdirAll(e.hostPath("/home/user/w d"), 0o755); err != nil {
						t.Fatal(err)
					}
					msg = `{"process":{"cmd":"/bin/bash","args":["-c",` + mustJSON(c.cmd) + `],"cwd":"w d","envs":{"A":"x y"}}}`
				}
				resp, body := e.do(e.startRequest(msg))
				if resp.StatusCode != 200 {
					t.Fatalf("%q: status %d", c.cmd, resp.StatusCode)
				}
				s := collect(t, readFrames(t, body))
				if i == 3 {
					// The command runs in its directory (on the host: the
					// stand-in has no chroot) with its environment.
					if !strings.HasSuffix(s.stdout, "/home/user/w d|x y") {
						t.Fatalf("pwd|env: %q", s.stdout)
					}
				} else if s.stdout != c.stdout || s.stderr != c.stderr {
					t.Fatalf("%q: stdout %q stderr %q, want %q %q", c.cmd, s.stdout, s.stderr, c.stdout, c.stderr)
				}
				end, _ := json.Marshal(s.end)
				if string(end) != c.end || len(s.eos) != 0 {
					t.Fatalf("%q: end %s eos %v, want %s", c.cmd, end, s.eos, c.end)
				}
			}
			for _, c := range e.execd.Commands() {
				if c.Request.Cwd == "/" && !c.Background && !strings.Contains(c.Request.Command, outputScript) {
					t.Fatalf("a Start ran in the foreground: %+v", c.Request)
				}
			}
			left, _ := filepath.Glob(e.hostPath("/tmp/.sandgate/processes/*"))
			if len(left) != 0 {
				t.Fatalf("process files left after their end was delivered: %v", left)
			}
			// A directory that does not exist is refused before anything runs.
			before := len(e.execd.Commands())
			_, body := e.do(e.startRequest(`{"process":{"cmd":"true","cwd":"/nope"}}`))
			if fr := readFrames(t, body); len(fr) != 1 || !strings.Contains(fr[0].raw, "EXECD_REJECTED: working directory does not exist") {
				t.Fatalf("missing cwd: %q", body)
			}
			if len(e.execd.Commands()) != before {
				t.Fatal("a command ran for a missing cwd")
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestExtendedProcessLifecycle: a process started through the gateway
// outlives its stream; List shows it with its config; Connect attaches to
// its output from where it is (nothing earlier replayed); SendSignal ends
// it (execd's DELETE /command) and the Connect stream gets its end; then
// List no longer shows it, a second kill answers not_found, and Connect
// to it gets its retained end.
func TestExtendedProcessLifecycle(t *testing.T) {
	e := newTestEnv(t, extended, func(_ *Config, x *execdstub.Config) { x.KillGrace = 200 * time.Millisecond })
	gate := filepath.Join(t.TempDir(), "go")
	ctx, cancel := context.WithCancel(context.Background())
	_, r := e.openStream(ctx, "Start", `{"process":{"cmd":"/bin/bash","args":["-c","echo before; while [ ! -f '`+gate+`' ]; do sleep 0.05; done; echo after; sleep 60"]},"tag":"srv"}`, nil)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	if _, d := nextEvent(t, r, "data"); b64(t, d["stdout"]) != "before\n" {
		t.Fatalf("first output %v", d)
	}
	cancel() // the client goes away; the process stays
	if o := e.waitOutcome(); o.Code != CodeCanceled {
		t.Fatalf("start outcome %+v", o)
	}

	resp, body := e.processCall("List", `{}`)
	var list struct {
		Processes []struct {
			PID    uint32
			Tag    string
			Config struct{ Cmd string }
		}
	}
	if err := json.Unmarshal(body, &list); err != nil || resp.StatusCode != 200 || len(list.Processes) != 1 ||
		list.Processes[0].PID != pid || list.Processes[0].Tag != "srv" || list.Processes[0].Config.Cmd != "/bin/bash" {
		t.Fatalf("List: %d %s (pid %d)", resp.StatusCode, body, pid)
	}
	e.waitOutcome()

	// Connect from where it is: "before" is not replayed.
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	_, cr := e.openStream(cctx, "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
	if _, s := nextEvent(t, cr, "start"); uint32(s["pid"].(float64)) != pid {
		t.Fatalf("connect start %v", s)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, d := nextEvent(t, cr, "data"); b64(t, d["stdout"]) != "after\n" {
		t.Fatalf("connected output %v", d)
	}

	resp, body = e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid))
	if resp.StatusCode != 200 || string(body) != "{}" {
		t.Fatalf("SendSignal: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	kind, end := nextEvent(t, cr, "end")
	if kind != "end" || end["exitCode"] != -1.0 || !strings.HasPrefix(end["status"].(string), "signal: ") {
		t.Fatalf("connect end %s %v", kind, end)
	}
	if k, eos := nextEvent(t, cr); k != "eos" || len(eos) != 0 {
		t.Fatalf("after end: %s %v", k, eos)
	}
	e.waitOutcome()
	rec, err := waitEnded(e, func(r execdstub.CommandRecord) bool { return r.Background })
	if err != nil || !rec.Interrupted {
		t.Fatalf("execd record %+v %v", rec, err)
	}

	if _, body = e.processCall("List", `{}`); string(body) != `{"processes":[]}` {
		t.Fatalf("List after kill: %s", body)
	}
	e.waitOutcome()
	resp, body = e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGTERM"}`, pid))
	if resp.StatusCode != 404 || !strings.Contains(string(body), `"code":"not_found"`) {
		t.Fatalf("second kill: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
}

// TestExtendedConnectRetainedEnd: Connect to a process that has ended but
// whose record is still there (nobody listed or followed it to its end)
// gets start and its end, as newer envd serves a retained terminal event.
func TestExtendedConnectRetainedEnd(t *testing.T) {
	e := newTestEnv(t, extended)
	ctx, cancel := context.WithCancel(context.Background())
	_, r := e.openStream(ctx, "Start", startMsg("echo hi; exit 7"), nil)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	cancel()
	e.waitOutcome()
	if _, err := waitEnded(e, func(r execdstub.CommandRecord) bool { return r.Background }); err != nil {
		t.Fatal(err)
	}
	_, cr := e.openStream(context.Background(), "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
	nextEvent(t, cr, "start")
	if k, end := nextEvent(t, cr, "data", "end"); k != "end" || end["exitCode"] != 7.0 {
		t.Fatalf("retained end: %s %v", k, end)
	}
}

// TestExtendedProcessErrors: unknown pids, unsupported signals, and the
// input stream no SDK sends.
func TestExtendedProcessErrors(t *testing.T) {
	e := newTestEnv(t, extended)
	for _, c := range []struct {
		method, msg string
		status      int
		connect     string
		code        Code
	}{
		{"SendSignal", `{"process":{"pid":12345},"signal":"SIGNAL_SIGKILL"}`, 404, "not_found", CodeProcessNotFound},
		{"SendSignal", `{"process":{"tag":"none"},"signal":9}`, 404, "not_found", CodeProcessNotFound},
		{"SendSignal", `{"process":{"pid":1},"signal":"SIGNAL_UNSPECIFIED"}`, 501, "unimplemented", CodeUnsupportedOperation},
		{"SendSignal", `{"process":{},"signal":9}`, 400, "invalid_argument", CodeBadRequest},
		{"SendSignal", `{"process":{"pid":1,"tag":"x"},"signal":9}`, 400, "invalid_argument", CodeBadRequest},
		{"SendSignal", `{"process":{"pid":1},"signal":"SIGHUP"}`, 400, "invalid_argument", CodeBadRequest},
		{"SendInput", `{"process":{"pid":1},"input":{"stdin":"YWJj"}}`, 404, "not_found", CodeProcessNotFound},
		{"CloseStdin", `{"process":{"pid":1}}`, 404, "not_found", CodeProcessNotFound},
		{"CloseStdin", `{"process":{}}`, 400, "invalid_argument", CodeBadRequest},
		{"CloseStdin", `{"process":{"pid":1,"tag":"x"}}`, 400, "invalid_argument", CodeBadRequest},
		{"CloseStdin", `[]`, 400, "invalid_argument", CodeBadRequest},
		{"CloseStdin", `{"process":{"pid":1}`, 400, "invalid_argument", CodeBadRequest},
		{"SendInput", `{"process":{"pid":1},"input":{"stdin":"!!"}}`, 400, "invalid_argument", CodeBadRequest},
		{"SendInput", `{"process":{"pid":1}}`, 400, "invalid_argument", CodeBadRequest},
		{"StreamInput", `{}`, 501, "unimplemented", CodeUnsupportedOperation},
		{"List", `[]`, 400, "invalid_argument", CodeBadRequest},
	} {
		resp, body := e.processCall(c.method, c.msg)
		code, msg := "", ""
		var ce struct{ Code, Message string }
		if json.Unmarshal(body, &ce) == nil {
			code, msg = ce.Code, ce.Message
		}
		if resp.StatusCode != c.status || code != c.connect || !strings.HasPrefix(msg, string(c.code)+": ") {
			t.Errorf("%s %s: %d %s", c.method, c.msg, resp.StatusCode, body)
		}
	}
	_, r := e.openStream(context.Background(), "Connect", `{"process":{"pid":4242}}`, nil)
	if k, eos := nextEvent(t, r); k != "eos" || !strings.Contains(mustJSON(eos), `"code":"not_found"`) {
		t.Fatalf("connect to an unknown pid: %s %v", k, eos)
	}
	// A record the sandbox forged or broke names no process of ours.
	e.writeFile("/tmp/.sandgate/processes/77.json", `{"id":"x","pid":78}`)
	if resp, _ := e.processCall("SendSignal", `{"process":{"pid":77},"signal":9}`); resp.StatusCode != 404 {
		t.Fatalf("forged record: %d", resp.StatusCode)
	}
}

// TestExtendedStartTimeout: Connect-Timeout-Ms is the process's lifetime:
// the stream ends with deadline_exceeded and execd, given the same timeout,
// kills the background command.
func TestExtendedStartTimeout(t *testing.T) {
	e := newTestEnv(t, extended)
	req := e.startRequest(`{"process":{"cmd":"/bin/bash","args":["-c","echo begun; sleep 30"]}}`)
	req.Header.Set("Connect-Timeout-Ms", "500")
	_, body := e.do(req)
	s := collect(t, readFrames(t, body))
	if errObj, _ := s.eos["error"].(map[string]any); errObj["code"] != "deadline_exceeded" || s.end != nil {
		t.Fatalf("end %v eos %v", s.end, s.eos)
	}
	rec, err := waitEnded(e, func(r execdstub.CommandRecord) bool { return r.Background })
	if err != nil || rec.Request.TimeoutMs != 500 || rec.Signal != syscall.SIGKILL {
		t.Fatalf("record %+v %v", rec, err)
	}
}

// TestExtendedOff: without extended_operations the extra routes stay
// Connect unimplemented and Start runs in the foreground.
func TestExtendedOff(t *testing.T) {
	e := newTestEnv(t)
	for _, m := range []string{"List", "SendSignal", "SendInput"} {
		resp, body := e.processCall(m, `{}`)
		if resp.StatusCode != 501 || !strings.Contains(string(body), "is not implemented by this gateway") {
			t.Fatalf("%s: %d %s", m, resp.StatusCode, body)
		}
	}
	_, body := e.do(e.startRequest(startMsg("true")))
	collect(t, readFrames(t, body))
	if c := e.execd.Commands(); len(c) != 1 || c[0].Background {
		t.Fatalf("commands %+v", c)
	}
}

// TestExtendedFilesystem: Stat, MakeDir and Move on execd HEAD and v1.0.18,
// with envd's answers and errors.
func TestExtendedFilesystem(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newTestEnv(t, extended, func(_ *Config, x *execdstub.Config) { x.Version = version })
			e.writeFile("/home/user/f.txt", "hello!")
			if err := os.Symlink("f.txt", e.hostPath("/home/user/link")); err != nil {
				t.Fatal(err)
			}
			call := func(method, msg string) (int, map[string]any) {
				req := e.request(http.MethodPost, "/filesystem.Filesystem/"+method, strings.NewReader(msg))
				req.Header.Set("Content-Type", "application/json")
				resp, body := e.do(req)
				var m map[string]any
				if err := json.Unmarshal(body, &m); err != nil {
					t.Fatalf("%s %s: %s", method, msg, body)
				}
				return resp.StatusCode, m
			}
			entry := func(m map[string]any) string {
				ent, _ := m["entry"].(map[string]any)
				if ent["type"] == "FILE_TYPE_DIRECTORY" {
					return fmt.Sprint(ent["name"], " ", ent["type"], " ", ent["path"], " ", ent["permissions"])
				}
				return fmt.Sprint(ent["name"], " ", ent["type"], " ", ent["path"], " ", ent["size"])
			}
			errOf := func(m map[string]any) string {
				return fmt.Sprint(m["code"], " ", strings.SplitN(fmt.Sprint(m["message"]), ":", 2)[0])
			}
			for _, c := range []struct {
				method, msg string
				status      int
				want        string
			}{
				{"Stat", `{"path":"f.txt"}`, 200, "f.txt FILE_TYPE_FILE /home/user/f.txt 6"},
				{"Stat", `{"path":"/home/user"}`, 200, "user FILE_TYPE_DIRECTORY /home/user drwxr-xr-x"},
				{"Stat", `{"path":"/home/user/link"}`, 200, "link FILE_TYPE_FILE /home/user/link " + linkSize(version)},
				{"Stat", `{"path":"/home/user/nope"}`, 404, "not_found FILE_NOT_FOUND"},
				{"MakeDir", `{"path":"/home/user/a/b"}`, 200, "b FILE_TYPE_DIRECTORY /home/user/a/b drwxr-xr-x"},
				{"MakeDir", `{"path":"/home/user/a/b"}`, 409, "already_exists FILE_EXISTS"},
				{"MakeDir", `{"path":"/home/user/f.txt"}`, 400, "invalid_argument NOT_A_DIRECTORY"},
				{"Move", `{"source":"/home/user/f.txt","destination":"/home/user/a/g.txt"}`, 200, "g.txt FILE_TYPE_FILE /home/user/a/g.txt 6"},
				{"Move", `{"source":"/home/user/f.txt","destination":"/home/user/x"}`, 404, "not_found FILE_NOT_FOUND"},
				{"Move", `{"source":"/home/user/a/g.txt","destination":"/home/user/a/b"}`, 409, "already_exists FILE_EXISTS"},
				{"Move", `{"source":"/home/user/a","destination":""}`, 400, "invalid_argument BAD_REQUEST"},
			} {
				status, m := call(c.method, c.msg)
				got := entry(m)
				if status != 200 {
					got = errOf(m)
				}
				if status != c.status || got != c.want {
					t.Errorf("%s %s: %d %q, want %d %q", c.method, c.msg, status, got, c.status, c.want)
				}
			}
			if fi, err := os.Stat(e.hostPath("/home/user/a/b")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
				t.Fatalf("made directory: %v %v", fi, err)
			}
			if b, err := os.ReadFile(e.hostPath("/home/user/a/g.txt")); err != nil || string(b) != "hello!" {
				t.Fatalf("moved file: %q %v", b, err)
			}
			if _, err := os.Lstat(e.hostPath("/home/user/f.txt")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("source after move: %v", err)
			}
		})
	}
}

// linkSize: HEAD's /files/info describes the link itself (its size is
// the length of the target's name, "f.txt"), v1.0.18's follows it to the
// 6-byte file. Both report the target's type, as envd does.
func linkSize(version string) string {
	if version == execdstub.VersionHEAD {
		return "5"
	}
	return "6"
}

// TestExtendedOutputPrivate: a command started for one user has output
// files that another user of the sandbox can neither read nor append to
// (mode 0600, owned by the command's user, in a directory others cannot
// list or write), while the command's own user (and execd, which follows
// them) can. The stand-in runs commands on this machine as the uids asked
// for, so the second user is a real one: uid 1001 through setpriv.
func TestExtendedOutputPrivate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs commands as two users: it needs root (as make test does)")
	}
	e := newTestEnv(t, extended, func(c *Config, _ *execdstub.Config) {
		c.Users["user"] = User{UID: 1000, GID: 1000, Home: "/home/user"}
	})
	// The sandbox root is a 0700 temporary directory: let other users reach it.
	for _, d := range []string{e.root, filepath.Dir(e.root), e.hostPath("/home/user")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(e.hostPath("/home/user"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := e.startRequest(startMsg(`echo secret-of-1000; while [ ! -f gate ]; do sleep 0.05; done`)).WithContext(ctx)
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("user:")))
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	if _, d := nextEvent(t, r, "data"); b64(t, d["stdout"]) != "secret-of-1000\n" {
		t.Fatalf("first output %v", d)
	}

	dir := e.hostPath("/tmp/.sandgate/processes")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("process directory: %v %v, want mode 0711", fi.Mode(), err)
	}
	out := filepath.Join(dir, fmt.Sprint(pid)+".out")
	for _, f := range []string{out, filepath.Join(dir, fmt.Sprint(pid)+".err")} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o600 || st.Uid != 1000 || st.Gid != 1000 {
			t.Fatalf("%s: mode %v owner %d:%d, want 0600 1000:1000", f, fi.Mode().Perm(), st.Uid, st.Gid)
		}
	}
	as := func(uid int, script string, args ...string) error {
		cmd := exec.Command("setpriv", append([]string{"--reuid=" + fmt.Sprint(uid), "--regid=" + fmt.Sprint(uid), "--clear-groups",
			"--", "sh", "-c", script, "sh"}, args...)...)
		return cmd.Run()
	}
	if err := as(1000, `cat -- "$1" >/dev/null`, out); err != nil {
		t.Fatalf("the command's own user cannot read its output: %v", err)
	}
	if as(1001, `cat -- "$1"`, out) == nil {
		t.Fatal("another user read the command's output")
	}
	if as(1001, `echo forged >> "$1"`, out) == nil {
		t.Fatal("another user appended to the command's output")
	}
	if as(1001, `ls -- "$1"`, dir) == nil || as(1001, `: > "$1"/planted`, dir) == nil {
		t.Fatal("another user listed or wrote the process directory")
	}
	if err := os.WriteFile(e.hostPath("/home/user/gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		kind, ev := nextEvent(t, r, "data", "end")
		if kind == "data" {
			t.Fatalf("output the command did not print: %v", ev)
		}
		if kind == "end" {
			break
		}
	}
}

// malformedInitIDs are init texts real execd never sends (its ids are 32
// lowercase hex digits), by shape.
var malformedInitIDs = map[string]string{
	"empty":                  ``,
	"31 digits":              "9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6",
	"65 bytes":               strings.Repeat("a", 65),
	"1 MiB":                  strings.Repeat("a", 1<<20),
	"a UUID with its dashes": "9f1c2e4b-7a6d-4e0f-8b3c-5d2a1e0f7c6b",
	"uppercase":              "9F1C2E4B7A6D4E0F8B3C5D2A1E0F7C6B",
	"a path":                 "../../files/download?path=%2Fetc",
	"a NUL":                  `\u00009f1c2e4b7a6d4e0f8b3c5d2a1e0f7c`,
}

// TestExtendedStartInitID: a background start whose execd stream names
// the command with what is not a command id (each shape of
// malformedInitIDs) is refused with EXECD_PROTOCOL before any start event,
// and leaves no process record or output files. Before, any non-empty text
// became the command's id: written into its record, and put in execd's
// status and interrupt URLs.
func TestExtendedStartInitID(t *testing.T) {
	for name, text := range malformedInitIDs {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, extended)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && r.URL.Path == "/command" {
					b, _ := io.ReadAll(r.Body)
					if bytes.Contains(b, []byte(`"background":true`)) {
						_, _ = io.WriteString(w, `{"type":"init","text":"`+text+`"}`+"\n\n"+`{"type":"execution_complete"}`+"\n\n")
						return
					}
					r.Body = io.NopCloser(bytes.NewReader(b))
				}
				e.execd.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
				Ports: map[int]string{execd.DefaultPort: srv.Listener.Addr().String()}})
			_, body := e.do(e.startRequest(startMsg("sleep 1")))
			fr := readFrames(t, body)
			// An init line over 64 KiB is refused as a line before its
			// text is looked at (errBackgroundLine).
			why := "not a command id"
			if len(text) > execd.LargeLineBytes {
				why = "sent a line over 64 KiB"
			}
			if len(fr) != 1 || fr[0].flags != connect.FlagEndStream || !strings.Contains(fr[0].raw, string(CodeExecdProtocol)) ||
				!strings.Contains(fr[0].raw, why) {
				t.Fatalf("frames %q; want only an end-stream with %s saying %q", body, CodeExecdProtocol, why)
			}
			left, _ := filepath.Glob(e.hostPath("/tmp/.sandgate/processes/*"))
			if len(left) != 0 {
				t.Fatalf("process files left by a refused start: %v", left)
			}
		})
	}
}

// TestExtendedRecordIDNotCommandID: a process record (the sandbox can
// write its directory) whose id is not a command id execd gives names no
// process: selected by pid (SendSignal) or by tag, it is PROCESS_NOT_FOUND,
// and nothing of it reaches execd's interrupt or status routes. Before, a
// record whose pid matched had its id put in DELETE /command?id=.
func TestExtendedRecordIDNotCommandID(t *testing.T) {
	for name, id := range malformedInitIDs {
		if len(id) > 4096 {
			continue // the record's own bound refuses it already
		}
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, extended)
			var asked []string
			var mu sync.Mutex
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/command") {
					mu.Lock()
					asked = append(asked, r.Method+" "+r.URL.String())
					mu.Unlock()
				}
				e.execd.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
				Ports: map[int]string{execd.DefaultPort: srv.Listener.Addr().String()}})
			e.writeFile("/tmp/.sandgate/processes/77.json", `{"id":`+mustJSON(id)+`,"pid":77,"config":{"cmd":"sleep"},"tag":"t"}`)
			for _, msg := range []string{`{"process":{"pid":77},"signal":9}`, `{"process":{"tag":"t"},"signal":9}`} {
				resp, body := e.processCall("SendSignal", msg)
				if resp.StatusCode != 404 || !strings.Contains(string(body), string(CodeProcessNotFound)) {
					t.Fatalf("%s: %d %s; want 404 %s", msg, resp.StatusCode, body, CodeProcessNotFound)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) != 0 {
				t.Fatalf("execd was asked about the record's id: %q", asked)
			}
		})
	}
}

// TestDeferredCleanupsBounded: a tenant that ends many processes cannot
// hold an unbounded number of deferred cleanups (a timer each for 10 s,
// then a goroutine and a request to its sandbox for up to 5 s, none of
// them counted once its Start stream has ended): past its bound (here 2
// for the credential) a Start stream removes its process's files at once,
// as before the grace; before the bound every ended process kept its
// files and its timer. A cleanup that ran gives its place back.
func TestDeferredCleanupsBounded(t *testing.T) {
	e := newTestEnv(t, extended)
	e.handler.cleanupGrace = time.Hour // never ends within the test
	e.handler.shared.cleanups = admission.New(100, 2)
	exists := func(pid uint32) bool {
		_, err := os.Stat(e.hostPath("/tmp/.sandgate/processes/" + strconv.FormatUint(uint64(pid), 10) + ".out"))
		return err == nil
	}
	var pids []uint32
	for range 4 {
		_, r := e.openStream(context.Background(), "Start", startMsg("true"), nil)
		_, start := nextEvent(t, r, "start")
		pids = append(pids, uint32(start["pid"].(float64)))
		if k, end := nextEvent(t, r, "end"); k != "end" || end["exited"] != true {
			t.Fatalf("%s %v, want the end", k, end)
		}
		e.waitOutcome() // the stream's handler has returned, its cleanup done or deferred
	}
	for i, pid := range pids {
		if deferred := i < 2; exists(pid) != deferred {
			t.Errorf("process %d: files there %v, want %v (deferred cleanups bounded at 2)", i, !deferred, deferred)
		}
	}
	if all, cred := e.handler.shared.cleanups.Held("cred-a"); all != 2 || cred != 2 {
		t.Fatalf("%d deferred cleanups held, %d of cred-a; want 2", all, cred)
	}

	// With a grace that has passed, the cleanup runs and its place is free.
	e.handler.shared.cleanups = admission.New(100, 2)
	e.handler.cleanupGrace = time.Nanosecond
	_, r := e.openStream(context.Background(), "Start", startMsg("true"), nil)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	nextEvent(t, r, "end")
	e.waitOutcome()
	e.waitFor("the deferred cleanup to run and give its place back", func() bool {
		all, _ := e.handler.shared.cleanups.Held("cred-a")
		return all == 0 && !exists(pid)
	})
}

// TestExtendedTwoStreamsOneProcess: a process followed by its Start stream
// and a Connect stream gives its output to both, whichever sees its end
// first: the Start stream leaves the process's files for cleanupGrace
// after delivering the end, so the Connect stream still reads what was
// written since its last poll (they were removed at once, and the Connect
// stream then ended with exit 0 and no output). Files removed while a
// stream follows end it with PROCESS_NOT_FOUND, not with a clean end.
func TestExtendedTwoStreamsOneProcess(t *testing.T) {
	e := newTestEnv(t, extended)
	e.handler.cleanupGrace = cleanupGrace
	for i := range 3 {
		gate := filepath.Join(t.TempDir(), "go")
		_, r := e.openStream(context.Background(), "Start", startMsg(`while [ ! -f '`+gate+`' ]; do sleep 0.05; done; echo X`+strconv.Itoa(i)), nil)
		_, start := nextEvent(t, r, "start")
		pid := uint32(start["pid"].(float64))
		_, cr := e.openStream(context.Background(), "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
		nextEvent(t, cr, "start")
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]*bufio.Reader{"Start": r, "Connect": cr} {
			k, d := nextEvent(t, s, "data", "end")
			if k != "data" || b64(t, d["stdout"]) != "X"+strconv.Itoa(i)+"\n" {
				t.Fatalf("round %d, the %s stream: %s %v, want the output", i, name, k, d)
			}
			if k, end := nextEvent(t, s, "end"); k != "end" || end["exited"] != true {
				t.Fatalf("round %d, the %s stream: %s %v, want its end", i, name, k, end)
			}
		}
		e.waitOutcome()
		e.waitOutcome()
	}

	// The files removed under a Connect stream: a stream error. They are
	// removed once the command has written to them: the start event can
	// come before the command's shell opens them (for appending), which
	// would make them again.
	gate := filepath.Join(t.TempDir(), "go")
	_, r := e.openStream(context.Background(), "Start", startMsg(`echo ready; while [ ! -f '`+gate+`' ]; do sleep 0.05; done; echo late`), nil)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	if k, d := nextEvent(t, r, "data"); k != "data" || b64(t, d["stdout"]) != "ready\n" {
		t.Fatalf("the Start stream: %s %v, want the first line", k, d)
	}
	_, cr := e.openStream(context.Background(), "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
	nextEvent(t, cr, "start")
	for _, ext := range []string{".out", ".err"} {
		if err := os.Remove(e.hostPath("/tmp/.sandgate/processes/" + strconv.FormatUint(uint64(pid), 10) + ext)); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range map[string]*bufio.Reader{"Start": r, "Connect": cr} {
		if k, eos := nextEvent(t, s, "end"); k != "eos" || !strings.Contains(mustJSON(eos), "PROCESS_NOT_FOUND") {
			t.Fatalf("the %s stream with its files removed: %s %v, want a PROCESS_NOT_FOUND error", name, k, eos)
		}
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
