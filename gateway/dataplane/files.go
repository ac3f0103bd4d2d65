package dataplane

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"net/textproto"
	"path"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/internal/multipartstream"
)

// restUser reads the user of a /files call from the username query
// parameter (docs/wire-facts.md §E4.1).
func (h *Handler) restUser(r *http.Request) (sdkUser, *Error) {
	name, e := queryOne(r, "username")
	if e != nil {
		return sdkUser{}, e
	}
	return h.lookupUser(name)
}

// queryOne returns the query parameter name of a /files call; a repeated
// one is ambiguous and refused, as envd's generated binding does.
func queryOne(r *http.Request, name string) (string, *Error) {
	v := r.URL.Query()[name]
	if len(v) > 1 {
		return "", fail(CodeBadRequest, "the "+name+" query parameter is repeated")
	}
	if len(v) == 0 {
		return "", nil
	}
	return v[0], nil
}

// queryPathParam resolves the path query parameter of a /files call.
func (h *Handler) queryPathParam(r *http.Request, u sdkUser) (string, *Error) {
	p, e := queryOne(r, "path")
	if e != nil {
		return "", e
	}
	return h.resolvePath(p, u)
}

// downloadHeaders are the request headers passed to execd's download, so
// Range and conditional requests keep working (docs/wire-facts.md §X1.5).
var downloadHeaders = []string{"Range", "If-Range", "If-Modified-Since", "If-Unmodified-Since", "If-None-Match", "If-Match"}

// downloadResponseHeaders are the execd response headers relayed to the SDK.
var downloadResponseHeaders = []string{"Content-Type", "Content-Length", "Content-Range", "Accept-Ranges",
	"Last-Modified", "ETag", "Content-Disposition"}

