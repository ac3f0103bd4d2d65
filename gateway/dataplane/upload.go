package dataplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"path"
	"sync"

	"github.com/sandgate/sandgate/gateway/envd"
)

// uploadChunk is the size of the reads from the client and of the writes
// to execd while an upload streams (1 MiB). A multipart write's upstream
// body has no known length, so Go's transport sends each write as one
// chunk of the chunked encoding in three write system calls (the chunk
// header with the first bytes that fill its 4 KiB buffer, the rest, the
// closing CRLF): larger writes mean fewer of them (the sweep of 128 KiB
// to 1 MiB is in docs/benchmarks.md, "Issue 33: nginx beside
// reverse_proxy…").
const uploadChunk = 1 << 20

// maxLargeUploadBuffers is how many writes of the whole process stream
// through a buffer of uploadChunk bytes at once (16: 16 MiB). A write
// holds its buffer for as long as execd takes to read what the client
// sends, and a sandbox's code can read nothing (it answers in execd's
// place) while the tenant's client fills the buffer, so a tenant whose
// clients start many writes would pin 1 MiB a write; past this many, a
// write streams through smallUploadChunk instead, which costs more
// system calls per MiB but a sixteenth of the memory. The writes
// that stream at full speed are few at any moment, so they keep the
// large one.
const maxLargeUploadBuffers = 16

// largeUploadSlots counts the writes streaming through uploadChunk bytes.
var largeUploadSlots = make(slots, maxLargeUploadBuffers)

// slots counts the transfers holding a large buffer, at most its capacity
// (the writes' budget).
type slots chan struct{}

// take takes a slot if one is free, without waiting.
func (s slots) take() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

// give gives back a slot take took.
func (s slots) give() { <-s }

// smallUploadChunk is the buffer of a write that found every large one in
// use (bytes): 64 KiB, multipartstream's MaxHeaderBytes, so that a part's
// header block is bounded alike either way.
const smallUploadChunk = 64 << 10

// takeUploadBuffer returns the size of a write's buffer: uploadChunk
// (large) while fewer than maxLargeUploadBuffers writes have it, else
// smallUploadChunk. It never waits. Give it back with giveUploadBuffer
// once the write is done with its body.
func takeUploadBuffer() (size int, large bool) {
	if largeUploadSlots.take() {
		return uploadChunk, true
	}
	return smallUploadChunk, false
}

// giveUploadBuffer gives back what takeUploadBuffer gave.
func giveUploadBuffer(large bool) {
	if large {
		largeUploadSlots.give()
	}
}

// uploadFramingBuffer is the buffer of the framing a multipart write's
// upstream body produces between its files (bytes).
const uploadFramingBuffer = 4 << 10

// uploadFile is one file of a write: its target path and its content.
type uploadFile struct {
	target string
	body   io.Reader
}

// nextFile returns the next file of a write; ok false means there is none
// left; a non-nil *Error refuses the write.
type nextFile func() (f uploadFile, ok bool, e *Error)

// uploadBody is the body of execd's POST /files/upload, produced while the
// transport reads it: for each file a metadata file part (execd reads
// form.File, so it needs a filename) and a file part with the file's bytes,
// then the closing boundary (docs/wire-facts.md §X1.5). There is no pipe
// and no goroutine: the transport's reads pull the bytes from the client's
// body, so a 1 GiB file passes through one fixed-size buffer. A failure on
// the client's side (an unreadable body, a refused part, a decompression
// bound) is kept in err and ends the body with errClientBody, so the
// transport aborts the request and execd never sees a complete body.
type uploadBody struct {
	// mu orders the transport's reads (in its own goroutine, possibly
	// after RoundTrip returned) with stop.
	mu      sync.Mutex
	stopped bool
	user    sdkUser
	next    nextFile
	mw      *multipart.Writer
	framing bytes.Buffer // multipart headers and boundaries not yet read
	cur     io.Reader    // the current file's content, nil between files
	done    bool         // the closing boundary is in framing
	eof     bool         // everything was read
	err     *Error       // the client's side failed
	written []envd.WriteInfo
	bufSize int // the size of WriteTo's buffer for a file not handed out in place (bytes)
}

var errClientBody = errors.New("the write's body failed on the client's side")

// newUploadBody returns the body of a write whose files next gives; a
// file not handed out in place streams through chunk bytes (uploadChunk
// or smallUploadChunk: takeUploadBuffer).
func newUploadBody(user sdkUser, next nextFile, chunk int) *uploadBody {
	u := &uploadBody{user: user, next: next, bufSize: chunk}
	u.mw = multipart.NewWriter(&u.framing)
	return u
}

// contentType is the multipart/form-data Content-Type with the boundary.
func (u *uploadBody) contentType() string { return u.mw.FormDataContentType() }

