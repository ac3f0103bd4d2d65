package execdstub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const sigKill = syscall.SIGKILL

// RunCommandRequest is the JSON body of POST /command (docs/wire-facts.md §X1.4).
// The Go type name matters: decode errors quote it, e.g. "json: cannot
// unmarshal string into Go struct field RunCommandRequest.timeout of type
// int64", exactly as execd does.
type RunCommandRequest struct {
	// Command is the shell text run as `bash -c Command` (`sh -c` without
	// bash). Required.
	Command string `json:"command"`
	// Cwd is the sandbox working directory; it must exist ("" = sandbox
	// "/", i.e. Root). A relative Cwd is taken relative to sandbox "/".
	Cwd string `json:"cwd,omitempty"`
	// Background selects detached mode: init, then execution_complete at
	// once; poll /command/status/{id} and /command/{id}/logs.
	Background bool `json:"background,omitempty"`
	// TimeoutMs is the run-time limit in milliseconds (JSON "timeout");
	// 0/omitted = none, negative is a validation error. On expiry the
	// process group gets SIGKILL.
	TimeoutMs int64 `json:"timeout,omitempty"`
	// Uid runs the command as this user id (SysProcAttr.Credential; the
	// primary gid and supplementary groups come from the user database).
	Uid *uint32 `json:"uid,omitempty"`
	// Gid overrides the group id; it requires Uid.
	Gid *uint32 `json:"gid,omitempty"`
	// Envs is overlaid on the stub process environment.
	Envs map[string]string `json:"envs,omitempty"`
}

// Event is one object of the POST /command stream, written as the bare
// JSON object followed by "\n\n" with no "data:" prefix (§X1.4). Every field
// is omitted when zero. Timestamp is unix milliseconds; ExecutionTime is
// milliseconds.
type Event struct {
	// Type is init, ping, stdout, stderr, execution_complete or error.
	Type string `json:"type,omitempty"`
	// Text is the command id (init), "pong" (ping) or one output line
	// without its terminator, an empty line being "\n" (stdout/stderr).
	Text string `json:"text,omitempty"`
	// ExecutionCount is used by Jupyter /code only; never set here.
	ExecutionCount int `json:"execution_count,omitempty"`
	// ExecutionTime is the run time in ms on execution_complete.
	ExecutionTime int64 `json:"execution_time,omitempty"`
	// Timestamp is the emission time in unix ms.
	Timestamp int64 `json:"timestamp,omitempty"`
	// Results is used by Jupyter /code only; never set here.
	Results map[string]any `json:"results,omitempty"`
	// Error is set on type error.
	Error *EventError `json:"error,omitempty"`
}

// EventError is the error member of an error event (§X1.4): EName is
// "CommandExecError"; EValue is the exit code as a decimal string ("-1" when
// a signal killed the command, or the start error text when it could not
// start); Traceback holds the Go error text, e.g. "exit status 3",
// "signal: killed", "signal: terminated".
type EventError struct {
	// EName is always "CommandExecError" for commands.
	EName string `json:"ename"`
	// EValue is the exit code as a decimal string, "-1" for a signal.
	EValue string `json:"evalue"`
	// Traceback holds one entry: the Go error text.
	Traceback []string `json:"traceback"`
}

// CommandRecord is the stub's view of one command, for test assertions
// (it is not part of the execd API).
type CommandRecord struct {
	// ID is the 32-hex command id sent in the init event.
	ID string
	// Request is the decoded POST /command body.
	Request RunCommandRequest
	// Dir is the host directory the command ran in.
	Dir string
	// PID is the process (and process group) id; 0 if it never started.
	PID int
	// StartErr is the exec error when the command could not start. A
	// foreground command that failed to start is invisible to the HTTP API,
	// as in execd (DELETE says "no such session", status 404).
	StartErr string
	// StartedAt is when the request was accepted.
	StartedAt time.Time
	// Running is true until the process has been reaped.
	Running bool
	// FinishedAt is when the process was reaped (zero while running).
	FinishedAt time.Time
	// ExitCode is the exit status; -1 when killed by a signal (execd's
	// exit_code); 255 for a background command that failed to start.
	ExitCode int
	// Signal is the signal that killed the process, 0 if none.
	Signal syscall.Signal
	// Err is execd's error text ("exit status 4", "signal: terminated"),
	// "" after a clean exit.
	Err string
	// Interrupted is set once DELETE /command?id= was accepted for it.
	Interrupted bool
	// ClientDisconnected is set when the client of a foreground stream went
	// away while the command was still running (the command keeps running,
	// §X1.4).
	ClientDisconnected bool
	// Background mirrors Request.Background.
	Background bool
	// Done is closed when the process has ended and the record is final.
	Done <-chan struct{}
}

