package dataplane

import (
	"context"
	"encoding/base64"
	"errors"
	"hash/fnv"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// Headers of a Process/Start call (docs/wire-facts.md §E1.2, §E3.3).
const (
	headerTimeout   = "Connect-Timeout-Ms"
	headerKeepalive = "Keepalive-Ping-Interval"
)

// parseTimeout reads Connect-Timeout-Ms: at most 10 ASCII digits (Connect
// protocol). Missing or 0 means no limit, as in envd.
func parseTimeout(v string) (time.Duration, *Error) {
	if v == "" {
		return 0, nil
	}
	if len(v) > 10 || strings.Trim(v, "0123456789") != "" {
		return 0, fail(CodeBadRequest, headerTimeout+" must be up to 10 digits")
	}
	ms, _ := strconv.ParseInt(v, 10, 64)
	return time.Duration(ms) * time.Millisecond, nil
}

// parseKeepalive reads Keepalive-Ping-Interval in seconds; anything missing,
// unparsable or not positive gives def, as in envd's keepalive.go.
func parseKeepalive(v string, def time.Duration) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 || n > 86400 {
		return def
	}
	return time.Duration(n) * time.Second
}

func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return mt
}

// pidOf derives the pid reported in the start event from execd's command
// id. execd does not expose the pid, and no other supported operation takes
// a pid back, so it only has to be stable, positive and fit uint32.
func pidOf(id string) uint32 {
	f := fnv.New32a()
	_, _ = f.Write([]byte(id))
	pid := f.Sum32() & 0x7fffffff
	if pid == 0 {
		pid = 1
	}
	return pid
}

// streamItem is one result of reading the execd stream.
type streamItem struct {
	ev  execd.Event
	err error
	// large: ev came from a line over execd.LargeLineBytes, whose slot the
	// reader holds until the event was handled.
	large bool
}

// streamCall is what every server-stream call carries besides its
// message: the Connect-Timeout-Ms limit (0: none) and the keepalive period.
type streamCall struct {
	payload   []byte
	timeout   time.Duration
	keepalive time.Duration
}

// readStreamCall checks the codec of a Connect server-stream request and
// reads its one message, its timeout and its keepalive period.
func (h *Handler) readStreamCall(r *http.Request, method string) (streamCall, *Error) {
	if mediaType(r.Header.Get("Content-Type")) != connect.ContentTypeStreamJSON {
		return streamCall{}, fail(CodeBadRequest, method+" must be application/connect+json (the Connect JSON codec)")
	}
	if enc := r.Header.Get("Connect-Content-Encoding"); enc != "" && enc != "identity" {
		return streamCall{}, fail(CodeBadRequest, "compressed requests are not supported")
	}
	timeout, e := parseTimeout(r.Header.Get(headerTimeout))
	if e != nil {
		return streamCall{}, e
	}
	sc := streamCall{timeout: timeout, keepalive: parseKeepalive(r.Header.Get(headerKeepalive), h.cfg.KeepaliveInterval)}
	var err error
	if sc.payload, err = connect.ReadSingleEnvelope(r.Body, h.cfg.MaxMessageBytes); err != nil {
		return streamCall{}, fail(CodeBadRequest, "the request envelope is not valid: "+strings.TrimPrefix(err.Error(), "connect: "))
	}
	return sc, nil
}

// startCall is a checked Process/Start request.
type startCall struct {
	streamCall
	req  envd.StartRequest
	user sdkUser
	cwd  string // absolute
	line string // the command line, each word quoted
}

