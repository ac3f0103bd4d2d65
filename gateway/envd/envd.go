// Package envd holds the E2B envd messages that sandgate serves, in their
// protobuf-JSON wire form as the official SDKs send and decode them
// (docs/wire-facts.md §E2.4, §E3, §E4; protos spec/envd/process/process.proto and
// spec/envd/filesystem/filesystem.proto of e2b-dev/E2B).
//
// Decoding follows protojson as used by envd's connect-go handlers: field
// names in lowerCamelCase (single-word fields have no other spelling),
// unknown fields ignored, integers accepted as JSON numbers or strings.
// Encoding follows protojson: int64 as strings, enums as names, timestamps
// as RFC 3339 in UTC with a Z suffix, and fields at their zero value omitted.
package envd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"strconv"
	"time"
)

// Service routes of the Connect services the gateway knows (docs/wire-facts.md §E6.1).
const (
	ProcessService    = "process.Process"
	FilesystemService = "filesystem.Filesystem"
)

// ProcessConfig is process.ProcessConfig: the command line, environment and
// working directory of a process.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// StartRequest is process.StartRequest, the body of Process/Start.
type StartRequest struct {
	Process *ProcessConfig  `json:"process"`
	PTY     json.RawMessage `json:"pty,omitempty"`
	Tag     *string         `json:"tag,omitempty"`
	Stdin   *bool           `json:"stdin,omitempty"`
}

// ErrBadRequest wraps every decoding error returned by this package.
var ErrBadRequest = fmt.Errorf("envd: malformed request message")

func decode(payload []byte, v any) error {
	if len(bytes.TrimSpace(payload)) == 0 {
		return fmt.Errorf("%w: empty message", ErrBadRequest)
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return nil
}

// DecodeStartRequest decodes a Process/Start message. It returns an error
// wrapping ErrBadRequest for invalid JSON, a missing process or an empty
// cmd. A PTY request is returned as is; the caller decides whether it is
// supported.
func DecodeStartRequest(payload []byte) (StartRequest, error) {
	var req StartRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	if req.Process == nil || req.Process.Cmd == "" {
		return req, fmt.Errorf("%w: process.cmd is required", ErrBadRequest)
	}
	return req, nil
}

// Uint32 is a protobuf-JSON uint32: accepted as a JSON number or a decimal
// string, written as a number.
type Uint32 uint32

// UnmarshalJSON accepts 3 or "3"; negative, fractional and out-of-range
// values are errors.
func (u *Uint32) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	if s == "null" {
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return fmt.Errorf("invalid uint32 %q", s)
	}
	*u = Uint32(n)
	return nil
}

// ListDirRequest is filesystem.ListDirRequest. Depth 0 means 1, as in envd.
type ListDirRequest struct {
	Path  string `json:"path"`
	Depth Uint32 `json:"depth"`
}

// DecodeListDirRequest decodes a Filesystem/ListDir message. An empty path is
// an error wrapping ErrBadRequest.
func DecodeListDirRequest(payload []byte) (ListDirRequest, error) {
	var req ListDirRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	if req.Path == "" {
		return req, fmt.Errorf("%w: path is required", ErrBadRequest)
	}
	if req.Depth == 0 {
		req.Depth = 1
	}
	return req, nil
}

// RemoveRequest is filesystem.RemoveRequest.
type RemoveRequest struct {
	Path string `json:"path"`
}

// DecodeRemoveRequest decodes a Filesystem/Remove message. An empty path is
// an error wrapping ErrBadRequest.
func DecodeRemoveRequest(payload []byte) (RemoveRequest, error) {
	var req RemoveRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	if req.Path == "" {
		return req, fmt.Errorf("%w: path is required", ErrBadRequest)
	}
	return req, nil
}

// StartEvent is the first event of a process stream.
type StartEvent struct {
	PID uint32 `json:"pid"`
}

// DataEvent carries output bytes; exactly one field is set. []byte is
// written as standard base64, as protojson writes bytes.
type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
}

