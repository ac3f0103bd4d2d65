package dataplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// PTY processes (Config.ExtendedOperations; docs/dataplane.md "PTY
// processes").
//
// A Process/Start with a pty member runs the SDK's command on an execd PTY
// session (docs/wire-facts.md §X1.8): POST /pty, then the session's one
// WebSocket, which starts its shell. The stream that holds the WebSocket
// (Start, or a Connect after it) relays the terminal's output as data
// {pty} events and the shell's exit as the end event. The process record
// (<ProcessDir>/<pid>.json, as for background commands) names the
// session, so SendInput, Update (resize), SendSignal and Connect find it
// from any replica. Input and resizes go through the WebSocket: the one
// this gateway process's stream holds (ptyHolds), else one opened for the
// call and closed after it; when another replica's stream holds it, execd
// refuses a second WebSocket (409) and the call is PTY_ATTACHED. A Connect
// while a stream of this process holds it follows that stream (followPTY).

// Bounds of the PTY sessions whose WebSocket this gateway process holds
// (a Start or Connect stream each): per sandbox and in all. A stream over
// either is refused with GATEWAY_BUSY before anything is created.
const (
	maxPTYStreamsPerSandbox = 8
	maxPTYStreams           = 256
)

// Bounds of the PTY kills waiting for their Start's deadline
// (ptyDeadlineKill): per credential and over the gateway process.
const (
	maxPTYDeadlineKills              = 4096
	maxPTYDeadlineKillsPerCredential = 256
)

// maxPTYPreamble bounds the terminal output read before the command's
// marker (bytes): the shell's prompt and the echo of the typed line on
// execd v1.0.18, nothing on HEAD. More fails the start.
const maxPTYPreamble = 64 << 10

// ptyActTimeout bounds one SendInput, Update or SIGTERM on a session no
// stream of this process holds: dial, act, execd's pong, close.
const ptyActTimeout = 10 * time.Second

// ptyHeld counts, per stream, the frames read from its WebSocket and not
// yet relayed, and keeps the most any stream ever held (maxHeld): relayPTY
// holds at most two (one being relayed, one waiting to be handed over),
// whatever the client's speed, which TestPTYBackpressure checks.
// It is read once a frame on every stream: an atomic maximum, not a lock
// the streams would share.
type ptyHeld struct {
	maxHeld atomic.Int32
}

func (p *ptyHeld) observe(n int32) {
	for {
		m := p.maxHeld.Load()
		if n <= m || p.maxHeld.CompareAndSwap(m, n) {
			return
		}
	}
}

// ptyHolds is the registry of the PTY WebSockets this gateway process's
// streams hold, by cluster, sandbox and pid (ptyKey), with the streams
// following each (ptyHold). Every configuration of the process shares it
// (Shared).
type ptyHolds struct {
	mu sync.Mutex
	m  map[string]*ptyHold
}

// ptyKey is the registry key of rq's sandbox's process pid: its cluster
// too, so that a sandbox ID met in two clusters (or in the clusters of two
// configurations) never reaches the other's terminal. The pid comes from a
// record the sandbox wrote, so only the sandbox's own part of the key is
// the tenant's.
func ptyKey(rq *request, pid uint32) string {
	return rq.cluster.ID + "/" + rq.sandboxID + "/" + strconv.FormatUint(uint64(pid), 10)
}

// hold registers c for key and returns its hold; nil when another stream
// holds the key.
func (p *ptyHolds) hold(key string, c *execd.PTYConn) *ptyHold {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*ptyHold{}
	}
	if _, ok := p.m[key]; ok {
		return nil
	}
	h := &ptyHold{conn: c}
	p.m[key] = h
	return h
}

// release unregisters h, the hold of key, and ends its followers
// (PTY_ATTACHED) unless its relay ended them with the shell's end.
func (p *ptyHolds) release(key string, h *ptyHold) {
	p.mu.Lock()
	if p.m[key] == h {
		delete(p.m, key)
	}
	p.mu.Unlock()
	h.finish(nil)
}

// get returns the hold of key (nil: none).
func (p *ptyHolds) get(key string) *ptyHold {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[key]
}

// conn returns the WebSocket the hold of key holds (nil: none).
func (p *ptyHolds) conn(key string) *execd.PTYConn {
	if h := p.get(key); h != nil {
		return h.conn
	}
	return nil
}

