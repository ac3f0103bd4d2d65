package dataplane

import (
	"context"
	"net/http"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// Filesystem Stat, MakeDir and Move (Config.ExtendedOperations), mapped on
// execd's file API: GET /files/info, POST /directories, POST /files/mv.

// statEntry stats p as envd's Stat does: the entry with a symlink's target
// type (execd HEAD's /files/info reports the link itself, v1.0.18's no type
// at all; FollowedType fills both in). A missing path is FILE_NOT_FOUND.
func (h *Handler) statEntry(ctx context.Context, t execd.Target, p, what string) (execd.FileInfo, *Error) {
	fi, err := h.deps.Execd.Stat(ctx, t, p)
	if err == nil && (fi.Type == "" || fi.Type == execd.TypeSymlink) {
		fi.Type, err = h.deps.Execd.FollowedType(ctx, t, p)
	}
	if err != nil {
		e := fromExecd(err, what)
		if e.Code == CodeFileNotFound {
			e.Message = "path '" + p + "' does not exist"
		}
		return execd.FileInfo{}, e
	}
	return fi, nil
}

// writeEntry answers {"entry": EntryInfo} for fi.
func writeEntry(w http.ResponseWriter, fi execd.FileInfo, what string) *Error {
	ent, err := entryInfo(fi, new(envd.Timestamp))
	if err != nil {
		return fail(CodeExecdProtocol, what+": "+err.Error())
	}
	_ = connect.WriteUnary(w, envd.EntryResponse{Entry: ent})
	return nil
}

// stat serves Filesystem/Stat (files.exists, files.getInfo).
func (h *Handler) stat(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	p, e := h.readPathMessage(r, func(msg []byte) (string, error) {
		req, err := envd.DecodePathRequest(msg)
		return req.Path, err
	})
	if e != nil {
		return e
	}
	fi, e := h.statEntry(r.Context(), rq.target, p, "stat "+p)
	if e != nil {
		return e
	}
	return writeEntry(w, fi, "stat "+p)
}

// makeDir serves Filesystem/MakeDir as envd does: an existing directory is
// FILE_EXISTS (already_exists, which files.makeDir answers as false), an
// existing file NOT_A_DIRECTORY; otherwise execd's POST /directories
// creates it with its parents (mode 0755, owned by the SDK user by name as
// for written files) and the new entry is returned.
func (h *Handler) makeDir(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	user, req, e := readUnary(h, r, envd.DecodePathRequest)
	if e != nil {
		return e
	}
	p, e := h.resolvePath(req.Path, user)
	if e != nil {
		return e
	}
	ctx := r.Context()
	what := "make directory " + p
	switch fi, e := h.statEntry(ctx, rq.target, p, what); {
	case e == nil && fi.Type == execd.TypeDirectory:
		return fail(CodeFileExists, "directory already exists: "+p)
	case e == nil:
		return fail(CodeNotADirectory, "path already exists but it is not a directory: "+p)
	case e.Code != CodeFileNotFound:
		return e
	}
	perm := execd.Permission{Mode: 755}
	if user.set {
		perm.Owner, perm.Group = user.name, user.name
	}
	if err := h.deps.Execd.MakeDirs(ctx, rq.target, p, perm); err != nil {
		return fromExecd(err, what)
	}
	fi, e := h.statEntry(ctx, rq.target, p, what)
	if e != nil {
		return e
	}
	return writeEntry(w, fi, what)
}

// move serves Filesystem/Move (files.rename) with execd's POST /files/mv,
// which creates the destination's parent. A missing source is
// FILE_NOT_FOUND. execd never replaces an existing destination (envd's
// rename(2) would replace a file): that is FILE_EXISTS.
func (h *Handler) move(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	user, req, e := readUnary(h, r, envd.DecodeMoveRequest)
	if e != nil {
		return e
	}
	src, e := h.resolvePath(req.Source, user)
	if e != nil {
		return e
	}
	dst, e := h.resolvePath(req.Destination, user)
	if e != nil {
		return e
	}
	ctx := r.Context()
	what := "move " + src
	if _, err := h.deps.Execd.Stat(ctx, rq.target, src); err != nil {
		e := fromExecd(err, what)
		if e.Code == CodeFileNotFound {
			e.Message = "source file '" + src + "' does not exist"
		}
		return e
	}
	switch _, err := h.deps.Execd.Stat(ctx, rq.target, dst); {
	case err == nil:
		return fail(CodeFileExists, "destination '"+dst+"' exists: execd's move does not replace it")
	case !execd.IsNotFound(err):
		return fromExecd(err, what)
	}
	if err := h.deps.Execd.Move(ctx, rq.target, src, dst); err != nil {
		return fromExecd(err, what)
	}
	fi, e := h.statEntry(ctx, rq.target, dst, what)
	if e != nil {
		return e
	}
	return writeEntry(w, fi, what)
}
