package dataplane

import (
	"bytes"
	"crypto/rand"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/multipartstream"
)

// writeSizes records the size of every Write: the chunks Go's transport
// would send.
type writeSizes struct {
	bytes.Buffer
	sizes []int
}

func (w *writeSizes) Write(b []byte) (int, error) {
	w.sizes = append(w.sizes, len(b))
	return w.Buffer.Write(b)
}

// TestUploadBodyWriteTo: a multipart write of a 3 MiB file and a small
// one produces, through WriteTo (the path of a chunked upstream body),
// execd's body with both files whole, in writes of at most uploadChunk
// bytes; the framing before the first file goes out in a write of at
// most uploadFramingBuffer bytes.
func TestUploadBodyWriteTo(t *testing.T) {
	big := make([]byte, 3<<20+17)
	_, _ = rand.Read(big)
	files := [][2]string{{"/home/user/big.bin", string(big)}, {"/home/user/small.txt", "small\r\n"}}
	ct, body := multipartBody(t, files)
	_, params, _ := mime.ParseMediaType(ct)
	mr := multipartstream.NewReader(bytes.NewReader(body), params["boundary"], uploadChunk)
	next := func() (uploadFile, bool, *Error) {
		part, err := mr.NextPart()
		if err == io.EOF {
			return uploadFile{}, false, nil
		}
		if err != nil {
			t.Fatalf("NextPart: %v", err)
		}
		_, p, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		return uploadFile{target: p["filename"], body: part}, true, nil
	}
	up := newUploadBody(sdkUser{}, next, uploadChunk)
	if e := up.start(); e != nil {
		t.Fatalf("start: %v", e)
	}
	var w writeSizes
	if _, err := up.WriteTo(&w); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if e, complete := up.stop(); e != nil || !complete {
		t.Fatalf("stop: %v, complete %v", e, complete)
	}
	for i, n := range w.sizes {
		if n > uploadChunk {
			t.Fatalf("write %d is %d bytes, over uploadChunk (%d)", i, n, uploadChunk)
		}
	}
	if w.sizes[0] > uploadFramingBuffer {
		t.Fatalf("the first write (framing) is %d bytes, over uploadFramingBuffer (%d)", w.sizes[0], uploadFramingBuffer)
	}
	_, params, _ = mime.ParseMediaType(up.contentType())
	got := map[string]string{}
	xr := multipart.NewReader(&w.Buffer, params["boundary"])
	for {
		p, err := xr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("execd's body: %v", err)
		}
		b, _ := io.ReadAll(p)
		if p.FormName() == "file" {
			got[p.FileName()] = string(b)
		}
	}
	if len(got) != 2 || got["big.bin"] != string(big) || got["small.txt"] != "small\r\n" {
		t.Fatalf("execd's body has %d files (big.bin %d bytes, small.txt %q)", len(got), len(got["big.bin"]), got["small.txt"])
	}
}

// TestUploadBuffersLargeWithinTheBudget: writes stream through uploadChunk
// bytes while fewer than maxLargeUploadBuffers do, through
// smallUploadChunk past that (never waiting), and a large one given back
// goes to the next write.
func TestUploadBuffersLargeWithinTheBudget(t *testing.T) {
	for i := range maxLargeUploadBuffers {
		if size, large := takeUploadBuffer(); !large || size != uploadChunk {
			t.Fatalf("write %d: large %v, %d bytes; want %d", i, large, size, uploadChunk)
		}
	}
	if size, large := takeUploadBuffer(); large || size != smallUploadChunk {
		t.Fatalf("past the budget: large %v, %d bytes; want %d", large, size, smallUploadChunk)
	}
	giveUploadBuffer(false)
	giveUploadBuffer(true)
	if size, large := takeUploadBuffer(); !large || size != uploadChunk {
		t.Fatalf("after one was given back: large %v, %d bytes; want a large one", large, size)
	}
	for range maxLargeUploadBuffers {
		giveUploadBuffer(true)
	}
	if n := len(largeUploadSlots); n != 0 {
		t.Fatalf("%d large buffers counted in use after all were given back", n)
	}
}

// TestWritesPastTheUploadBudget: with every large buffer taken, a
// multipart write and a chunked octet-stream write of more than the small
// buffer still arrive whole; every write, written or refused, gives its
// large buffer back.
func TestWritesPastTheUploadBudget(t *testing.T) {
	e := newTestEnv(t)
	inUse := func(name string, want int) {
		t.Helper()
		if n := len(largeUploadSlots); n != want {
			t.Fatalf("%s: %d large upload buffers in use, want %d", name, n, want)
		}
	}
	data := make([]byte, 3*smallUploadChunk+17)
	_, _ = rand.Read(data)
	write := func(name string, req *http.Request, target string) {
		t.Helper()
		resp, out := e.do(req)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d body %s", name, resp.StatusCode, out)
		}
		if got, err := os.ReadFile(e.hostPath(target)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: the file differs (%d bytes, %v)", name, len(got), err)
		}
	}
	multipartWrite := func(target string) *http.Request {
		ct, body := multipartBody(t, [][2]string{{target, string(data)}})
		req := e.request(http.MethodPost, "/files", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		return req
	}
	chunkedWrite := func(target string) *http.Request {
		// A reader without a length: the request, and so the upload, go chunked.
		req := e.request(http.MethodPost, "/files?path="+target, struct{ io.Reader }{bytes.NewReader(data)})
		req.Header.Set("Content-Type", "application/octet-stream")
		return req
	}

	inUse("before any", 0)
	write("multipart within the budget", multipartWrite("/home/user/a.bin"), "/home/user/a.bin")
	write("chunked within the budget", chunkedWrite("/home/user/b.bin"), "/home/user/b.bin")
	inUse("after the writes within the budget", 0)

	for range maxLargeUploadBuffers {
		takeUploadBuffer()
	}
	write("multipart past the budget", multipartWrite("/home/user/c.bin"), "/home/user/c.bin")
	write("chunked past the budget", chunkedWrite("/home/user/d.bin"), "/home/user/d.bin")
	inUse("after the writes past the budget", maxLargeUploadBuffers)
	for range maxLargeUploadBuffers {
		giveUploadBuffer(true)
	}

	req := e.request(http.MethodPost, "/files", strings.NewReader("not multipart"))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	if resp, out := e.do(req); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a broken multipart body: status %d body %s", resp.StatusCode, out)
	}
	inUse("after a refused write", 0)
}

