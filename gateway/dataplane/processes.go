package dataplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// Processes that outlive their stream (Config.ExtendedOperations).
//
// envd keeps every process it started in a table: Process/List lists it,
// Connect attaches to a process's output from where it is, SendSignal
// ends it. execd has no such table (it knows a command by its id, has no
// list, and replays the output of a background command only as one merged
// log), so with ExtendedOperations the gateway keeps one per sandbox, in
// the sandbox, through execd's file API (no gateway state: any replica
// serves any call):
//
//   - <ProcessDir>/<pid>.json, the process record: execd's command id, the
//     pid the SDK got, the command's config and tag;
//   - <ProcessDir>/<pid>.out and <pid>.err, the command's stdout and stderr,
//     created empty before it starts, mode 0600 and owned by the user the
//     command runs as (outputScript), so no other user of the sandbox can
//     read or append to them.
//
// Process/Start runs the command as an execd background command (POST
// /command with background, docs/wire-facts.md §X1.4), whose wrapper appends its
// stdout and stderr to those files; the Start and Connect streams follow
// the files (GET /files/info for their sizes, GET /files/download with a
// Range for new bytes) and the command's status (GET /command/status/{id})
// until it has ended. So the bytes are exact (no line splitting), and
// output keeps flowing into the files whether or not any stream follows.

// procRecord is the JSON of <ProcessDir>/<pid>.json.
type procRecord struct {
	ID     string             `json:"id"`
	PID    uint32             `json:"pid"`
	Config envd.ProcessConfig `json:"config"`
	Tag    *string            `json:"tag,omitempty"`
	// PTY is the execd PTY session of a PTY process (ID is then the
	// session's UUID without its dashes); empty for a command.
	PTY string `json:"pty,omitempty"`
	// Stdin is set when the process was started with a writable stdin
	// (StartRequest.stdin): its stdin is the FIFO <pid>.in, held open by
	// the holder the background wrapper starts until CloseStdin writes to
	// <pid>.ctl (stdin.go).
	Stdin bool `json:"stdin,omitempty"`
	// EndsAt is a PTY process's deadline, its Start's Connect-Timeout-Ms
	// after the start (unix milliseconds; 0: none). The gateway process
	// that started the terminal ends it then (ptyDeadlineKill); one still
	// running ptyOrphanGrace later outlived that process, and the next
	// List, from any replica, ends it (records).
	EndsAt int64 `json:"endsAt,omitempty"`
}

// ptyOrphanGrace is how long past its record's EndsAt a terminal may
// still run before List ends it: the deadline kill of the gateway process
// that started it comes at EndsAt and takes a request.
const ptyOrphanGrace = 5 * time.Second

// Bounds of what the gateway reads back from the process directory, which
// the sandbox can write: each is checked before what it bounds is read.
const (
	// maxProcessRecords bounds the records one List (or a selection by
	// tag) reads: a directory naming more is refused.
	maxProcessRecords = 256
	// maxSearchBytes bounds execd's answer naming the directory's records
	// (bytes; a record's entry is about 200).
	maxSearchBytes = 1 << 20
	// recordOverhead is what a record holds besides the command's config
	// and tag, with room to spare (bytes): execd's command id, the pid.
	recordOverhead = 4 << 10
)

// recordLimit is the largest process record the gateway writes, and so
// reads back (bytes): the config and tag come from one Start message of
// at most MaxMessageBytes, encoded again without HTML escaping.
func (h *Handler) recordLimit() int64 { return int64(h.cfg.MaxMessageBytes) + recordOverhead }

// listBudget bounds the bytes of records one List reads (four records of
// the largest size; 16 MiB by default).
func (h *Handler) listBudget() int64 { return 4 * h.recordLimit() }

// encodeRecord encodes a process record as the gateway writes it: JSON
// without HTML escaping, so a command line's "<", ">" and "&" take one
// byte, not six. A record over recordLimit (a config whose encoding grew:
// invalid UTF-8, U+2028) is refused, since it could not be read back.
func (h *Handler) encodeRecord(rec procRecord) ([]byte, *Error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, fail(CodeBadRequest, "the process config cannot be encoded")
	}
	if int64(buf.Len()) > h.recordLimit() {
		return nil, fail(CodeBadRequest, "the process config is too large to keep in its process record ("+
			strconv.Itoa(buf.Len())+" bytes encoded, over "+strconv.FormatInt(h.recordLimit(), 10)+")")
	}
	return buf.Bytes(), nil
}

// procFiles are the sandbox paths of one process's record and output, and
// of its stdin FIFOs (in, ctl), which exist when stdin is set.
type procFiles struct {
	rec, out, err string
	in, ctl       string
	stdin         bool
}

func (h *Handler) procFiles(pid uint32) procFiles {
	base := path.Join(h.cfg.ProcessDir, strconv.FormatUint(uint64(pid), 10))
	return procFiles{rec: base + ".json", out: base + ".out", err: base + ".err", in: base + ".in", ctl: base + ".ctl"}
}

