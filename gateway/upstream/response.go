package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"

	"golang.org/x/net/http/httpguts"
)

// ErrFraming is wrapped by every error about a response the client refuses
// to read: a malformed status line or header, a header section over its
// limit, ambiguous or unknown body framing (RFC 9112 §6), a bad chunk.
var ErrFraming = errors.New("upstream: malformed HTTP/1.1 response")

func framingError(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFraming}, a...)...)
}

// maxInformational bounds the 1xx responses skipped before the final one
// (net/http's limit too).
const maxInformational = 5

// head is a parsed response head and how its body is framed.
type head struct {
	proto        string
	major, minor int
	status       int
	statusText   string
	header       http.Header
	// length is the body's length: >= 0 from Content-Length (or 0 for a
	// status or method without a body), -1 for chunked or read-to-close.
	length  int64
	chunked bool
	// close is set when the connection cannot carry another request
	// after this response: Connection: close, HTTP/1.0 without
	// keep-alive, or a body delimited by the connection's end.
	close bool
}

// readHead reads one final response head from br for a request of method,
// skipping up to maxInformational 1xx responses (101 is refused: the
// client never asks to switch protocols). Every line must fit br's buffer
// and the lines of one head together at most maxHeaderBytes.
func readHead(br *bufio.Reader, method string, maxHeaderBytes int) (*head, error) {
	for range maxInformational + 1 {
		h, err := readOneHead(br, maxHeaderBytes)
		if err != nil {
			return nil, err
		}
		if h.status >= 100 && h.status < 200 {
			if h.status == http.StatusSwitchingProtocols {
				return nil, framingError("101 Switching Protocols was not asked for")
			}
			continue
		}
		if err := h.frame(method); err != nil {
			return nil, err
		}
		return h, nil
	}
	return nil, framingError("more than %d informational responses", maxInformational)
}

// readLine returns the next line of br without its CRLF. A line longer
// than br's buffer, or one not ended by CRLF, is an error; so is one that
// takes *budget below zero (it is charged the line's length).
func readLine(br *bufio.Reader, budget *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, framingError("a line longer than %d bytes", br.Size())
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	*budget -= len(line)
	if *budget < 0 {
		return nil, framingError("the header section is over its limit")
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, framingError("a line not ended by CRLF")
	}
	return line[:len(line)-2], nil
}

func readOneHead(br *bufio.Reader, maxHeaderBytes int) (*head, error) {
	budget := maxHeaderBytes
	line, err := readLine(br, &budget)
	if err != nil {
		return nil, err
	}
	h := &head{length: -1}
	// HTTP-version SP status-code SP [reason-phrase] (RFC 9112 §4).
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' || len(line) > 12 && line[12] != ' ' ||
		!validValue(line) {
		return nil, framingError("bad status line")
	}
	switch line[7] {
	case '0':
		h.proto, h.major, h.minor = "HTTP/1.0", 1, 0
	case '1':
		h.proto, h.major, h.minor = "HTTP/1.1", 1, 1
	default:
		return nil, framingError("bad status line")
	}
	code := line[9:12]
	if code[0] < '1' || code[0] > '5' || code[1] < '0' || code[1] > '9' || code[2] < '0' || code[2] > '9' {
		return nil, framingError("bad status code")
	}
	h.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	switch {
	case string(line[9:]) == "200 OK":
		h.statusText = "200 OK" // the usual answer, without an allocation
	case len(line) > 13:
		h.statusText = string(line[9:])
	default:
		h.statusText = strconv.Itoa(h.status)
	}
	h.header = make(http.Header, 8)
	for {
		line, err := readLine(br, &budget)
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			return h, nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return nil, framingError("a header line without a name")
		}
		name := line[:colon]
		// No whitespace before the colon (RFC 9112 §5.1), no obs-fold
		// (a line starting with whitespace has no token name either).
		if !validName(name) {
			return nil, framingError("a bad header name")
		}
		value := bytes.Trim(line[colon+1:], " \t")
		if !validValue(value) {
			return nil, framingError("a bad header value")
		}
		key := textproto.CanonicalMIMEHeaderKey(string(name))
		h.header[key] = append(h.header[key], string(value))
	}
}