// command is the internal state behind a CommandRecord; rec is guarded by
// Server.mu.
type command struct {
	rec     CommandRecord
	done    chan struct{}
	pid     int
	outPath string
	hidden  bool
}

// Commands returns a snapshot of every command received, in start order.
func (s *Server) Commands() []CommandRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CommandRecord, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.cmds[id].rec)
	}
	return out
}

// Command returns the record of command id.
func (s *Server) Command(id string) (CommandRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cmds[id]
	if !ok {
		return CommandRecord{}, false
	}
	return c.rec, true
}

// WaitCommand blocks until some command record satisfies pred and returns
// it, or returns ctx.Err(). pred runs with the Server's lock held and must
// not call Server methods. Typical predicates: "a command with this text
// has started", "ClientDisconnected", "!Running".
func (s *Server) WaitCommand(ctx context.Context, pred func(CommandRecord) bool) (CommandRecord, error) {
	for {
		s.mu.Lock()
		for _, id := range s.order {
			if rec := s.cmds[id].rec; pred(rec) {
				s.mu.Unlock()
				return rec, nil
			}
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return CommandRecord{}, ctx.Err()
		}
	}
}

// notifyLocked wakes WaitCommand callers; s.mu must be held.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) update(id string, f func(c *command)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cmds[id]; ok {
		f(c)
		s.notifyLocked()
	}
}

func (s *Server) register(id string, req *RunCommandRequest, dir string, started time.Time, pid int, outPath string) *command {
	c := &command{done: make(chan struct{}), pid: pid, outPath: outPath}
	c.rec = CommandRecord{
		ID: id, Request: *req, Dir: dir, PID: pid, StartedAt: started,
		Running: pid > 0, Background: req.Background, Done: c.done,
	}
	s.mu.Lock()
	s.cmds[id] = c
	s.order = append(s.order, id)
	if pid > 0 {
		s.running.Add(1)
	}
	s.notifyLocked()
	s.mu.Unlock()
	return c
}

// finish records the end of c (execd's markCommandFinished).
func (s *Server) finish(c *command, code int, errMsg string, sig syscall.Signal) {
	s.mu.Lock()
	wasRunning := c.rec.Running
	c.rec.Running = false
	c.rec.ExitCode = code
	c.rec.Err = errMsg
	c.rec.Signal = sig
	c.rec.FinishedAt = time.Now()
	c.pid = 0
	s.notifyLocked()
	s.mu.Unlock()
	close(c.done)
	if wasRunning {
		s.running.Done()
	}
}

// newCommandID returns a random UUIDv4 without dashes, as execd does.
func newCommandID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// eventStream writes the bare-JSON event stream. Headers are committed
// lazily on the first event so that errors found earlier can still be sent
// as JSON (§X1.4); writes are skipped once the client is gone or the handler
// has finished.
type eventStream struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	reqCtx    context.Context
	mu        sync.Mutex
	committed bool
	stopped   bool
	pings     sync.WaitGroup
}

func (st *eventStream) send(ev Event) {
	if st.reqCtx.Err() != nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped {
		return
	}
	st.commitLocked()
	b, _ := json.Marshal(ev)
	_, _ = st.w.Write(append(b, '\n', '\n'))
	_ = st.rc.Flush()
}