// filesRead serves GET /files?path=: stat first (execd answers a directory
// download with a broken 200 or a 500, docs/wire-facts.md §X1.5), then
// stream execd's GET /files/download, keeping Range. A directory, found by
// the stat or by the download's answer, is IS_A_DIRECTORY.
func (h *Handler) filesRead(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	user, e := h.restUser(r)
	if e != nil {
		return e
	}
	p, e := h.queryPathParam(r, user)
	if e != nil {
		return e
	}
	fi, err := h.deps.Execd.Stat(r.Context(), rq.target, p)
	if err != nil {
		e := fromExecd(err, "read "+p)
		if e.Code == CodeFileNotFound {
			e.Message = "path '" + p + "' does not exist"
		}
		return e
	}
	if fi.Type == execd.TypeDirectory {
		return fail(CodeIsADirectory, "path '"+p+"' is a directory")
	}
	hdr := http.Header{}
	for _, k := range downloadHeaders {
		if v := r.Header.Values(k); len(v) > 0 {
			hdr[k] = v
		}
	}
	resp, err := h.deps.Execd.Do(r.Context(), rq.target, http.MethodGet, "/files/download", queryPath(p), hdr, nil)
	if err != nil {
		return fromExecd(err, "read "+p)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusPartialContent, http.StatusNotModified, http.StatusPreconditionFailed, http.StatusRequestedRangeNotSatisfiable:
	default:
		checkErr := execd.CheckResponse(resp)
		// Where the directory's filesystem cannot seek it (tmpfs), execd
		// answers its download with 500 "seeker can't seek" instead
		// (docs/wire-facts.md §X1.5): when the stat gave no type (v1.0.18)
		// or a symlink's (HEAD), the type with symlinks followed tells a
		// directory from a failed read.
		if resp.StatusCode == http.StatusInternalServerError && fi.Type != execd.TypeFile {
			if typ, err := h.deps.Execd.FollowedType(r.Context(), rq.target, p); err == nil && typ == execd.TypeDirectory {
				return fail(CodeIsADirectory, "path '"+p+"' is a directory")
			}
		}
		e := fromExecd(checkErr, "read "+p)
		if e.Code == CodeFileNotFound {
			e.Message = "path '" + p + "' does not exist"
		}
		return e
	}
	// execd answers a directory download with 200 and a Content-Length of
	// MaxInt64 over a broken body where the filesystem seeks a directory to
	// that offset (ext4; docs/wire-facts.md §X1.5); v1.0.18 gives no type
	// to stat first, so that length is how the directory shows.
	if resp.ContentLength == math.MaxInt64 {
		return fail(CodeIsADirectory, "path '"+p+"' is a directory")
	}
	for _, k := range downloadResponseHeaders {
		if v := resp.Header.Values(k); len(v) > 0 {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	buf := downloadBuffers.Get().(*[]byte)
	defer downloadBuffers.Put(buf)
	_, err = io.CopyBuffer(w, resp.Body, *buf)
	if err != nil {
		// The status is sent; a broken copy can only end the response early,
		// and it must end as broken. The code only says, for metrics and
		// logs, which side broke it.
		abortResponse(w)
		if r.Context().Err() != nil {
			return fail(CodeCanceled, "read "+p+": the client went away")
		}
		return fail(CodeSandboxUnreachable, "read "+p+": the download was cut off")
	}
	return nil
}

// downloadBuffer is the size of a download's copy buffer (bytes): 32
// KiB, io.Copy's own size and reverse_proxy's. Larger buffers take fewer
// reads (a 256 KiB one about 6.5 reads per MiB instead of 33, Caddy's
// write idle timeout cutting the writes into 64 KiB parts), and cost less
// CPU per GiB on one of the machines measured but more on another, where
// 32 KiB was below reverse_proxy in every run and 256 KiB above it
// (docs/benchmarks.md "Issue 33: the download buffer on another CPU").
// A stalled download holds one, whoever filled it.
const downloadBuffer = 32 << 10

// downloadBuffers holds the downloads' copy buffers (*[]byte of
// downloadBuffer bytes) between downloads.
var downloadBuffers = sync.Pool{New: func() any {
	b := make([]byte, downloadBuffer)
	return &b
}}

func queryPath(p string) map[string][]string { return map[string][]string{"path": {p}} }

// filesDelete serves DELETE /files?path= over execd's DELETE /files?path=:
// 200 with an empty body; a missing file succeeds; a directory is refused.
func (h *Handler) filesDelete(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	user, e := h.restUser(r)
	if e != nil {
		return e
	}
	p, e := h.queryPathParam(r, user)
	if e != nil {
		return e
	}
	if err := h.deps.Execd.DeleteFile(r.Context(), rq.target, p); err != nil {
		return deleteError(err, p)
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// isDirectoryError reports execd's answer to a file delete of a directory:
// 500 RUNTIME_ERROR "... path is a directory ..." (docs/wire-facts.md §X1.3).
func isDirectoryError(err error) bool {
	var xe *execd.Error
	return errors.As(err, &xe) && xe.Kind == execd.KindExecd && strings.Contains(xe.Message, "is a directory")
}

// uploadError is the answer to a failed upload. execd answers a write
// onto a directory, or under a regular file, with a 500 whose message
// ends in the system's error ("… open <p>: is a directory", "… mkdir <p>:
// not a directory", docs/wire-facts.md §X1.3): those are IS_A_DIRECTORY
// and NOT_A_DIRECTORY (400, the SDKs' InvalidArgumentError, as envd
// answers them); anything else is fromExecd's. Only the message's end is
// read, so a path that merely contains those words changes nothing.
func uploadError(err error) *Error {
	var xe *execd.Error
	if errors.As(err, &xe) && xe.Kind == execd.KindExecd {
		msg := strings.TrimSpace(xe.Message)
		switch {
		case strings.HasSuffix(msg, ": is a directory"):
			return fail(CodeIsADirectory, "write: "+msg)
		case strings.HasSuffix(msg, ": not a directory"):
			return fail(CodeNotADirectory, "write: "+msg)
		}
	}
	return fromExecd(err, "write")
}

func deleteError(err error, p string) *Error {
	if isDirectoryError(err) {
		return fail(CodeIsADirectory, "path '"+p+"' is a directory")
	}
	return fromExecd(err, "delete "+p)
}

// maxUploadParts bounds the number of files in one multipart write.
const maxUploadParts = 1000

// filesWrite serves POST /files: multipart "file" parts whose filename is
// the full target path (or the path query parameter for a single file), or
// an application/octet-stream body (gzip-decoded when Content-Encoding:
// gzip, within Config.MaxDecompressedBytes and MaxDecompressionRatio, else
// WRITE_TOO_LARGE and nothing is written) for the path query parameter (docs/wire-facts.md §E4.1). The files are
// streamed into one execd POST /files/upload, each as a metadata file part
// and a file part (docs/wire-facts.md §X1.5); nothing is held in memory. The
// answer is the JSON array of exactly {name, type, path}.
func (h *Handler) filesWrite(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	user, e := h.restUser(r)
	if e != nil {
		return e
	}
	qp, e := queryOne(r, "path")
	if e != nil {
		return e
	}
	var queryTarget string
	if qp != "" {
		if queryTarget, e = h.resolvePath(qp, user); e != nil {
			return e
		}
	}
	// The buffer a chunked upload streams through: 1 MiB within the
	// process's budget, else 64 KiB (takeUploadBuffer), taken by the
	// writes that go chunked (an octet-stream body with a length goes
	// through the upstream transport's own copy). Given back when the
	// write ends, its body no longer read.
	chunk, large := smallUploadChunk, false
	defer func() { giveUploadBuffer(large) }()
	var (
		next   nextFile
		length int64 = -1 // the upstream body's length, when known
	)
	switch mediaType(r.Header.Get("Content-Type")) {
	case "application/octet-stream":
		if queryTarget == "" {
			return fail(CodeBadRequest, "an octet-stream write needs the path query parameter")
		}
		body := io.Reader(r.Body)
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
			length = r.ContentLength
		case "gzip":
			zr, err := gunzipBounded(r.Body, h.cfg.MaxDecompressedBytes, h.cfg.MaxDecompressionRatio)
			if err != nil {
				return fail(CodeBadRequest, "the gzip body is not valid")
			}
			defer zr.Close()
			body = zr
		default:
			return fail(CodeBadRequest, "Content-Encoding "+truncate(enc, 32)+" is not supported")
		}
		if length < 0 {
			chunk, large = takeUploadBuffer()
		}
		sent := false
		next = func() (uploadFile, bool, *Error) {
			if sent {
				return uploadFile{}, false, nil
			}
			sent = true
			return uploadFile{target: queryTarget, body: body}, true, nil
		}
	case "multipart/form-data":
		chunk, large = takeUploadBuffer()
		mr, err := multipartReader(r, chunk)
		if err != nil {
			return fail(CodeBadRequest, "the multipart body is not valid")
		}
		seen := map[string]bool{}
		next = func() (uploadFile, bool, *Error) {
			for {
				part, err := mr.NextPart()
				if errors.Is(err, io.EOF) {
					return uploadFile{}, false, nil
				}
				if err != nil {
					return uploadFile{}, false, fail(CodeBadRequest, "the multipart body is not valid")
				}
				target, isFile, e := h.partTarget(part.Header, queryTarget, user)
				if e != nil {
					return uploadFile{}, false, e
				}
				if !isFile {
					continue
				}
				if seen[target] {
					return uploadFile{}, false, fail(CodeBadRequest, "two parts write the same path '"+target+"'")
				}
				if len(seen) == maxUploadParts {
					return uploadFile{}, false, fail(CodeBadRequest, "too many files in one write")
				}
				seen[target] = true
				return uploadFile{target: target, body: part}, true, nil
			}
		}
	default:
		return fail(CodeBadRequest, "writes must be multipart/form-data or application/octet-stream")
	}
	up := newUploadBody(user, next, chunk)
	if e := up.start(); e != nil {
		return e
	}
	if length >= 0 {
		length += int64(up.framing.Len()) + up.closingLength()
	}
	err := h.deps.Execd.Upload(r.Context(), rq.target, up.contentType(), up, length)
	clientErr, complete := up.stop()
	switch {
	case clientErr != nil:
		return clientErr
	case err != nil:
		return uploadError(err)
	case !complete:
		return fail(CodeExecdProtocol, "write: execd ended the upload early")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(up.written)
	return nil
}

// multipartReader reads r's multipart/form-data body as r.MultipartReader
// would (package multipartstream parses as mime/multipart's NextRawPart),
// through one buffer of size bytes (uploadChunk or smallUploadChunk) whose
// file contents are handed to execd in place: mime/multipart reads
// through its own 4 KiB buffer whatever it is given, and copies every
// byte twice.
func multipartReader(r *http.Request, size int) (*multipartstream.Reader, error) {
	d, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || d != "multipart/form-data" {
		return nil, http.ErrNotMultipart
	}
	boundary, ok := params["boundary"]
	if !ok {
		return nil, http.ErrMissingBoundary
	}
	return multipartstream.NewReader(r.Body, boundary, size), nil
}

func writeInfo(p string) envd.WriteInfo {
	return envd.WriteInfo{Name: path.Base(p), Type: "file", Path: p}
}

// partTarget returns the target path of a multipart part from its header.
// Only parts named "file" are files. Their filename parameter is the full
// path as the SDK gave it, read from the raw Content-Disposition (Go's
// multipart.Part.FileName keeps only the base name; docs/wire-facts.md
// §E4.1).
func (h *Handler) partTarget(header textproto.MIMEHeader, queryTarget string, user sdkUser) (string, bool, *Error) {
	disp, params, err := mime.ParseMediaType(header.Get("Content-Disposition"))
	if err != nil || disp != "form-data" {
		return "", false, fail(CodeBadRequest, "a multipart part has no valid form-data Content-Disposition")
	}
	if params["name"] != "file" {
		return "", false, nil
	}
	if queryTarget != "" {
		return queryTarget, true, nil
	}
	name := params["filename"]
	if name == "" {
		return "", false, fail(CodeBadRequest, "a file part has no filename and the request has no path")
	}
	target, e := h.resolvePath(name, user)
	return target, true, e
}
