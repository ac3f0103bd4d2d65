package dataplane

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/internal/waittest"
)

// ptyShell is the command the PTY tests run: it says ready, then answers
// every line it reads with got:<line>; "exit N" ends it with N.
const ptyShell = `echo ready; while IFS= read -r l; do case $l in exit*) exit ${l#exit };; esac; echo "got:$l"; done`

func ptyStartMsg(cols, rows int) string {
	return `{"process":{"cmd":"/bin/sh","args":["-c",` + mustJSON(ptyShell) + `],"envs":{"TERM":"xterm-256color"}},` +
		fmt.Sprintf(`"pty":{"size":{"cols":%d,"rows":%d}}}`, cols, rows)
}

// ptyOutput reads a PTY stream's data events until their text holds want,
// and returns the text.
func ptyOutput(t *testing.T, r *bufio.Reader, want string) string {
	t.Helper()
	var out strings.Builder
	for !strings.Contains(out.String(), want) {
		kind, ev := nextEvent(t, r, "data", "end")
		if kind != "data" {
			t.Fatalf("%s %v before %q (output so far %q)", kind, ev, want, out.String())
		}
		if _, ok := ev["pty"]; !ok {
			t.Fatalf("a PTY data event without pty: %v", ev)
		}
		out.WriteString(b64(t, ev["pty"]))
	}
	return out.String()
}

func ptyInput(e *testEnv, pid uint32, s string) (*http.Response, []byte) {
	return e.processCall("SendInput", fmt.Sprintf(`{"process":{"pid":%d},"input":{"pty":%q}}`, pid,
		base64.StdEncoding.EncodeToString([]byte(s))))
}

func onlySession(t *testing.T, e *testEnv) string {
	t.Helper()
	ids := e.execd.PTYSessions()
	if len(ids) != 1 {
		t.Fatalf("execd sessions %v, want one", ids)
	}
	return ids[0]
}

// TestPTYLifecycle: Start with a pty runs the command on an execd PTY
// session (the command line and its environment honoured on HEAD through
// POST /pty's command, on v1.0.18 typed into the session's bash) sized as
// asked; the stream carries the terminal's output from the command's
// first byte (nothing of the start script or its echo); SendInput reaches
// the terminal, Update resizes it, List lists the process, SIGKILL ends
// it (execd's DELETE) with envd's killed end, after which the session and
// the record are gone and a second kill is not_found.
func TestPTYLifecycle(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newTestEnv(t, extended, func(_ *Config, x *execdstub.Config) { x.Version = version })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, r := e.openStream(ctx, "Start", ptyStartMsg(100, 30), nil)
			_, start := nextEvent(t, r, "start")
			pid := uint32(start["pid"].(float64))
			if out := ptyOutput(t, r, "ready\n"); out != "ready\n" {
				t.Fatalf("first output %q, want the command's own", out)
			}
			id := onlySession(t, e)
			if c, rw := e.execd.PTYSize(id); c != 100 || rw != 30 {
				t.Fatalf("size %dx%d, want 100x30", c, rw)
			}

			if resp, body := ptyInput(e, pid, "hi\n"); resp.StatusCode != 200 || string(body) != "{}" {
				t.Fatalf("SendInput: %d %s", resp.StatusCode, body)
			}
			e.waitOutcome()
			ptyOutput(t, r, "got:hi\n")

			resp, body := e.processCall("Update", fmt.Sprintf(`{"process":{"pid":%d},"pty":{"size":{"cols":120,"rows":40}}}`, pid))
			if resp.StatusCode != 200 || string(body) != "{}" {
				t.Fatalf("Update: %d %s", resp.StatusCode, body)
			}
			e.waitOutcome()
			// execd handles a connection's frames in order: once the next
			// input was answered, the resize was handled.
			ptyInput(e, pid, "x\n")
			e.waitOutcome()
			ptyOutput(t, r, "got:x\n")
			if c, rw := e.execd.PTYSize(id); c != 120 || rw != 40 {
				t.Fatalf("size after Update %dx%d, want 120x40", c, rw)
			}

			if _, body := e.processCall("List", `{}`); !strings.Contains(string(body), fmt.Sprintf(`"pid":%d`, pid)) ||
				!strings.Contains(string(body), `"cmd":"/bin/sh"`) {
				t.Fatalf("List: %s", body)
			}
			e.waitOutcome()

			resp, body = e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid))
			if resp.StatusCode != 200 {
				t.Fatalf("kill: %d %s", resp.StatusCode, body)
			}
			e.waitOutcome()
			kind, end := nextEvent(t, r, "end")
			if kind != "end" || end["exitCode"] != -1.0 || end["status"] != "signal: killed" {
				t.Fatalf("end %s %v", kind, end)
			}
			if k, eos := nextEvent(t, r); k != "eos" || len(eos) != 0 {
				t.Fatalf("after end: %s %v", k, eos)
			}
			if o := e.waitOutcome(); o.Code != "" {
				t.Fatalf("start outcome %+v", o)
			}
			if ids := e.execd.PTYSessions(); len(ids) != 0 {
				t.Fatalf("sessions left: %v", ids)
			}
			if _, body := e.processCall("List", `{}`); string(body) != `{"processes":[]}` {
				t.Fatalf("List after kill: %s", body)
			}
			e.waitOutcome()
			if resp, body := e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid)); resp.StatusCode != 404 {
				t.Fatalf("second kill: %d %s", resp.StatusCode, body)
			}
			e.waitOutcome()
		})
	}
}

