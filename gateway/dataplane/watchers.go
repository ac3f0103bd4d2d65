package dataplane

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// Filesystem/CreateWatcher, GetWatcherEvents and RemoveWatcher
// (Config.ExtendedOperations; the Python SDK's synchronous watch_dir, whose
// handle asks for the new events with get_new_events).
//
// envd keeps such a watcher in its memory and gathers inotify's events
// until they are asked for. The gateway keeps no state between calls (any
// replica serves any call), so a watcher is a file in the sandbox's
// process directory, <ProcessDir>/<id>.watch (mode 0600, execd's
// identity's, as the process records are): the directory watched, the
// listing depth, and the listing as it was at the watcher's last call.
// GetWatcherEvents lists the directory again, answers the changes since
// that listing as WatchDir sends them (watchChanges), and keeps the new
// listing. So events come at the pace the client asks for them, and what
// a poll cannot see (watch.go) is not seen between two calls either. Two
// calls at once for one watcher may both answer the same changes.
// A sandbox holds at most maxWatchersPerSandbox watchers (a CreateWatcher
// over it is GATEWAY_BUSY naming watchers_per_sandbox): RemoveWatcher
// deletes one; nothing else does, as envd's live until removed.
const (
	maxWatchersPerSandbox = 64
	// watcherIDBytes is the random part of a watcher id (32 hex digits).
	watcherIDBytes = 16
)

// minWatcherTime is the earliest modification time a watcher's file
// keeps (UnixNano's range starts in 1678); an earlier one is kept as none,
// so it compares equal to itself from call to call.
var minWatcherTime = time.Unix(0, 0).Add(-200 * 365 * 24 * time.Hour)

// watcherFile is the JSON of a watcher's file: the directory, the depth,
// and per entry name [directory (0 or 1), size, modification time in unix
// nanoseconds, permission bits as execd writes them].
type watcherFile struct {
	Dir     string              `json:"dir"`
	Depth   int                 `json:"depth"`
	Entries map[string][4]int64 `json:"entries"`
}

// encodeWatcher is the file of a watcher of dir at depth whose last
// listing is snap.
func encodeWatcher(dir string, depth int, snap map[string]watchEntry) ([]byte, error) {
	wf := watcherFile{Dir: dir, Depth: depth, Entries: make(map[string][4]int64, len(snap))}
	for name, e := range snap {
		d := int64(0)
		if e.dir {
			d = 1
		}
		var mod int64 // 0: no time (UnixNano is undefined before 1678)
		if e.modified.After(minWatcherTime) {
			mod = e.modified.UnixNano()
		}
		wf.Entries[name] = [4]int64{d, e.size, mod, int64(e.mode)}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(wf)
	return buf.Bytes(), err
}

// decodeWatcher reads a watcher's file back; ok is false for anything the
// gateway did not write (the sandbox can write the directory's files),
// and for a file of more than maxEntries entries, which no listing the
// gateway keeps has (max_listing_entries): the entries are counted as
// they are decoded, a name given twice included, so a file of many small
// entries, which its byte bound lets through, never costs more than that
// many.
func decodeWatcher(b []byte, maxEntries int) (dir string, depth int, snap map[string]watchEntry, ok bool) {
	var wf struct {
		Dir     string          `json:"dir"`
		Depth   int             `json:"depth"`
		Entries json.RawMessage `json:"entries"`
	}
	if json.Unmarshal(b, &wf) != nil || !path.IsAbs(wf.Dir) || (wf.Depth != 1 && wf.Depth != watchRecursiveDepth) {
		return "", 0, nil, false
	}
	snap = map[string]watchEntry{}
	if len(wf.Entries) == 0 || string(wf.Entries) == "null" {
		return wf.Dir, wf.Depth, snap, true
	}
	dec := json.NewDecoder(bytes.NewReader(wf.Entries))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", 0, nil, false
	}
	for n := 1; dec.More(); n++ {
		if n > maxEntries {
			return "", 0, nil, false
		}
		t, err := dec.Token()
		name, isName := t.(string)
		var v [4]int64
		if err != nil || !isName || dec.Decode(&v) != nil {
			return "", 0, nil, false
		}
		var mod time.Time
		if t := time.Unix(0, v[2]); v[2] != 0 && t.After(minWatcherTime) {
			mod = t // as encodeWatcher keeps it
		}
		snap[name] = watchEntry{dir: v[0] == 1, size: v[1], modified: mod, mode: int(v[3])}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return "", 0, nil, false
	}
	return wf.Dir, wf.Depth, snap, true
}

// watcherPath is the sandbox path of watcher id's file, or "" for an id
// the gateway does not give (watcherIDBytes, lower-case hex): an id is the
// client's word, and names a file only in that form.
func (h *Handler) watcherPath(id string) string {
	if len(id) != 2*watcherIDBytes {
		return ""
	}
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ""
		}
	}
	return path.Join(h.cfg.ProcessDir, id+".watch")
}

// watcherLimit bounds a watcher's file as read back (bytes): its listing
// holds less per entry than execd's answer did (a name and four numbers
// against a path, owner, group and times), which MaxListingBytes bounds.
func (h *Handler) watcherLimit() int64 { return h.cfg.MaxListingBytes + 8<<10 }

// readWatcherRequest reads a GetWatcherEvents or RemoveWatcher message and
// returns it with the path of the watcher's file: BAD_REQUEST for a
// malformed message, WATCHER_NOT_FOUND for an id of another form than the
// gateway gives.
func (h *Handler) readWatcherRequest(r *http.Request) (envd.WatcherRequest, string, *Error) {
	_, req, e := readUnary(h, r, envd.DecodeWatcherRequest)
	if e != nil {
		return req, "", e
	}
	p := h.watcherPath(req.WatcherID)
	if p == "" {
		return req, "", errWatcherNotFound(req.WatcherID)
	}
	return req, p, nil
}

