package envd

import "fmt"

// PathRequest is filesystem.StatRequest and filesystem.MakeDirRequest:
// one path.
type PathRequest struct {
	// Path is the entry to stat or the directory to make; required.
	Path string `json:"path"`
}

// DecodePathRequest decodes a Filesystem/Stat or MakeDir message. An empty
// path is an error wrapping ErrBadRequest.
func DecodePathRequest(payload []byte) (PathRequest, error) {
	var req PathRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	if req.Path == "" {
		return req, fmt.Errorf("%w: path is required", ErrBadRequest)
	}
	return req, nil
}

// MoveRequest is filesystem.MoveRequest.
type MoveRequest struct {
	// Source is the entry to move; required.
	Source string `json:"source"`
	// Destination is its new path; required.
	Destination string `json:"destination"`
}

// DecodeMoveRequest decodes a Filesystem/Move message. An empty source or
// destination is an error wrapping ErrBadRequest.
func DecodeMoveRequest(payload []byte) (MoveRequest, error) {
	var req MoveRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	if req.Source == "" || req.Destination == "" {
		return req, fmt.Errorf("%w: source and destination are required", ErrBadRequest)
	}
	return req, nil
}

// EntryResponse is filesystem.StatResponse, MakeDirResponse and
// MoveResponse: {"entry": EntryInfo}.
type EntryResponse struct {
	// Entry is the entry stat'ed, made or moved (at its new path).
	Entry EntryInfo `json:"entry"`
}