// recordFiles are the files of the process rec names.
func (h *Handler) recordFiles(rec procRecord) procFiles {
	f := h.procFiles(rec.PID)
	f.stdin = rec.Stdin
	return f
}

// all lists the paths of f that exist (the FIFOs only with stdin).
func (f procFiles) all() []string {
	if f.stdin {
		return []string{f.rec, f.out, f.err, f.in, f.ctl}
	}
	return []string{f.rec, f.out, f.err}
}

// newPID returns a random pid in [1, 2^31): the gateway names the process
// before execd has started it (its files are named by it).
func newPID() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	pid := binary.BigEndian.Uint32(b[:]) & 0x7fffffff
	if pid == 0 {
		pid = 1
	}
	return pid
}

// relative makes an absolute sandbox path relative to "/" ("." for "/").
// The background wrapper runs in "/" and names every path relative to it,
// so the command text holds no absolute path.
func relative(p string) string {
	if p == "/" {
		return "."
	}
	return strings.TrimPrefix(p, "/")
}

// wrapBackground wraps the SDK's command line for an execd background
// command run in "/": it opens the output files for appending on fds 3 and
// 4 (before it changes directory, so their paths stay relative to "/"),
// changes into the command's directory, runs the command with its stdout
// and stderr on them (the shell's own stderr silenced, so its "Killed" job
// notice stays out), and re-raises the signal that killed the command (as
// wrapCommand does), so execd's status reports it.
func wrapBackground(line string, f procFiles, cwd string) string {
	return "exec 3>>" + execd.Quote(relative(f.out)) + " 4>>" + execd.Quote(relative(f.err)) + " || exit 1; " +
		"cd -- " + execd.Quote(relative(cwd)) + " 2>&4 || exit 1; " +
		"{ " + line + " 2>&4 3>&- 4>&-; } >&3 2>/dev/null; __sandgate_rc=$?; " +
		"case $__sandgate_rc in 129|130|137|141|142|143) kill -$((__sandgate_rc-128)) $$;; esac; " +
		"exit $__sandgate_rc"
}

// startBackground serves Process/Start with ExtendedOperations: the output
// files, the background command, the record, then the start event and the
// output followed until the command ends.
func (h *Handler) startBackground(w http.ResponseWriter, r *http.Request, rq *request, sc startCall) *Error {
	ctx := r.Context()
	// envd refuses a directory that does not exist; execd, which runs the
	// wrapper in "/", cannot check it for us.
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
	// The record must be one the gateway can read back, or the process
	// would be out of reach once its stream ends: checked before it runs
	// (the id execd gives it is short).
	if _, e := h.encodeRecord(procRecord{ID: strings.Repeat("x", 64), PID: pid, Config: *sc.req.Process, Tag: sc.req.Tag, Stdin: true}); e != nil {
		return e
	}
	files := h.procFiles(pid)
	files.stdin = sc.req.Stdin != nil && *sc.req.Stdin
	if e := h.createOutput(ctx, rq.target, files, sc.user); e != nil {
		return e
	}
	creq := execd.CommandRequest{Command: wrapFor(sc.line, files, sc.cwd), Cwd: "/", Background: true, Envs: h.commandEnvs(sc.user, sc.req.Process.Envs)}
	if sc.timeout > 0 {
		creq.Timeout = max(sc.timeout.Milliseconds(), 1)
	}
	if sc.user.set {
		uid, gid := sc.user.user.UID, sc.user.user.GID
		creq.UID, creq.GID = &uid, &gid
	}
	begun := time.Now()
	id, err := h.runBackground(ctx, rq, creq)
	if err != nil {
		h.removeProcFiles(ctx, rq.target, files)
		return fromExecd(err, "start process")
	}
	rec, e := h.encodeRecord(procRecord{ID: id, PID: pid, Config: *sc.req.Process, Tag: sc.req.Tag, Stdin: files.stdin})
	if e != nil {
		e = fail(CodeExecdProtocol, "start process: execd named the command with an id of "+strconv.Itoa(len(id))+" bytes")
	} else if err := h.deps.Execd.WriteFiles(ctx, rq.target, []execd.SmallFile{{Path: files.rec, Data: rec, Permission: execd.Permission{Mode: 600}}}); err != nil {
		e = fromExecd(err, "start process")
	}
	if e != nil {
		// Nobody could find the command again: stop it.
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = h.deps.Execd.Interrupt(ictx, rq.target, id)
		h.removeProcFiles(ictx, rq.target, files)
		cancel()
		return e
	}
	sw := connect.NewStreamWriter(w)
	if err := sw.Send(envd.StartResponse{Event: envd.ProcessEvent{Start: &envd.StartEvent{PID: pid}}}); err != nil {
		return fail(CodeCanceled, "the client closed the stream")
	}
	f := &follower{id: id, files: files, statusMax: execd.StatusLimit(len(creq.Command))}
	var deadline time.Time
	if sc.timeout > 0 {
		deadline = begun.Add(sc.timeout)
	}
	return h.follow(r, rq, sw, f, followOpts{deadline: deadline, onDeadline: timeoutError(sc.timeout), execdDeadline: true,
		keepalive: sc.keepalive, cleanup: true, storedBy: begun.Add(registerGrace)})
}