// processStart serves POST /process.Process/Start as a Connect server
// stream over execd's POST /command (spec §3.3; docs/wire-facts.md §E3.1–E3.3;
// docs/wire-facts.md §X1.4): a foreground command streamed as execd
// reports it, or, with Config.ExtendedOperations, a background command
// (startBackground).
func (h *Handler) processStart(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	user, e := h.basicUser(r)
	if e != nil {
		return e
	}
	call, e := h.readStreamCall(r, "Process/Start")
	if e != nil {
		return e
	}
	timeout, keepalive := call.timeout, call.keepalive
	req, err := envd.DecodeStartRequest(call.payload)
	if err != nil {
		return fail(CodeBadRequest, err.Error())
	}
	if hasNUL(req.Process.Cmd, req.Process.Args, req.Process.Envs) {
		// No program can receive a NUL in its argv or environment; execd
		// would fail it as an internal error.
		return fail(CodeBadRequest, "process cmd, args and envs must not contain NUL bytes")
	}
	pty, err := envd.DecodePTY(req.PTY)
	if err != nil {
		return fail(CodeBadRequest, err.Error())
	}
	if pty != nil && !h.cfg.ExtendedOperations {
		return fail(CodeUnsupportedOperation, "PTY processes are not supported by this gateway without extended_operations")
	}
	cwd := h.home(user)
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		if cwd, e = h.resolvePath(*req.Process.Cwd, user); e != nil {
			return e
		}
	}
	if pty != nil {
		return h.startPTY(w, r, rq, startCall{streamCall: call, req: req, user: user, cwd: cwd}, pty)
	}
	if h.cfg.ExtendedOperations {
		return h.startBackground(w, r, rq, startCall{streamCall: call, req: req, user: user, cwd: cwd,
			line: commandLine(req.Process.Cmd, req.Process.Args)})
	}
	marker := newMarker()
	creq := execd.CommandRequest{
		Command: wrapCommand(commandLine(req.Process.Cmd, req.Process.Args), marker),
		Cwd:     cwd,
		Envs:    h.commandEnvs(user, req.Process.Envs),
	}
	if timeout > 0 {
		// execd ends the command at the same deadline, whether or not a
		// client still reads it (envd's process context).
		creq.Timeout = max(timeout.Milliseconds(), 1)
	}
	if user.set {
		uid, gid := user.user.UID, user.user.GID
		creq.UID, creq.GID = &uid, &gid
	}

	// The command's lifetime does not depend on this stream (as in envd): a
	// client that goes away cancels the upstream request, which ends the
	// stream, and execd keeps running a foreground command whose request
	// is gone (docs/wire-facts.md §X1.4). Only the command's own timeout, passed
	// to execd, ends it.
	upCtx, cancelUp := context.WithCancel(r.Context())
	defer cancelUp()
	begun := time.Now()
	items := make(chan streamItem)
	// relayed is signalled once an event the reader marked large was
	// handled: the reader holds a large-line slot for it, and reads on,
	// only until then.
	relayed := make(chan struct{}, 1)
	go func() {
		send := func(it streamItem) bool {
			select {
			case items <- it:
				return true
			case <-upCtx.Done():
				return false
			}
		}
		stream, err := h.deps.Execd.RunCommand(upCtx, rq.target, creq)
		if err != nil {
			send(streamItem{err: err})
			return
		}
		defer stream.Close()
		// Output before init is held by the loop below until init; past
		// largeData it takes a large-line slot (releaseEarly), which also
		// covers the large lines read meanwhile, until the event after
		// which the loop has sent it (init) was handled.
		var releaseEarly func()
		defer func() {
			if releaseEarly != nil {
				releaseEarly()
			}
		}()
		stream.SetLargeLineGate(func() (func(), error) {
			if releaseEarly != nil {
				return func() {}, nil
			}
			return h.admitLargeLine(upCtx, rq)
		})
		inited, earlyBytes := false, 0
		for {
			ev, err := stream.Next()
			large := stream.HoldsLargeLine()
			if err == nil && !inited {
				switch {
				case ev.Type == execd.EventInit && ev.Text != "":
					inited = true
					large = large || releaseEarly != nil
				case ev.Type == execd.EventStdout || ev.Type == execd.EventStderr:
					earlyBytes += len(ev.Text)
					if earlyBytes > largeData && releaseEarly == nil {
						if releaseEarly, err = h.admitLargeLine(upCtx, rq); err != nil {
							releaseEarly = nil
						}
					}
				}
			}
			if !send(streamItem{ev: ev, err: err, large: large}) || err != nil || ev.Terminal() {
				return
			}
			if large {
				select {
				case <-relayed:
				case <-upCtx.Done():
					return
				}
			}
			if inited && releaseEarly != nil {
				releaseEarly()
				releaseEarly = nil
			}
		}
	}()

	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	ka := time.NewTimer(keepalive)
	defer ka.Stop()

	sw := connect.NewStreamWriter(w)
	var cmdID string
	var early []execd.Event // output events execd sent before init
	earlyBytes := 0
	out := map[string]*outputStream{execd.EventStdout: {marker: marker}, execd.EventStderr: {marker: marker}}
	streamErr := func(e *Error) *Error {
		_ = sw.Close(&connect.Error{Code: e.Code.StreamCode(cmdID != ""), Message: e.Error()})
		return e
	}
	large := false // the last event came from a large line
	for {
		if large {
			relayed <- struct{}{}
			large = false
		}
		select {
		case <-r.Context().Done():
			return fail(CodeCanceled, "the client closed the stream")
		case <-deadline:
			return streamErr(timeoutError(timeout))
		case <-ending(r.Context()):
			return streamErr(drainingError("ended this stream at the end of its drain grace; the command keeps running in the sandbox"))
		case <-ka.C:
			if cmdID != "" {
				_ = sw.Send(envd.StartResponse{Event: envd.ProcessEvent{KeepAlive: &envd.KeepAlive{}}})
			}
			ka.Reset(keepalive)
		case it := <-items:
			large = it.large
			if it.err != nil {
				var e *Error
				switch {
				case errors.Is(it.err, execd.ErrStreamEnded):
					e = fail(CodeExecdProtocol, "execd closed the command stream before the command ended")
				case cmdID == "" && !sw.Started():
					return fromExecd(it.err, "start process")
				default:
					e = fromExecd(it.err, "process output")
				}
				// The command, if it started, keeps running under its own
				// timeout: only the stream is lost — unless the sandbox
				// itself is gone.
				return streamErr(h.sandboxGone(r.Context(), rq, e))
			}
			ev := it.ev
			switch {
			case ev.Type == execd.EventInit:
				if cmdID != "" {
					continue
				}
				if ev.Text == "" {
					// execd's init names the command (its 32-hex id); one
					// that does not is no start.
					return streamErr(fail(CodeExecdProtocol, "execd's init event names no command"))
				}
				cmdID = ev.Text
				if err := sw.Send(envd.StartResponse{Event: envd.ProcessEvent{Start: &envd.StartEvent{PID: pidOf(cmdID)}}}); err != nil {
					return fail(CodeCanceled, "the client closed the stream")
				}
				for _, p := range early {
					h.sendLine(sw, p.Type, out[p.Type], p.Text)
				}
				early = nil
				ka.Reset(keepalive)
			case cmdID == "" && (ev.Type == execd.EventStdout || ev.Type == execd.EventStderr):
				// execd starts its output tailers before the process and
				// sends init just after; a poll in between reports output
				// first. It is held (bounded) until the start event.
				earlyBytes += len(ev.Text)
				if earlyBytes > int(h.cfg.MaxMessageBytes) {
					return streamErr(fail(CodeExecdProtocol, "execd sent too much output before the command's init event"))
				}
				early = append(early, ev)
			case cmdID == "" && ev.Type != execd.EventPing:
				return streamErr(fail(CodeExecdProtocol, "execd did not start the command with an init event"))
			case ev.Type == execd.EventStdout || ev.Type == execd.EventStderr:
				if h.sendLine(sw, ev.Type, out[ev.Type], ev.Text) {
					ka.Reset(keepalive)
				}
			case ev.Terminal():
				end, ok := endEvent(ev)
				if !ok {
					return streamErr(fail(CodeExecdProtocol, "execd reported an exit code that is not a number"))
				}
				if timeout > 0 && end.ExitCode == -1 && end.Status == "signal: killed" && time.Since(begun) >= timeout {
					// execd's timer fired before the gateway's select saw
					// its own: the same deadline.
					return streamErr(timeoutError(timeout))
				}
				_ = sw.Send(envd.StartResponse{Event: envd.ProcessEvent{End: end}})
				_ = sw.Close(nil)
				return nil
			}
		}
	}
}

