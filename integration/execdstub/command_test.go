package execdstub_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/execdstub"
)

// TestAuthAndRouting pins §X1.2 and the routing rows of §X1.3.
func TestAuthAndRouting(t *testing.T) {
	e := newEnv(t, nil)
	unauthorized := `{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}`
	cases := []struct {
		name, method, path string
		hdr                http.Header
		status             int
		body, ctype        string
		location           string
	}{
		{"ping without token", "GET", "/ping", http.Header{"X-No-Token": {"1"}}, 401, unauthorized, "application/json; charset=utf-8", ""},
		{"ping wrong token", "GET", "/ping", http.Header{execdstub.AccessTokenHeader: {"nope"}}, 401, unauthorized, "application/json; charset=utf-8", ""},
		{"ping", "GET", "/ping", nil, 200, "", "", ""},
		{"HEAD ping is not routed", "HEAD", "/ping", nil, 404, "", "text/plain", ""},
		{"unknown route", "GET", "/nope", nil, 404, "404 page not found", "text/plain", ""},
		{"unknown route without token", "GET", "/nope", http.Header{"X-No-Token": {"1"}}, 401, unauthorized, "application/json; charset=utf-8", ""},
		{"wrong method", "POST", "/files/info", nil, 404, "404 page not found", "text/plain", ""},
		{"no /code route", "POST", "/code", nil, 404, "404 page not found", "text/plain", ""},
		{"trailing slash GET redirect before auth", "GET", "/ping/", http.Header{"X-No-Token": {"1"}}, 301, "", "text/html; charset=utf-8", "/ping"},
		{"trailing slash DELETE redirect", "DELETE", "/files/?path=/x", nil, 307, "", "", "/files?path=/x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.do(c.method, c.path, nil, c.hdr)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, c.status, body)
			}
			if c.location != "" {
				if got := resp.Header.Get("Location"); got != c.location {
					t.Errorf("Location %q, want %q", got, c.location)
				}
				return
			}
			if c.method != "HEAD" && string(body) != c.body {
				t.Errorf("body %q, want %q", body, c.body)
			}
			if got := resp.Header.Get("Content-Type"); got != c.ctype {
				t.Errorf("Content-Type %q, want %q", got, c.ctype)
			}
		})
	}

	open := newEnv(t, func(c *execdstub.Config) { c.AccessToken = "" })
	resp, body := open.do("GET", "/ping", nil, nil)
	expectEmpty200(t, resp, body)
	if resp.Header.Get("Content-Length") != "0" {
		t.Errorf("Content-Length %q", resp.Header.Get("Content-Length"))
	}
}