// uploadMetadata is execd's upload metadata (docs/wire-facts.md §X1.5). Mode 644
// gives the file envd's 0644 (execd would otherwise leave 0755 under umask).
type uploadMetadata struct {
	Path  string `json:"path"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	Mode  int    `json:"mode"`
}

// advance moves to the next file: its two part headers go into framing;
// with no file left, the closing boundary does.
func (u *uploadBody) advance() *Error {
	f, ok, e := u.next()
	if e != nil {
		return e
	}
	if !ok {
		_ = u.mw.Close()
		u.done = true
		return nil
	}
	meta := uploadMetadata{Path: f.target, Mode: 644}
	if u.user.set {
		meta.Owner, meta.Group = u.user.name, u.user.name
	}
	mb, _ := json.Marshal(meta)
	pw, _ := u.mw.CreateFormFile("metadata", "metadata")
	_, _ = pw.Write(mb)
	_, _ = u.mw.CreateFormFile("file", path.Base(f.target))
	u.cur = f.body
	u.written = append(u.written, writeInfo(f.target))
	return nil
}

// start reads up to the first file, before anything is sent: a write whose
// first file is refused, or that has none, sends nothing.
func (u *uploadBody) start() *Error {
	if e := u.advance(); e != nil {
		return e
	}
	if u.done {
		return fail(CodeBadRequest, "the multipart body has no file part")
	}
	return nil
}

// Read produces the next bytes of the body.
func (u *uploadBody) Read(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stopped {
		return 0, errClientBody
	}
	for {
		switch {
		case u.err != nil:
			return 0, errClientBody
		case u.framing.Len() > 0:
			return u.framing.Read(p)
		case u.cur != nil:
			n, err := u.cur.Read(p)
			if err = u.fileRead(err); err != nil {
				return 0, err
			}
			if n > 0 {
				return n, nil
			}
		case u.done:
			u.eof = true
			return 0, io.EOF
		default:
			if e := u.advance(); e != nil {
				u.err = e
				return 0, errClientBody
			}
		}
	}
}

// fileRead handles the error of a read of the current file; u.mu is held.
// The file's end moves on to the next file (nil is returned); a failure
// is kept in u.err and gives errClientBody.
func (u *uploadBody) fileRead(err error) error {
	switch {
	case err == nil:
		return nil
	case err == io.EOF:
		u.cur = nil
		return nil
	}
	var tl *tooLarge
	if errors.As(err, &tl) {
		u.err = fail(CodeWriteTooLarge, tl.msg)
	} else {
		u.err = fail(CodeBadRequest, "the request body could not be read")
	}
	return errClientBody
}

// inPlace is a file body that hands out its bytes without copying them
// (a multipartstream.Part): each slice is valid until the next call.
type inPlace interface {
	Next() ([]byte, error)
}

// chunk returns the next bytes of the current file in place when its body
// allows it (ok true; b is valid until the next call and may be empty),
// with the errors of Read.
func (u *uploadBody) chunk() (b []byte, ok bool, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c, isInPlace := u.cur.(inPlace)
	if !isInPlace || u.stopped || u.err != nil || u.framing.Len() > 0 {
		return nil, false, nil
	}
	b, err = c.Next()
	if err = u.fileRead(err); err != nil {
		return nil, true, err
	}
	return b, true, nil
}

// framingOnly reports whether the next bytes of Read are multipart
// framing (part headers, boundaries) followed by a file handed out in
// place, or the closing boundary: no file content needs the large buffer.
func (u *uploadBody) framingOnly() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, isInPlace := u.cur.(inPlace)
	return u.cur == nil || isInPlace
}

// Close is called by the transport when it is done with the body.
func (u *uploadBody) Close() error { return nil }

// stop ends the body for the transport: a read in progress finishes
// first, later ones fail. It returns the client's failure, if any, and
// whether the whole body was read.
func (u *uploadBody) stop() (*Error, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stopped = true
	return u.err, u.eof
}

// WriteTo copies the body to w (Go's transport uses it for a body of
// unknown length, where each write is one chunk of the chunked encoding,
// flushed on its own): a multipart file's bytes straight from the buffer
// they were read into (the multipart reader's buffer), the framing
// between them through a buffer of uploadFramingBuffer bytes, and any
// other file through a buffer of u.bufSize bytes.
func (u *uploadBody) WriteTo(w io.Writer) (int64, error) {
	var small, large []byte
	var total int64
	write := func(b []byte) error {
		wn, err := w.Write(b)
		total += int64(wn)
		return err
	}
	for {
		b, ok, err := u.chunk()
		if ok {
			if len(b) > 0 {
				if werr := write(b); werr != nil {
					return total, werr
				}
			}
			if err != nil {
				return total, err
			}
			continue
		}
		// Between the files of a multipart write only framing is read
		// here (and at most a small buffer's worth of the next file,
		// before chunk takes over): a small buffer saves the large one.
		buf := large
		if u.framingOnly() {
			if small == nil {
				small = make([]byte, uploadFramingBuffer)
			}
			buf = small
		} else if large == nil {
			large = make([]byte, u.bufSize)
			buf = large
		}
		n, err := io.ReadFull(u, buf)
		if n > 0 {
			if werr := write(buf[:n]); werr != nil {
				return total, werr
			}
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return total, nil
		case err != nil:
			return total, err
		}
	}
}

// closingLength is the length of the closing boundary
// "\r\n--<boundary>--\r\n" multipart.Writer.Close writes.
func (u *uploadBody) closingLength() int64 { return int64(len(u.mw.Boundary())) + 8 }