// timeoutError is the end of a command stream whose Connect-Timeout-Ms
// passed; execd kills the command at the same deadline.
func timeoutError(timeout time.Duration) *Error {
	return fail(CodeCommandTimeout, "the command ran past its "+timeout.String()+" timeout")
}

// hasNUL reports whether a command word or environment entry holds a NUL.
func hasNUL(cmd string, args []string, envs map[string]string) bool {
	if strings.IndexByte(cmd, 0) >= 0 {
		return true
	}
	for _, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return true
		}
	}
	for k, v := range envs {
		if strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return true
		}
	}
	return false
}

func (h *Handler) sendData(sw *connect.StreamWriter, stream string, b []byte) {
	if len(b) > largeData {
		_ = sw.SendJSON(dataEventJSON(stream, b, false))
		return
	}
	d := &envd.DataEvent{}
	if stream == execd.EventStdout {
		d.Stdout = b
	} else {
		d.Stderr = b
	}
	_ = sw.Send(envd.StartResponse{Event: envd.ProcessEvent{Data: d}})
}

// largeData is the length (bytes) past which a data event is encoded by
// dataEventJSON instead of json.Marshal.
const largeData = 64 << 10

// sendLine relays one execd output line of stream as outputStream.line
// says (the line and its newline, or what precedes the marker), reporting
// whether anything was sent. A large line is encoded straight from its
// text, without the copy line makes.
func (h *Handler) sendLine(sw *connect.StreamWriter, stream string, o *outputStream, text string) bool {
	if len(text) > largeData && !o.done {
		content, isMarker := strings.CutSuffix(text, o.marker)
		o.done = isMarker
		if content == "" {
			return false
		}
		// Read only: base64 reads the text's bytes in place.
		_ = sw.SendJSON(dataEventJSON(stream, unsafe.Slice(unsafe.StringData(content), len(content)), !isMarker))
		return true
	}
	b, _ := o.line(text)
	if len(b) == 0 {
		return false
	}
	h.sendData(sw, stream, b)
	return true
}