// admitPTYStream takes a place among the PTY streams of rq's sandbox and
// of the gateway process, or returns GATEWAY_BUSY.
func (h *Handler) admitPTYStream(rq *request) (func(), *Error) {
	release, why := h.shared.ptyStreams.TryAcquire(rq.sandboxID)
	switch why {
	case admission.KeyFull:
		return nil, busy(BoundPTYStreamsPerSandbox, "this sandbox has the most PTY streams open at this gateway ("+
			strconv.Itoa(maxPTYStreamsPerSandbox)+" by default); close one (its terminal keeps running) and retry")
	case admission.GlobalFull:
		return nil, busy(BoundPTYStreams, "the gateway has the most PTY streams open ("+strconv.Itoa(maxPTYStreams)+" by default); retry shortly")
	}
	return release, nil
}

// ptyRecordID is the record id of a PTY session: its UUID without the
// dashes (32 hex digits, as execd's command ids, which the record head
// check expects).
func ptyRecordID(session string) string { return strings.ReplaceAll(session, "-", "") }

// ptySize checks a terminal size: cols and rows up to 65,535 (the
// kernel's winsize); 0 in either leaves the size as it is (execd ignores
// it).
func ptySize(s *envd.PTYSize) (cols, rows uint16, e *Error) {
	if s == nil {
		return 0, 0, nil
	}
	if s.Cols > math.MaxUint16 || s.Rows > math.MaxUint16 {
		return 0, 0, fail(CodeBadRequest, "pty.size cols and rows must be at most 65535")
	}
	return uint16(s.Cols), uint16(s.Rows), nil
}

// newPTYMarker returns the two halves of the marker the start script
// prints before it runs the command: 'sg' and 24 random hex digits, cut
// in two, so the echo of the typed script (on v1.0.18) never holds the
// marker whole.
func newPTYMarker() (string, string) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	m := "sg" + hex.EncodeToString(b[:])
	return m[:13], m[13:]
}

// ptyScript is the shell line that starts the SDK's command on the
// terminal: it prints the marker (two halves joined), then replaces the
// shell with env (the environment: envd's HOME, USER, LOGNAME for a mapped
// user, then the request's envs) running the command, through setpriv
// (--reuid, --regid, --clear-groups) when the user is mapped to an
// identity other than root. execd HEAD runs it as POST /pty's command;
// on v1.0.18 the gateway types it into the session's bash. If env or
// setpriv cannot run, the shell exits 127, which ends the process.
func (h *Handler) ptyScript(m1, m2 string, u sdkUser, cfg *envd.ProcessConfig) string {
	var b strings.Builder
	b.WriteString("printf '%s%s' " + m1 + " " + m2 + "; exec ")
	if u.set && (u.user.UID != 0 || u.user.GID != 0) {
		b.WriteString("setpriv --reuid=" + strconv.FormatUint(uint64(u.user.UID), 10) + " --regid=" +
			strconv.FormatUint(uint64(u.user.GID), 10) + " --clear-groups -- ")
	}
	b.WriteString("env --")
	envs := h.commandEnvs(u, cfg.Envs)
	keys := make([]string, 0, len(envs))
	for k := range envs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(" " + execd.Quote(k+"="+envs[k]))
	}
	b.WriteString(" " + commandLine(cfg.Cmd, cfg.Args) + " || exit 127")
	return b.String()
}

// checkPTYEnvs refuses environment names env cannot set: empty, or
// holding "=".
func checkPTYEnvs(envs map[string]string) *Error {
	for k := range envs {
		if k == "" || strings.IndexByte(k, '=') >= 0 {
			return fail(CodeBadRequest, "process envs names must be non-empty and must not contain '='")
		}
	}
	return nil
}

