package execd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
)

// Permission is execd's ownership and mode of a file or directory
// (docs/wire-facts.md §X1.3): Owner and Group are names (execd ignores names it
// cannot resolve and, when neither resolves, gives the file its own
// identity); Mode is an int whose decimal digits are the octal permission
// (755 means 0o755), 0 meaning "leave as created".
type Permission struct {
	// Owner is the owning user's name.
	Owner string `json:"owner,omitempty"`
	// Group is the owning group's name.
	Group string `json:"group,omitempty"`
	// Mode is the octal permission written in decimal digits (755 for
	// 0o755); 0 leaves the mode as created.
	Mode int `json:"mode,omitempty"`
}

// SmallFile is one file WriteFiles writes whole from memory.
type SmallFile struct {
	// Path is the file's absolute path in the sandbox.
	Path string
	// Data is the file's whole content.
	Data []byte
	Permission
}

// WriteFiles writes small files in one POST /files/upload (a metadata file
// part and a file part per file, docs/wire-facts.md §X1.5). execd creates
// the parent directories and truncates an existing file.
func (c *Client) WriteFiles(ctx context.Context, t Target, files []SmallFile) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, f := range files {
		meta, _ := json.Marshal(struct {
			Path string `json:"path"`
			Permission
		}{f.Path, f.Permission})
		pw, err := mw.CreateFormFile("metadata", "metadata")
		if err == nil {
			_, err = pw.Write(meta)
		}
		if err == nil {
			pw, err = mw.CreateFormFile("file", "file")
		}
		if err == nil {
			_, err = pw.Write(f.Data)
		}
		if err != nil {
			return &Error{Kind: KindUnexpected, Message: "building the upload failed"}
		}
	}
	if err := mw.Close(); err != nil {
		return &Error{Kind: KindUnexpected, Message: "building the upload failed"}
	}
	return c.Upload(ctx, t, mw.FormDataContentType(), unsized(body.Bytes()), -1)
}

// Info calls GET /files/info with every path of ps (one request) and
// returns the entries by path. A missing path fails the whole call with
// KindNotFound (execd v1.0.18's 500 "file not found" included).
func (c *Client) Info(ctx context.Context, t Target, ps []string) (map[string]FileInfo, error) {
	return c.info(ctx, t, ps)
}

// ReadAt reads up to limit bytes of file p from offset off with
// GET /files/download and a Range header. It returns nothing, without
// error, when off is at or past the end of the file (execd answers 416).
func (c *Client) ReadAt(ctx context.Context, t Target, p string, off, limit int64) ([]byte, error) {
	if limit <= 0 {
		return nil, nil
	}
	hdr := http.Header{"Range": {"bytes=" + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+limit-1, 10)}}
	resp, err := t.admitted(c.Do(ctx, t, http.MethodGet, "/files/download", url.Values{"path": {p}}, hdr, nil))
	if err != nil {
		return nil, err
	}
	defer drain(resp)
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusRequestedRangeNotSatisfiable:
		return nil, nil
	case http.StatusOK:
		// No range applied: the whole file; skip to off.
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			return nil, nil
		}
	default:
		return nil, CheckResponse(resp)
	}
	b, err := appendBody(nil, resp.Body, limit) // one buffer of the bytes' size
	if err != nil {
		return nil, transportError(ctx, err)
	}
	return b, nil
}

// Move calls POST /files/mv [{"src","dest"}]: execd creates dest's parent
// and refuses a dest that exists (docs/wire-facts.md §X1.3); a missing
// source is 404 on HEAD and 500 on v1.0.18.
func (c *Client) Move(ctx context.Context, t Target, src, dst string) error {
	body, _ := json.Marshal([]map[string]string{{"src": src, "dest": dst}})
	resp, err := c.doOK(ctx, t, http.MethodPost, "/files/mv", "", http.Header{"Content-Type": {"application/json"}}, unsized(body))
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// MakeDirs calls POST /directories {p: perm}: mkdir -p, then mode and
// ownership of p.
func (c *Client) MakeDirs(ctx context.Context, t Target, p string, perm Permission) error {
	body, _ := json.Marshal(map[string]Permission{p: perm})
	resp, err := c.doOK(ctx, t, http.MethodPost, "/directories", "", http.Header{"Content-Type": {"application/json"}}, unsized(body))
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// ErrTooLarge is returned by Search for an answer over its byte limit.
var ErrTooLarge = errors.New("execd: the answer is larger than the caller's limit")

// Search calls GET /files/search?path=dir&pattern=: the regular files
// (and other non-directories) below dir, recursively, whose base name
// matches the glob. A missing dir is KindNotFound; an answer of more than
// maxBytes bytes is ErrTooLarge, found before anything is decoded.
func (c *Client) Search(ctx context.Context, t Target, dir, pattern string, maxBytes int64) ([]FileInfo, error) {
	resp, err := c.unaryOK(ctx, t, http.MethodGet, "/files/search", url.Values{"path": {dir}, "pattern": {pattern}}.Encode())
	if err != nil {
		return nil, err
	}
	defer drain(resp)
	if resp.ContentLength > maxBytes {
		return nil, ErrTooLarge
	}
	body, err := appendBody(nil, resp.Body, maxBytes+1)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if int64(len(body)) > maxBytes {
		return nil, ErrTooLarge
	}
	var list []FileInfo
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, &Error{Kind: KindUnexpected, Status: resp.StatusCode, Message: "execd sent a response that is not the expected JSON"}
	}
	return list, nil
}

// DeleteFiles calls DELETE /files with every path of ps; missing files are
// ignored.
func (c *Client) DeleteFiles(ctx context.Context, t Target, ps ...string) error {
	resp, err := c.unaryOK(ctx, t, http.MethodDelete, "/files", url.Values{"path": ps}.Encode())
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// IsNotFound reports whether err is an *Error with KindNotFound.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindNotFound
}