// errWatcherNotFound is WATCHER_NOT_FOUND for id (shown at most 64 bytes
// of it: it is the client's).
func errWatcherNotFound(id string) *Error {
	return fail(CodeWatcherNotFound, "watcher with id "+truncate(id, 64)+" not found")
}

// createWatcher serves POST /filesystem.Filesystem/CreateWatcher: the
// directory is listed (FILE_NOT_FOUND, NOT_A_DIRECTORY as WatchDir), and a
// watcher file written with that listing; the answer is its id.
func (h *Handler) createWatcher(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	var req envd.CreateWatcherRequest
	dir, e := h.readPathMessage(r, func(msg []byte) (p string, err error) {
		req, err = envd.DecodeCreateWatcherRequest(msg)
		return req.Path, err
	})
	if e != nil {
		return e
	}
	depth := 1
	if req.Recursive {
		depth = watchRecursiveDepth
	}
	ctx := r.Context()
	snap, e := h.watchSnapshot(ctx, rq, dir, depth)
	if e != nil {
		return e
	}
	res, err := h.deps.Execd.Shell(ctx, rq.target, 4<<10, "/", processDirScript, relative(h.cfg.ProcessDir))
	switch {
	case err != nil:
		return fromExecd(err, "create watcher")
	case res.ExitCode == 3:
		return h.processDirRefused("create watcher")
	case res.ExitCode != 0:
		return fail(CodeExecdFailed, "create watcher: making the process directory "+h.cfg.ProcessDir+
			" failed with exit status "+strconv.Itoa(res.ExitCode))
	}
	found, err := h.deps.Execd.Search(ctx, rq.target, h.cfg.ProcessDir, "*.watch", maxSearchBytes)
	if err != nil && !execd.IsNotFound(err) {
		return fromExecd(err, "create watcher")
	}
	if len(found) >= maxWatchersPerSandbox {
		return busy(BoundWatchersPerSandbox, "this sandbox has "+strconv.Itoa(maxWatchersPerSandbox)+
			" directory watchers; remove one (the handle's stop()) and retry")
	}
	data, err := encodeWatcher(dir, depth, snap)
	if err != nil {
		return fail(CodeExecdProtocol, "create watcher: the listing cannot be kept")
	}
	raw := make([]byte, watcherIDBytes)
	_, _ = rand.Read(raw)
	id := hex.EncodeToString(raw)
	if err := h.deps.Execd.WriteFiles(ctx, rq.target, []execd.SmallFile{{Path: h.watcherPath(id), Data: data, Permission: execd.Permission{Mode: 600}}}); err != nil {
		return fromExecd(err, "create watcher")
	}
	_ = connect.WriteUnary(w, envd.CreateWatcherResponse{WatcherID: id})
	return nil
}

// getWatcherEvents serves POST /filesystem.Filesystem/GetWatcherEvents:
// the changes since the watcher's last call (in WatchDir's order), the new
// listing kept when there were any. WATCHER_NOT_FOUND for an id that names
// no watcher file (or one the gateway did not write); FILE_NOT_FOUND once
// the watched directory is gone.
func (h *Handler) getWatcherEvents(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	req, p, e := h.readWatcherRequest(r)
	if e != nil {
		return e
	}
	ctx := r.Context()
	b, err := h.deps.Execd.ReadAt(ctx, rq.target, p, 0, h.watcherLimit()+1)
	switch {
	case execd.IsNotFound(err):
		return errWatcherNotFound(req.WatcherID)
	case err != nil:
		return fromExecd(err, "watcher events")
	}
	if int64(len(b)) > h.watcherLimit() {
		nf := errWatcherNotFound(req.WatcherID)
		nf.cause = "the watcher's file is over its bound" // logged: the file is the sandbox's
		return nf
	}
	dir, depth, old, ok := decodeWatcher(b, h.cfg.MaxListingEntries)
	if !ok {
		nf := errWatcherNotFound(req.WatcherID)
		nf.cause = "the watcher's file is not one the gateway writes" // logged: the file is the sandbox's
		return nf
	}
	snap, e := h.watchSnapshot(ctx, rq, dir, depth)
	if e != nil {
		return e
	}
	events := watchChanges(old, snap)
	if len(events) > 0 {
		data, err := encodeWatcher(dir, depth, snap)
		if err != nil {
			return fail(CodeExecdProtocol, "watcher events: the listing cannot be kept")
		}
		if err := h.deps.Execd.WriteFiles(ctx, rq.target, []execd.SmallFile{{Path: p, Data: data, Permission: execd.Permission{Mode: 600}}}); err != nil {
			return fromExecd(err, "watcher events")
		}
	}
	if events == nil {
		events = []envd.FilesystemEvent{}
	}
	_ = connect.WriteUnary(w, envd.GetWatcherEventsResponse{Events: events})
	return nil
}

// removeWatcher serves POST /filesystem.Filesystem/RemoveWatcher: the
// watcher's file is deleted; WATCHER_NOT_FOUND when there is none.
func (h *Handler) removeWatcher(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	req, p, e := h.readWatcherRequest(r)
	if e != nil {
		return e
	}
	ctx := r.Context()
	if _, err := h.deps.Execd.Info(ctx, rq.target, []string{p}); execd.IsNotFound(err) {
		return errWatcherNotFound(req.WatcherID)
	} else if err != nil {
		return fromExecd(err, "remove watcher")
	}
	if err := h.deps.Execd.DeleteFiles(ctx, rq.target, p); err != nil {
		return fromExecd(err, "remove watcher")
	}
	_ = connect.WriteUnary(w, envd.Empty{})
	return nil
}