// processDirScript makes the process directory ($1, relative to "/") as
// outputScript says, and exits 3 when it (or its parent) is a symlink or
// not execd's identity's.
const processDirScript = `umask 066
d=$1
mkdir -p -- "$d" || exit 1
if [ -L "$d" ] || [ ! -O "$d" ] || [ ! -O "$(dirname -- "$d")" ]; then exit 3; fi
chmod 711 -- "$d" || exit 1
`

// outputScript creates a process's output files, run by execd's own
// identity (root in OpenSandbox's pods) in "/" with the process directory
// ($1), the two files ($2, $3), the owner to give them ($4, "uid:gid";
// empty leaves them to execd's identity, which the command then runs as)
// and, for a process with a stdin, its two FIFOs ($5, $6; empty for none),
// all relative to "/". mkfifo fails on an existing path, as noclobber does
// for the files, and gives them mode 0600. Under umask 066 the directory and any parent it
// creates get mode 0711 (others may reach a file they own in it, not list
// or change it) and the files 0600; the directory is set to 0711 when it
// already exists. It must be execd's identity's, as its parent must, and
// not a symlink (exit 3): a directory another user owns lets that user swap
// the files. noclobber creates each file exclusively (exit 1 if it exists),
// and it is private from its creation: execd's identity owns it until the
// chown (-h: a symlink is never followed) gives it to the user.
const outputScript = processDirScript + `set -C
: > "$2" && : > "$3" || exit 1
if [ -n "$5" ]; then mkfifo -m 600 -- "$5" "$6" || exit 1; fi
if [ -n "$4" ]; then chown -h -- "$4" "$2" "$3" || exit 1; fi
if [ -n "$4" ] && [ -n "$5" ]; then chown -h -- "$4" "$5" "$6" || exit 1; fi
`

// createOutput creates the output files of a process started for u with
// outputScript (one foreground execd command).
func (h *Handler) createOutput(ctx context.Context, t execd.Target, f procFiles, u sdkUser) *Error {
	owner := ""
	if u.set {
		owner = strconv.FormatUint(uint64(u.user.UID), 10) + ":" + strconv.FormatUint(uint64(u.user.GID), 10)
	}
	in, ctl := "", ""
	if f.stdin {
		in, ctl = relative(f.in), relative(f.ctl)
	}
	res, err := h.deps.Execd.Shell(ctx, t, 4<<10, "/", outputScript, relative(h.cfg.ProcessDir), relative(f.out), relative(f.err), owner, in, ctl)
	switch {
	case err != nil:
		return fromExecd(err, "start process")
	case res.ExitCode == 3:
		return h.processDirRefused("start process")
	case res.ExitCode != 0:
		return fail(CodeExecdFailed, "start process: creating the output files in "+h.cfg.ProcessDir+
			" failed with exit status "+strconv.Itoa(res.ExitCode))
	}
	return nil
}

// processDirRefused is EXECD_FAILED for a process directory that
// processDirScript refused (exit 3).
func (h *Handler) processDirRefused(what string) *Error {
	return fail(CodeExecdFailed, what+": the process directory "+h.cfg.ProcessDir+
		" (or its parent) is a symlink or belongs to another user than execd's; remove it")
}

// runBackground starts an execd background command and returns its id:
// execd answers init, then execution_complete at once (docs/wire-facts.md §X1.4).
//
// When the stream breaks after init, the command may well be running: a
// proxy in front of execd (Go's httputil.ReverseProxy, as the OpenSandbox
// Ingress is) cuts about one such stream in a hundred right after init (see
// docs/dataplane.md). execd's status then says whether it started; only if
// execd does not know the id is the start a failure.
//
// execd sends no output on this stream, and its two events are under
// 200 bytes; what answers for it may send more: a line over 64 KiB
// (execd.LargeLineBytes) is not read further, and ends the start with
// EXECD_PROTOCOL (errBackgroundLine). Before, such a line was read with a
// large-line slot, as in a foreground stream, and a tenant starting
// processes in a loop against an execd answering 16 MiB lines kept the
// collector behind them (TestHostileExecdBackgroundLinesBoundedMemory).
func (h *Handler) runBackground(ctx context.Context, rq *request, creq execd.CommandRequest) (string, error) {
	t := rq.target
	stream, err := h.deps.Execd.RunCommand(ctx, t, creq)
	if err != nil {
		return "", err
	}
	defer stream.Close()
	stream.SetLargeLineGate(func() (func(), error) { return nil, errBackgroundLine })
	id := ""
	for {
		ev, err := stream.Next()
		switch {
		case err != nil && id != "" && ctx.Err() == nil:
			if h.awaitStored(ctx, t, id, execd.StatusLimit(len(creq.Command)), time.Now().Add(registerGrace)) == nil {
				return id, nil
			}
			if own := (*Error)(nil); errors.As(err, &own) {
				return "", own // the large line's gate
			}
			// execd sent init and then no execution_complete, and does not
			// know the command: it could not start it (execd then appends a
			// JSON error to the stream).
			return "", &execd.Error{Kind: execd.KindExecd, Status: http.StatusInternalServerError, Code: "RUNTIME_ERROR", Message: "execd could not start the background command"}
		case err != nil:
			return "", err
		case ev.Type == execd.EventInit && id == "":
			id = ev.Text
		case ev.Type == execd.EventExecutionComplete && id != "":
			return id, nil
		case ev.Type == execd.EventError:
			return "", &execd.Error{Kind: execd.KindExecd, Status: http.StatusInternalServerError, Code: "RUNTIME_ERROR", Message: "execd could not start the background command"}
		}
	}
}

