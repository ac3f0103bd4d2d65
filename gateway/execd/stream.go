package execd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Event types of the /command stream (docs/wire-facts.md §X1.4).
const (
	EventInit              = "init"
	EventPing              = "ping"
	EventStdout            = "stdout"
	EventStderr            = "stderr"
	EventExecutionComplete = "execution_complete"
	EventError             = "error"
)

// CommandError is the error member of an "error" event. EValue holds the exit
// code as a string; -1 means a signal, named by Traceback[0].
type CommandError struct {
	// EName is the error's class, "CommandExecError" for a command.
	EName string `json:"ename"`
	// EValue is the exit code as a decimal string; "-1" for a signal.
	EValue string `json:"evalue"`
	// Traceback holds the detail lines; for a signal, [0] names it.
	Traceback []string `json:"traceback"`
}

// Event is one /command stream event. Text is the command id for init and
// one output line without its terminator for stdout/stderr (an empty line
// arrives as "\n"). Timestamp is unix ms; ExecutionTime is ms.
type Event struct {
	// Type is one of the Event* constants.
	Type string `json:"type"`
	// Text is the command ID (init) or one output line (stdout, stderr).
	Text string `json:"text,omitempty"`
	// Timestamp is the event's time in Unix milliseconds.
	Timestamp int64 `json:"timestamp,omitempty"`
	// ExecutionTime is the command's run time in milliseconds, on
	// execution_complete.
	ExecutionTime int64 `json:"execution_time,omitempty"`
	// Error is set on "error" events.
	Error *CommandError `json:"error,omitempty"`
}

// ExitCode returns the exit code of a terminal event: 0 for
// execution_complete, int(evalue) for error (-1 for a signal). ok is false
// for non-terminal events and for an evalue that is not an integer.
func (ev Event) ExitCode() (code int, ok bool) {
	switch ev.Type {
	case EventExecutionComplete:
		return 0, true
	case EventError:
		if ev.Error == nil {
			return 0, false
		}
		n, err := strconv.Atoi(ev.Error.EValue)
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// Terminal reports whether ev ends the command (execution_complete or error).
func (ev Event) Terminal() bool {
	return ev.Type == EventExecutionComplete || ev.Type == EventError
}

// commandIDLen is the length of execd's command ids (bytes).
const commandIDLen = 32

// ValidCommandID reports whether id has the shape of the command ids execd
// gives: exactly 32 lowercase hexadecimal digits, a random UUID without its
// dashes (OpenSandbox execd names each command with github.com/google/uuid;
// docs/wire-facts.md §X1.4). The gateway derives pids from such an id,
// writes it into process records, and puts it in execd's URLs
// (/command/status/{id}, DELETE /command?id=); anything else is not an id
// execd gave.
func ValidCommandID(id string) bool {
	if len(id) != commandIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// maxEventLine bounds one event line (bytes). execd emits one event per
// output line, so this is also the longest output line the gateway relays.
const maxEventLine = 16 << 20

// LargeLineBytes is the length (bytes, its newline included) past which an
// event line is large: a stream reads such a line further only once its
// large-line gate, if one is set (SetLargeLineGate), let it.
const LargeLineBytes = 64 << 10

// streamBufferBytes is a stream's own read buffer (bytes): a line that fits
// it is read in place, a longer one is gathered in a buffer of its own,
// dropped once its event is decoded. So a stream waiting for output (a
// background command's, for hours) holds 4 KiB, not LargeLineBytes.
const streamBufferBytes = 4 << 10

// ErrStreamEnded is returned by Next when the stream closed before a
// terminal event.
var ErrStreamEnded = errors.New("execd: the command stream ended without a terminal event")

// gateError carries the large-line gate's error out of readLine.
type gateError struct{ err error }

func (e gateError) Error() string { return e.err.Error() }

// errLineTooLong is a line over maxEventLine.
var errLineTooLong = errors.New("execd: event line too long")

// CommandStream reads the /command event stream: bare JSON objects
// separated by blank lines, no "data:" prefix (docs/wire-facts.md §X1.4). A
// "data:" prefix is tolerated in case a later execd adds SSE framing.
type CommandStream struct {
	body io.ReadCloser
	br   *bufio.Reader
	err  error // the read error that ended the stream, returned again
	// gate and release: SetLargeLineGate's function, and what it gave
	// for the current line.
	gate    func() (release func(), err error)
	release func()
}

func newCommandStream(body io.ReadCloser) *CommandStream {
	return &CommandStream{body: body, br: bufio.NewReaderSize(body, streamBufferBytes)}
}

// NewCommandStream wraps an event-stream body; used by tests and by callers
// that made the request themselves.
func NewCommandStream(body io.ReadCloser) *CommandStream { return newCommandStream(body) }

// SetLargeLineGate makes the stream call gate before it reads a line past
// LargeLineBytes, and hold the release function gate returns until the
// next call of Next or Close: the caller's bound on what large lines cost
// (such a line's buffer, up to 16 MiB, and whatever the caller makes of
// its event before it asks for the next one). An error from gate ends the
// stream: Next returns it as it is, and again on later calls. A line's
// buffer past LargeLineBytes is dropped once its event is decoded.
func (s *CommandStream) SetLargeLineGate(gate func() (release func(), err error)) { s.gate = gate }

// HoldsLargeLine reports whether the event Next last returned came from a
// large line whose gate is still held (released by the next Next or Close).
func (s *CommandStream) HoldsLargeLine() bool { return s.release != nil }

func (s *CommandStream) releaseLarge() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
}

// readLine returns the next line, its newline included; at the stream's
// end a last line without one (as bufio.ScanLines does). A line longer
// than the reader's buffer is gathered in a buffer of its own; one over
// LargeLineBytes only once the gate let it grow past that, within
// maxEventLine.
func (s *CommandStream) readLine() ([]byte, error) {
	b, err := s.br.ReadSlice('\n')
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, io.EOF) && len(b) > 0:
		return b, nil
	case !errors.Is(err, bufio.ErrBufferFull):
		return nil, err
	}
	line := append(make([]byte, 0, 4*len(b)), b...)
	gated := false
	for {
		b, err = s.br.ReadSlice('\n')
		if !gated && len(line)+len(b) > LargeLineBytes {
			gated = true
			if s.gate != nil {
				release, err := s.gate()
				if err != nil {
					return nil, gateError{err}
				}
				s.release = release
			}
		}
		if len(line)+len(b) > maxEventLine {
			return nil, errLineTooLong
		}
		if len(line)+len(b) > cap(line) {
			// Doubled (append grows a large slice by a quarter, which
			// allocates about five times the line's length on its way).
			grown := make([]byte, len(line), min(2*cap(line), maxEventLine))
			copy(grown, line)
			line = grown
		}
		line = append(line, b...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, io.EOF):
			return line, nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, err
		}
	}
}

