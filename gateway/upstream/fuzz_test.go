package upstream

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
)

// readAnswer parses stream as the answer to a GET the way RoundTrip does:
// the head, then the body by its framing (at most limit bytes read). It
// returns the head, the body and how many bytes of stream were consumed.
func readAnswer(stream []byte, limit int64) (*head, []byte, error) {
	br := bufio.NewReaderSize(bytes.NewReader(stream), 512)
	h, err := readHead(br, http.MethodGet, 2048)
	if err != nil {
		return nil, nil, err
	}
	// The body as RoundTrip gives it, on a connection never reused.
	nc, other := net.Pipe()
	defer other.Close()
	b := &body{c: &conn{nc: nc}, r: br, left: h.length}
	if h.chunked {
		b.r = &chunkReader{br: br, maxTrailerBytes: 2048}
	}
	defer b.Close()
	got, err := io.ReadAll(io.LimitReader(b, limit))
	if err != nil {
		return nil, nil, err
	}
	if !h.chunked && h.length >= 0 && int64(len(got)) != h.length {
		return nil, nil, io.ErrUnexpectedEOF
	}
	return h, got, nil
}

// FuzzReadResponse feeds arbitrary bytes to the response parser. Whatever
// they are it must not panic, must read no line past the buffer and no
// head past its limit, and an answer it accepts that net/http's
// ReadResponse accepts too must have the same status, framing and body:
// the two never disagree on where an answer ends.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: v\r\n\r\n",
		"HTTP/1.0 404 Not Found\r\n\r\ngone",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 41\r\n\r\n{\"code\":\"RUNTIME_ERROR\",\"message\":\"boom\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		h, got, err := readAnswer(stream, 1<<20)
		if err != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(stream)), &http.Request{Method: http.MethodGet})
		if err != nil || resp.StatusCode < 200 {
			return // net/http's Transport, not ReadResponse, skips 1xx
		}
		want, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return
		}
		if resp.StatusCode != h.status {
			t.Fatalf("status %d, net/http %d", h.status, resp.StatusCode)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("body %q, net/http %q", got, want)
		}
		// A 204 or 304 has no body whatever its header says; net/http
		// still reports the Transfer-Encoding it named.
		if h.status != http.StatusNoContent && h.status != http.StatusNotModified && h.chunked != (len(resp.TransferEncoding) > 0) {
			t.Fatalf("chunked %v, net/http %v", h.chunked, resp.TransferEncoding)
		}
	})
}