// errBackgroundLine ends a background start whose stream sent a line over
// execd.LargeLineBytes: execd's own are init and execution_complete.
var errBackgroundLine = fail(CodeExecdProtocol, "start process: execd's stream of a background command sent a line over "+
	strconv.Itoa(execd.LargeLineBytes>>10)+" KiB; execd sends only its init and execution_complete events there")

// registerGrace is how long after its init event execd's status may still
// answer "command not found" for a background command: execd sends init
// before it starts the command, and stores the command for its status only
// once started, in a goroutine (OpenSandbox execd, runBackgroundCommand),
// so the status can lag even behind execution_complete.
const registerGrace = 2 * time.Second

// awaitStored asks execd's status for command id until it knows it, or
// until deadline (then it returns the not-found error), every 50 ms;
// statusMax bounds each answer (execd.StatusLimit).
func (h *Handler) awaitStored(ctx context.Context, t execd.Target, id string, statusMax int64, deadline time.Time) error {
	for {
		_, err := h.deps.Execd.CommandStatus(ctx, t, id, statusMax)
		if err == nil || !execd.IsNotFound(err) || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// removeProcFiles deletes a process's record and output files, best
// effort, on a context that outlives the request by at most 5 s.
func (h *Handler) removeProcFiles(ctx context.Context, t execd.Target, f procFiles) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = h.deps.Execd.DeleteFiles(dctx, t, f.all()...)
}

// follower is the state of one stream following a background command.
type follower struct {
	id             string
	files          procFiles
	outOff, errOff int64
	// statusMax bounds execd's status answers (execd.StatusLimit of the
	// command the gateway sent).
	statusMax int64
}

// recordStatusLimit bounds execd's status answer for the command of rec:
// the background wrapper around its command line, with room for a working
// directory of 4,096 bytes quoted (resolvePath's bound; quoting at most
// quadruples it).
func (h *Handler) recordStatusLimit(rec procRecord) int64 {
	line := commandLine(rec.Config.Cmd, rec.Config.Args)
	return execd.StatusLimit(len(wrapFor(line, h.recordFiles(rec), "/")) + 4*4096 + 2)
}

// Polling of a followed command's files and status: the period starts at
// pollMin after output and grows by half up to pollMax while nothing
// happens. execd itself polls a command's output every 100 ms.
const (
	pollMin = 50 * time.Millisecond
	pollMax = 500 * time.Millisecond
	// cleanupGrace is how long after a Start stream delivered its
	// process's end the process's files stay, for Connect streams that
	// follow it and poll at most every pollMax.
	cleanupGrace = 20 * pollMax
	// readChunk bounds the bytes read from one output file per poll.
	readChunk = 1 << 20
)

// followOpts says how a stream follows a command.
type followOpts struct {
	// deadline (zero: none) ends the stream early with onDeadline.
	deadline   time.Time
	onDeadline *Error
	// execdDeadline: execd was given the same deadline (Start), so a kill
	// found at or after it is that deadline.
	execdDeadline bool
	keepalive     time.Duration
	// cleanup removes the process's files once its end was delivered (the
	// Start stream does; a Connect stream leaves them to the others).
	cleanup bool
	// storedBy (zero: none): until then execd's status may not know the
	// command yet (registerGrace), which is not its end.
	storedBy time.Time
}

// follow streams f's new output until its command ends, then the end event
// from execd's status and the end-stream frame.
func (h *Handler) follow(r *http.Request, rq *request, sw *connect.StreamWriter, f *follower, o followOpts) *Error {
	ctx := r.Context()
	deadline, keepalive := o.deadline, o.keepalive
	deadlineC, stop := deadlineTimer(deadline)
	defer stop()
	ka := time.NewTimer(keepalive)
	defer ka.Stop()
	interval := pollMin
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return fail(CodeCanceled, "the client closed the stream")
		case <-deadlineC:
			return endStream(sw, o.onDeadline)
		case <-ending(ctx):
			return endStream(sw, drainingError("ended this stream at the end of its drain grace; the process keeps running and can be connected to again"))
		case <-ka.C:
			_ = sw.Send(envd.StartResponse{Event: envd.ProcessEvent{KeepAlive: &envd.KeepAlive{}}})
			ka.Reset(keepalive)
			continue
		case <-poll.C:
		}
		// A poll decodes execd's answers: it waits for a slot of the
		// upstream bound (its next turn) rather than failing the stream.
		release, busy := h.admitUpstream(ctx, rq, 0)
		if busy != nil {
			poll.Reset(interval)
			continue
		}
		done, next, got, e := h.pollOnce(ctx, rq, sw, f, o, deadline, interval)
		release()
		if done {
			return e
		}
		if got {
			ka.Reset(keepalive)
		}
		interval = next
		poll.Reset(interval)
	}
}

