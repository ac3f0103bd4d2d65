package dataplane

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// Filesystem/WatchDir (Config.ExtendedOperations; the SDKs'
// files.watchDir) by polling.
//
// envd watches a directory with inotify; execd has no watch, so the
// gateway lists the directory through execd (the ListDir route, depth 1,
// or watchRecursiveDepth with recursive) and reports what changed between
// two listings: an entry that appeared is EVENT_TYPE_CREATE, one that went
// EVENT_TYPE_REMOVE (a rename is both), a file whose size or modification
// time changed EVENT_TYPE_WRITE, an entry whose permission bits changed
// EVENT_TYPE_CHMOD; each named by its path relative to the watched
// directory, as envd names them. A change undone between two listings, a
// write that changes neither the size nor the time execd reports, and a
// directory's own time are not seen. The listing runs every
// watchPollMin after a change, slowing by half up to watchPollMax while
// nothing changes; each takes one of the sandbox's upstream slots
// (max_upstream_calls_per_sandbox) for its duration, and the streams are
// bounded per sandbox and per gateway process (maxWatchStreamsPerSandbox,
// maxWatchStreams), so a tenant's watches cost the gateway a bounded number
// of listings a second. A listing is bounded as ListDir's is
// (max_listing_size, max_listing_entries): a directory over them ends the
// stream with that error.
const (
	watchPollMin = 100 * time.Millisecond
	watchPollMax = time.Second
	// watchRecursiveDepth is how deep a recursive watch lists.
	watchRecursiveDepth = 32
	// maxWatchStreamsPerSandbox, maxWatchStreamsPerCredential and
	// maxWatchStreams bound the WatchDir streams open at a gateway
	// process, per sandbox, per credential and in all: a tenant's watches
	// hold their listings between polls, outside any upstream slot.
	maxWatchStreamsPerSandbox    = 8
	maxWatchStreamsPerCredential = 64
	maxWatchStreams              = 256
)

// watchEntry is what a listing says of one entry, for comparing two.
type watchEntry struct {
	dir      bool
	size     int64
	modified time.Time
	mode     int
}

// watchSnapshot lists dir (depth) and returns its entries by path relative
// to dir.
func (h *Handler) watchSnapshot(ctx context.Context, rq *request, dir string, depth int) (map[string]watchEntry, *Error) {
	list, err := h.deps.Execd.ListDirectory(ctx, rq.target, dir, depth)
	if err != nil {
		return nil, listError(err, "watch", dir)
	}
	snap := make(map[string]watchEntry, len(list))
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for _, fi := range list {
		name, ok := strings.CutPrefix(fi.Path, prefix)
		if !ok || name == "" {
			continue // not under dir: not the listing's to report
		}
		// A copy: the name is a part of the path, which may share one
		// buffer with the whole listing (execd's decoder), and a watch
		// holds its snapshot for the stream's life.
		snap[strings.Clone(name)] = watchEntry{dir: fi.Type == execd.TypeDirectory, size: fi.Size, modified: fi.ModifiedAt, mode: fi.Mode}
	}
	return snap, nil
}

// watchChanges returns the events that turn listing old into listing new,
// in order: removals, then creations, then writes and permission changes,
// each by name.
func watchChanges(old, new map[string]watchEntry) []envd.FilesystemEvent {
	var removed, created, changed []envd.FilesystemEvent
	for name, o := range old {
		n, ok := new[name]
		switch {
		case !ok || n.dir != o.dir:
			removed = append(removed, envd.FilesystemEvent{Name: name, Type: envd.EventRemove})
			if ok {
				created = append(created, envd.FilesystemEvent{Name: name, Type: envd.EventCreate})
			}
		case !n.dir && (n.size != o.size || !n.modified.Equal(o.modified)):
			changed = append(changed, envd.FilesystemEvent{Name: name, Type: envd.EventWrite})
			if n.mode != o.mode {
				changed = append(changed, envd.FilesystemEvent{Name: name, Type: envd.EventChmod})
			}
		case n.mode != o.mode:
			changed = append(changed, envd.FilesystemEvent{Name: name, Type: envd.EventChmod})
		}
	}
	for name := range new {
		if _, ok := old[name]; !ok {
			created = append(created, envd.FilesystemEvent{Name: name, Type: envd.EventCreate})
		}
	}
	byName := func(a, b envd.FilesystemEvent) int { return strings.Compare(a.Name, b.Name) }
	slices.SortStableFunc(removed, byName)
	slices.SortStableFunc(created, byName)
	slices.SortStableFunc(changed, byName)
	return append(append(removed, created...), changed...)
}

