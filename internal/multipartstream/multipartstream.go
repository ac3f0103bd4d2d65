// Package multipartstream reads a MIME multipart body (RFC 2046, as
// multipart/form-data uses it, RFC 7578) part by part, with each part's
// body handed out as slices of one large buffer.
//
// It parses exactly as mime/multipart's Reader.NextRawPart and Part.Read
// do (the boundary rules, the bare-LF tolerance, the preamble and epilogue,
// Content-Transfer-Encoding left alone; the scanning code is a port of
// Go's), with two differences that matter for large uploads:
//
//   - mime/multipart reads through its own 4 KiB bufio.Reader whatever it
//     is given, so a 1 GiB part costs 262,144 boundary scans and two
//     copies of every byte (into that buffer, then into the caller's).
//     Here the buffer has the size the caller chooses (DefaultBufferSize,
//     256 KiB), and Part.Next returns the scanned bytes in place: one copy
//     (from the socket into the buffer) and one scan per buffer fill.
//   - A part's header block must fit in MaxHeaderBytes (64 KiB, or the
//     buffer size when smaller) and hold at most MaxHeaders lines, else
//     NextPart fails with ErrHeaderTooLarge before anything of it is
//     parsed (mime/multipart allows 10 MiB and 10,000 headers). Lines
//     outside parts (preamble, boundary lines) must be at most
//     MaxLineBytes long (64 KiB, or the buffer when smaller), else
//     NextPart fails with ErrLineTooLong: the same bound whatever the
//     buffer, so a body is read the same through any buffer of at least
//     64 KiB (mime/multipart's bound is its 4 KiB buffer).
//   - A body that ends inside a part's header block is an error
//     (ErrHeaderTruncated); mime/multipart returns io.EOF for it, as if
//     the parts had ended normally.
//
// Memory is bounded by the buffer and one header block per part.
package multipartstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/textproto"
)

const (
	// DefaultBufferSize is the buffer NewReader uses for size 0: 256 KiB.
	DefaultBufferSize = 256 << 10
	// MinBufferSize is the smallest buffer: 4 KiB, mime/multipart's own
	// (a boundary line of up to 70 characters and its framing must fit).
	MinBufferSize = 4 << 10
	// MaxHeaderBytes is the largest header block of one part, blank line
	// included: 64 KiB (or the buffer size when that is smaller).
	MaxHeaderBytes = 64 << 10
	// MaxHeaders is the most header lines of one part, as mime/multipart's
	// default.
	MaxHeaders = 10000
	// MaxLineBytes is the longest line outside a part (a preamble line, a
	// boundary line, the line break before one), line break included: 64
	// KiB (or the buffer size when that is smaller). A line the body ends
	// without a line break (a final boundary line) may be one byte shorter.
	MaxLineBytes = 64 << 10
)

// ErrLineTooLong is the error of NextPart for a line outside any part
// over MaxLineBytes (or the buffer).
var ErrLineTooLong = errors.New("multipartstream: a line outside the parts is too long")

// ErrHeaderTruncated is the error of NextPart when the body ends inside a
// part's header block; it wraps io.ErrUnexpectedEOF.
var ErrHeaderTruncated = fmt.Errorf("multipartstream: the body ended inside a part header: %w", io.ErrUnexpectedEOF)

// ErrHeaderTooLarge is the error of NextPart for a part whose header block
// is over MaxHeaderBytes (or the buffer) or MaxHeaders lines.
var ErrHeaderTooLarge = errors.New("multipartstream: part header block too large")

// Reader iterates over the parts of one multipart body. It is not safe for
// concurrent use.
type Reader struct {
	br *bufio.Reader

	current   *Part
	partsRead int

	nl               []byte // "\r\n" or "\n" (set after seeing the first boundary line)
	nlDashBoundary   []byte // nl + "--boundary"
	dashBoundaryDash []byte // "--boundary--"
	dashBoundary     []byte // "--boundary"
}

// NewReader reads the multipart body r with boundary (the Content-Type's
// boundary parameter) through a buffer of size bytes: DefaultBufferSize
// for 0, at least MinBufferSize. r is read only through the Reader's
// buffer, and never again after it returned an error.
func NewReader(r io.Reader, boundary string, size int) *Reader {
	if size == 0 {
		size = DefaultBufferSize
	}
	b := []byte("\r\n--" + boundary + "--")
	return &Reader{
		br:               bufio.NewReaderSize(&stickyErrorReader{r: r}, max(size, MinBufferSize)),
		nl:               b[:2],
		nlDashBoundary:   b[:len(b)-2],
		dashBoundaryDash: b[2:],
		dashBoundary:     b[2 : len(b)-2],
	}
}

// stickyErrorReader never calls Read on r again once it returned an error.
type stickyErrorReader struct {
	r   io.Reader
	err error
}

func (r *stickyErrorReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	var n int
	n, r.err = r.r.Read(p)
	return n, r.err
}