// startPTY serves Process/Start with a pty member (ExtendedOperations).
func (h *Handler) startPTY(w http.ResponseWriter, r *http.Request, rq *request, sc startCall, p *envd.PTY) *Error {
	ctx := r.Context()
	var size *envd.PTYSize
	if p != nil {
		size = p.Size
	}
	cols, rows, e := ptySize(size)
	if e != nil {
		return e
	}
	if e := checkPTYEnvs(sc.req.Process.Envs); e != nil {
		return e
	}
	release, e := h.admitPTYStream(rq)
	if e != nil {
		return e
	}
	defer release()
	fi, err := h.deps.Execd.Stat(ctx, rq.target, sc.cwd)
	switch {
	case execd.IsNotFound(err):
		return fail(CodeExecdRejected, "working directory does not exist: "+sc.cwd)
	case err != nil:
		return fromExecd(err, "start process")
	case fi.Type != "" && fi.Type != execd.TypeDirectory && fi.Type != execd.TypeSymlink:
		return fail(CodeExecdRejected, "working directory path is not a directory: "+sc.cwd)
	}
	pid := newPID()
	if _, e := h.encodeRecord(procRecord{ID: strings.Repeat("x", 32), PID: pid, Config: *sc.req.Process, Tag: sc.req.Tag,
		PTY: strings.Repeat("x", 36), EndsAt: math.MaxInt64}); e != nil {
		return e
	}
	files := h.procFiles(pid)
	// The process directory as for every process (outputScript); the
	// output files stay empty.
	if e := h.createOutput(ctx, rq.target, files, sc.user); e != nil {
		return e
	}
	takes, err := h.deps.Execd.PTYTakesCommand(ctx, rq.target)
	if err != nil {
		h.removeProcFiles(ctx, rq.target, files)
		return fromExecd(err, "start process")
	}
	m1, m2 := newPTYMarker()
	script := h.ptyScript(m1, m2, sc.user, sc.req.Process)
	command := ""
	if takes {
		command = script
	}
	id, err := h.deps.Execd.CreatePTY(ctx, rq.target, sc.cwd, command)
	if err != nil {
		h.removeProcFiles(ctx, rq.target, files)
		return fromExecd(err, "start process")
	}
	abandon := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = h.deps.Execd.DeletePTY(dctx, rq.target, id)
		h.removeProcFiles(dctx, rq.target, files)
	}
	var deadline time.Time
	endsAt := int64(0)
	if sc.timeout > 0 {
		deadline = time.Now().Add(sc.timeout)
		endsAt = deadline.UnixMilli()
	}
	rec, e := h.encodeRecord(procRecord{ID: ptyRecordID(id), PID: pid, Config: *sc.req.Process, Tag: sc.req.Tag, PTY: id, EndsAt: endsAt})
	if e == nil {
		if err := h.deps.Execd.WriteFiles(ctx, rq.target, []execd.SmallFile{{Path: files.rec, Data: rec, Permission: execd.Permission{Mode: 600}}}); err != nil {
			e = fromExecd(err, "start process")
		}
	}
	if e != nil {
		abandon()
		return e
	}
	conn, err := h.deps.Execd.DialPTY(ctx, rq.target, id, 0)
	if err != nil {
		abandon()
		return fromExecd(err, "start process")
	}
	if cols > 0 && rows > 0 {
		err = conn.Resize(cols, rows)
	}
	if err == nil && !takes {
		err = conn.SendInput([]byte(script + "\n"))
	}
	if err != nil {
		conn.Close()
		abandon()
		return fromExecd(err, "start process")
	}
	key := ptyKey(rq, pid)
	hold := h.shared.ptyHolds.hold(key, conn) // a fresh pid: nobody else holds it
	defer h.shared.ptyHolds.release(key, hold)
	sw := connect.NewStreamWriter(w)
	if err := sw.Send(envd.StartResponse{Event: envd.ProcessEvent{Start: &envd.StartEvent{PID: pid}}}); err != nil {
		conn.Close()
		h.ptyDeadlineKill(rq, id, files, sc.timeout, time.Now())
		return fail(CodeCanceled, "the client closed the stream")
	}
	return h.relayPTY(r, rq, sw, conn, ptyRelay{session: id, files: files, marker: []byte(m1 + m2), deadline: deadline,
		killAtDeadline: true, keepalive: sc.keepalive, timeout: sc.timeout, hold: hold})
}

