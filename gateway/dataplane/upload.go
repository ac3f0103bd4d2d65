package dataplane

import (
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"path"
)

// upload streams files into one execd POST /files/upload through a pipe:
// the multipart body is produced while it is sent, so a 1 GiB file passes
// through a fixed-size buffer. The upstream request starts with the first
// file, so a write with no valid file sends nothing.
type upload struct {
	h     *Handler
	r     *http.Request
	rq    *request
	user  sdkUser
	pw    *io.PipeWriter
	mw    *multipart.Writer
	done  chan error
	ended bool
}

func (h *Handler) newUpload(r *http.Request, rq *request, user sdkUser) *upload {
	return &upload{h: h, r: r, rq: rq, user: user}
}

// uploadMetadata is execd's upload metadata (docs/wire-facts.md §X1.5). Mode 644
// gives the file envd's 0644 (execd would otherwise leave 0755 under umask).
type uploadMetadata struct {
	Path  string `json:"path"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	Mode  int    `json:"mode"`
}

func (u *upload) start() {
	pr, pw := io.Pipe()
	u.pw = pw
	u.mw = multipart.NewWriter(pw)
	u.done = make(chan error, 1)
	ct := u.mw.FormDataContentType()
	go func() {
		err := u.h.deps.Execd.Upload(u.r.Context(), u.rq.target, ct, pr)
		// Unblock the writer if execd answered before reading everything.
		_ = pr.CloseWithError(errUploadEnded)
		u.done <- err
	}()
}

type uploadEnded struct{}

func (uploadEnded) Error() string { return "the upload ended" }

var errUploadEnded error = uploadEnded{}

// add writes one file: a metadata file part (execd reads form.File, so it
// needs a filename) and a file part copied from body.
func (u *upload) add(target string, body io.Reader) *Error {
	if u.pw == nil {
		u.start()
	}
	meta := uploadMetadata{Path: target, Mode: 644}
	if u.user.set {
		meta.Owner, meta.Group = u.user.name, u.user.name
	}
	mb, _ := json.Marshal(meta)
	pw, err := u.mw.CreateFormFile("metadata", "metadata")
	if err == nil {
		_, err = pw.Write(mb)
	}
	if err == nil {
		pw, err = u.mw.CreateFormFile("file", path.Base(target))
	}
	if err != nil {
		return u.upstreamError()
	}
	buf := make([]byte, 256<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, werr := pw.Write(buf[:n]); werr != nil {
				return u.upstreamError()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			var tl *tooLarge
			if errors.As(rerr, &tl) {
				return fail(CodeWriteTooLarge, tl.msg)
			}
			return fail(CodeBadRequest, "the request body could not be read")
		}
	}
}

// upstreamError waits for execd's answer after a failed pipe write.
func (u *upload) upstreamError() *Error {
	_ = u.pw.CloseWithError(errUploadEnded)
	u.ended = true
	if err := <-u.done; err != nil {
		return fromExecd(err, "write")
	}
	return fail(CodeExecdProtocol, "write: execd ended the upload early")
}

// finish closes the multipart body and returns execd's answer.
func (u *upload) finish() *Error {
	if u.pw == nil {
		return nil
	}
	if err := u.mw.Close(); err != nil {
		return u.upstreamError()
	}
	_ = u.pw.Close()
	u.ended = true
	if err := <-u.done; err != nil {
		return fromExecd(err, "write")
	}
	return nil
}

// abort cancels an upload that was not finished, so execd never sees a
// complete body for a write that failed half-way.
func (u *upload) abort() {
	if u.pw == nil || u.ended {
		return
	}
	u.ended = true
	_ = u.pw.CloseWithError(errUploadAborted)
	<-u.done
}

type uploadAborted struct{}

func (uploadAborted) Error() string { return "the write was aborted" }

var errUploadAborted error = uploadAborted{}