// Next returns the next event. It returns ErrStreamEnded at EOF, an *Error
// with KindUnexpected for a line that is not an event or is over 16 MiB,
// and for an init event whose text is not a command id (ValidCommandID;
// the stream then ends: Next returns that error again), the large-line
// gate's error as it is, and a *StreamBrokenError wrapping the read error
// otherwise. It first releases the previous event's large
// line, if it held one.
func (s *CommandStream) Next() (Event, error) {
	s.releaseLarge()
	if s.err != nil {
		return Event{}, s.err
	}
	for {
		raw, err := s.readLine()
		if err != nil {
			s.releaseLarge()
			switch {
			case errors.Is(err, io.EOF):
				s.err = ErrStreamEnded
			case errors.Is(err, errLineTooLong):
				s.err = &Error{Kind: KindUnexpected, Message: fmt.Sprintf("execd sent an event line over %d bytes", maxEventLine)}
			case errors.As(err, new(gateError)):
				s.err = err.(gateError).err
			default:
				s.err = &StreamBrokenError{err: err}
			}
			return Event{}, s.err
		}
		line := bytes.TrimSpace(raw)
		line = bytes.TrimSpace(bytes.TrimPrefix(line, []byte("data:")))
		if len(line) == 0 || line[0] != '{' {
			s.releaseLarge()
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Type == "" {
			s.releaseLarge()
			return Event{}, &Error{Kind: KindUnexpected, Message: "execd sent an event that is not JSON"}
		}
		if ev.Type == EventInit && !ValidCommandID(ev.Text) {
			// Its text is not echoed: it is the sandbox's, up to 16 MiB.
			s.releaseLarge()
			s.err = &Error{Kind: KindUnexpected, Message: "execd's init event named the command with " + strconv.Itoa(len(ev.Text)) +
				" bytes that are not a command id (32 lowercase hex digits)"}
			return Event{}, s.err
		}
		return ev, nil
	}
}

// StreamBrokenError is Next's error when reading the stream failed (a
// connection reset, a timeout). Its text is a fixed sentence: the read
// error's own text names the gateway's and the fixed entry's addresses
// ("read tcp 10.0.3.4:43210->10.0.9.1:80: …"), which SDK users are not
// shown. Unwrap gives the read error (for logs, and errors.As of a
// net.Error).
type StreamBrokenError struct{ err error }

// Error returns "execd: the command stream broke off".
func (e *StreamBrokenError) Error() string { return "execd: the command stream broke off" }

// Unwrap returns the read error.
func (e *StreamBrokenError) Unwrap() error { return e.err }

// Close closes the stream body. The caller should Close as soon as it has
// the terminal event: execd keeps the response open for its graceful
// shutdown delay (1 s by default) after the last event.
func (s *CommandStream) Close() error {
	s.releaseLarge()
	return s.body.Close()
}
