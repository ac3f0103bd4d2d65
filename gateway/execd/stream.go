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

// maxEventLine bounds one event line (bytes). execd emits one event per
// output line, so this is also the longest output line the gateway relays.
const maxEventLine = 16 << 20

// ErrStreamEnded is returned by Next when the stream closed before a
// terminal event.
var ErrStreamEnded = errors.New("execd: the command stream ended without a terminal event")

// CommandStream reads the /command event stream: bare JSON objects
// separated by blank lines, no "data:" prefix (docs/wire-facts.md §X1.4). A
// "data:" prefix is tolerated in case a later execd adds SSE framing.
type CommandStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

func newCommandStream(body io.ReadCloser) *CommandStream {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	return &CommandStream{body: body, sc: sc}
}

// NewCommandStream wraps an event-stream body; used by tests and by callers
// that made the request themselves.
func NewCommandStream(body io.ReadCloser) *CommandStream { return newCommandStream(body) }

// Next returns the next event. It returns ErrStreamEnded at EOF, an *Error
// with KindUnexpected for a line that is not an event, and a
// *StreamBrokenError wrapping the read error otherwise.
func (s *CommandStream) Next() (Event, error) {
	for s.sc.Scan() {
		line := bytes.TrimSpace(s.sc.Bytes())
		line = bytes.TrimSpace(bytes.TrimPrefix(line, []byte("data:")))
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Type == "" {
			return Event{}, &Error{Kind: KindUnexpected, Message: "execd sent an event that is not JSON"}
		}
		return ev, nil
	}
	if err := s.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Event{}, &Error{Kind: KindUnexpected, Message: fmt.Sprintf("execd sent an event line over %d bytes", maxEventLine)}
		}
		return Event{}, &StreamBrokenError{err: err}
	}
	return Event{}, ErrStreamEnded
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
func (s *CommandStream) Close() error { return s.body.Close() }