// dataEventJSON returns json.Marshal's encoding of the start response
// carrying b, followed by a newline when nl is set, as stream's data
// ({"event":{"data":{"stdout":"<base64>"}}}), in one buffer of its exact
// size: json.Marshal grows its buffer by doubling and then copies it,
// about three times the encoding's size for a 16 MiB output line.
func dataEventJSON(stream string, b []byte, nl bool) []byte {
	const head, tail = `{"event":{"data":{"`, `":"`
	size := len(b)
	if nl {
		size++
	}
	n := base64.StdEncoding.EncodedLen(size)
	out := make([]byte, 0, len(head)+len(stream)+len(tail)+n+len(`"}}}`))
	out = append(append(append(out, head...), stream...), tail...)
	dst := out[len(out) : len(out)+n]
	out = out[:len(out)+n]
	if nl {
		// The whole groups of three bytes in place, then the rest (at
		// most two bytes) with the newline.
		k := len(b) - len(b)%3
		base64.StdEncoding.Encode(dst, b[:k])
		var last [3]byte
		m := copy(last[:], b[k:])
		last[m] = '\n'
		base64.StdEncoding.Encode(dst[k/3*4:], last[:m+1])
	} else {
		base64.StdEncoding.Encode(dst, b)
	}
	return append(out, `"}}}`...)
}

// endEvent builds envd's end event from execd's terminal event, as envd's
// Wait fills it (docs/wire-facts.md §E3.2): exit 0 → exited, "exit status 0"; exit
// N → exitCode N, "exit status N" in status and error; a signal (execd's
// evalue -1, traceback "signal: killed") → exitCode -1, exited false.
func endEvent(ev execd.Event) (*envd.EndEvent, bool) {
	code, ok := ev.ExitCode()
	if !ok {
		return nil, false
	}
	if code == 0 {
		return &envd.EndEvent{Exited: true, Status: "exit status 0"}, true
	}
	if code == -1 {
		status := "signal: killed"
		if ev.Error != nil && len(ev.Error.Traceback) > 0 && strings.HasPrefix(ev.Error.Traceback[0], "signal: ") {
			status = ev.Error.Traceback[0]
		}
		return &envd.EndEvent{ExitCode: -1, Exited: false, Status: status, Error: status}, true
	}
	status := "exit status " + strconv.Itoa(code)
	return &envd.EndEvent{ExitCode: int32(code), Exited: true, Status: status, Error: status}, true
}