// ptyDeadlineKill ends session id at its Start's deadline (timeout after
// begun; none when 0) once no stream of this process follows it any more,
// as envd ends a process whose Start timeout passed. It lives in this
// gateway process; the record holds the deadline too (procRecord.EndsAt),
// so a terminal this process did not end because it stopped first is
// ended by the next List from any replica (docs/dataplane.md "PTY
// processes").
//
// The kills waiting for their deadline are bounded per credential and in
// all (maxPTYDeadlineKills): each holds a timer and, at the deadline, a
// goroutine and two requests, and a tenant can start and leave terminals
// in a loop. Past a bound the terminal is ended at once, as the deferred
// cleanups of commands are (deferCleanup).
func (h *Handler) ptyDeadlineKill(rq *request, id string, files procFiles, timeout time.Duration, begun time.Time) {
	if timeout <= 0 {
		return
	}
	t := rq.target
	kill := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.deps.Execd.DeletePTY(ctx, t, id); err == nil || execd.IsNotFound(err) {
			h.removeProcFiles(ctx, t, files)
		}
	}
	release, why := h.shared.ptyKills.TryAcquire(rq.cred.ID)
	if why != admission.Admitted {
		kill()
		return
	}
	time.AfterFunc(time.Until(begun.Add(timeout)), func() {
		defer release()
		kill()
	})
}

// ptyRelay says how relayPTY follows a session.
type ptyRelay struct {
	session string
	files   procFiles
	// marker, when set, is what the start script prints before the
	// command runs: output up to its end is dropped (at most
	// maxPTYPreamble bytes).
	marker []byte
	// deadline (zero: none) ends the stream with COMMAND_TIMEOUT; with
	// killAtDeadline the session is killed then (Start), and when the
	// stream ends earlier, at the deadline (ptyDeadlineKill).
	deadline       time.Time
	killAtDeadline bool
	timeout        time.Duration
	keepalive      time.Duration
	// hold is the registry's hold of the WebSocket: the output sent is
	// handed to its followers too, and the shell's end.
	hold *ptyHold
}

// ptyItem is one result of reading the session's WebSocket.
type ptyItem struct {
	f   execd.PTYFrame
	err error
}