// pollOnce is one poll of follow: the command's status, then its new
// output. done reports that the stream has ended (with e, nil on a clean
// end); next is the period until the following poll given the current
// one, interval; got that output was sent.
func (h *Handler) pollOnce(ctx context.Context, rq *request, sw *connect.StreamWriter, f *follower, o followOpts,
	deadline time.Time, interval time.Duration) (done bool, next time.Duration, got bool, e *Error) {
	// broken ends the stream when execd could not be followed: with the
	// sandbox's refusal if it is gone (sandboxGone).
	broken := func(e *Error) *Error { return endStream(sw, h.sandboxGone(ctx, rq, e)) }
	// The status first: output read after a finished status is all of it.
	st, err := h.deps.Execd.CommandStatus(ctx, rq.target, f.id, f.statusMax)
	if execd.IsNotFound(err) && time.Now().Before(o.storedBy) {
		return false, pollMin, false, nil
	}
	if execd.IsNotFound(err) {
		return true, 0, false, broken(fail(CodeProcessNotFound, "execd no longer knows the command (was execd restarted?)"))
	}
	if err != nil {
		return true, 0, false, broken(fromExecd(err, "process status"))
	}
	got, e = h.pump(ctx, rq.target, sw, f)
	if e != nil {
		return true, 0, got, broken(e)
	}
	if !st.Running {
		if o.execdDeadline && !deadline.IsZero() && !time.Now().Before(deadline) && st.ExitCode != nil && *st.ExitCode == -1 {
			return true, 0, got, endStream(sw, o.onDeadline) // execd's timer, the same deadline
		}
		_ = sw.Send(envd.StartResponse{Event: envd.ProcessEvent{End: endFromStatus(st)}})
		_ = sw.Close(nil)
		if o.cleanup {
			// Not at once: a Connect stream following the same process
			// still has to read the output written since its last poll
			// (at most pollMax ago). Until then the files stay; a gateway
			// that stops meanwhile leaves them to List's prune, as a
			// Start stream whose client left does.
			// The files of a tenant's ended processes wait out the
			// grace only while its count of waiting cleanups is under
			// its bound (deferCleanup); past it they go at once.
			if release, ok := h.deferCleanup(rq); ok {
				t, files := rq.target, f.files
				time.AfterFunc(h.cleanupGrace, func() {
					defer release()
					h.removeProcFiles(context.Background(), t, files)
				})
			} else {
				h.removeProcFiles(ctx, rq.target, f.files)
			}
		}
		return true, 0, got, nil
	}
	if got {
		return false, pollMin, true, nil
	}
	return false, min(interval*3/2, pollMax), false, nil
}

// pump sends what the output files gained since the last call. It reports
// whether anything was sent. Output files that are gone (removed by a
// List's prune, or by the sandbox) end the stream with PROCESS_NOT_FOUND:
// what was written since the last poll cannot be delivered, and a clean
// end without it would say the process wrote nothing more.
func (h *Handler) pump(ctx context.Context, t execd.Target, sw *connect.StreamWriter, f *follower) (bool, *Error) {
	sizes, err := h.deps.Execd.Info(ctx, t, []string{f.files.out, f.files.err})
	if execd.IsNotFound(err) {
		return false, fail(CodeProcessNotFound, "the output files of the process were removed before this stream read all of it")
	}
	if err != nil {
		return false, fromExecd(err, "process output")
	}
	got := false
	for _, s := range []struct {
		path  string
		off   *int64
		event string
	}{{f.files.out, &f.outOff, execd.EventStdout}, {f.files.err, &f.errOff, execd.EventStderr}} {
		for size := sizes[s.path].Size; *s.off < size; {
			b, err := h.deps.Execd.ReadAt(ctx, t, s.path, *s.off, min(size-*s.off, readChunk))
			if err != nil {
				return got, fromExecd(err, "process output")
			}
			if len(b) == 0 {
				break
			}
			*s.off += int64(len(b))
			h.sendData(sw, s.event, b)
			got = true
		}
	}
	return got, nil
}

// endFromStatus is envd's end event for a finished command, from execd's
// status: exit code N, or -1 with the signal in Error ("signal: killed").
func endFromStatus(st execd.CommandStatus) *envd.EndEvent {
	code := 0
	if st.ExitCode != nil {
		code = *st.ExitCode
	}
	switch {
	case code == 0:
		return &envd.EndEvent{Exited: true, Status: "exit status 0"}
	case code == -1:
		status := "signal: killed"
		if strings.HasPrefix(st.Error, "signal: ") {
			status = st.Error
		}
		return &envd.EndEvent{ExitCode: -1, Status: status, Error: status}
	default:
		status := "exit status " + strconv.Itoa(code)
		return &envd.EndEvent{ExitCode: int32(code), Exited: true, Status: status, Error: status}
	}
}