func (st *eventStream) commitLocked() {
	if st.committed {
		return
	}
	st.committed = true
	h := st.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	st.w.WriteHeader(http.StatusOK)
	_ = st.rc.Flush()
}

func now() int64 { return time.Now().UnixMilli() }

// sendInit writes the init event and starts the pings: the first ping is
// written immediately after init (the real execd starts a goroutine that
// pings at once, so this is one of its possible orders, made deterministic
// here), then every PingInterval until the handler ends or the client goes.
func (s *Server) sendInit(ctx context.Context, st *eventStream, id string) {
	st.send(Event{Type: "init", Text: id, Timestamp: now()})
	st.send(Event{Type: "ping", Text: "pong", Timestamp: now()})
	st.pings.Add(1)
	go func() {
		defer st.pings.Done()
		t := time.NewTicker(s.ping)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				st.send(Event{Type: "ping", Text: "pong", Timestamp: now()})
			}
		}
	}()
}

// handleRunCommand serves POST /command (§X1.4). The body is decoded as JSON
// whatever its Content-Type; validation errors are 400 JSON before any
// stream starts. After the terminal event the handler waits
// GracefulShutdown before ending the response, and pings may still appear
// during that wait, as in execd.
func (s *Server) handleRunCommand(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	var req RunCommandRequest
	err := json.NewDecoder(r.Body).Decode(&req)
	// Drain the rest so that net/http notices a client disconnect.
	_, _ = io.Copy(io.Discard, r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest,
			fmt.Sprintf("error parsing request, MAYBE invalid body format. %v", err))
		return
	}
	if err := s.validateRunCommand(&req); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest,
			fmt.Sprintf("invalid request, validation error %v", err))
		return
	}

	ctx, cancel := context.WithCancel(r.Context())
	st := &eventStream{w: w, rc: http.NewResponseController(w), reqCtx: r.Context()}
	defer func() {
		cancel()
		st.mu.Lock()
		st.stopped = true
		st.mu.Unlock()
		st.pings.Wait()
	}()

	if req.Background {
		err = s.runBackground(ctx, st, &req)
	} else {
		err = s.runForeground(ctx, st, &req, r)
	}
	if err != nil {
		msg := fmt.Sprintf("error running commands %v", err)
		st.mu.Lock()
		committed := st.committed
		st.stopped = true
		st.mu.Unlock()
		if committed {
			// gin cannot change the status any more: the JSON error
			// body is appended to the event stream as is.
			b, _ := json.Marshal(errorBody{Code: CodeRuntimeError, Message: msg})
			_, _ = w.Write(b)
			return
		}
		writeError(w, http.StatusInternalServerError, CodeRuntimeError, msg)
		return
	}
	if s.grace > 0 {
		t := time.NewTimer(s.grace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.closed:
		}
	}
}