// Part is one part of a multipart body: its header and its raw body.
type Part struct {
	// Header is the part's header, keys canonicalised as net/textproto
	// does.
	Header textproto.MIMEHeader

	mr      *Reader
	n       int   // scanned body bytes waiting in mr.br
	total   int64 // body bytes returned so far
	err     error // returned once n is 0
	readErr error // the read error seen on mr.br
}

// NextPart returns the next part, after discarding the rest of the current
// one. It returns io.EOF after the final boundary. Errors: a malformed
// body (a line where a boundary belongs, a missing final boundary: the
// body's read error, io.ErrUnexpectedEOF when it just ended), a header
// block mime/multipart refuses, ErrHeaderTruncated, ErrHeaderTooLarge, and ErrLineTooLong
// for a line outside any part over MaxLineBytes.
func (r *Reader) NextPart() (*Part, error) {
	if r.current != nil {
		_ = r.current.Close()
		r.current = nil
	}
	if string(r.dashBoundary) == "--" {
		return nil, errors.New("multipartstream: boundary is empty")
	}
	expectNewPart := false
	for {
		line, err := r.br.ReadSlice('\n')
		// A line the body ends without its line break (err set) is too
		// long at the bound already, its line break counted: a buffer of
		// the bound's size is full before the end can be seen, or not,
		// depending on whether the last bytes come with io.EOF.
		if limit := min(MaxLineBytes, r.br.Size()); errors.Is(err, bufio.ErrBufferFull) ||
			len(line) > limit || (err != nil && len(line) >= limit) {
			return nil, ErrLineTooLong
		}
		if err == io.EOF && r.isFinalBoundary(line) {
			// "--boundary--" at the very end without its line break.
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("multipartstream: NextPart: %w", err)
		}
		if r.isBoundaryDelimiterLine(line) {
			r.partsRead++
			h, err := r.readHeader()
			if err != nil {
				return nil, err
			}
			r.current = &Part{Header: h, mr: r}
			return r.current, nil
		}
		if r.isFinalBoundary(line) {
			return nil, io.EOF
		}
		if expectNewPart {
			return nil, fmt.Errorf("multipartstream: expecting a new part; got line %q", string(line))
		}
		if r.partsRead == 0 {
			continue // preamble
		}
		// The line break between the previous part's body and the
		// boundary line that must follow.
		if bytes.Equal(line, r.nl) {
			expectNewPart = true
			continue
		}
		return nil, fmt.Errorf("multipartstream: unexpected line in NextPart: %q", line)
	}
}

// readHeader reads a part's header block: it is located in the buffer
// first (bounded), then parsed by net/textproto as mime/multipart does.
func (r *Reader) readHeader() (textproto.MIMEHeader, error) {
	limit := min(MaxHeaderBytes, r.br.Size())
	for {
		buf, _ := r.br.Peek(r.br.Buffered())
		if end := headerEnd(buf[:min(len(buf), limit)]); end >= 0 {
			block := buf[:end]
			if bytes.Count(block, []byte{'\n'}) > MaxHeaders+1 {
				return nil, ErrHeaderTooLarge
			}
			h, err := textproto.NewReader(bufio.NewReaderSize(bytes.NewReader(block), max(end, 16))).ReadMIMEHeader()
			_, _ = r.br.Discard(end)
			if err != nil {
				return nil, err
			}
			return h, nil
		}
		if len(buf) >= limit {
			return nil, ErrHeaderTooLarge
		}
		if _, err := r.br.Peek(len(buf) + 1); err != nil {
			if err == io.EOF {
				return nil, ErrHeaderTruncated
			}
			return nil, fmt.Errorf("multipartstream: part header: %w", err)
		}
	}
}

// headerEnd returns the length of the header block at the start of b up to
// and including its blank line, or -1 when b holds no blank line. Lines end
// at "\n" (a "\r" before it is part of the line break), as net/textproto
// reads them; a line of spaces is a continuation, not the end.
func headerEnd(b []byte) int {
	switch {
	case bytes.HasPrefix(b, []byte("\r\n")):
		return 2
	case bytes.HasPrefix(b, []byte("\n")):
		return 1
	}
	end := -1
	if i := bytes.Index(b, []byte("\n\r\n")); i >= 0 {
		end = i + 3
	}
	if i := bytes.Index(b, []byte("\n\n")); i >= 0 && (end < 0 || i+2 < end) {
		end = i + 2
	}
	return end
}

// isFinalBoundary reports whether line is the final boundary line,
// `^--boundary--[ \t]*(\r\n)?$`.
func (r *Reader) isFinalBoundary(line []byte) bool {
	if !bytes.HasPrefix(line, r.dashBoundaryDash) {
		return false
	}
	rest := skipLWSPChar(line[len(r.dashBoundaryDash):])
	return len(rest) == 0 || bytes.Equal(rest, r.nl)
}