// readRecord reads the record of pid, at most recordLimit bytes of it,
// and returns it with its size. A missing or unreadable record, or one
// whose id is not a command id execd gives (execd.ValidCommandID), is
// PROCESS_NOT_FOUND: the sandbox owns the directory, so a record that is
// not ours names no process of ours.
func (h *Handler) readRecord(ctx context.Context, t execd.Target, pid uint32) (procRecord, int64, *Error) {
	notFound := fail(CodeProcessNotFound, "process with pid "+strconv.FormatUint(uint64(pid), 10)+" not found")
	b, err := h.deps.Execd.ReadAt(ctx, t, h.procFiles(pid).rec, 0, h.recordLimit()+1)
	if execd.IsNotFound(err) {
		return procRecord{}, 0, notFound
	}
	if err != nil {
		return procRecord{}, 0, fromExecd(err, "process record")
	}
	var rec procRecord
	why := ""
	switch {
	case int64(len(b)) > h.recordLimit():
		why = "the record is larger than a record can be"
	case json.Unmarshal(b, &rec) != nil:
		why = "the record is not JSON of a record"
	case rec.PID != pid:
		why = "the record names another pid"
	case !execd.ValidCommandID(rec.ID):
		why = "the record's id is not an execd command id"
	case rec.PTY != "" && (!execd.ValidPTYSessionID(rec.PTY) || ptyRecordID(rec.PTY) != rec.ID):
		why = "the record's pty is not its id's session"
	}
	if why != "" {
		notFound.cause = why // logged, not answered: the record is the sandbox's
		return procRecord{}, int64(len(b)), notFound
	}
	return rec, int64(len(b)), nil
}

// selectProcess finds the record a ProcessSelector names: by pid, or the
// first running process with the tag.
func (h *Handler) selectProcess(ctx context.Context, rq *request, sel *envd.ProcessSelector) (procRecord, *Error) {
	t := rq.target
	if sel.PID != nil {
		rec, _, e := h.readRecord(ctx, t, uint32(*sel.PID))
		return rec, e
	}
	release, e := h.admitProcessCall(ctx, rq)
	if e != nil {
		return procRecord{}, e
	}
	defer release()
	procs, e := h.records(ctx, t, false)
	if e != nil {
		return procRecord{}, e
	}
	for _, p := range procs {
		if p.Tag != nil && *p.Tag == *sel.Tag {
			return p, nil
		}
	}
	return procRecord{}, fail(CodeProcessNotFound, "process with tag "+truncate(*sel.Tag, 64)+" not found")
}

// records returns the records of the running processes, ordered by pid.
// Records of commands that have ended (or that execd no longer knows) are
// removed with their output files when prune is set. What it reads is
// bounded before it is read: execd's search answer (maxSearchBytes), the
// records it names (maxProcessRecords), each record (recordLimit, by the
// size the search reported: a larger one is not the gateway's and is left
// alone), and the bytes of the records read whole (listBudget). A record
// is first read up to recordHead bytes, which hold the command id and pid
// the gateway writes first; a record naming a command an earlier record
// named is not the gateway's either (it writes one record per command) and
// is not read further, so planted copies of a running command's record
// cost recordHead bytes each. The upstream requests of one call are at
// most 1 (search) + 3 per record (head, rest, status) + one delete per
// pruneBatch ended records. A directory beyond a bound is refused with
// EXECD_FAILED, and nothing is pruned.
func (h *Handler) records(ctx context.Context, t execd.Target, prune bool) ([]procRecord, *Error) {
	tooMuch := func(what string) *Error {
		return fail(CodeExecdFailed, "list processes: the process directory "+h.cfg.ProcessDir+" holds "+what+
			"; remove the records (<pid>.json) of processes that are no longer needed")
	}
	found, err := h.deps.Execd.Search(ctx, t, h.cfg.ProcessDir, "*.json", maxSearchBytes)
	switch {
	case execd.IsNotFound(err):
		return nil, nil
	case errors.Is(err, execd.ErrTooLarge):
		return nil, tooMuch("more than " + strconv.Itoa(maxSearchBytes) + " bytes of search results")
	case err != nil:
		return nil, fromExecd(err, "list processes")
	}
	type candidate struct {
		pid  uint32
		size int64
	}
	var cands []candidate
	for _, fi := range found {
		n, err := strconv.ParseUint(strings.TrimSuffix(path.Base(fi.Path), ".json"), 10, 31)
		if err != nil || path.Dir(fi.Path) != h.cfg.ProcessDir || fi.Size > h.recordLimit() || fi.Size <= 0 {
			continue
		}
		cands = append(cands, candidate{uint32(n), fi.Size})
	}
	if len(cands) > maxProcessRecords {
		return nil, tooMuch("more than " + strconv.Itoa(maxProcessRecords) + " process records")
	}
	var out, ended []procRecord
	var read int64
	seen := map[string]bool{}
	for _, c := range cands {
		id, e := h.recordID(ctx, t, c.pid)
		if e != nil {
			if e.Code == CodeProcessNotFound {
				continue
			}
			return nil, e
		}
		if seen[id] {
			continue // a second record of one command: not the gateway's
		}
		seen[id] = true
		if read += c.size; read > h.listBudget() {
			return nil, tooMuch("more than " + strconv.FormatInt(h.listBudget(), 10) + " bytes of process records")
		}
		rec, n, e := h.readRecord(ctx, t, c.pid)
		// The search's size is execd's word: the budget counts the bytes
		// that came, when there were more.
		if read += max(n-c.size, 0); read > h.listBudget() {
			return nil, tooMuch("more than " + strconv.FormatInt(h.listBudget(), 10) + " bytes of process records")
		}
		if e != nil {
			if e.Code == CodeProcessNotFound {
				continue
			}
			return nil, e
		}
		if rec.ID != id {
			continue // rewritten between the two reads
		}
		running, err := h.recordRunning(ctx, t, rec)
		if running && rec.PTY != "" && rec.EndsAt > 0 && time.Now().After(time.UnixMilli(rec.EndsAt).Add(ptyOrphanGrace)) {
			// Past its deadline: the gateway process that started it
			// stopped before its deadline kill. Ended, as envd ends a
			// process whose timeout passed; a pruning List deletes its
			// session.
			running = false
		}
		switch {
		case err == nil && running:
			out = append(out, rec)
		case err == nil || execd.IsNotFound(err):
			ended = append(ended, rec)
		default:
			return nil, fromExecd(err, "process status")
		}
	}
	if prune {
		for len(ended) > 0 {
			n := min(len(ended), pruneBatch)
			var paths []string
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			for _, rec := range ended[:n] {
				paths = append(paths, h.recordFiles(rec).all()...)
				if rec.PTY != "" {
					_ = h.deps.Execd.DeletePTY(dctx, t, rec.PTY) // ended: execd still keeps it
				}
			}
			ended = ended[n:]
			_ = h.deps.Execd.DeleteFiles(dctx, t, paths...)
			cancel()
		}
	}
	slices.SortFunc(out, func(a, b procRecord) int { return int(a.PID) - int(b.PID) })
	return out, nil
}