// validateRunCommand reproduces execd's RunCommandRequest.Validate: the
// go-playground validator messages for command (required) and timeout
// (gte=1 when set), then the uid/gid rule, then the working directory
// (expanded with the stub environment only, not with envs).
func (s *Server) validateRunCommand(req *RunCommandRequest) error {
	var verrs []string
	if req.Command == "" {
		verrs = append(verrs, "Key: 'RunCommandRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag")
	}
	if req.TimeoutMs != 0 && req.TimeoutMs < 1 {
		verrs = append(verrs, "Key: 'RunCommandRequest.TimeoutMs' Error:Field validation for 'TimeoutMs' failed on the 'gte' tag")
	}
	if len(verrs) > 0 {
		return errors.New(strings.Join(verrs, "\n"))
	}
	if req.Gid != nil && req.Uid == nil {
		return errors.New("uid is required when gid is provided")
	}
	if req.Cwd == "" {
		return nil
	}
	resolved, err := s.expand(req.Cwd, nil)
	if err != nil {
		return fmt.Errorf("cannot resolve working directory %q: %w", req.Cwd, err)
	}
	fi, err := os.Stat(s.HostPath(resolved))
	if err != nil {
		err = fsErr(err, resolved)
		if s.isNotExist(err) {
			if s.v1018 {
				return fmt.Errorf("working directory does not exist: %s", req.Cwd)
			}
			return fmt.Errorf("working directory does not exist: %s: %w", req.Cwd, err)
		}
		return fmt.Errorf("cannot access working directory %q: %w", req.Cwd, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("working directory path is not a directory: %s", req.Cwd)
	}
	return nil
}

// procContext is execd's process context: context.Background plus the
// timeout, never the request context, so a client disconnect does not
// cancel the command (§X1.4).
func procContext(timeoutMs int64) (context.Context, context.CancelFunc) {
	if timeoutMs > 0 {
		return context.WithTimeout(context.Background(), time.Duration(timeoutMs)*time.Millisecond)
	}
	return context.WithCancel(context.Background())
}

// newCmd builds the shell process: its own process group, optional
// credentials, env = stub env + HOME + envs, cwd mapped under Root. HOME is
// the host directory standing for Config.Home, as execd's commands inherit
// the sandbox user's HOME (and so a login shell reads the sandbox's
// profile, not the test machine's).
func (s *Server) newCmd(ctx context.Context, req *RunCommandRequest, cwd string) *exec.Cmd {
	shell := "sh"
	if _, err := exec.LookPath("bash"); err == nil {
		shell = "bash"
	}
	cmd := exec.CommandContext(ctx, shell, "-c", req.Command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: buildCredential(req.Uid, req.Gid)}
	cmd.Env = mergeEnv(mergeEnv(os.Environ(), map[string]string{"HOME": s.HostPath(s.cfg.Home)}), req.Envs)
	if cwd == "" {
		cmd.Dir = s.root
	} else {
		cmd.Dir = s.HostPath(cwd)
	}
	return cmd
}

// buildCredential follows execd: with a uid, the user's primary gid and
// supplementary groups are looked up (ignored if unknown); an explicit gid
// overrides the primary one.
func buildCredential(uid, gid *uint32) *syscall.Credential {
	if uid == nil && gid == nil {
		return nil
	}
	cred := &syscall.Credential{}
	if uid != nil {
		cred.Uid = *uid
		if u, err := user.LookupId(strconv.FormatUint(uint64(*uid), 10)); err == nil {
			if gid == nil {
				if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
					cred.Gid = uint32(g)
				}
			}
			if gids, err := u.GroupIds(); err == nil {
				for _, gs := range gids {
					if g, err := strconv.ParseUint(gs, 10, 32); err == nil {
						cred.Groups = append(cred.Groups, uint32(g))
					}
				}
			}
		}
	}
	if gid != nil {
		cred.Gid = *gid
	}
	return cred
}

func mergeEnv(base []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, ok := strings.Cut(kv, "=")
		if _, over := extra[k]; ok && over {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	return out
}

// exitInfo converts cmd.Wait's error to execd's exit code, evalue and the
// killing signal.
func exitInfo(err error) (code int, evalue string, sig syscall.Signal) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig = ws.Signal()
		}
		return code, strconv.Itoa(code), sig
	}
	return 1, err.Error(), 0
}

