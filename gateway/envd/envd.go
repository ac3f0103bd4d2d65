// Package envd holds the E2B envd messages that sandgate serves, in their
// protobuf-JSON wire form as the official SDKs send and decode them
// (docs/wire-facts.md §E2.4, §E3, §E4; protos spec/envd/process/process.proto and
// spec/envd/filesystem/filesystem.proto of e2b-dev/E2B).
//
// Decoding follows protojson as used by envd's connect-go handlers: field
// names in lowerCamelCase (single-word fields have no other spelling),
// matched exactly (a name in another case is an unknown field), unknown
// fields ignored, integers accepted as JSON numbers or strings; a repeated
// field, invalid UTF-8 and an unpaired surrogate escape are refused.
// Encoding follows protojson: int64 as strings, enums as names, timestamps
// as RFC 3339 in UTC with a Z suffix, and fields at their zero value omitted.
package envd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sandgate/sandgate/internal/strictjson"
)

// Service routes of the Connect services the gateway knows (docs/wire-facts.md §E6.1).
const (
	ProcessService    = "process.Process"
	FilesystemService = "filesystem.Filesystem"
)

// ProcessConfig is process.ProcessConfig: the command line, environment and
// working directory of a process.
type ProcessConfig struct {
	// Cmd is the program to run; required (the SDKs send "/bin/bash").
	Cmd string `json:"cmd"`
	// Args are the program's arguments (the SDKs send -l -c <command>).
	Args []string `json:"args,omitempty"`
	// Envs are environment variables added to the process's environment.
	Envs map[string]string `json:"envs,omitempty"`
	// Cwd is the working directory; nil or empty means the user's home.
	Cwd *string `json:"cwd,omitempty"`
}

// StartRequest is process.StartRequest, the body of Process/Start.
type StartRequest struct {
	// Process is what to run; required.
	Process *ProcessConfig `json:"process"`
	// PTY is the process.PTY message, kept raw (DecodePTY reads it): a
	// non-null value asks for a terminal.
	PTY json.RawMessage `json:"pty,omitempty"`
	// Tag names the process for Connect, SendSignal and List.
	Tag *string `json:"tag,omitempty"`
	// Stdin asks for a writable stdin (the SDKs' stdin option).
	Stdin *bool `json:"stdin,omitempty"`
}

// ErrBadRequest wraps every decoding error returned by this package.
var ErrBadRequest = fmt.Errorf("envd: malformed request message")