// isBoundaryDelimiterLine reports whether line is a boundary delimiter
// line (RFC 2046 section 5.1: "--" boundary, optional linear white space,
// CRLF). On the first part a bare LF switches the reader to LF line breaks,
// as mime/multipart does.
func (r *Reader) isBoundaryDelimiterLine(line []byte) bool {
	if !bytes.HasPrefix(line, r.dashBoundary) {
		return false
	}
	rest := skipLWSPChar(line[len(r.dashBoundary):])
	if r.partsRead == 0 && len(rest) == 1 && rest[0] == '\n' {
		r.nl = r.nl[1:]
		r.nlDashBoundary = r.nlDashBoundary[1:]
	}
	return bytes.Equal(rest, r.nl)
}

func skipLWSPChar(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// scan finds the next body bytes in the buffer: it sets p.n, or p.err at
// the part's end (io.EOF) or on a read error.
func (p *Part) scan() {
	br := p.mr.br
	for p.n == 0 && p.err == nil {
		peek, _ := br.Peek(br.Buffered())
		p.n, p.err = scanUntilBoundary(peek, p.mr.dashBoundary, p.mr.nlDashBoundary, p.total, p.readErr)
		if p.n == 0 && p.err == nil {
			// Read more into the buffer.
			_, p.readErr = br.Peek(len(peek) + 1)
			if p.readErr == io.EOF {
				p.readErr = io.ErrUnexpectedEOF
			}
		}
	}
}

// Read reads the part's body, up to the line break before the next
// boundary. It returns io.EOF at the boundary; a body that ends before it
// gives io.ErrUnexpectedEOF (or the read error).
func (p *Part) Read(d []byte) (int, error) {
	p.scan()
	if p.n == 0 {
		return 0, p.err
	}
	n, _ := p.mr.br.Read(d[:min(len(d), p.n)])
	p.total += int64(n)
	p.n -= n
	if p.n == 0 {
		return n, p.err
	}
	return n, nil
}

// Next returns the next bytes of the part's body without copying them:
// everything scanned so far, as a slice of the Reader's buffer (at most
// its size). The slice is valid until the next call of any method of the
// Reader or of its parts; the caller must not modify it. At the end of the
// body Next returns nil and io.EOF, and the errors of Read otherwise.
func (p *Part) Next() ([]byte, error) {
	p.scan()
	if p.n == 0 {
		return nil, p.err
	}
	b, _ := p.mr.br.Peek(p.n) // buffered already: no read
	_, _ = p.mr.br.Discard(p.n)
	p.total += int64(p.n)
	p.n = 0
	return b, nil
}

// Close discards the rest of the part's body.
func (p *Part) Close() error {
	for {
		if _, err := p.Next(); err != nil {
			return nil
		}
	}
}

// scanUntilBoundary scans buf for the body bytes that can be returned:
// everything before "\r\n--boundary" (or, at the very start of the part,
// "--boundary") when that is followed by what ends a boundary; else
// everything up to the last "\r" that could start one. total is the number
// of body bytes already returned, readErr the read error that ends buf.
func scanUntilBoundary(buf, dashBoundary, nlDashBoundary []byte, total int64, readErr error) (int, error) {
	if total == 0 {
		// At the beginning of the body, "--boundary" ends an empty body.
		if bytes.HasPrefix(buf, dashBoundary) {
			switch matchAfterPrefix(buf, dashBoundary, readErr) {
			case -1:
				return len(dashBoundary), nil
			case 0:
				return 0, nil
			case +1:
				return 0, io.EOF
			}
		}
		if bytes.HasPrefix(dashBoundary, buf) {
			return 0, readErr
		}
	}
	if i := bytes.Index(buf, nlDashBoundary); i >= 0 {
		switch matchAfterPrefix(buf[i:], nlDashBoundary, readErr) {
		case -1:
			return i + len(nlDashBoundary), nil
		case 0:
			return i, nil
		case +1:
			return i, io.EOF
		}
	}
	if bytes.HasPrefix(nlDashBoundary, buf) {
		return 0, readErr
	}
	// Everything before the last possible start of the delimiter is body.
	i := bytes.LastIndexByte(buf, nlDashBoundary[0])
	if i >= 0 && bytes.HasPrefix(nlDashBoundary, buf[i:]) {
		return i, nil
	}
	return len(buf), readErr
}

// matchAfterPrefix reports whether buf, which starts with prefix
// ("--boundary", "\r\n--boundary" or "\n--boundary"), is a boundary: +1
// when prefix is followed by "--", a space, a tab, "\r", "\n" or the end
// of the input; -1 when by anything else; 0 when more input is needed.
func matchAfterPrefix(buf, prefix []byte, readErr error) int {
	if len(buf) == len(prefix) {
		if readErr != nil {
			return +1
		}
		return 0
	}
	c := buf[len(prefix)]
	if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
		return +1
	}
	if c == '-' {
		if len(buf) == len(prefix)+1 {
			if readErr != nil {
				return -1
			}
			return 0
		}
		if buf[len(prefix)+1] == '-' {
			return +1
		}
	}
	return -1
}
