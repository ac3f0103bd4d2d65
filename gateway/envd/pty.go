package envd

import "fmt"

// PTYSize is process.PTY.Size: the terminal's columns and rows.
type PTYSize struct {
	// Cols is the terminal's width in columns.
	Cols Uint32 `json:"cols"`
	// Rows is the terminal's height in rows.
	Rows Uint32 `json:"rows"`
}

// PTY is process.PTY, the pty member of Process/Start and Process/Update.
type PTY struct {
	// Size is the terminal's size; nil leaves it as it is.
	Size *PTYSize `json:"size,omitempty"`
}

// DecodePTY decodes the raw pty member of a Start request (StartRequest.PTY);
// it returns nil for an absent or null member, and an error wrapping
// ErrBadRequest for one that is not a process.PTY.
func DecodePTY(raw []byte) (*PTY, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var p PTY
	if err := decode(raw, &p); err != nil {
		return nil, fmt.Errorf("%w (in pty)", err)
	}
	return &p, nil
}

// ProcessInput is process.ProcessInput: bytes for a process's stdin or
// its terminal (a oneof; exactly one is set).
type ProcessInput struct {
	// Stdin is written to the process's standard input.
	Stdin []byte `json:"stdin,omitempty"`
	// PTY is written to the process's terminal.
	PTY []byte `json:"pty,omitempty"`
}

// SendInputRequest is process.SendInputRequest.
type SendInputRequest struct {
	// Process is the process to write to; required.
	Process *ProcessSelector `json:"process"`
	// Input is what to write; required.
	Input *ProcessInput `json:"input"`
}

// DecodeSendInputRequest decodes a Process/SendInput message; a missing or
// ambiguous selector or a missing input is an error wrapping
// ErrBadRequest.
func DecodeSendInputRequest(payload []byte) (SendInputRequest, error) {
	var req SendInputRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	if req.Input == nil {
		return req, fmt.Errorf("%w: input is required", ErrBadRequest)
	}
	return req, req.Process.validate()
}

// UpdateRequest is process.UpdateRequest: a new terminal size.
type UpdateRequest struct {
	// Process is the process to update; required.
	Process *ProcessSelector `json:"process"`
	// PTY carries the new size; nil changes nothing.
	PTY *PTY `json:"pty,omitempty"`
}

// DecodeUpdateRequest decodes a Process/Update message; a missing or
// ambiguous selector is an error wrapping ErrBadRequest.
func DecodeUpdateRequest(payload []byte) (UpdateRequest, error) {
	var req UpdateRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	return req, req.Process.validate()
}

// CloseStdinRequest is process.CloseStdinRequest.
type CloseStdinRequest struct {
	// Process is the process whose stdin to close; required.
	Process *ProcessSelector `json:"process"`
}

// DecodeCloseStdinRequest decodes a Process/CloseStdin message; a missing
// or ambiguous selector is an error wrapping ErrBadRequest.
func DecodeCloseStdinRequest(payload []byte) (CloseStdinRequest, error) {
	var req CloseStdinRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	return req, req.Process.validate()
}