// relayPTY relays the session's terminal output as data {pty} events
// until the shell exits (the end event, then the session and the record
// are removed), the client goes (the WebSocket is closed and the shell
// keeps running), or the deadline passes. Frames are read one at a time
// and handed over unbuffered, so a slow client holds the reading (and
// execd's writes, through the WebSocket) rather than the gateway's memory
// growing.
func (h *Handler) relayPTY(r *http.Request, rq *request, sw *connect.StreamWriter, conn *execd.PTYConn, o ptyRelay) *Error {
	ctx := r.Context()
	begun := time.Now()
	defer conn.Close()
	items := make(chan ptyItem)
	stop := make(chan struct{})
	defer close(stop)
	var held atomic.Int32 // frames read and not yet relayed
	go func() {
		for {
			f, err := conn.Next()
			h.shared.ptyHeld.observe(held.Add(1))
			select {
			case items <- ptyItem{f, err}:
			case <-stop:
				return
			}
			if err != nil || f.Kind == execd.PTYExit {
				return
			}
		}
	}()
	left := func() {
		// The client (or the drain) ended the stream: the terminal keeps
		// running, until its deadline.
		if o.killAtDeadline {
			h.ptyDeadlineKill(rq, o.session, o.files, o.timeout, begun)
		}
	}
	deadlineC, stopDeadline := deadlineTimer(o.deadline)
	defer stopDeadline()
	ka := time.NewTimer(o.keepalive)
	defer ka.Stop()
	var pre []byte
	marker := o.marker
	send := func(b []byte) {
		if marker != nil {
			pre = append(pre, b...)
			i := bytes.Index(pre, marker)
			if i < 0 {
				return
			}
			b = pre[i+len(marker):]
			marker, pre = nil, nil
		}
		if len(b) == 0 {
			return
		}
		_ = sw.Send(envd.StartResponse{Event: envd.ProcessEvent{Data: &envd.DataEvent{PTY: b}}})
		o.hold.publish(b)
		ka.Reset(o.keepalive)
	}
	for {
		select {
		case <-ctx.Done():
			conn.Close()
			left()
			return fail(CodeCanceled, "the client closed the stream")
		case <-ending(ctx):
			conn.Close()
			left()
			return endStream(sw, drainingError("ended this stream at the end of its drain grace; the terminal keeps running in the sandbox"))
		case <-deadlineC:
			conn.Close()
			if o.killAtDeadline {
				h.ptyEnded(ctx, rq, o.session, o.files)
				o.hold.finish(ptyEnd(-1)) // the terminal is gone, not left running
				return endStream(sw, timeoutError(o.timeout))
			}
			return endStream(sw, fail(CodeCommandTimeout, "the connection ran past its "+o.timeout.String()+" timeout; the terminal keeps running"))
		case <-ka.C:
			_ = sw.Send(envd.StartResponse{Event: envd.ProcessEvent{KeepAlive: &envd.KeepAlive{}}})
			ka.Reset(o.keepalive)
		case it := <-items:
			if it.err != nil {
				if errors.Is(it.err, execd.ErrPTYClosed) {
					// execd closes after the exit frame; a close without
					// one is a session deleted under the stream (execd's
					// DELETE kills the shell) or a broken relay.
					st, err := h.deps.Execd.PTYStatus(ctx, rq.target, o.session)
					if execd.IsNotFound(err) {
						h.ptyEnded(ctx, rq, o.session, o.files)
						o.hold.finish(ptyEnd(-1))
						_ = sw.Send(envd.StartResponse{Event: envd.ProcessEvent{End: ptyEnd(-1)}})
						_ = sw.Close(nil)
						return nil
					}
					if err == nil && st.Running {
						left()
					}
					return endStream(sw, fail(CodeExecdProtocol, "execd closed the PTY WebSocket before the shell ended"))
				}
				left()
				return endStream(sw, h.sandboxGone(ctx, rq, fromExecd(it.err, "pty output")))
			}
			switch f := it.f; f.Kind {
			case execd.PTYOutput, execd.PTYReplay:
				send(f.Data)
				if marker != nil && len(pre) > maxPTYPreamble {
					conn.Close()
					h.ptyEnded(ctx, rq, o.session, o.files)
					o.hold.finish(ptyEnd(-1))
					return endStream(sw, fail(CodeExecdProtocol, "the terminal wrote over "+strconv.Itoa(maxPTYPreamble)+
						" bytes before the command started; the session was ended"))
				}
			case execd.PTYExit:
				h.ptyEnded(ctx, rq, o.session, o.files)
				o.hold.finish(ptyEnd(f.ExitCode))
				_ = sw.Send(envd.StartResponse{Event: envd.ProcessEvent{End: ptyEnd(f.ExitCode)}})
				_ = sw.Close(nil)
				return nil
			case execd.PTYFailure:
				conn.Close()
				left()
				return endStream(sw, fail(CodeExecdFailed, "pty output: execd reported "+f.Code+": "+f.Message))
			}
			// Relayed; meanwhile the reader has read at most the next
			// frame, which it hands over only now.
			held.Add(-1)
		}
	}
}

// ptyEnd is the end event of a shell that exited with code (-1: killed
// by a signal, which execd does not name: SIGKILL is what its DELETE
// sends).
func ptyEnd(code int) *envd.EndEvent {
	st := execd.CommandStatus{ExitCode: &code}
	if code == -1 {
		st.Error = "signal: killed"
	}
	return endFromStatus(st)
}

// ptyEnded removes an ended (or ending) session and its record, best
// effort, on a context that outlives the request by at most 5 s.
func (h *Handler) ptyEnded(ctx context.Context, rq *request, session string, files procFiles) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = h.deps.Execd.DeletePTY(dctx, rq.target, session)
	h.removeProcFiles(dctx, rq.target, files)
}