// TestPTYExitAndEnvironment: the shell's exit ends the stream with envd's
// end event (exit status N), in the directory and with the environment
// asked for, and the session is removed.
func TestPTYExitAndEnvironment(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newTestEnv(t, extended, func(_ *Config, x *execdstub.Config) { x.Version = version })
			msg := `{"process":{"cmd":"/bin/bash","args":["-c","printf '%s|%s' \"$A\" \"${PWD##*/}\"; exit 4"],"cwd":"/root","envs":{"A":"x 'y'"}},"pty":{}}`
			resp, body := e.do(e.startRequest(msg))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			var out strings.Builder
			var end map[string]any
			for _, f := range readFrames(t, body) {
				if ev, ok := f.json["event"].(map[string]any); ok {
					if d, ok := ev["data"].(map[string]any); ok {
						out.WriteString(b64(t, d["pty"]))
					}
					if en, ok := ev["end"].(map[string]any); ok {
						end = en
					}
				}
			}
			if out.String() != "x 'y'|root" || end["exitCode"] != 4.0 || end["status"] != "exit status 4" {
				t.Fatalf("output %q end %v", out.String(), end)
			}
			if ids := e.execd.PTYSessions(); len(ids) != 0 {
				t.Fatalf("sessions left: %v", ids)
			}
		})
	}
}

// ptyStartLeft starts a PTY process (80x24) whose client leaves once the
// terminal said "ready": the Start stream ends CANCELED and the shell keeps
// running. It returns the pid.
func ptyStartLeft(t *testing.T, e *testEnv) uint32 {
	t.Helper()
	return ptyStartLeftWith(t, e, nil)
}

// ptyStartReady starts the PTY test shell (ptyStartMsg, 80x24) with the
// Start's headers hdr on ctx and returns its pid and the stream, read up
// to the shell's first line ("ready"): the shell runs.
func ptyStartReady(t *testing.T, e *testEnv, ctx context.Context, hdr map[string]string) (uint32, *bufio.Reader) {
	t.Helper()
	_, r := e.openStream(ctx, "Start", ptyStartMsg(80, 24), hdr)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	ptyOutput(t, r, "ready\n")
	return pid, r
}

// ptyStartLeftWith is ptyStartLeft with the Start's headers hdr.
func ptyStartLeftWith(t *testing.T, e *testEnv, hdr map[string]string) uint32 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pid, _ := ptyStartReady(t, e, ctx, hdr)
	cancel()
	if o := e.waitOutcome(); o.Code != CodeCanceled {
		t.Fatalf("start outcome %+v", o)
	}
	return pid
}

// TestPTYDeadlineKillsBounded: a terminal whose Start stream ended before
// its Connect-Timeout-Ms deadline waits for it with a kill scheduled, and
// those waiting kills are bounded per credential (maxPTYDeadlineKills):
// past the bound the terminal is ended at once, so a tenant starting and
// leaving terminals in a loop holds no more timers than the bound. Here
// the bound is 1: the first terminal keeps running, the second is ended
// when its client leaves.
func TestPTYDeadlineKillsBounded(t *testing.T) {
	e := newTestEnv(t, extended)
	e.handler.shared.ptyKills = admission.New(100, 1)
	leave := func() { ptyStartLeftWith(t, e, map[string]string{"Connect-Timeout-Ms": "3600000"}) }
	leave()
	first := onlySession(t, e)
	if all, cred := e.handler.shared.ptyKills.Held("cred-a"); all != 1 || cred != 1 {
		t.Fatalf("%d deadline kills held, %d of cred-a; want 1", all, cred)
	}
	leave()
	if ids := e.execd.PTYSessions(); len(ids) != 1 || ids[0] != first {
		t.Fatalf("sessions %v, want only the first (%s): the second ended past the bound", ids, first)
	}
	if all, _ := e.handler.shared.ptyKills.Held("cred-a"); all != 1 {
		t.Fatalf("%d deadline kills held, want 1", all)
	}
}