// admitWatchStream takes a place among the WatchDir streams of rq's
// credential, of its sandbox and of the gateway, or returns GATEWAY_BUSY
// naming the bound.
func (h *Handler) admitWatchStream(rq *request) (func(), *Error) {
	releaseCred, why := h.shared.watchCreds.TryAcquire(rq.cred.ID)
	if why == admission.KeyFull {
		return nil, busy(BoundWatchStreamsPerCredential, "this credential has the most directory watches open at this gateway ("+
			strconv.Itoa(maxWatchStreamsPerCredential)+"), over its sandboxes; stop one and retry")
	}
	if why != admission.Admitted {
		return nil, busy(BoundWatchStreams, "the gateway has the most directory watches open ("+strconv.Itoa(maxWatchStreams)+"); retry shortly")
	}
	release, why := h.shared.watchStreams.TryAcquire(rq.sandboxID)
	if why != admission.Admitted {
		releaseCred()
	}
	switch why {
	case admission.KeyFull:
		return nil, busy(BoundWatchStreamsPerSandbox, "this sandbox has the most directory watches open at this gateway ("+
			strconv.Itoa(maxWatchStreamsPerSandbox)+"); stop one and retry")
	case admission.GlobalFull:
		return nil, busy(BoundWatchStreams, "the gateway has the most directory watches open ("+strconv.Itoa(maxWatchStreams)+"); retry shortly")
	}
	return func() { release(); releaseCred() }, nil
}

// watchDir serves POST /filesystem.Filesystem/WatchDir as a Connect server
// stream: the directory is listed (FILE_NOT_FOUND, NOT_A_DIRECTORY as
// ListDir answers them), the start event sent, then the changes between
// listings (watchChanges), keepalives while nothing changes, until the
// client goes, Connect-Timeout-Ms passes (COMMAND_TIMEOUT, as a command
// stream's), the gateway drains, or a listing fails (the directory removed:
// FILE_NOT_FOUND).
func (h *Handler) watchDir(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	user, e := h.basicUser(r)
	if e != nil {
		return e
	}
	call, e := h.readStreamCall(r, "Filesystem/WatchDir")
	if e != nil {
		return e
	}
	req, err := envd.DecodeWatchDirRequest(call.payload)
	if err != nil {
		return fail(CodeBadRequest, err.Error())
	}
	dir, e := h.resolvePath(req.Path, user)
	if e != nil {
		return e
	}
	depth := 1
	if req.Recursive {
		depth = watchRecursiveDepth
	}
	release, e := h.admitWatchStream(rq)
	if e != nil {
		return e
	}
	defer release()
	ctx := r.Context()
	up, e := h.admitUpstream(ctx, rq, h.cfg.UpstreamWait)
	if e != nil {
		return e
	}
	snap, e := h.watchSnapshot(ctx, rq, dir, depth)
	up()
	if e != nil {
		return e
	}
	sw := connect.NewStreamWriter(w)
	if err := sw.Send(envd.WatchDirResponse{Start: &envd.Empty{}}); err != nil {
		return fail(CodeCanceled, "the client closed the stream")
	}
	deadlineC, stop := deadlineTimer(call.deadline())
	defer stop()
	ka := time.NewTimer(call.keepalive)
	defer ka.Stop()
	interval := watchPollMin
	poll := time.NewTimer(interval)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return fail(CodeCanceled, "the client closed the stream")
		case <-deadlineC:
			return endStream(sw, fail(CodeCommandTimeout, "the watch ran past its "+call.timeout.String()+" timeout"))
		case <-ending(ctx):
			return endStream(sw, drainingError("ended this watch at the end of its drain grace"))
		case <-ka.C:
			_ = sw.Send(envd.WatchDirResponse{KeepAlive: &envd.KeepAlive{}})
			ka.Reset(call.keepalive)
			continue
		case <-poll.C:
		}
		// A listing waits for a slot of the sandbox's upstream bound (its
		// next turn) rather than failing the watch.
		up, busy := h.admitUpstream(ctx, rq, 0)
		if busy != nil {
			poll.Reset(interval)
			continue
		}
		next, e := h.watchSnapshot(ctx, rq, dir, depth)
		up()
		if e != nil {
			if ctx.Err() != nil {
				return fail(CodeCanceled, "the client closed the stream")
			}
			return endStream(sw, h.sandboxGone(ctx, rq, e))
		}
		events := watchChanges(snap, next)
		snap = next
		for i := range events {
			if err := sw.Send(envd.WatchDirResponse{Filesystem: &events[i]}); err != nil {
				return fail(CodeCanceled, "the client closed the stream")
			}
		}
		if len(events) > 0 {
			ka.Reset(call.keepalive)
			interval = watchPollMin
		} else {
			interval = min(interval*3/2, watchPollMax)
		}
		poll.Reset(interval)
	}
}
