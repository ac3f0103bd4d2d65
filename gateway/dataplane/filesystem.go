package dataplane

import (
	"bytes"
	"net/http"
	"path"
	"slices"
	"sync"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// readPathMessage reads the user and the unary message of a filesystem
// call, decodes it with decode (which returns the message's path) and
// resolves that path against the user's home.
func (h *Handler) readPathMessage(r *http.Request, decode func([]byte) (string, error)) (string, *Error) {
	user, p, e := readUnary(h, r, decode)
	if e != nil {
		return "", e
	}
	return h.resolvePath(p, user)
}

// listDir serves POST /filesystem.Filesystem/ListDir (Connect unary) over
// execd's GET /directories/list (spec §3.3; docs/wire-facts.md §E4.2).
func (h *Handler) listDir(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	var req envd.ListDirRequest
	dir, e := h.readPathMessage(r, func(msg []byte) (p string, err error) {
		req, err = envd.DecodeListDirRequest(msg)
		return req.Path, err
	})
	if e != nil {
		return e
	}
	list, viewed, err := h.deps.Execd.ListDirectoryView(r.Context(), rq.target, dir, int(req.Depth), func(views []execd.FileInfoView) {
		writePlainListing(w, views)
	})
	if viewed {
		return nil
	}
	if err != nil {
		return listError(err, "list", dir)
	}
	resp := envd.ListDirResponse{Entries: make([]envd.EntryInfo, 0, len(list))}
	// The entries' times in one allocation, not one per entry.
	times := make([]envd.Timestamp, len(list))
	for i, fi := range list {
		ent, err := entryInfo(fi, &times[i])
		if err != nil {
			return fail(CodeExecdProtocol, "list "+dir+": "+err.Error())
		}
		resp.Entries = append(resp.Entries, ent)
	}
	_ = connect.WriteUnary(w, resp)
	return nil
}

// listError is the error of a failed listing of dir (what names the
// operation): FILE_NOT_FOUND and NOT_A_DIRECTORY (execd's 400 for a file)
// worded as envd words them, else execd's error as fromExecd makes it.
func listError(err error, what, dir string) *Error {
	e := fromExecd(err, what+" "+dir)
	if e.Code == CodeFileNotFound {
		e.Message = "directory '" + dir + "' does not exist"
	} else if e.Code == CodeExecdRejected {
		e.Code, e.Message = CodeNotADirectory, "path '"+dir+"' is not a directory"
	}
	return e
}

// plainEntries holds the entries of the plain listings being written, for
// reuse.
var plainEntries = sync.Pool{New: func() any { return new([]envd.PlainEntry) }}

// maxPooledPlainEntries is the most entries a slice kept in plainEntries
// may hold (about 200 bytes each).
const maxPooledPlainEntries = 1024

// writePlainListing writes ListDir's answer for a plain listing: views
// converted as entryInfo converts a FileInfo, the strings and the time
// copied as execd wrote them (envd.PlainEntry), the same bytes as the
// answer of the decoded list.
func writePlainListing(w http.ResponseWriter, views []execd.FileInfoView) {
	ep := plainEntries.Get().(*[]envd.PlainEntry)
	entries := slices.Grow((*ep)[:0], len(views))
	if entries == nil {
		entries = []envd.PlainEntry{} // "entries":[], as for a decoded empty list
	}
	for _, v := range views {
		typ := fileType(v.Type)
		name := v.Path // path.Base of a path that does not end in '/'
		if i := bytes.LastIndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
		entries = append(entries, envd.PlainEntry{
			Name: name, Type: typ, Path: v.Path, Size: v.Size, Mode: v.Perm,
			Permissions: envd.Permissions(v.Perm, typ == envd.FileTypeDirectory),
			Owner:       v.Owner, Group: v.Group, Modified: v.Modified, ModifiedNanos: v.ModifiedNanos,
		})
	}
	_ = connect.WriteUnary(w, envd.PlainListDirResponse{Entries: entries})
	if cap(entries) <= maxPooledPlainEntries {
		clear(entries) // no view into execd's answer kept
		*ep = entries[:0]
		plainEntries.Put(ep)
	}
}

// linkPermissions is envd's permissions of a symlink: Go's FileMode string
// of the link itself, whose permission bits Linux always reports as 0777.
const linkPermissions = "Lrwxrwxrwx"

// fileType is envd's type of an entry execd lists with type t: a file or
// a directory; anything else (a symlink, other, none on v1.0.18) is
// FILE_TYPE_UNSPECIFIED (entryInfo; a resolved symlink takes its target's
// type there).
func fileType[T string | []byte](t T) envd.FileType {
	switch string(t) {
	case execd.TypeFile:
		return envd.FileTypeFile
	case execd.TypeDirectory:
		return envd.FileTypeDirectory
	}
	return envd.FileTypeUnspecified
}

// entryInfo converts execd's FileInfo to envd's EntryInfo (docs/wire-facts.md
// §4.2): name is the base name, size an int64 string, mode the permission
// bits, permissions Go's FileMode string. A symlink resolved by the
// listing (fi.Link) is what envd makes of it: the type and permission
// bits of its target, Go's FileMode string of the link itself
// ("Lrwxrwxrwx", a Linux symlink's), its target in symlinkTarget (its own
// path when it resolves to nothing, as envd's), and the link's own size,
// owner and time. An unresolved symlink and an "other" entry are
// FILE_TYPE_UNSPECIFIED, which the SDKs leave out.
// The modification time is written to *ts, which ModifiedTime then points
// to (when execd sent one).
func entryInfo(fi execd.FileInfo, ts *envd.Timestamp) (envd.EntryInfo, error) {
	perm, err := fi.Perm()
	if err != nil {
		return envd.EntryInfo{}, err
	}
	typ := fileType(fi.Type)
	ent := envd.EntryInfo{
		Name:        path.Base(fi.Path),
		Type:        typ,
		Path:        fi.Path,
		Size:        envd.Int64(fi.Size),
		Mode:        perm,
		Permissions: envd.Permissions(perm, typ == envd.FileTypeDirectory),
		Owner:       fi.Owner,
		Group:       fi.Group,
	}
	if l := fi.Link; l != nil && fi.Type == execd.TypeSymlink {
		ent.Type, ent.Mode, ent.Permissions = fileType(l.Type), l.Perm, linkPermissions
		target := l.Target
		if target == "" {
			target = fi.Path // envd's answer for a link it cannot resolve
		}
		ent.SymlinkTarget = &target
	}
	if !fi.ModifiedAt.IsZero() {
		*ts = envd.Timestamp(fi.ModifiedAt)
		ent.ModifiedTime = ts
	}
	return ent, nil
}

// remove serves POST /filesystem.Filesystem/Remove: stat, then execd's
// delete for that type. A missing path succeeds, as envd's RemoveAll does
// (docs/wire-facts.md §E4.2).
func (h *Handler) remove(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	p, e := h.readPathMessage(r, func(msg []byte) (string, error) {
		req, err := envd.DecodeRemoveRequest(msg)
		return req.Path, err
	})
	if e != nil {
		return e
	}
	fi, err := h.deps.Execd.Stat(r.Context(), rq.target, p)
	if err != nil {
		if e := fromExecd(err, "remove "+p); e.Code != CodeFileNotFound {
			return e
		}
	} else {
		if fi.Type == execd.TypeDirectory {
			err = h.deps.Execd.DeleteDirectory(r.Context(), rq.target, p)
		} else {
			err = h.deps.Execd.DeleteFile(r.Context(), rq.target, p)
			// execd v1.0.18 reports no type; its file delete refuses a
			// directory, which then takes the directory delete.
			if fi.Type == "" && isDirectoryError(err) {
				err = h.deps.Execd.DeleteDirectory(r.Context(), rq.target, p)
			}
		}
		if err != nil {
			return fromExecd(err, "remove "+p)
		}
	}
	_ = connect.WriteUnary(w, envd.RemoveResponse{})
	return nil
}