// recordRunning asks execd whether the process of rec runs: a PTY process
// while its execd session's shell does, a command while execd's status
// says so. execd's not-found comes back as its error.
func (h *Handler) recordRunning(ctx context.Context, t execd.Target, rec procRecord) (bool, error) {
	if rec.PTY != "" {
		st, err := h.deps.Execd.PTYStatus(ctx, t, rec.PTY)
		return st.Running, err
	}
	st, err := h.deps.Execd.CommandStatus(ctx, t, rec.ID, h.recordStatusLimit(rec))
	return st.Running, err
}

// recordHead is how much of a record recordID reads (bytes): the gateway
// writes the command id (execd's ids are 32 hex digits) and the pid before
// the config.
const recordHead = 1 << 10

// pruneBatch is how many ended processes one DELETE /files removes (three
// paths each, five with a stdin).
const pruneBatch = 64

// recordID reads the first recordHead bytes of pid's record and returns
// the command id it names. A record that does not start as the gateway
// writes it ({"id":"…","pid":<pid>, the id one execd.ValidCommandID
// accepts) is PROCESS_NOT_FOUND.
func (h *Handler) recordID(ctx context.Context, t execd.Target, pid uint32) (string, *Error) {
	notFound := fail(CodeProcessNotFound, "process with pid "+strconv.FormatUint(uint64(pid), 10)+" not found")
	b, err := h.deps.Execd.ReadAt(ctx, t, h.procFiles(pid).rec, 0, recordHead)
	if execd.IsNotFound(err) {
		return "", notFound
	}
	if err != nil {
		return "", fromExecd(err, "process record")
	}
	id, gotPID, ok := parseRecordHead(b)
	if !ok || gotPID != pid || !execd.ValidCommandID(id) {
		return "", notFound
	}
	return id, nil
}

// parseRecordHead reads the first two members of a record's JSON prefix
// b, which must be "id" (a string) and "pid" (an integer below 2^31), as
// the gateway writes them; the rest of b, cut anywhere, is not read.
func parseRecordHead(b []byte) (id string, pid uint32, ok bool) {
	d := jsontext.NewDecoder(bytes.NewReader(b))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", 0, false
	}
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '"' || tok.String() != "id" {
		return "", 0, false
	}
	tok, err := d.ReadToken()
	if err != nil || tok.Kind() != '"' {
		return "", 0, false
	}
	id = tok.String()
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '"' || tok.String() != "pid" {
		return "", 0, false
	}
	tok, err = d.ReadToken()
	if err != nil || tok.Kind() != '0' {
		return "", 0, false
	}
	n, err := strconv.ParseUint(tok.String(), 10, 31)
	if err != nil {
		return "", 0, false
	}
	return id, uint32(n), true
}