// frame decides how the body of h is delimited (RFC 9112 §6.3) and
// whether the connection may carry another request, refusing the
// ambiguous cases instead of choosing: Transfer-Encoding with
// Content-Length, a transfer coding other than chunked alone, differing
// or malformed Content-Length values.
func (h *head) frame(method string) error {
	te, hasTE := h.header["Transfer-Encoding"]
	cl, hasCL := h.header["Content-Length"]
	if hasTE && hasCL {
		return framingError("both Transfer-Encoding and Content-Length")
	}
	h.close = h.minor == 0 && !httpguts.HeaderValuesContainsToken(h.header["Connection"], "keep-alive") ||
		httpguts.HeaderValuesContainsToken(h.header["Connection"], "close")
	if method == http.MethodHead || h.status == http.StatusNoContent || h.status == http.StatusNotModified {
		h.length = 0
		return nil
	}
	switch {
	case hasTE:
		if h.minor == 0 {
			return framingError("Transfer-Encoding in an HTTP/1.0 response")
		}
		if len(te) != 1 || !asciiEqualFold(te[0], "chunked") {
			return framingError("a transfer coding other than chunked")
		}
		h.chunked = true
		h.length = -1
		delete(h.header, "Transfer-Encoding")
	case hasCL:
		n, ok := parseLength(cl[0])
		if !ok {
			return framingError("a bad Content-Length")
		}
		for _, v := range cl[1:] {
			if v != cl[0] {
				return framingError("differing Content-Length values")
			}
		}
		h.length = n
	default:
		h.length = -1
		h.close = true // the body ends with the connection
	}
	return nil
}

// validName reports whether b is a token (RFC 9110 §5.1): no whitespace,
// no separators, not empty.
func validName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

// validValue reports whether b holds only field-value bytes (RFC 9110
// §5.5): HTAB, SP, visible ASCII and obs-text; no CR, LF, NUL or other
// controls.
func validValue(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// parseLength parses a Content-Length value: 1 to 18 decimal digits.
func parseLength(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// chunkReader reads a chunked body (RFC 9112 §7.1) from br: chunk sizes
// of at most 15 hex digits, extensions ignored, each chunk's data ended by
// CRLF, and the trailer section after the last chunk read and dropped
// within maxTrailerBytes. It returns io.EOF only after all of that.
type chunkReader struct {
	br              *bufio.Reader
	left            int64 // bytes of the current chunk still to read
	needCRLF        bool  // the current chunk's data ended; its CRLF is next
	done            bool
	err             error
	maxTrailerBytes int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		if err := c.next(); err != nil {
			c.err = err
			return 0, err
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if c.left == 0 {
		c.needCRLF = true
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		c.err = err
	}
	return n, err
}

// next reads the CRLF ending the previous chunk, then the next chunk's
// size line; after the last chunk, the trailer section.
func (c *chunkReader) next() error {
	budget := c.br.Size()
	if c.needCRLF {
		line, err := readLine(c.br, &budget)
		if err != nil {
			return eofUnexpected(err)
		}
		if len(line) != 0 {
			return framingError("chunk data longer than its size")
		}
		c.needCRLF = false
		budget = c.br.Size()
	}
	line, err := readLine(c.br, &budget)
	if err != nil {
		return eofUnexpected(err)
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return framingError("a bad chunk size")
	}
	var n int64
	for _, b := range line {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b -= 'a' - 10
		case 'A' <= b && b <= 'F':
			b -= 'A' - 10
		default:
			return framingError("a bad chunk size")
		}
		n = n<<4 | int64(b)
	}
	if n > 0 {
		c.left = n
		return nil
	}
	// The last chunk: trailer fields until an empty line, dropped.
	budget = c.maxTrailerBytes
	for {
		line, err := readLine(c.br, &budget)
		if err != nil {
			return eofUnexpected(err)
		}
		if len(line) == 0 {
			c.done = true
			return nil
		}
	}
}

func eofUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