// TestPTYPastItsDeadlineEndedByList: a terminal's record holds its
// Start's deadline (endsAt, Connect-Timeout-Ms after the start); List
// lists the running terminal before it, and once it is past by
// ptyOrphanGrace (the gateway process that started it gone before its
// deadline kill: here the record rewritten as if the hour had passed)
// List leaves it out and deletes its session and its files. A terminal
// started without a timeout has no endsAt.
func TestPTYPastItsDeadlineEndedByList(t *testing.T) {
	e := newTestEnv(t, extended)
	before := time.Now()
	pid := ptyStartLeftWith(t, e, map[string]string{"Connect-Timeout-Ms": "3600000"})
	recPath := e.hostPath(fmt.Sprintf("/tmp/.sandgate/processes/%d.json", pid))
	b, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec procRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if lo, hi := before.Add(time.Hour).UnixMilli(), time.Now().Add(time.Hour).UnixMilli(); rec.EndsAt < lo || rec.EndsAt > hi {
		t.Fatalf("endsAt %d, want the start plus an hour (%d..%d)", rec.EndsAt, lo, hi)
	}
	if _, body := e.processCall("List", `{}`); !strings.Contains(string(body), fmt.Sprintf(`"pid":%d`, pid)) {
		t.Fatalf("List before the deadline: %s", body)
	}
	e.waitOutcome()

	rec.EndsAt = time.Now().Add(-ptyOrphanGrace - time.Second).UnixMilli()
	b, _ = json.Marshal(rec)
	if err := os.WriteFile(recPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, body := e.processCall("List", `{}`); string(body) != `{"processes":[]}` {
		t.Fatalf("List past the deadline: %s", body)
	}
	e.waitOutcome()
	if ids := e.execd.PTYSessions(); len(ids) != 0 {
		t.Fatalf("sessions left: %v", ids)
	}
	if _, err := os.Stat(recPath); !os.IsNotExist(err) {
		t.Fatalf("the record after the prune: %v", err)
	}

	// Without a timeout: no endsAt, and the terminal is listed.
	pid = ptyStartLeft(t, e)
	if b, err := os.ReadFile(e.hostPath(fmt.Sprintf("/tmp/.sandgate/processes/%d.json", pid))); err != nil || strings.Contains(string(b), "endsAt") {
		t.Fatalf("the record of a terminal without a timeout: %s %v", b, err)
	}
}

// TestPTYReattach: a Start stream whose client goes leaves the shell
// running; input sent meanwhile opens a WebSocket for the call; Connect
// reattaches (start event with the pid) and relays what follows, not what
// the shell wrote before the Start stream ended.
func TestPTYReattach(t *testing.T) {
	e := newTestEnv(t, extended)
	pid := ptyStartLeft(t, e)
	// No stream holds it: the input goes through a WebSocket of its own,
	// once execd has released the Start stream's (a moment after it
	// closed: ptyReleaseWaits).
	if resp, body := ptyInput(e, pid, "a\n"); resp.StatusCode != 200 {
		t.Fatalf("input with no stream: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	_, cr := e.openStream(cctx, "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
	if k, s := nextEvent(t, cr, "start"); k != "start" || s["pid"] != float64(pid) {
		t.Fatalf("connect: %s %v", k, s)
	}
	if resp, body := ptyInput(e, pid, "b\n"); resp.StatusCode != 200 {
		t.Fatalf("input: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	if out := ptyOutput(t, cr, "got:b\n"); strings.Contains(out, "ready") {
		t.Fatalf("output from before the Connect replayed: %q", out)
	}
	ptyInput(e, pid, "exit 0\n")
	e.waitOutcome()
	if kind, end := nextEvent(t, cr, "end"); kind != "end" || end["status"] != "exit status 0" {
		t.Fatalf("end %s %v", kind, end)
	}
}

// TestPTYAcrossAReload: after a reload (a new Handler for new requests,
// the process's Shared kept, as the e2b_dataplane module passes it), input
// and a resize reach a terminal whose WebSocket the replaced Handler's
// Start stream holds, through that WebSocket, and the stream relays the
// answer; the new Handler counts that stream among the sandbox's PTY
// streams. With a Shared of its own (the Handler before Deps.Shared) the
// same input was PTY_ATTACHED: execd allows one WebSocket per terminal.
func TestPTYAcrossAReload(t *testing.T) {
	e := newTestEnv(t, extended)
	_, r := e.openStream(context.Background(), "Start", ptyStartMsg(80, 24), nil)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	ptyOutput(t, r, "ready\n")
	id := onlySession(t, e)

	h := e.reload(nil)
	if resp, body := ptyInput(e, pid, "after\n"); resp.StatusCode != 200 || string(body) != "{}" {
		t.Fatalf("SendInput after the reload: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	ptyOutput(t, r, "got:after\n")
	if resp, body := e.processCall("Update", fmt.Sprintf(`{"process":{"pid":%d},"pty":{"size":{"cols":120,"rows":40}}}`, pid)); resp.StatusCode != 200 {
		t.Fatalf("Update after the reload: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	ptyInput(e, pid, "x\n") // handled after the resize (one connection, in order)
	e.waitOutcome()
	ptyOutput(t, r, "got:x\n")
	if c, rw := e.execd.PTYSize(id); c != 120 || rw != 40 {
		t.Fatalf("size after Update %dx%d, want 120x40", c, rw)
	}
	if all, sbx := h.shared.ptyStreams.Held(testSandbox); all != 1 || sbx != 1 {
		t.Fatalf("the new Handler counts %d PTY streams, %d of the sandbox; want the replaced one's 1", all, sbx)
	}

	e.reload(NewShared())
	resp, body := ptyInput(e, pid, "lost\n")
	if resp.StatusCode != 400 || !strings.Contains(string(body), "PTY_ATTACHED") {
		t.Fatalf("SendInput from a Handler with a Shared of its own: %d %s, want PTY_ATTACHED", resp.StatusCode, body)
	}
	e.waitOutcome()

	e.reload(e.deps.Shared)
	if resp, body := e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid)); resp.StatusCode != 200 {
		t.Fatalf("kill: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	if kind, end := nextEvent(t, r, "end"); kind != "end" || end["status"] != "signal: killed" {
		t.Fatalf("end %s %v", kind, end)
	}
	if o := e.waitOutcome(); o.Code != "" {
		t.Fatalf("start outcome %+v", o)
	}
}

// TestPTYHoldsKeyedByCluster: the registry of held terminals is keyed by
// the credential's cluster as well as the sandbox ID and pid, so a call
// for a sandbox of the same ID in another cluster (here a second cluster
// behind the same fixed entry, so the same execd and the same process
// record answer it) does not ride the held WebSocket: it opens its own,
// which execd refuses (PTY_ATTACHED), and the terminal gets no input.
func TestPTYHoldsKeyedByCluster(t *testing.T) {
	e := newTestEnvDeps(t, func(d *Deps) {
		c := d.Clusters.(fakeClusters)
		c["cluster-b"] = Cluster{ID: "cluster-b", FixedEntry: c["cluster-a"].FixedEntry}
	}, extended)
	e.creds.mu.Lock()
	e.creds.creds["cred-b"] = credential.Credential{ID: "cred-b", Enabled: true, ProjectNamespace: "ns", ClusterID: "cluster-b"}
	e.creds.mu.Unlock()
	_, r := e.openStream(context.Background(), "Start", ptyStartMsg(80, 24), nil)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	ptyOutput(t, r, "ready\n")

	req := e.request(http.MethodPost, "/process.Process/SendInput", strings.NewReader(fmt.Sprintf(`{"process":{"pid":%d},"input":{"pty":%q}}`,
		pid, base64.StdEncoding.EncodeToString([]byte("other\n")))))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderAccessToken, e.mint("cred-b", testSandbox))
	if resp, body := e.do(req); resp.StatusCode != 400 || !strings.Contains(string(body), "PTY_ATTACHED") {
		t.Fatalf("SendInput from the other cluster's credential: %d %s, want PTY_ATTACHED", resp.StatusCode, body)
	}
	e.waitOutcome()
	// The terminal got none of it: the next line it echoes is its own
	// cluster's.
	ptyInput(e, pid, "own\n")
	e.waitOutcome()
	if out := ptyOutput(t, r, "got:own\n"); strings.Contains(out, "other") {
		t.Fatalf("the other cluster's input reached the terminal: %q", out)
	}
}

// TestPTYAttachedElsewhere: when another client (another replica's
// stream) holds the session's WebSocket, input, resize and Connect are
// PTY_ATTACHED (failed_precondition) and nothing takes the session over;
// SIGKILL still works.
func TestPTYAttachedElsewhere(t *testing.T) {
	e := newTestEnv(t, extended)
	pid := ptyStartLeft(t, e)
	id := onlySession(t, e)
	tgt := execd.Target{FixedEntry: e.fe, SandboxID: testSandbox}
	var other *execd.PTYConn
	e.waitFor("the other client's WebSocket", func() bool {
		c, err := (&execd.Client{}).DialPTY(context.Background(), tgt, id, 1<<62)
		other = c
		return err == nil
	})
	defer other.Close()
	for _, c := range []struct{ method, msg string }{
		{"SendInput", fmt.Sprintf(`{"process":{"pid":%d},"input":{"pty":"eAo="}}`, pid)},
		{"Update", fmt.Sprintf(`{"process":{"pid":%d},"pty":{"size":{"cols":9,"rows":9}}}`, pid)},
	} {
		resp, body := e.processCall(c.method, c.msg)
		if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":"failed_precondition"`) ||
			!strings.Contains(string(body), "PTY_ATTACHED") || !strings.Contains(string(body), "another gateway replica") {
			t.Fatalf("%s: %d %s", c.method, resp.StatusCode, body)
		}
		if o := e.waitOutcome(); o.Code != CodePTYAttached {
			t.Fatalf("%s outcome %+v", c.method, o)
		}
	}
	_, cr := e.openStream(context.Background(), "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
	if k, eos := nextEvent(t, cr); k != "eos" || !strings.Contains(fmt.Sprint(eos), "PTY_ATTACHED") {
		t.Fatalf("Connect: %s %v", k, eos)
	}
	e.waitOutcome()
	if resp, body := e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid)); resp.StatusCode != 200 {
		t.Fatalf("kill: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	for {
		f, err := other.Next()
		if err != nil {
			t.Fatalf("the other client saw no exit: %v", err)
		}
		if f.Kind == execd.PTYExit {
			if f.ExitCode != -1 {
				t.Fatalf("exit %d", f.ExitCode)
			}
			break
		}
	}
}

// TestPTYRefusals: without extended operations a pty is
// UNSUPPORTED_OPERATION as before; terminal input to a command (no pty)
// is unsupported and stdin to a PTY is STDIN_UNAVAILABLE; a size over 65535 and an env name
// with "=" are BAD_REQUEST; input over MaxMessageBytes is refused whole.
func TestPTYRefusals(t *testing.T) {
	off := newTestEnv(t)
	_, body := off.do(off.startRequest(ptyStartMsg(80, 24)))
	if fr := readFrames(t, body); len(fr) != 1 || !strings.Contains(fr[0].raw, "UNSUPPORTED_OPERATION") {
		t.Fatalf("pty without extended operations: %s", body)
	}

	e := newTestEnv(t, extended, func(c *Config, _ *execdstub.Config) { c.MaxMessageBytes = 4 << 10 })
	for _, msg := range []string{ptyStartMsg(70000, 24),
		`{"process":{"cmd":"/bin/sh","envs":{"A=B":"x"}},"pty":{}}`} {
		_, body := e.do(e.startRequest(msg))
		if fr := readFrames(t, body); len(fr) != 1 || !strings.Contains(fr[0].raw, "BAD_REQUEST") {
			t.Fatalf("%s: %s", msg, body)
		}
		e.waitOutcome()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, r := e.openStream(ctx, "Start", `{"process":{"cmd":"/bin/sh","args":["-c","sleep 30"]}}`, nil)
	_, start := nextEvent(t, r, "start")
	cmdPID := uint32(start["pid"].(float64))
	if resp, body := ptyInput(e, cmdPID, "x"); resp.StatusCode != 501 || !strings.Contains(string(body), "no terminal") {
		t.Fatalf("SendInput on a command: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()

	pctx, pcancel := context.WithCancel(context.Background())
	defer pcancel()
	_, pr := e.openStream(pctx, "Start", ptyStartMsg(80, 24), nil)
	_, pstart := nextEvent(t, pr, "start")
	pid := uint32(pstart["pid"].(float64))
	if resp, body := e.processCall("SendInput", fmt.Sprintf(`{"process":{"pid":%d},"input":{"stdin":"eA=="}}`, pid)); resp.StatusCode != 400 ||
		!strings.Contains(string(body), string(CodeStdinUnavailable)) {
		t.Fatalf("stdin on a PTY: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	big := strings.Repeat("y", 4<<10)
	if resp, body := ptyInput(e, pid, big); resp.StatusCode != 400 || !strings.Contains(string(body), "too large") {
		t.Fatalf("input over MaxMessageBytes: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
}

// TestPTYStreamBounds: the PTY streams one gateway process holds are
// bounded per sandbox and in all (GATEWAY_BUSY naming the bound); a
// stream that ends gives its place back.
func TestPTYStreamBounds(t *testing.T) {
	for _, c := range []struct {
		global, perSandbox int
		bound              Bound
	}{{4, 1, BoundPTYStreamsPerSandbox}, {1, 4, BoundPTYStreams}} {
		t.Run(string(c.bound), func(t *testing.T) {
			e := newTestEnv(t, extended)
			e.handler.shared.ptyStreams = admission.New(c.global, c.perSandbox)
			ctx, cancel := context.WithCancel(context.Background())
			_, r := e.openStream(ctx, "Start", ptyStartMsg(80, 24), nil)
			nextEvent(t, r, "start")
			_, body := e.do(e.startRequest(ptyStartMsg(80, 24)))
			if fr := readFrames(t, body); len(fr) != 1 || !strings.Contains(fr[0].raw, "GATEWAY_BUSY") {
				t.Fatalf("second stream: %s", body)
			}
			if o := e.waitOutcome(); o.Code != CodeGatewayBusy || o.Bound != c.bound {
				t.Fatalf("outcome %+v, want bound %s", o, c.bound)
			}
			if n := len(e.execd.PTYSessions()); n != 1 {
				t.Fatalf("a refused stream created a session (%d)", n)
			}
			cancel()
			e.waitOutcome()
			e.waitFor("the place to be given back", func() bool {
				all, _ := e.handler.shared.ptyStreams.Held(testSandbox)
				return all == 0
			})
		})
	}
}

// TestPTYMalformedFrames: every frame execd is not documented to send on
// a PTY WebSocket ends the Start stream with EXECD_PROTOCOL naming it,
// and a message over the read limit too; execd's error frame is
// EXECD_FAILED.
func TestPTYMalformedFrames(t *testing.T) {
	off := make([]byte, 9)
	off[0] = 0x03
	binary.BigEndian.PutUint64(off[1:], 1<<63)
	for _, c := range []struct {
		name  string
		frame execdstub.RawFrame
		code  Code
		msg   string
	}{
		{"empty binary", execdstub.RawFrame{Binary: true}, CodeExecdProtocol, "an empty binary frame"},
		{"stdin channel", execdstub.RawFrame{Binary: true, Data: []byte{0x00, 'x'}}, CodeExecdProtocol, "a binary frame on channel 0"},
		{"stderr channel", execdstub.RawFrame{Binary: true, Data: []byte{0x02, 'x'}}, CodeExecdProtocol, "a binary frame on channel 2"},
		{"short replay", execdstub.RawFrame{Binary: true, Data: []byte{0x03, 0, 0}}, CodeExecdProtocol, "shorter than its 9-byte header"},
		{"negative replay offset", execdstub.RawFrame{Binary: true, Data: off}, CodeExecdProtocol, "a negative offset"},
		{"not JSON", execdstub.RawFrame{Data: []byte("hello")}, CodeExecdProtocol, "not a JSON object"},
		{"unknown type", execdstub.RawFrame{Data: []byte(`{"type":"bogus"}`)}, CodeExecdProtocol, "an unknown type"},
		{"exit without code", execdstub.RawFrame{Data: []byte(`{"type":"exit"}`)}, CodeExecdProtocol, "without an integer exit_code"},
		{"exit code not integer", execdstub.RawFrame{Data: []byte(`{"type":"exit","exit_code":1.5}`)}, CodeExecdProtocol, "without an integer exit_code"},
		{"large JSON", execdstub.RawFrame{Data: []byte(`{"type":"pong","x":"` + strings.Repeat("a", 5000) + `"}`)}, CodeExecdProtocol, "a JSON frame over 4096 bytes"},
		{"over the read limit", execdstub.RawFrame{Binary: true, Data: append([]byte{0x01}, make([]byte, execd.MaxPTYFrameBytes)...)}, CodeExecdProtocol, "a message over"},
		{"error frame", execdstub.RawFrame{Data: []byte(`{"type":"error","code":"STDIN_WRITE_FAILED","error":"boom"}`)}, CodeExecdFailed, "STDIN_WRITE_FAILED: boom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEnv(t, extended, func(_ *Config, x *execdstub.Config) { x.PTYFrames = []execdstub.RawFrame{c.frame} })
			resp, body := e.do(e.startRequest(ptyStartMsg(80, 24)))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			fr := readFrames(t, body)
			last := fr[len(fr)-1].raw
			if !strings.Contains(last, string(c.code)) || !strings.Contains(last, c.msg) {
				t.Fatalf("end %s, want %s %q", last, c.code, c.msg)
			}
			if o := e.waitOutcome(); o.Code != c.code {
				t.Fatalf("outcome %+v", o)
			}
		})
	}
}

// TestPTYBackpressure: while the client reads nothing, the gateway reads
// no more of the terminal's WebSocket than one frame ahead, so the
// shell's output is held (the stand-in's shell waits for its WebSocket to
// be read) and the gateway's memory does not grow with it; once the
// client reads, every byte of the 64 MiB arrives, once, and no stream
// ever held more than two frames read and not yet relayed.
func TestPTYBackpressure(t *testing.T) {
	const size = 64 << 20
	e := newTestEnv(t, extended)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msg := `{"process":{"cmd":"/bin/sh","args":["-c","head -c ` + fmt.Sprint(size) + ` /dev/zero | tr '\\0' x; exit 0"]},"pty":{}}`
	_, r := e.openStream(ctx, "Start", msg, nil)
	nextEvent(t, r, "start")
	id := onlySession(t, e)
	e.waitFor("the terminal's output to be held", func() bool {
		_, held := e.execd.PTYOutput(id)
		return held
	})
	got := 0
	for {
		kind, ev := nextEvent(t, r, "data", "end")
		if kind == "end" {
			if ev["status"] != "exit status 0" {
				t.Fatalf("end %v", ev)
			}
			break
		}
		b := b64(t, ev["pty"])
		if strings.Trim(b, "x") != "" {
			t.Fatalf("unexpected output %q", truncate(b, 64))
		}
		got += len(b)
	}
	if got != size {
		t.Fatalf("relayed %d bytes, want %d", got, size)
	}
	maxHeld := e.handler.shared.ptyHeld.maxHeld.Load()
	if maxHeld > 2 || maxHeld < 1 {
		t.Fatalf("a stream held %d frames read and not yet relayed, want at most 2", maxHeld)
	}
}

// TestPTYConnectFollowsTheHoldingStream: a Connect to a terminal whose
// WebSocket a Start stream of this gateway holds follows that stream, as
// envd lets several streams follow one terminal (before, it was
// PTY_ATTACHED: execd allows one WebSocket per terminal): both streams
// carry the output written after the Connect, and both end with the
// shell's end event.
func TestPTYConnectFollowsTheHoldingStream(t *testing.T) {
	e := newTestEnv(t, extended)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pid, r := ptyStartReady(t, e, ctx, nil)
	_, cr := e.openStream(ctx, "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
	if k, s := nextEvent(t, cr, "start"); k != "start" || s["pid"] != float64(pid) {
		t.Fatalf("connect: %s %v", k, s)
	}
	if resp, body := ptyInput(e, pid, "a\n"); resp.StatusCode != 200 {
		t.Fatalf("input: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	ptyOutput(t, r, "got:a\n")
	if out := ptyOutput(t, cr, "got:a\n"); strings.Contains(out, "ready") {
		t.Fatalf("the follower got output from before its Connect: %q", out)
	}
	ptyInput(e, pid, "exit 3\n")
	e.waitOutcome()
	for name, rd := range map[string]*bufio.Reader{"Start": r, "Connect": cr} {
		if kind, end := nextEvent(t, rd, "end"); kind != "end" || end["status"] != "exit status 3" {
			t.Fatalf("%s: end %s %v", name, kind, end)
		}
		if k, eos := nextEvent(t, rd); k != "eos" || len(eos) != 0 {
			t.Fatalf("%s after end: %s %v", name, k, eos)
		}
	}
	for range 2 {
		if o := e.waitOutcome(); o.Code != "" {
			t.Fatalf("outcome %+v", o)
		}
	}
}

// TestPTYFollowerWhenTheHolderLeaves: when the stream that holds the
// terminal ends first (its client left), a stream that followed it ends
// with PTY_ATTACHED saying to connect again, the terminal keeps running,
// and a Connect then holds it and carries its output.
func TestPTYFollowerWhenTheHolderLeaves(t *testing.T) {
	e := newTestEnv(t, extended)
	hctx, leave := context.WithCancel(context.Background())
	pid, _ := ptyStartReady(t, e, hctx, nil)
	_, fr := e.openStream(context.Background(), "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
	nextEvent(t, fr, "start")
	leave()
	if k, eos := nextEvent(t, fr); k != "eos" || !strings.Contains(fmt.Sprint(eos), "PTY_ATTACHED") ||
		!strings.Contains(fmt.Sprint(eos), "connect again") {
		t.Fatalf("the follower after its holder left: %s %v", k, eos)
	}
	codes := map[Code]bool{}
	for range 2 {
		codes[e.waitOutcome().Code] = true
	}
	if !codes[CodeCanceled] || !codes[CodePTYAttached] {
		t.Fatalf("outcomes %v, want the holder's CANCELED and the follower's PTY_ATTACHED", codes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, cr := e.openStream(ctx, "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
	nextEvent(t, cr, "start")
	ptyInput(e, pid, "b\n")
	e.waitOutcome()
	ptyOutput(t, cr, "got:b\n")
	ptyInput(e, pid, "exit 0\n")
	e.waitOutcome()
	if kind, end := nextEvent(t, cr, "end"); kind != "end" || end["status"] != "exit status 0" {
		t.Fatalf("end %s %v", kind, end)
	}
}

// TestPTYFollowerBounded: output waiting for a follower's client is
// bounded (maxPTYFollowerBytes); a follower that would go over it is ended
// with PTY_ATTACHED ("fell behind") after what it had queued, and the
// holding stream never waits for it.
func TestPTYFollowerBounded(t *testing.T) {
	hold := &ptyHold{}
	slow, quick := hold.follow(), hold.follow()
	piece := make([]byte, 64<<10)
	for i := 0; i < maxPTYFollowerBytes/len(piece); i++ {
		hold.publish(piece)
		if out, ended, _, _ := quick.take(); ended || len(out) != 1 {
			t.Fatalf("the quick follower after piece %d: ended %v, %d pieces", i, ended, len(out))
		}
		quick.sent(len(piece))
	}
	if out, ended, _, _ := slow.take(); ended {
		t.Fatal("the slow follower ended at the bound, not over it")
	} else {
		for _, b := range out {
			slow.sent(len(b))
		}
	}
	for i := 0; i <= maxPTYFollowerBytes/len(piece); i++ { // the last one over the bound
		hold.publish(piece)
		quick.take()
		quick.sent(len(piece))
	}
	out, ended, end, err := slow.take()
	if !ended || end != nil || err == nil || err.Code != CodePTYAttached || !strings.Contains(err.Error(), "behind") {
		t.Fatalf("the slow follower: ended %v, end %v, err %v", ended, end, err)
	}
	if n := len(out) * len(piece); n > maxPTYFollowerBytes {
		t.Fatalf("the slow follower held %d bytes, over %d", n, maxPTYFollowerBytes)
	}
	hold.mu.Lock()
	_, kept := hold.followers[slow]
	hold.mu.Unlock()
	if kept {
		t.Fatal("the ended follower still follows")
	}
	hold.finish(ptyEnd(0))
	if _, ended, end, _ := quick.take(); !ended || end == nil || end.Status != "exit status 0" {
		t.Fatalf("the quick follower after the shell's end: ended %v, end %v", ended, end)
	}
	if hold.follow() != nil {
		t.Fatal("a follower was taken after the relay was over")
	}
}

// TestPTYFollowerOfAStartPastItsDeadline: a Start with Connect-Timeout-Ms
// holds the terminal and a Connect follows it; at the Start's deadline the
// gateway ends the terminal (as envd ends a process whose timeout passed),
// and the follower gets the killed end event. Before, it was told
// PTY_ATTACHED "the terminal keeps running: connect again", and connecting
// again found the process gone.
func TestPTYFollowerOfAStartPastItsDeadline(t *testing.T) {
	e := newTestEnv(t, extended)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pid, r := ptyStartReady(t, e, ctx, map[string]string{"Connect-Timeout-Ms": "1500"})
	_, fr := e.openStream(ctx, "Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), nil)
	nextEvent(t, fr, "start")
	if k, eos := nextEvent(t, r); k != "eos" || !strings.Contains(fmt.Sprint(eos), "COMMAND_TIMEOUT") {
		t.Fatalf("the Start at its deadline: %s %v", k, eos)
	}
	if kind, end := nextEvent(t, fr, "end"); kind != "end" || end["status"] != "signal: killed" {
		t.Fatalf("the follower of a terminal ended at its Start's deadline: %s %v, want the killed end event", kind, end)
	}
	if ids := e.execd.PTYSessions(); len(ids) != 0 {
		t.Fatalf("sessions %v after the Start's deadline", ids)
	}
}

// blockingWriter is an http.ResponseWriter whose Write blocks, once
// armed, until release is closed: a client that stopped reading.
type blockingWriter struct {
	h       http.Header
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (w *blockingWriter) Header() http.Header { return w.h }
func (w *blockingWriter) WriteHeader(int)     {}
func (w *blockingWriter) Flush()              {}
func (w *blockingWriter) Write(p []byte) (int, error) {
	if w.armed.Load() {
		w.once.Do(func() { close(w.entered) })
		<-w.release
	}
	return len(p), nil
}

// TestPTYFollowerBoundWhileSending: output taken for a client that stopped
// reading stays counted until sent, so a follower pins at most
// maxPTYFollowerBytes: with a full bound's worth being sent (the write
// blocked), the next piece ends it as fallen behind. Before, taking the
// queue reset the count, and a follower pinned twice the bound.
func TestPTYFollowerBoundWhileSending(t *testing.T) {
	hold := &ptyHold{}
	w := &blockingWriter{h: http.Header{}, entered: make(chan struct{}), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx)
	done := make(chan *Error, 1)
	go func() { done <- (&Handler{}).followPTY(w, r, 7, hold, streamCall{keepalive: time.Hour}) }()
	var f *ptyFollower
	waittest.Until(t, 10*time.Second, "the follower registered", func() bool {
		hold.mu.Lock()
		defer hold.mu.Unlock()
		for x := range hold.followers {
			f = x
		}
		return f != nil
	})
	w.armed.Store(true)
	hold.publish(make([]byte, maxPTYFollowerBytes)) // within the bound
	<-w.entered                                     // taken; its write blocks
	hold.publish(make([]byte, 1))                   // over it
	f.mu.Lock()
	ended, err := f.ended, f.err
	f.mu.Unlock()
	cancel()
	close(w.release)
	<-done
	if !ended || err == nil || !strings.Contains(err.Error(), "behind") {
		t.Fatalf("a follower with a full bound being sent, given one more byte: ended %v, %v; want ended, fell behind", ended, err)
	}
}