// runForeground runs a streamed command: output files are polled every
// PollInterval; the terminal event follows the final flush of both files.
func (s *Server) runForeground(ctx context.Context, st *eventStream, req *RunCommandRequest, r *http.Request) error {
	id := newCommandID()
	outPath := filepath.Join(s.tmpDir, id+".stdout")
	errPath := filepath.Join(s.tmpDir, id+".stderr")
	stdout, err := os.OpenFile(outPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o777)
	if err != nil {
		return fmt.Errorf("failed to get stdlog descriptor: %w", err)
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(errPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o777)
	if err != nil {
		return fmt.Errorf("failed to get stdlog descriptor: %w", err)
	}
	defer stderr.Close()

	startAt := time.Now()
	cwd, err := s.expand(req.Cwd, req.Envs)
	if err != nil {
		return fmt.Errorf("resolve request cwd %s: %w", req.Cwd, err)
	}
	pctx, pcancel := procContext(req.TimeoutMs)
	defer pcancel()
	cmd := s.newCmd(pctx, req, cwd)
	cmd.Stdout, cmd.Stderr = stdout, stderr

	emit := func(typ string) func(string) {
		return func(text string) { st.send(Event{Type: typ, Text: text, Timestamp: now()}) }
	}
	outT := &lineTail{path: outPath, emit: emit("stdout")}
	errT := &lineTail{path: errPath, emit: emit("stderr")}
	stopTail := make(chan struct{})
	tailDone := make(chan struct{})
	// execd starts its tailers before the process and sends init right
	// after it started, so output before init is possible only when a poll
	// lands in that microsecond window; the stub polls only once init is
	// out, one of execd's possible orders, made deterministic.
	initSent := make(chan struct{})
	go func() {
		defer close(tailDone)
		select {
		case <-initSent:
		case <-stopTail:
		}
		s.tail(outT, errT, stopTail)
	}()

	if err := cmd.Start(); err != nil {
		close(stopTail)
		<-tailDone
		c := s.register(id, req, cmd.Dir, startAt, 0, outPath)
		s.update(id, func(c *command) { c.hidden = true; c.rec.StartErr = err.Error() })
		s.finish(c, 1, err.Error(), 0)
		s.sendInit(ctx, st, id)
		st.send(Event{Type: "error", Timestamp: now(), Error: &EventError{
			EName: "CommandExecError", EValue: err.Error(), Traceback: []string{err.Error()},
		}})
		return nil
	}
	pid := cmd.Process.Pid
	c := s.register(id, req, cmd.Dir, startAt, pid, outPath)
	s.sendInit(ctx, st, id)
	close(initSent)

	waited := make(chan struct{})
	go func() {
		// Timeout: SIGKILL the whole group, unless the process is already
		// reaped (its pid could have been recycled).
		select {
		case <-waited:
		case <-pctx.Done():
			select {
			case <-waited:
			default:
				killGroup(pid, sigKill)
			}
		}
	}()
	go func() {
		select {
		case <-waited:
		case <-r.Context().Done():
			s.update(id, func(c *command) {
				if c.rec.Running {
					c.rec.ClientDisconnected = true
				}
			})
		}
	}()

	werr := cmd.Wait()
	close(waited)
	close(stopTail)
	<-tailDone
	if werr != nil {
		code, evalue, sig := exitInfo(werr)
		st.send(Event{Type: "error", Timestamp: now(), Error: &EventError{
			EName: "CommandExecError", EValue: evalue, Traceback: []string{werr.Error()},
		}})
		s.finish(c, code, werr.Error(), sig)
		return nil
	}
	s.finish(c, 0, "", 0)
	st.send(Event{Type: "execution_complete", ExecutionTime: time.Since(startAt).Milliseconds(), Timestamp: now()})
	return nil
}

// runBackground runs a detached command (§X1.4): init first, stdout and
// stderr combined into <id>.output, stdin /dev/null, execution_complete at
// once. As in execd, when the process context ends (timeout, or simply the
// shell exiting) the whole process group gets SIGKILL, so children the
// shell left behind in its group die with it.
func (s *Server) runBackground(ctx context.Context, st *eventStream, req *RunCommandRequest) error {
	id := newCommandID()
	s.sendInit(ctx, st, id)
	outPath := filepath.Join(s.tmpDir, id+".output")
	pipe, err := os.OpenFile(outPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o777)
	if err != nil {
		return fmt.Errorf("failed to get combined output descriptor: %w", err)
	}
	startAt := time.Now()
	cwd, err := s.expand(req.Cwd, req.Envs)
	if err != nil {
		pipe.Close()
		return fmt.Errorf("resolve cwd: %w", err)
	}
	pctx, pcancel := procContext(req.TimeoutMs)
	cmd := s.newCmd(pctx, req, cwd)
	cmd.Stdout, cmd.Stderr = pipe, pipe
	if devNull, err := os.Open(os.DevNull); err == nil {
		cmd.Stdin = devNull
		defer devNull.Close()
	}
	if err := cmd.Start(); err != nil {
		pcancel()
		pipe.Close()
		c := s.register(id, req, cmd.Dir, startAt, 0, outPath)
		s.update(id, func(c *command) { c.rec.StartErr = err.Error() })
		s.finish(c, 255, err.Error(), 0)
		return fmt.Errorf("failed to start commands: %w", err)
	}
	pid := cmd.Process.Pid
	c := s.register(id, req, cmd.Dir, startAt, pid, outPath)
	go func() {
		<-pctx.Done()
		killGroup(pid, sigKill)
	}()
	go func() {
		defer pipe.Close()
		werr := cmd.Wait()
		pcancel()
		if werr != nil {
			code, _, sig := exitInfo(werr)
			s.finish(c, code, werr.Error(), sig)
			return
		}
		s.finish(c, 0, "", 0)
	}()
	st.send(Event{Type: "execution_complete", ExecutionTime: time.Since(startAt).Milliseconds(), Timestamp: now()})
	return nil
}

func killGroup(pid int, sig syscall.Signal) error {
	if pid <= 0 {
		return syscall.ESRCH
	}
	return syscall.Kill(-pid, sig)
}

// terminate is execd's killPid: SIGTERM to the group, wait up to KillGrace
// (probing every 50ms) for it to disappear, then SIGKILL.
func (s *Server) terminate(pid int) {
	if err := killGroup(pid, syscall.SIGTERM); err == nil {
		deadline := time.Now().Add(s.kill)
		for time.Now().Before(deadline) {
			if errors.Is(killGroup(pid, 0), syscall.ESRCH) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	} else if errors.Is(err, syscall.ESRCH) {
		return
	}
	if errors.Is(killGroup(pid, sigKill), syscall.ESRCH) {
		return
	}
	for range 3 {
		if errors.Is(killGroup(pid, 0), syscall.ESRCH) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// handleInterrupt serves DELETE /command?id= (§X1.3). Where docs/wire-facts.md is
// silent the execd source is followed: a missing id is 400 MISSING_QUERY
// "missing query parameter 'id'"; an unknown id is 500 RUNTIME_ERROR
// "error interruptting code context. no such session" (sic); a finished
// command is 500 RUNTIME_ERROR "error interruptting code context. command
// session <id> is not running". Otherwise the process group gets SIGTERM,
// then SIGKILL after KillGrace, and the answer (200, empty) is sent once
// the group is gone or the SIGKILL was sent.
func (s *Server) handleInterrupt(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	id := queryFirst(r.URL.Query(), "id")
	if id == "" {
		writeError(w, http.StatusBadRequest, CodeMissingQuery, "missing query parameter 'id'")
		return
	}
	s.mu.Lock()
	c, ok := s.cmds[id]
	if !ok || c.hidden {
		s.mu.Unlock()
		writeError(w, http.StatusInternalServerError, CodeRuntimeError, "error interruptting code context. no such session")
		return
	}
	if !c.rec.Running || c.pid <= 0 {
		s.mu.Unlock()
		writeError(w, http.StatusInternalServerError, CodeRuntimeError,
			fmt.Sprintf("error interruptting code context. command session %s is not running", id))
		return
	}
	pid := c.pid
	c.rec.Interrupted = true
	s.notifyLocked()
	s.mu.Unlock()
	s.terminate(pid)
	w.WriteHeader(http.StatusOK)
}

// commandStatus is the body of GET /command/status/{id} (§X1.4).
type commandStatus struct {
	ID         string     `json:"id"`
	Content    string     `json:"content,omitempty"`
	Running    bool       `json:"running"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

func (s *Server) lookup(id string) (CommandRecord, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cmds[id]
	if !ok || c.hidden {
		return CommandRecord{}, "", false
	}
	return c.rec, c.outPath, true
}

// handleCommandStatus serves GET /command/status/{id} for foreground and
// background commands; an unknown id is 404 INVALID_REQUEST_BODY
// "command not found: <id>" (§X1.4). Times are UTC RFC3339Nano.
func (s *Server) handleCommandStatus(w http.ResponseWriter, _ *http.Request, params map[string]string) {
	id := params["id"]
	rec, _, ok := s.lookup(id)
	if !ok {
		writeError(w, http.StatusNotFound, CodeInvalidRequest, "command not found: "+id)
		return
	}
	resp := commandStatus{ID: id, Content: rec.Request.Command, Running: rec.Running, StartedAt: rec.StartedAt.UTC()}
	if !rec.Running {
		code := rec.ExitCode
		fin := rec.FinishedAt.UTC()
		resp.ExitCode, resp.Error, resp.FinishedAt = &code, rec.Err, &fin
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleCommandLogs serves GET /command/{id}/logs?cursor=N (§X1.4): the
// combined output of a background command from byte offset N (invalid N =
// 0) to EOF as text/plain, with the new offset in Execd-Commands-Tail-Cursor.
// Unknown id: 400 "command not found: <id>"; a foreground id: 400
// "command <id> is not running in background"; both INVALID_REQUEST_BODY.
func (s *Server) handleCommandLogs(w http.ResponseWriter, r *http.Request, params map[string]string) {
	id := params["id"]
	cursor, err := strconv.ParseInt(queryFirst(r.URL.Query(), "cursor"), 10, 64)
	if err != nil {
		cursor = 0
	}
	rec, outPath, ok := s.lookup(id)
	if !ok {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "command not found: "+id)
		return
	}
	if !rec.Background {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("command %s is not running in background", id))
		return
	}
	f, err := os.Open(outPath)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest,
			fmt.Sprintf("error open combined output file for command %s: %v", id, err))
		return
	}
	defer f.Close()
	if _, err := f.Seek(cursor, io.SeekStart); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("error seek file: %v", err))
		return
	}
	data, err := io.ReadAll(f)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("error read file: %v", err))
		return
	}
	pos, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("error get current position: %v", err))
		return
	}
	w.Header().Set(TailCursorHeader, strconv.FormatInt(pos, 10))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// lineTail follows one capture file and splits it into lines the way
// execd's tailer does (execd source pkg/runtime/command_common.go; §X1.4):
// '\n' and '\r' both end a line; the text is the line without its
// terminator; an empty line is reported as "\n"; the '\n' of a "\r\n" pair
// (even when the pair straddles two polls) is swallowed; a partial last
// line is re-read on the next poll and flushed only by the final poll.
type lineTail struct {
	path string
	pos  int64
	cr   bool
	emit func(string)
}

func (t *lineTail) poll(final bool) {
	f, err := os.Open(t.path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(t.pos, io.SeekStart); err != nil {
		return
	}
	data, _ := io.ReadAll(f)
	var line []byte
	consumed := 0
	for i, b := range data {
		if b == '\n' || b == '\r' {
			switch {
			case len(line) > 0:
				t.emit(string(line))
				line = line[:0]
			case b == '\n' && t.cr:
				// second half of "\r\n": the line was emitted on '\r'
			default:
				t.emit("\n")
			}
			t.cr = b == '\r'
			consumed = i + 1
			continue
		}
		t.cr = false
		line = append(line, b)
	}
	if final {
		if len(line) > 0 {
			t.emit(string(line))
		}
		consumed = len(data)
	}
	t.pos += int64(consumed)
}

// tail polls stdout then stderr every PollInterval, and both once more
// (flushing partial lines) when stop is closed. Polling both files from
// one goroutine makes stdout-before-stderr within one poll deterministic;
// execd uses two goroutines, so this is one of its possible orders.
func (s *Server) tail(out, errT *lineTail, stop <-chan struct{}) {
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			out.poll(true)
			errT.poll(true)
			return
		case <-t.C:
			out.poll(false)
			errT.poll(false)
		}
	}
}
