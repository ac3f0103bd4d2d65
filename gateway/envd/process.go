package envd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// ProcessSelector is process.ProcessSelector: a process by pid or by tag
// (a oneof; exactly one is set).
type ProcessSelector struct {
	// PID selects the process by the pid of its start event.
	PID *Uint32 `json:"pid,omitempty"`
	// Tag selects the process by the tag it was started with.
	Tag *string `json:"tag,omitempty"`
}

func (s *ProcessSelector) validate() error {
	switch {
	case s == nil:
		return fmt.Errorf("%w: process is required", ErrBadRequest)
	case s.PID != nil && s.Tag != nil:
		return fmt.Errorf("%w: process names both a pid and a tag", ErrBadRequest)
	case s.PID == nil && s.Tag == nil:
		return fmt.Errorf("%w: process names neither a pid nor a tag", ErrBadRequest)
	}
	return nil
}

// ConnectRequest is process.ConnectRequest, the body of Process/Connect.
type ConnectRequest struct {
	// Process is the process to follow; required.
	Process *ProcessSelector `json:"process"`
}

// DecodeConnectRequest decodes a Process/Connect message; a missing or
// ambiguous selector is an error wrapping ErrBadRequest.
func DecodeConnectRequest(payload []byte) (ConnectRequest, error) {
	var req ConnectRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	return req, req.Process.validate()
}

// Signal is process.Signal: only SIGTERM (15) and SIGKILL (9) exist, as
// in envd. It decodes from the enum name or its number.
type Signal int32

// The signals of process.Signal.
const (
	SignalUnspecified Signal = 0
	SignalSIGKILL     Signal = 9
	SignalSIGTERM     Signal = 15
)

// UnmarshalJSON accepts "SIGNAL_SIGKILL", "SIGNAL_SIGTERM",
// "SIGNAL_UNSPECIFIED" or a number; any other name is an error, an unknown
// number is kept (protobuf keeps unknown enum numbers).
func (s *Signal) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	var name string
	if json.Unmarshal(b, &name) == nil {
		switch name {
		case "SIGNAL_UNSPECIFIED":
			*s = SignalUnspecified
		case "SIGNAL_SIGKILL":
			*s = SignalSIGKILL
		case "SIGNAL_SIGTERM":
			*s = SignalSIGTERM
		default:
			return fmt.Errorf("unknown signal %q", name)
		}
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 32)
	if err != nil {
		return fmt.Errorf("invalid signal %s", b)
	}
	*s = Signal(n)
	return nil
}

// SendSignalRequest is process.SendSignalRequest.
type SendSignalRequest struct {
	// Process is the process to signal; required.
	Process *ProcessSelector `json:"process"`
	// Signal is the signal to send.
	Signal Signal `json:"signal"`
}

// DecodeSendSignalRequest decodes a Process/SendSignal message; a missing
// or ambiguous selector is an error wrapping ErrBadRequest. The signal is
// returned as sent; the caller decides which it serves.
func DecodeSendSignalRequest(payload []byte) (SendSignalRequest, error) {
	var req SendSignalRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	return req, req.Process.validate()
}

// ProcessInfo is process.ProcessInfo, one entry of Process/List.
type ProcessInfo struct {
	// Config is the process's configuration as it was started.
	Config ProcessConfig `json:"config"`
	// PID is the pid of its start event.
	PID uint32 `json:"pid"`
	// Tag is the tag it was started with, if any.
	Tag *string `json:"tag,omitempty"`
}

// ListResponse is process.ListResponse; Processes is written as [] when
// empty.
type ListResponse struct {
	// Processes are the running processes.
	Processes []ProcessInfo `json:"processes"`
}

// Empty is an empty message (SendSignalResponse, …), written as {}.
type Empty struct{}