// TestOnlyChunkedWritesTakeALargeBuffer: a multipart write and an
// octet-stream write without a length hold a large buffer's slot while
// execd reads them; an octet-stream write with a length goes through the
// upstream transport's own copy and holds none.
func TestOnlyChunkedWritesTakeALargeBuffer(t *testing.T) {
	inUse := make(chan int, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/"+testSandbox+"/44772/files/upload", func(w http.ResponseWriter, r *http.Request) {
		inUse <- len(largeUploadSlots)
		_, _ = io.Copy(io.Discard, r.Body)
	})
	gw, tok := newFakeGateway(t, mux)
	data := bytes.Repeat([]byte("x"), 100<<10)
	ct, form := multipartBody(t, [][2]string{{"/home/user/m.bin", string(data)}})
	for _, c := range []struct {
		name, query, contentType string
		body                     io.Reader
		want                     int
	}{
		{"multipart", "", ct, bytes.NewReader(form), 1},
		{"octet-stream without a length", "?path=/home/user/c.bin", "application/octet-stream", struct{ io.Reader }{bytes.NewReader(data)}, 1},
		{"octet-stream with a length", "?path=/home/user/l.bin", "application/octet-stream", bytes.NewReader(data), 0},
	} {
		req := gwRequest(t, gw, tok, http.MethodPost, "/files"+c.query, c.body)
		req.Header.Set("Content-Type", c.contentType)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d body %s", c.name, resp.StatusCode, out)
		}
		if got := <-inUse; got != c.want {
			t.Errorf("%s: %d large upload buffers in use while execd read it, want %d", c.name, got, c.want)
		}
		if n := len(largeUploadSlots); n != 0 {
			t.Fatalf("%s: %d large upload buffers in use after it ended", c.name, n)
		}
	}
}

// TestMultipartLineBoundSameEitherBuffer: a multipart write whose preamble
// line is 60 KiB is written, and one whose preamble line is 100 KiB is
// refused with 400, whether the write gets a large buffer (1 MiB) or the
// small one (64 KiB): the outcome does not depend on what other writes
// hold. Before, the 100 KiB line passed through a large buffer and failed
// through the small one. The same for a final boundary line padded with
// spaces to 60 KiB and 100 KiB that the body ends without a line break.
func TestMultipartLineBoundSameEitherBuffer(t *testing.T) {
	e := newTestEnv(t)
	write := func(line int) (*http.Response, []byte) {
		t.Helper()
		ct, body := multipartBody(t, [][2]string{{"/home/user/p.txt", "content"}})
		body = append(append(bytes.Repeat([]byte("p"), line), "\r\n"...), body...)
		req := e.request(http.MethodPost, "/files", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		return e.do(req)
	}
	// padFinal: the final boundary line padded with spaces to line bytes,
	// the body ending without its line break.
	padFinal := func(line int) (*http.Response, []byte) {
		t.Helper()
		ct, body := multipartBody(t, [][2]string{{"/home/user/f.txt", "content"}})
		body = bytes.TrimSuffix(body, []byte("\r\n"))
		i := bytes.LastIndex(body, []byte("\r\n")) + 2 // the final boundary line's start
		body = append(body, bytes.Repeat([]byte(" "), line-(len(body)-i))...)
		req := e.request(http.MethodPost, "/files", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		return e.do(req)
	}
	for _, past := range []bool{false, true} {
		if past {
			for range maxLargeUploadBuffers {
				takeUploadBuffer()
			}
		}
		if resp, out := write(60 << 10); resp.StatusCode != http.StatusOK {
			t.Fatalf("a 60 KiB preamble line (past the budget: %v): status %d body %s", past, resp.StatusCode, out)
		}
		if resp, out := write(100 << 10); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a 100 KiB preamble line (past the budget: %v): status %d body %s", past, resp.StatusCode, out)
		}
		if resp, out := padFinal(60 << 10); resp.StatusCode != http.StatusOK {
			t.Fatalf("a final boundary line padded to 60 KiB at the end (past the budget: %v): status %d body %s", past, resp.StatusCode, out)
		}
		if resp, out := padFinal(100 << 10); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a final boundary line padded to 100 KiB at the end (past the budget: %v): status %d body %s", past, resp.StatusCode, out)
		}
	}
	for range maxLargeUploadBuffers {
		giveUploadBuffer(true)
	}
}
