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

// WatchDirRequest is filesystem.WatchDirRequest, the body of
// Filesystem/WatchDir. The SDKs' includeEntry and allowNetworkMounts
// (JS 2.51, for envd 0.6.3 and 0.6.4) are not read: the gateway reports an
// older envd, for which the SDKs leave them false.
type WatchDirRequest struct {
	// Path is the directory to watch; required.
	Path string `json:"path"`
	// Recursive watches the directories under it too.
	Recursive bool `json:"recursive,omitempty"`
}

// DecodeWatchDirRequest decodes a Filesystem/WatchDir message; a missing
// path is an error wrapping ErrBadRequest.
func DecodeWatchDirRequest(payload []byte) (WatchDirRequest, error) {
	var req WatchDirRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	if req.Path == "" {
		return req, fmt.Errorf("%w: path is required", ErrBadRequest)
	}
	return req, nil
}

// The filesystem.EventType names of a FilesystemEvent, as protojson writes
// them.
const (
	EventCreate = "EVENT_TYPE_CREATE"
	EventWrite  = "EVENT_TYPE_WRITE"
	EventRemove = "EVENT_TYPE_REMOVE"
	EventRename = "EVENT_TYPE_RENAME"
	EventChmod  = "EVENT_TYPE_CHMOD"
)

// FilesystemEvent is filesystem.FilesystemEvent: what changed (Name,
// relative to the watched directory) and how (one of the Event* names).
type FilesystemEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// WatchDirResponse is filesystem.WatchDirResponse, one message of the
// WatchDir server stream. Its oneof "event" is not a field of its own, so
// protojson writes the member that is set at the top level:
// {"start":{}}, {"filesystem":{…}}, {"keepalive":{}}. Exactly one member
// is set.
type WatchDirResponse struct {
	// Start is the stream's first message, once the watch is in place.
	Start *Empty `json:"start,omitempty"`
	// Filesystem is one change.
	Filesystem *FilesystemEvent `json:"filesystem,omitempty"`
	// KeepAlive is sent while nothing changes.
	KeepAlive *KeepAlive `json:"keepalive,omitempty"`
}

// CreateWatcherRequest is filesystem.CreateWatcherRequest: WatchDir's
// request for a watcher whose events are fetched with GetWatcherEvents
// (the Python SDK's synchronous watch_dir).
type CreateWatcherRequest = WatchDirRequest

// DecodeCreateWatcherRequest decodes a Filesystem/CreateWatcher message as
// DecodeWatchDirRequest does.
func DecodeCreateWatcherRequest(payload []byte) (CreateWatcherRequest, error) {
	return DecodeWatchDirRequest(payload)
}

// CreateWatcherResponse is filesystem.CreateWatcherResponse.
type CreateWatcherResponse struct {
	WatcherID string `json:"watcherId"`
}

// WatcherRequest is filesystem.GetWatcherEventsRequest and
// filesystem.RemoveWatcherRequest: one watcher. protojson parsers take the
// field's JSON name (watcherId, what the SDKs send) and its proto name
// (watcher_id); both are read, and giving both is an error.
type WatcherRequest struct {
	WatcherID string `json:"watcherId"`
	// WatcherIDProto is the field under its proto name.
	WatcherIDProto string `json:"watcher_id"`
}

// DecodeWatcherRequest decodes a Filesystem/GetWatcherEvents or
// RemoveWatcher message and returns it with WatcherID set; a missing
// watcher id, or one given under both names, is an error wrapping
// ErrBadRequest.
func DecodeWatcherRequest(payload []byte) (WatcherRequest, error) {
	var req WatcherRequest
	if err := decode(payload, &req); err != nil {
		return req, err
	}
	switch {
	case req.WatcherID != "" && req.WatcherIDProto != "":
		return req, fmt.Errorf("%w: watcherId is given twice", ErrBadRequest)
	case req.WatcherID == "":
		req.WatcherID = req.WatcherIDProto
	}
	if req.WatcherID == "" {
		return req, fmt.Errorf("%w: watcherId is required", ErrBadRequest)
	}
	return req, nil
}

// GetWatcherEventsResponse is filesystem.GetWatcherEventsResponse: the
// events since the watcher's last call.
type GetWatcherEventsResponse struct {
	Events []FilesystemEvent `json:"events"`
}