// connectPTY serves Process/Connect on a PTY process: the start event,
// then the terminal's output from the offset execd reports at the call
// (what the shell wrote before is not replayed, as envd does not; what it
// writes between that report and the WebSocket comes as execd's replay),
// until the shell exits.
func (h *Handler) connectPTY(w http.ResponseWriter, r *http.Request, rq *request, call streamCall, rec procRecord) *Error {
	ctx := r.Context()
	release, e := h.admitPTYStream(rq)
	if e != nil {
		return e
	}
	defer release()
	key := ptyKey(rq, rec.PID)
	if hold := h.shared.ptyHolds.get(key); hold != nil {
		return h.followPTY(w, r, rec.PID, hold, call)
	}
	st, err := h.deps.Execd.PTYStatus(ctx, rq.target, rec.PTY)
	if execd.IsNotFound(err) || err == nil && !st.Running {
		return fail(CodeProcessNotFound, "process with pid "+strconv.FormatUint(uint64(rec.PID), 10)+" has ended")
	}
	if err != nil {
		return fromExecd(err, "process status")
	}
	conn, err := h.dialHeldPTY(ctx, rq.target, rec.PTY, st.OutputOffset)
	if errors.Is(err, execd.ErrPTYAttached) {
		return ptyAttached(rec.PID, "another gateway replica's stream")
	}
	if err != nil {
		return fromExecd(err, "connect process")
	}
	hold := h.shared.ptyHolds.hold(key, conn)
	if hold == nil {
		// Another stream of this process took it meanwhile.
		conn.Close()
		return ptyAttached(rec.PID, "a stream through this gateway")
	}
	defer h.shared.ptyHolds.release(key, hold)
	sw := connect.NewStreamWriter(w)
	if err := sw.Send(envd.ConnectResponse{Event: envd.ProcessEvent{Start: &envd.StartEvent{PID: rec.PID}}}); err != nil {
		conn.Close()
		return fail(CodeCanceled, "the client closed the stream")
	}
	return h.relayPTY(r, rq, sw, conn, ptyRelay{session: rec.PTY, files: h.procFiles(rec.PID), deadline: call.deadline(),
		keepalive: call.keepalive, timeout: call.timeout, hold: hold})
}

// ptyReleaseWaits are the pauses between attempts at a session's
// WebSocket while execd answers 409: execd releases a session a moment
// after its WebSocket closed (its handler's deferred unlock), so a call
// right after another one's WebSocket (a SendInput's, a Start stream whose
// client left) can find it still held. About 0.6 s in all; a session
// another stream really holds is still PTY_ATTACHED after them.
var ptyReleaseWaits = []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 60 * time.Millisecond,
	120 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond}

// dialHeldPTY is DialPTY on a session that may have just been released
// (ptyReleaseWaits).
func (h *Handler) dialHeldPTY(ctx context.Context, t execd.Target, id string, since int64) (*execd.PTYConn, error) {
	for i := 0; ; i++ {
		conn, err := h.deps.Execd.DialPTY(ctx, t, id, since)
		if err == nil || !errors.Is(err, execd.ErrPTYAttached) || i == len(ptyReleaseWaits) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(ptyReleaseWaits[i]):
		}
	}
}

// ptyAttached is PTY_ATTACHED for pid, held by who.
func ptyAttached(pid uint32, who string) *Error {
	return fail(CodePTYAttached, "the terminal of process "+strconv.FormatUint(uint64(pid), 10)+" is held by "+who+
		" (execd allows one connection per terminal); end that stream (process.Connect's handle.disconnect) and retry")
}

