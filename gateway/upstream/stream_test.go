package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// probeWriter records what WriteTo handed it: the bytes written with
// Write, and for each ReadFrom whether the source was the connection
// itself limited to a length (the form net/http splices), and that
// length.
type probeWriter struct {
	buf      bytes.Buffer
	limited  []int64 // N of each *io.LimitedReader over a *net.TCPConn
	other    int     // ReadFrom calls with any other source
	failFrom int     // fail the ReadFrom once this many bytes were taken (0: never)
}

func (p *probeWriter) Write(b []byte) (int, error) { return p.buf.Write(b) }

func (p *probeWriter) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if _, ok := lr.R.(*net.TCPConn); ok {
			p.limited = append(p.limited, lr.N)
		} else {
			p.other++
		}
	} else {
		p.other++
	}
	if p.failFrom > 0 {
		n, _ := io.CopyN(&p.buf, r, int64(p.failFrom))
		return n, errors.New("the client went away")
	}
	return p.buf.ReadFrom(r)
}

func roundTrip(t *testing.T, tr *Transport, ctx context.Context, u string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestWriteToHandsTheConnectionLimitedToTheBody(t *testing.T) {
	body := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB: more than one read buffer
	big := "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	// The small answer last: had the low-water mark stayed up, its head
	// would never wake the reader (ResponseHeaderTimeout ends the wait).
	s := newRawServer(t, big, big, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
	tr := newTransport(t, Config{ResponseHeaderTimeout: 10 * time.Second})
	for i := range 2 {
		resp := roundTrip(t, tr, context.Background(), s.url("/").String())
		var w probeWriter
		n, err := io.Copy(&w, resp.Body)
		if err != nil || n != int64(len(body)) || w.buf.String() != body {
			t.Fatalf("request %d: copied %d, %v; body equal: %v", i, n, err, w.buf.String() == body)
		}
		// What the head's read left in the buffer went with Write; the
		// rest, exactly, as the connection limited to it: the bulk under
		// the low-water mark, then its last lowWater bytes.
		if len(w.limited) != 2 || w.other != 0 || w.limited[1] != lowWater || w.limited[0]+w.limited[1] >= int64(len(body)) {
			t.Fatalf("request %d: ReadFrom sources %v (other %d)", i, w.limited, w.other)
		}
		if err := resp.Body.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "hello" {
		t.Fatalf("a small answer after spliced bodies: %v %q", err, b)
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("3 answers read whole used %d connections, want 1", n)
	}
}

func TestWriteToBodyInTheBuffer(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
	tr := newTransport(t, Config{})
	resp := roundTrip(t, tr, context.Background(), s.url("/").String())
	var w probeWriter
	if n, err := io.Copy(&w, resp.Body); err != nil || n != 5 || w.buf.String() != "hello" {
		t.Fatalf("%d %v %q", n, err, w.buf.String())
	}
	if len(w.limited)+w.other != 0 {
		t.Fatalf("a body already buffered went through ReadFrom: %v %d", w.limited, w.other)
	}
	if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "hello" {
		t.Fatalf("%v %q", err, b)
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestWriteToStopsAtTheLength(t *testing.T) {
	// Content-Length 2 but more bytes: WriteTo relays 2, and what follows
	// never becomes the next answer.
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil")
	tr := newTransport(t, Config{})
	for i := range 2 {
		resp := roundTrip(t, tr, context.Background(), s.url("/").String())
		var w probeWriter
		if n, err := io.Copy(&w, resp.Body); err != nil || n != 2 || w.buf.String() != "ok" {
			t.Fatalf("request %d: %d %v %q", i, n, err, w.buf.String())
		}
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestWriteToUpstreamClosesEarly(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n"+big)
	s.closeAfter = true
	tr := newTransport(t, Config{})
	resp := roundTrip(t, tr, context.Background(), s.url("/").String())
	var w probeWriter
	n, err := io.Copy(&w, resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != int64(len(big)) {
		t.Fatalf("copied %d, %v; want %d, io.ErrUnexpectedEOF", n, err, len(big))
	}
	if _, err := resp.Body.Read(make([]byte, 1)); err == nil {
		t.Fatal("a read after the broken end succeeded")
	}
}

func TestWriteToWriterFailsNotReused(t *testing.T) {
	body := strings.Repeat("y", 256<<10)
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	tr := newTransport(t, Config{})
	resp := roundTrip(t, tr, context.Background(), s.url("/").String())
	w := probeWriter{failFrom: 1000}
	if _, err := io.Copy(&w, resp.Body); err == nil {
		t.Fatal("a failing writer's copy succeeded")
	}
	_ = resp.Body.Close()
	if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != body {
		t.Fatalf("%v, %d bytes", err, len(b))
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections after a body cut short, want 2", n)
	}
}

func TestWriteToCanceledWhileTheHostIsSilent(t *testing.T) {
	// Part of the body, then nothing (the server waits for a next request).
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nabc")
	tr := newTransport(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	resp := roundTrip(t, tr, ctx, s.url("/").String())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(&readerFromPipe{w}, resp.Body)
		done <- err
	}()
	// Cancel once the first bytes went through: the copy is then waiting
	// on the silent connection.
	got := make([]byte, 3)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "abc" {
		t.Fatalf("%q %v", got, err)
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the copy ended cleanly after its context was canceled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the copy did not return after its context was canceled")
	}
}

// readerFromPipe is a writer with a ReadFrom (the form WriteTo splices
// into) that copies into a pipe.
type readerFromPipe struct{ w *io.PipeWriter }

func (p *readerFromPipe) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *readerFromPipe) ReadFrom(r io.Reader) (int64, error) {
	return io.CopyBuffer(p.w, r, make([]byte, 1))
}

func TestWriteToChunkedIsCopied(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	tr := newTransport(t, Config{})
	resp := roundTrip(t, tr, context.Background(), s.url("/").String())
	var w probeWriter
	if n, err := io.Copy(&w, resp.Body); err != nil || n != 5 || w.buf.String() != "hello" {
		t.Fatalf("%d %v %q", n, err, w.buf.String())
	}
	if len(w.limited) != 0 || w.other != 1 {
		t.Fatalf("a chunked body was handed as the connection: %v %d", w.limited, w.other)
	}
	if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "hello" {
		t.Fatalf("%v %q", err, b)
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestWriteToThroughNetHTTPServer relays a body through a real net/http
// server's ResponseWriter (whose ReadFrom splices on Linux) and checks
// what its client receives, then that the upstream connection is reused.
func TestWriteToThroughNetHTTPServer(t *testing.T) {
	body := strings.Repeat("The quick brown fox. ", 200000) // about 4 MiB
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	tr := newTransport(t, Config{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp := roundTrip(t, tr, r.Context(), s.url("/").String())
		defer resp.Body.Close()
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
		w.WriteHeader(http.StatusOK)
		if n, err := resp.Body.(io.WriterTo).WriteTo(w); err != nil || n != int64(len(body)) {
			t.Errorf("relayed %d, %v", n, err)
		}
	}))
	t.Cleanup(front.Close)
	for i := range 2 {
		resp, err := http.Get(front.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || string(b) != body {
			t.Fatalf("request %d: %v, %d bytes, equal %v", i, err, len(b), string(b) == body)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("%d upstream connections, want 1", n)
	}
}