// EndEvent is the last event of a process stream, as envd's Wait fills it:
// ExitCode omitted when 0, Status is Go's ProcessState.String(), Error is
// the cmd.Wait() error text, absent on success (docs/wire-facts.md §E3.2).
type EndEvent struct {
	ExitCode int32  `json:"exitCode,omitempty"`
	Exited   bool   `json:"exited,omitempty"`
	Status   string `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
}

// KeepAlive is the empty keepalive event.
type KeepAlive struct{}

// ProcessEvent is process.ProcessEvent; exactly one member is set.
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	KeepAlive *KeepAlive  `json:"keepalive,omitempty"`
}

// StartResponse is process.StartResponse, one message of the Start stream.
type StartResponse struct {
	Event ProcessEvent `json:"event"`
}

// ConnectResponse is process.ConnectResponse, one message of the Connect
// stream; it has StartResponse's shape.
type ConnectResponse = StartResponse

// FileType is filesystem.FileType, written as its enum name.
type FileType string

// File types. Types the SDKs do not know (symlinks seen unresolved, sockets)
// are FileTypeUnspecified, which both SDKs drop from list() (docs/wire-facts.md §E4.2).
const (
	FileTypeUnspecified FileType = "FILE_TYPE_UNSPECIFIED"
	FileTypeFile        FileType = "FILE_TYPE_FILE"
	FileTypeDirectory   FileType = "FILE_TYPE_DIRECTORY"
)

// Int64 is a protobuf-JSON int64, written as a decimal string.
type Int64 int64

// MarshalJSON writes the value as a JSON string, as protojson does.
func (i Int64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(i), 10) + `"`), nil
}

// Timestamp is a google.protobuf.Timestamp, written as RFC 3339 in UTC with
// 0, 3, 6 or 9 fractional digits, as protojson does.
type Timestamp time.Time

// MarshalJSON writes the protojson form, e.g. "2026-11-29T15:05:23.775Z".
func (t Timestamp) MarshalJSON() ([]byte, error) {
	return t.appendJSON(make([]byte, 0, 32)), nil
}

// EntryInfo is filesystem.EntryInfo as envd emits it (docs/wire-facts.md §E4.2):
// Mode holds the permission bits only, Permissions is Go's
// fs.FileMode.String() of the entry (with the d for directories).
type EntryInfo struct {
	Name          string     `json:"name"`
	Type          FileType   `json:"type"`
	Path          string     `json:"path"`
	Size          Int64      `json:"size,omitempty"`
	Mode          uint32     `json:"mode,omitempty"`
	Permissions   string     `json:"permissions,omitempty"`
	Owner         string     `json:"owner,omitempty"`
	Group         string     `json:"group,omitempty"`
	ModifiedTime  *Timestamp `json:"modifiedTime,omitempty"`
	SymlinkTarget *string    `json:"symlinkTarget,omitempty"`
}

// Permissions returns what envd puts in EntryInfo.permissions for an entry
// with permission bits perm: fs.FileMode.String(), with the directory bit
// for directories.
func Permissions(perm uint32, dir bool) string {
	m := fs.FileMode(perm) & fs.ModePerm
	if dir {
		m |= fs.ModeDir
	}
	return m.String()
}

// ListDirResponse is filesystem.ListDirResponse.
type ListDirResponse struct {
	Entries []EntryInfo `json:"entries"`
}

// RemoveResponse is the empty filesystem.RemoveResponse, written as {}.
type RemoveResponse struct{}

// WriteInfo is one element of the POST /files response. It has exactly the
// keys name, type and path: Python SDK 2.24 builds WriteInfo(**item) and
// fails on any other key (docs/wire-facts.md §E4.1).
type WriteInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// RESTError is the error body of envd's REST routes (/files):
// {"code":<HTTP status>,"message":"..."} (envd internal/api/error.go).
type RESTError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}