// ptyAct runs act on the WebSocket of rec's session: the one this
// process's stream holds, else one opened for the call (its output
// dropped: it stays in execd's replay buffer), closed once execd answered
// a ping sent after act (execd handles a connection's frames in order, so
// act's frames were handled).
func (h *Handler) ptyAct(ctx context.Context, rq *request, rec procRecord, what string, act func(*execd.PTYConn) error) *Error {
	if c := h.shared.ptyHolds.conn(ptyKey(rq, rec.PID)); c != nil {
		if err := act(c); err != nil {
			return fromExecd(err, what)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ptyActTimeout)
	defer cancel()
	notFound := fail(CodeProcessNotFound, "process with pid "+strconv.FormatUint(uint64(rec.PID), 10)+" is not running")
	// A WebSocket starts a session's shell when it is not running: a
	// session whose shell ended is not attached to.
	st, err := h.deps.Execd.PTYStatus(ctx, rq.target, rec.PTY)
	if execd.IsNotFound(err) || err == nil && !st.Running {
		return notFound
	}
	if err != nil {
		return fromExecd(err, what)
	}
	conn, err := h.dialHeldPTY(ctx, rq.target, rec.PTY, math.MaxInt64)
	if errors.Is(err, execd.ErrPTYAttached) {
		return ptyAttached(rec.PID, "another gateway replica's stream")
	}
	if err != nil {
		return fromExecd(err, what)
	}
	defer conn.Close()
	stopRead := context.AfterFunc(ctx, conn.Close)
	defer stopRead()
	if err := act(conn); err != nil {
		return fromExecd(err, what)
	}
	if err := conn.Ping(); err != nil {
		return fromExecd(err, what)
	}
	for {
		f, err := conn.Next()
		switch {
		case err != nil && ctx.Err() != nil:
			return fail(CodeUpstreamTimeout, what+": execd did not answer within "+ptyActTimeout.String())
		case err != nil:
			return fromExecd(err, what)
		case f.Kind == execd.PTYPong, f.Kind == execd.PTYExit:
			return nil
		case f.Kind == execd.PTYFailure:
			return fail(CodeExecdFailed, what+": execd reported "+f.Code+": "+f.Message)
		}
	}
}

// ptyRecord selects a PTY process for SendInput and Update.
func (h *Handler) ptyRecord(ctx context.Context, rq *request, sel *envd.ProcessSelector, method string) (procRecord, *Error) {
	rec, e := h.selectProcess(ctx, rq, sel)
	if e != nil {
		return rec, e
	}
	if rec.PTY == "" {
		return rec, fail(CodeUnsupportedOperation, method+" is not supported on a process started without a pty: it has no terminal")
	}
	return rec, nil
}

// processSendInput serves Process/SendInput: the bytes of input.pty are
// written to a PTY process's terminal (at most MaxMessageBytes, the
// message's bound); input.stdin to the stdin of a process started with one
// (sendStdin, stdin.go).
func (h *Handler) processSendInput(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	_, req, e := readUnary(h, r, envd.DecodeSendInputRequest)
	if e != nil {
		return e
	}
	if req.Input.PTY == nil {
		return h.sendStdin(w, r, rq, req)
	}
	rec, e := h.ptyRecord(r.Context(), rq, req.Process, "process.Process/SendInput")
	if e != nil {
		return e
	}
	if e := h.ptyAct(r.Context(), rq, rec, "send input", func(c *execd.PTYConn) error { return c.SendInput(req.Input.PTY) }); e != nil {
		return e
	}
	_ = connect.WriteUnary(w, envd.Empty{})
	return nil
}

// processUpdate serves Process/Update: a PTY process's terminal size
// (pty.size; none changes nothing).
func (h *Handler) processUpdate(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	_, req, e := readUnary(h, r, envd.DecodeUpdateRequest)
	if e != nil {
		return e
	}
	var size *envd.PTYSize
	if req.PTY != nil {
		size = req.PTY.Size
	}
	cols, rows, e := ptySize(size)
	if e != nil {
		return e
	}
	rec, e := h.ptyRecord(r.Context(), rq, req.Process, "process.Process/Update")
	if e != nil {
		return e
	}
	if cols > 0 && rows > 0 {
		if e := h.ptyAct(r.Context(), rq, rec, "resize", func(c *execd.PTYConn) error { return c.Resize(cols, rows) }); e != nil {
			return e
		}
	}
	_ = connect.WriteUnary(w, envd.Empty{})
	return nil
}

// ptySignal serves SendSignal on a PTY process: SIGKILL is execd's DELETE
// /pty/{id} (SIGKILL to the shell's process group; the stream holding it
// gets the end), SIGTERM a signal frame on its WebSocket (to the shell's
// process group).
func (h *Handler) ptySignal(ctx context.Context, rq *request, rec procRecord, sig envd.Signal) *Error {
	if sig == envd.SignalSIGTERM {
		return h.ptyAct(ctx, rq, rec, "send signal", func(c *execd.PTYConn) error { return c.Signal("SIGTERM") })
	}
	err := h.deps.Execd.DeletePTY(ctx, rq.target, rec.PTY)
	if execd.IsNotFound(err) {
		h.removeProcFiles(ctx, rq.target, h.procFiles(rec.PID))
		return fail(CodeProcessNotFound, "process with pid "+strconv.FormatUint(uint64(rec.PID), 10)+" is not running")
	}
	if err != nil {
		return fromExecd(err, "send signal")
	}
	if h.shared.ptyHolds.conn(ptyKey(rq, rec.PID)) == nil {
		h.removeProcFiles(ctx, rq.target, h.procFiles(rec.PID))
	}
	return nil
}