// processList serves Process/List: the running processes the gateway
// started in this sandbox (with ExtendedOperations), as envd lists its
// table.
func (h *Handler) processList(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	if _, e := h.basicUser(r); e != nil {
		return e
	}
	msg, e := h.readMessage(r)
	if e != nil {
		return e
	}
	if err := json.Unmarshal(msg, &struct{}{}); err != nil {
		return fail(CodeBadRequest, "the request message is not a JSON object")
	}
	release, e := h.admitProcessCall(r.Context(), rq)
	if e != nil {
		return e
	}
	defer release()
	recs, e := h.records(r.Context(), rq.target, true)
	if e != nil {
		return e
	}
	resp := envd.ListResponse{Processes: make([]envd.ProcessInfo, 0, len(recs))}
	for _, rec := range recs {
		resp.Processes = append(resp.Processes, envd.ProcessInfo{Config: rec.Config, PID: rec.PID, Tag: rec.Tag})
	}
	_ = connect.WriteUnary(w, resp)
	return nil
}

// processSendSignal serves Process/SendSignal with execd's DELETE
// /command?id=, which sends SIGTERM to the command's process group and
// SIGKILL 3 s later: for SIGKILL envd kills at once, here after the grace
// (docs/dataplane.md). Signals other than SIGTERM and SIGKILL are
// unsupported, as in envd.
func (h *Handler) processSendSignal(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	_, req, e := readUnary(h, r, envd.DecodeSendSignalRequest)
	if e != nil {
		return e
	}
	if req.Signal != envd.SignalSIGKILL && req.Signal != envd.SignalSIGTERM {
		return fail(CodeUnsupportedOperation, "invalid signal "+strconv.Itoa(int(req.Signal))+": only SIGTERM and SIGKILL are supported, as in envd")
	}
	rec, e := h.selectProcess(r.Context(), rq, req.Process)
	if e != nil {
		return e
	}
	if rec.PTY != "" {
		if e := h.ptySignal(r.Context(), rq, rec, req.Signal); e != nil {
			return e
		}
		_ = connect.WriteUnary(w, envd.Empty{})
		return nil
	}
	if err := h.deps.Execd.Interrupt(r.Context(), rq.target, rec.ID); err != nil {
		var xe *execd.Error
		if errors.As(err, &xe) && xe.Kind == execd.KindExecd && (strings.Contains(xe.Message, "is not running") || strings.Contains(xe.Message, "no such session")) {
			return fail(CodeProcessNotFound, "process with pid "+strconv.FormatUint(uint64(rec.PID), 10)+" is not running")
		}
		return fromExecd(err, "send signal")
	}
	_ = connect.WriteUnary(w, envd.Empty{})
	return nil
}

// processConnect serves Process/Connect: the start event, then the
// process's output from where it is (nothing written before the call is
// replayed, as in envd), then its end. A process that has already ended
// gets its retained end event, as newer envd serves it. Connect-Timeout-Ms
// limits the stream, not the process.
func (h *Handler) processConnect(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	if _, e := h.basicUser(r); e != nil {
		return e
	}
	call, e := h.readStreamCall(r, "Process/Connect")
	if e != nil {
		return e
	}
	req, err := envd.DecodeConnectRequest(call.payload)
	if err != nil {
		return fail(CodeBadRequest, err.Error())
	}
	ctx := r.Context()
	begun := time.Now()
	rec, e := h.selectProcess(ctx, rq, req.Process)
	if e != nil {
		return e
	}
	if rec.PTY != "" {
		return h.connectPTY(w, r, rq, call, rec)
	}
	st, err := h.deps.Execd.CommandStatus(ctx, rq.target, rec.ID, h.recordStatusLimit(rec))
	if execd.IsNotFound(err) {
		return fail(CodeProcessNotFound, "process with pid "+strconv.FormatUint(uint64(rec.PID), 10)+" not found")
	}
	if err != nil {
		return fromExecd(err, "process status")
	}
	f := &follower{id: rec.ID, files: h.recordFiles(rec), statusMax: h.recordStatusLimit(rec)}
	sizes, err := h.deps.Execd.Info(ctx, rq.target, []string{f.files.out, f.files.err})
	if err != nil && !execd.IsNotFound(err) {
		return fromExecd(err, "process output")
	}
	f.outOff, f.errOff = sizes[f.files.out].Size, sizes[f.files.err].Size
	sw := connect.NewStreamWriter(w)
	if err := sw.Send(envd.ConnectResponse{Event: envd.ProcessEvent{Start: &envd.StartEvent{PID: rec.PID}}}); err != nil {
		return fail(CodeCanceled, "the client closed the stream")
	}
	if !st.Running {
		_ = sw.Send(envd.ConnectResponse{Event: envd.ProcessEvent{End: endFromStatus(st)}})
		_ = sw.Close(nil)
		return nil
	}
	var deadline time.Time
	if call.timeout > 0 {
		deadline = begun.Add(call.timeout)
	}
	return h.follow(r, rq, sw, f, followOpts{deadline: deadline, keepalive: call.keepalive,
		onDeadline: fail(CodeCommandTimeout, "the connection ran past its "+call.timeout.String()+" timeout; the process keeps running")})
}