// decodeOptions read a message as protojson does (envd's connect-go
// handlers, which discard unknown fields): member names matched exactly,
// unknown members ignored, and a repeated member, invalid UTF-8 and an
// unpaired surrogate escape refused. encoding/json matched names in any
// case, kept the last of repeated members and read invalid UTF-8 as
// U+FFFD, so {"path":"a","PATH":"b"} or "a\xff" made the gateway act on a
// path envd would not have.
var decodeOptions = jsonv2.JoinOptions(
	jsonv2.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

// decode decodes payload into v with decodeOptions. Its errors name the
// JSON pointer or byte offset and the rule, never a value (a message can
// carry secrets, e.g. in envs, and errors are logged).
func decode(payload []byte, v any) error {
	if len(bytes.TrimSpace(payload)) == 0 {
		return fmt.Errorf("%w: empty message", ErrBadRequest)
	}
	if err := jsonv2.Unmarshal(payload, v, decodeOptions); err != nil {
		var se *jsonv2.SemanticError
		if errors.As(err, &se) {
			if se.JSONPointer == "" {
				return fmt.Errorf("%w: the message is not a JSON object", ErrBadRequest)
			}
			return fmt.Errorf("%w: wrong JSON kind or value at %q", ErrBadRequest, se.JSONPointer)
		}
		return fmt.Errorf("%w: %w", ErrBadRequest, strictjson.Fault(payload, err))
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
	// Path is the directory to list; required.
	Path string `json:"path"`
	// Depth is how many levels to descend; 0 is read as 1.
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
	// Path is the file or directory to remove; required.
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
	// PID is the process ID the SDK uses to address the process later.
	PID uint32 `json:"pid"`
}

// DataEvent carries output bytes; exactly one field is set. []byte is
// written as standard base64, as protojson writes bytes.
type DataEvent struct {
	// Stdout is a chunk of the process's standard output.
	Stdout []byte `json:"stdout,omitempty"`
	// Stderr is a chunk of the process's standard error.
	Stderr []byte `json:"stderr,omitempty"`
	// PTY is a chunk of a PTY process's terminal output.
	PTY []byte `json:"pty,omitempty"`
}

// EndEvent is the last event of a process stream, as envd's Wait fills it:
// ExitCode omitted when 0, Status is Go's ProcessState.String(), Error is
// the cmd.Wait() error text, absent on success (docs/wire-facts.md §E3.2).
type EndEvent struct {
	// ExitCode is the process's exit status; omitted when 0.
	ExitCode int32 `json:"exitCode,omitempty"`
	// Exited reports that the process exited (rather than being killed
	// by a signal).
	Exited bool `json:"exited,omitempty"`
	// Status is Go's ProcessState.String(), e.g. "exit status 2".
	Status string `json:"status,omitempty"`
	// Error is the cmd.Wait() error text; absent on success.
	Error string `json:"error,omitempty"`
}

// KeepAlive is the empty keepalive event.
type KeepAlive struct{}

// ProcessEvent is process.ProcessEvent; exactly one member is set.
type ProcessEvent struct {
	// Start is the stream's first event.
	Start *StartEvent `json:"start,omitempty"`
	// Data is a chunk of output.
	Data *DataEvent `json:"data,omitempty"`
	// End is the stream's last event.
	End *EndEvent `json:"end,omitempty"`
	// KeepAlive is sent while the process is silent.
	KeepAlive *KeepAlive `json:"keepalive,omitempty"`
}

// StartResponse is process.StartResponse, one message of the Start stream.
type StartResponse struct {
	// Event is the one event this message carries.
	Event ProcessEvent `json:"event"`
}

// ConnectResponse is process.ConnectResponse, one message of the Connect
// stream; it has StartResponse's shape.
type ConnectResponse = StartResponse

// FileType is filesystem.FileType, written as its enum name.
type FileType string

// File types. Types the SDKs do not know (a symlink that resolves to nothing
// or was not resolved, FIFOs, sockets) are FileTypeUnspecified, which both
// SDKs drop from list() (docs/wire-facts.md §E4.2).
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
	// Name is the entry's base name.
	Name string `json:"name"`
	// Type is file, directory or unspecified (see FileType).
	Type FileType `json:"type"`
	// Path is the entry's absolute path.
	Path string `json:"path"`
	// Size is the size in bytes.
	Size Int64 `json:"size,omitempty"`
	// Mode is the permission bits only (e.g. 0o644).
	Mode uint32 `json:"mode,omitempty"`
	// Permissions is fs.FileMode.String() of the entry, e.g. "drwxr-xr-x".
	Permissions string `json:"permissions,omitempty"`
	// Owner is the owner's user name.
	Owner string `json:"owner,omitempty"`
	// Group is the group's name.
	Group string `json:"group,omitempty"`
	// ModifiedTime is the last modification time.
	ModifiedTime *Timestamp `json:"modifiedTime,omitempty"`
	// SymlinkTarget is the link's target, set only for a symbolic link.
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
}

// Permissions returns what envd puts in EntryInfo.permissions for an entry
// with permission bits perm: fs.FileMode.String(), with the directory bit
// for directories. The 1,024 possible strings are made once, so a listing
// allocates none.
func Permissions(perm uint32, dir bool) string {
	i := perm & uint32(fs.ModePerm)
	if dir {
		i |= 1 << 9
	}
	return permissionStrings()[i]
}

// permissionStrings holds fs.FileMode.String() of every permission value
// (index bits 0–8) without and with the directory bit (index bit 9).
var permissionStrings = sync.OnceValue(func() *[1024]string {
	var t [1024]string
	for i := range t {
		m := fs.FileMode(i) & fs.ModePerm
		if i&(1<<9) != 0 {
			m |= fs.ModeDir
		}
		t[i] = m.String()
	}
	return &t
})

// ListDirResponse is filesystem.ListDirResponse.
type ListDirResponse struct {
	// Entries are the directory's entries, down to the requested depth.
	Entries []EntryInfo `json:"entries"`
}

// RemoveResponse is the empty filesystem.RemoveResponse, written as {}.
type RemoveResponse struct{}

// WriteInfo is one element of the POST /files response. It has exactly the
// keys name, type and path: Python SDK 2.24 builds WriteInfo(**item) and
// fails on any other key (docs/wire-facts.md §E4.1).
type WriteInfo struct {
	// Name is the written file's base name.
	Name string `json:"name"`
	// Type is "file".
	Type string `json:"type"`
	// Path is the written file's absolute path.
	Path string `json:"path"`
}

// RESTError is the error body of envd's REST routes (/files):
// {"code":<HTTP status>,"message":"..."} (envd internal/api/error.go).
type RESTError struct {
	// Code repeats the HTTP status, e.g. 404.
	Code int `json:"code"`
	// Message says what failed, for a person.
	Message string `json:"message"`
}