// TestStreamErrorExit pins the §X1.7 transcript of
// `echo hi; echo err >&2; exit 3`: headers, framing, order and contents.
func TestStreamErrorExit(t *testing.T) {
	e := newEnv(t, nil)
	before := time.Now().UnixMilli()
	st := e.run(`{"command":"echo hi; echo err >&2; exit 3"}`)
	for k, want := range map[string]string{
		"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
		"X-Accel-Buffering": "no", "Connection": "keep-alive",
	} {
		if got := st.resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if !slices.Equal(st.resp.TransferEncoding, []string{"chunked"}) {
		t.Errorf("Transfer-Encoding %v, want chunked", st.resp.TransferEncoding)
	}

	var evs []execdstub.Event
	var raws []string
	var terminalAt time.Time
	for {
		ev, raw, ok := st.next()
		if !ok {
			break
		}
		if isTerminal(ev) {
			// The event's own stamp (ms, floored, taken before it was
			// sent), not its receipt: the grace starts at the send, and
			// the receipt can come after part of it has passed.
			terminalAt = time.UnixMilli(ev.Timestamp)
		}
		evs, raws = append(evs, ev), append(raws, raw)
	}
	eofAt := time.Now()
	after := time.Now().UnixMilli()

	want := []string{"init", "ping:pong", "stdout:hi", "stderr:err", "error:CommandExecError/3/exit status 3"}
	if got := summary(evs); !slices.Equal(got, want) {
		t.Fatalf("events %q\nwant   %q", got, want)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(evs[0].Text) {
		t.Errorf("init text %q is not a 32-hex id", evs[0].Text)
	}
	for _, ev := range evs {
		if ev.Timestamp < before || ev.Timestamp > after {
			t.Errorf("timestamp %d outside [%d,%d]", ev.Timestamp, before, after)
		}
	}
	// Field order and omissions as in the transcript.
	initRaw := fmt.Sprintf(`{"type":"init","text":"%s","timestamp":%d}`, evs[0].Text, evs[0].Timestamp)
	errRaw := fmt.Sprintf(`{"type":"error","timestamp":%d,"error":{"ename":"CommandExecError","evalue":"3","traceback":["exit status 3"]}}`, evs[4].Timestamp)
	if raws[0] != initRaw || raws[4] != errRaw {
		t.Errorf("raw events:\n%s\n%s\nwant\n%s\n%s", raws[0], raws[4], initRaw, errRaw)
	}
	if gap := eofAt.Sub(terminalAt); gap < e.cfg.GracefulShutdown {
		t.Errorf("stream closed %v after the terminal event, want >= GracefulShutdown %v", gap, e.cfg.GracefulShutdown)
	}

	rec, ok := e.s.Command(evs[0].Text)
	if !ok || rec.Running || rec.ExitCode != 3 || rec.Err != "exit status 3" || rec.Signal != 0 {
		t.Errorf("record %+v", rec)
	}
	if rec.Request.Command != "echo hi; echo err >&2; exit 3" || rec.Dir != e.root {
		t.Errorf("record request %+v dir %q", rec.Request, rec.Dir)
	}
}

// TestStreamLines pins the line splitting of §X1.4 (and of the execd tailer
// for \r\n): terminators, empty lines, partial lines, envs and cwd.
func TestStreamLines(t *testing.T) {
	e := newEnv(t, nil)
	if err := os.MkdirAll(e.host("ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		req  map[string]any
		want []string
	}{
		{"transcript envs cwd printf", map[string]any{
			"command": `echo $FOO; pwd; printf "a\n\nb"`, "cwd": "/ws", "envs": map[string]string{"FOO": "bar"},
		}, []string{"stdout:bar", "stdout:" + e.host("ws"), "stdout:a", "stdout:\n", "stdout:b"}},
		{"CRLF and CR end lines", map[string]any{"command": `printf 'x\r\ny\rz\n'`},
			[]string{"stdout:x", "stdout:y", "stdout:z"}},
		{"CR CR LF", map[string]any{"command": `printf 'a\r\r\nb'`},
			[]string{"stdout:a", "stdout:\n", "stdout:b"}},
		{"leading blank line", map[string]any{"command": `printf '\nq\n'`},
			[]string{"stdout:\n", "stdout:q"}},
		{"partial line across polls", map[string]any{"command": `printf p1; sleep 0.05; printf 'p2\n'`},
			[]string{"stdout:p1p2"}},
		{"CRLF straddling polls", map[string]any{"command": `printf 'a\r'; sleep 0.05; printf '\nb'`},
			[]string{"stdout:a", "stdout:b"}},
		{"no output", map[string]any{"command": "true"}, nil},
		{"relative cwd is under sandbox root", map[string]any{"command": "pwd", "cwd": "ws"},
			[]string{"stdout:" + e.host("ws")}},
		{"stderr lines", map[string]any{"command": `echo e1 >&2; printf 'e2' >&2`},
			[]string{"stderr:e1", "stderr:e2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := e.run(mustJSON(c.req)).all()
			want := append(append([]string{"init", "ping:pong"}, c.want...), "execution_complete")
			if got := summary(evs); !slices.Equal(got, want) {
				t.Fatalf("events %q\nwant   %q", got, want)
			}
			last := evs[len(evs)-1]
			if last.Error != nil || last.ExecutionTime < 0 {
				t.Errorf("terminal %+v", last)
			}
		})
	}
}

// TestTimeout pins §X1.7: a timeout SIGKILLs, evalue -1, "signal: killed".
func TestTimeout(t *testing.T) {
	e := newEnv(t, nil)
	evs := e.run(`{"command":"echo start; sleep 30","timeout":300}`).all()
	want := []string{"init", "ping:pong", "stdout:start", "error:CommandExecError/-1/signal: killed"}
	if got := summary(evs); !slices.Equal(got, want) {
		t.Fatalf("events %q\nwant   %q", got, want)
	}
	rec, _ := e.s.Command(evs[0].Text)
	if rec.Signal != syscall.SIGKILL || rec.ExitCode != -1 || rec.Request.TimeoutMs != 300 {
		t.Errorf("record %+v", rec)
	}
}

// TestInterrupt pins DELETE /command (§X1.3, §X1.7) and the choices for ids
// that are missing, unknown or finished (execd source).
func TestInterrupt(t *testing.T) {
	e := newEnv(t, nil)
	st := e.run(`{"command":"echo start; sleep 30"}`)
	evs := st.until(func(ev execdstub.Event) bool { return ev.Type == "stdout" })
	id := evs[0].Text

	resp, body := e.do("DELETE", "/command?id="+id, nil, nil)
	expectEmpty200(t, resp, body)
	rest := st.all()
	want := []string{"error:CommandExecError/-1/signal: terminated"}
	if got := summary(append([]execdstub.Event{{Type: "x"}}, rest...))[1:]; !slices.Equal(got, want) {
		t.Fatalf("after DELETE: %q, want %q", got, want)
	}
	rec, _ := e.s.Command(id)
	if !rec.Interrupted || rec.Signal != syscall.SIGTERM || rec.ExitCode != -1 || rec.Running {
		t.Errorf("record %+v", rec)
	}

	resp, body = e.do("DELETE", "/command?id="+id, nil, nil)
	expectJSONError(t, resp, body, 500, "RUNTIME_ERROR", "error interruptting code context. command session "+id+" is not running")
	resp, body = e.do("DELETE", "/command?id=0123456789abcdef0123456789abcdef", nil, nil)
	expectJSONError(t, resp, body, 500, "RUNTIME_ERROR", "error interruptting code context. no such session")
	resp, body = e.do("DELETE", "/command", nil, nil)
	expectJSONError(t, resp, body, 400, "MISSING_QUERY", "missing query parameter 'id'")
}

// TestInterruptEscalates: a group that ignores SIGTERM gets SIGKILL after
// KillGrace (§X1.3 "SIGKILL after 3s").
func TestInterruptEscalates(t *testing.T) {
	grace := 200 * time.Millisecond
	e := newEnv(t, func(c *execdstub.Config) { c.KillGrace = grace })
	st := e.run(`{"command":"trap '' TERM; echo start; sleep 30"}`)
	id := st.until(func(ev execdstub.Event) bool { return ev.Type == "stdout" })[0].Text
	began := time.Now()
	resp, body := e.do("DELETE", "/command?id="+id, nil, nil)
	expectEmpty200(t, resp, body)
	if took := time.Since(began); took < grace {
		t.Errorf("DELETE answered after %v, before KillGrace %v", took, grace)
	}
	last := st.all()
	if got := summary(append([]execdstub.Event{{Type: "x"}}, last...))[1:]; !slices.Equal(got, []string{"error:CommandExecError/-1/signal: killed"}) {
		t.Fatalf("after DELETE: %q", got)
	}
}

// TestClientDisconnectDoesNotKill pins §X1.4: the command survives the
// client going away (measured on the real execd with `sleep 2; touch marker`, docs/wire-facts.md §X1.4).
func TestClientDisconnectDoesNotKill(t *testing.T) {
	e := newEnv(t, nil)
	gate := e.mkfifo("gate")
	st := e.run(`{"command":"echo go; cat gate >/dev/null; touch marker"}`)
	id := st.until(func(ev execdstub.Event) bool { return ev.Type == "stdout" })[0].Text
	st.cancel()

	rec, err := e.s.WaitCommand(ctxLimit(t), func(r execdstub.CommandRecord) bool {
		return r.ID == id && r.ClientDisconnected
	})
	if err != nil {
		t.Fatalf("server never saw the disconnect: %v", err)
	}
	if !rec.Running {
		t.Fatal("command ended before it was released")
	}
	openFIFO(t, gate, true)
	waitDone(t, rec)
	rec, _ = e.s.Command(id)
	if rec.ExitCode != 0 || rec.Err != "" || rec.Signal != 0 {
		t.Errorf("record %+v", rec)
	}
	if _, err := os.Stat(e.host("marker")); err != nil {
		t.Errorf("marker not created after disconnect: %v", err)
	}
}

// TestPeriodicPings: pings follow init at once and then every
// PingInterval while the command runs (§X1.4).
func TestPeriodicPings(t *testing.T) {
	e := newEnv(t, func(c *execdstub.Config) { c.PingInterval = 20 * time.Millisecond })
	gate := e.mkfifo("gate")
	st := e.run(`{"command":"cat gate >/dev/null; echo done"}`)
	pings := 0
	evs := st.until(func(ev execdstub.Event) bool {
		if ev.Type == "ping" {
			pings++
		}
		return pings == 3
	})
	if evs[0].Type != "init" || evs[1].Type != "ping" || evs[1].Text != "pong" {
		t.Fatalf("stream starts %+v", evs[:2])
	}
	openFIFO(t, gate, true)
	rest := st.all()
	var got []string
	for _, ev := range rest {
		if ev.Type != "ping" {
			got = append(got, ev.Type+":"+ev.Text)
		}
	}
	if !slices.Equal(got, []string{"stdout:done", "execution_complete:"}) {
		t.Errorf("after release %q", got)
	}
}

// TestBackground pins §X1.4 background mode, status and logs.
func TestBackground(t *testing.T) {
	e := newEnv(t, nil)
	sync1 := e.mkfifo("sync1")
	gate := e.mkfifo("gate")
	const cmd = "echo bg1; echo x > sync1; cat gate >/dev/null; echo bg2; exit 4"
	evs := e.run(mustJSON(map[string]any{"command": cmd, "background": true})).all()
	if got := summary(evs); !slices.Equal(got, []string{"init", "ping:pong", "execution_complete"}) {
		t.Fatalf("events %q", got)
	}
	id := evs[0].Text
	openFIFO(t, sync1, false) // bg1 has been written

	resp, body := e.do("GET", "/command/status/"+id, nil, nil)
	var status map[string]any
	if err := json.Unmarshal(body, &status); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	if status["running"] != true || status["content"] != cmd || status["id"] != id {
		t.Errorf("running status %s", body)
	}
	for _, k := range []string{"exit_code", "error", "finished_at"} {
		if _, ok := status[k]; ok {
			t.Errorf("running status has %q: %s", k, body)
		}
	}
	resp, body = e.do("GET", "/command/"+id+"/logs?cursor=0", nil, nil)
	if string(body) != "bg1\n" || resp.Header.Get(execdstub.TailCursorHeader) != "4" {
		t.Errorf("logs while running %q cursor %q", body, resp.Header.Get(execdstub.TailCursorHeader))
	}

	openFIFO(t, gate, true)
	rec, _ := e.s.Command(id)
	waitDone(t, rec)

	_, body = e.do("GET", "/command/status/"+id, nil, nil)
	status = nil
	_ = json.Unmarshal(body, &status)
	if status["running"] != false || status["exit_code"] != float64(4) || status["error"] != "exit status 4" {
		t.Errorf("final status %s", body)
	}
	for _, k := range []string{"started_at", "finished_at"} {
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(status[k])); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	for _, c := range []struct{ cursor, body, next string }{
		{"0", "bg1\nbg2\n", "8"}, {"1", "g1\nbg2\n", "8"}, {"100", "", "100"}, {"abc", "bg1\nbg2\n", "8"},
	} {
		resp, body := e.do("GET", "/command/"+id+"/logs?cursor="+c.cursor, nil, nil)
		if resp.StatusCode != 200 || string(body) != c.body || resp.Header.Get(execdstub.TailCursorHeader) != c.next ||
			resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("cursor %s: %d %q %v", c.cursor, resp.StatusCode, body, resp.Header)
		}
	}

	fg := e.run(`{"command":"true"}`).all()[0].Text
	resp, body = e.do("GET", "/command/"+fg+"/logs", nil, nil)
	expectJSONError(t, resp, body, 400, "INVALID_REQUEST_BODY", "command "+fg+" is not running in background")
	resp, body = e.do("GET", "/command/nosuch/logs", nil, nil)
	expectJSONError(t, resp, body, 400, "INVALID_REQUEST_BODY", "command not found: nosuch")
	resp, body = e.do("GET", "/command/status/nosuch", nil, nil)
	expectJSONError(t, resp, body, 404, "INVALID_REQUEST_BODY", "command not found: nosuch")
}

// TestBackgroundInterrupt: a killed background command reports exit_code
// -1 (§X1.4).
func TestBackgroundInterrupt(t *testing.T) {
	e := newEnv(t, nil)
	id := e.run(`{"command":"sleep 30","background":true}`).all()[0].Text
	resp, body := e.do("DELETE", "/command?id="+id, nil, nil)
	expectEmpty200(t, resp, body)
	rec, _ := e.s.Command(id)
	waitDone(t, rec)
	_, body = e.do("GET", "/command/status/"+id, nil, nil)
	var status map[string]any
	_ = json.Unmarshal(body, &status)
	if status["exit_code"] != float64(-1) || status["error"] != "signal: terminated" {
		t.Errorf("status %s", body)
	}
}

// TestValidation pins the 400 INVALID_REQUEST_BODY answers sent before any
// stream (§X1.4, §X1.7); no command is started.
func TestValidation(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		e := newEnv(t, func(c *execdstub.Config) { c.Version = version })
		if err := os.WriteFile(e.host("afile"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		missingCwd := "invalid request, validation error working directory does not exist: /nonexistent: stat /nonexistent: no such file or directory"
		if version == execdstub.Version1018 {
			missingCwd = "invalid request, validation error working directory does not exist: /nonexistent"
		}
		cases := []struct{ name, body, msg string }{
			{"missing cwd", `{"command":"true","cwd":"/nonexistent"}`, missingCwd},
			{"cwd is a file", `{"command":"true","cwd":"/afile"}`, "invalid request, validation error working directory path is not a directory: /afile"},
			{"no command", `{"cwd":"/"}`, "invalid request, validation error Key: 'RunCommandRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag"},
			{"negative timeout", `{"command":"true","timeout":-5}`, "invalid request, validation error Key: 'RunCommandRequest.TimeoutMs' Error:Field validation for 'TimeoutMs' failed on the 'gte' tag"},
			{"gid without uid", `{"command":"true","gid":0}`, "invalid request, validation error uid is required when gid is provided"},
			{"truncated JSON", `{"command":`, "error parsing request, MAYBE invalid body format. unexpected EOF"},
			{"empty body", ``, "error parsing request, MAYBE invalid body format. EOF"},
			{"wrong type", `{"command":"true","timeout":"1"}`, "error parsing request, MAYBE invalid body format. json: cannot unmarshal string into Go struct field RunCommandRequest.timeout of type int64"},
		}
		for _, c := range cases {
			t.Run(version+"/"+c.name, func(t *testing.T) {
				resp, body := e.do("POST", "/command", strings.NewReader(c.body), nil)
				expectJSONError(t, resp, body, 400, "INVALID_REQUEST_BODY", c.msg)
			})
		}
		if n := len(e.s.Commands()); n != 0 {
			t.Errorf("%s: %d commands started by invalid requests", version, n)
		}
	}
}

// TestCredentials: uid/gid go to SysProcAttr.Credential (§X1.4). A
// command that cannot start (here: the user may not enter the working
// directory, or the stub may not switch user) streams init and then an
// error event whose evalue is the start error; execd keeps no record of it,
// so DELETE says "no such session" and status is 404.
func TestCredentials(t *testing.T) {
	e := newEnv(t, nil)
	// t.TempDir directories are 0700: user 65534 cannot chdir into Root.
	evs := e.run(`{"command":"id -u","uid":65534}`).all()
	if len(evs) != 3 || evs[0].Type != "init" || evs[1].Type != "ping" || evs[2].Type != "error" ||
		evs[2].Error.EName != "CommandExecError" || !strings.HasPrefix(evs[2].Error.EValue, "fork/exec ") ||
		!slices.Equal(evs[2].Error.Traceback, []string{evs[2].Error.EValue}) {
		t.Fatalf("start failure: %+v", evs)
	}
	id := evs[0].Text
	resp, body := e.do("DELETE", "/command?id="+id, nil, nil)
	expectJSONError(t, resp, body, 500, "RUNTIME_ERROR", "error interruptting code context. no such session")
	resp, body = e.do("GET", "/command/status/"+id, nil, nil)
	expectJSONError(t, resp, body, 404, "INVALID_REQUEST_BODY", "command not found: "+id)
	if rec, ok := e.s.Command(id); !ok || rec.StartErr != evs[2].Error.EValue || rec.Running {
		t.Errorf("record %+v", rec)
	}

	if os.Getuid() != 0 {
		if !strings.Contains(evs[2].Error.EValue, "operation not permitted") {
			t.Errorf("unprivileged stub: start error %q", evs[2].Error.EValue)
		}
		return
	}
	for _, d := range []string{e.root, filepath.Dir(e.root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	evs = e.run(`{"command":"id -u; id -g","uid":65534,"gid":4242}`).all()
	want := []string{"init", "ping:pong", "stdout:65534", "stdout:4242", "execution_complete"}
	if got := summary(evs); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	// Without gid the primary group comes from the user database.
	if u, err := user.LookupId("65534"); err == nil {
		evs = e.run(`{"command":"id -g","uid":65534}`).all()
		if got := summary(evs); !slices.Equal(got, []string{"init", "ping:pong", "stdout:" + u.Gid, "execution_complete"}) {
			t.Errorf("primary gid: %q, want %s", got, u.Gid)
		}
	}
}

// TestCloseKillsCommands: Close SIGKILLs what still runs.
func TestCloseKillsCommands(t *testing.T) {
	e := newEnv(t, nil)
	id := e.run(`{"command":"sleep 30","background":true}`).all()[0].Text
	e.s.Close()
	rec, _ := e.s.Command(id)
	waitDone(t, rec)
	if rec, _ = e.s.Command(id); rec.Signal != syscall.SIGKILL {
		t.Errorf("record %+v", rec)
	}
	e.s.Close() // idempotent

}
