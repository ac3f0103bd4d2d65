package dataplane

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/execdstub"
)

type restErr struct {
	Code    int
	Message string
}

func decodeRESTError(t *testing.T, b []byte) restErr {
	t.Helper()
	var e restErr
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("REST error body %q: %v", b, err)
	}
	return e
}

func TestFilesRead(t *testing.T) {
	e := newTestEnv(t)
	e.writeFile("/home/user/dir/hello.txt", "hello world")
	if err := os.MkdirAll(e.hostPath("/home/user/dir/sub"), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("relative path against home", func(t *testing.T) {
		resp, body := e.do(e.request(http.MethodGet, "/files?path=dir/hello.txt", nil))
		if resp.StatusCode != 200 || string(body) != "hello world" || resp.Header.Get("Content-Length") != "11" {
			t.Fatalf("status %d body %q headers %v", resp.StatusCode, body, resp.Header)
		}
	})
	t.Run("range", func(t *testing.T) {
		req := e.request(http.MethodGet, "/files?path=/home/user/dir/hello.txt", nil)
		req.Header.Set("Range", "bytes=0-4")
		resp, body := e.do(req)
		if resp.StatusCode != 206 || string(body) != "hello" || resp.Header.Get("Content-Range") != "bytes 0-4/11" {
			t.Fatalf("status %d body %q headers %v", resp.StatusCode, body, resp.Header)
		}
	})
	t.Run("directory", func(t *testing.T) {
		resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/dir/sub", nil))
		re := decodeRESTError(t, body)
		if resp.StatusCode != 400 || re.Code != 400 || re.Message != "IS_A_DIRECTORY: path '/home/user/dir/sub' is a directory" {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
			t.Fatalf("content type %q", ct)
		}
	})
	t.Run("missing", func(t *testing.T) {
		resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/nope", nil))
		re := decodeRESTError(t, body)
		if resp.StatusCode != 404 || re.Code != 404 || re.Message != "FILE_NOT_FOUND: path '/home/user/nope' does not exist" {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
	t.Run("no path", func(t *testing.T) {
		resp, body := e.do(e.request(http.MethodGet, "/files", nil))
		if resp.StatusCode != 400 || decodeRESTError(t, body).Code != 400 {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
	t.Run("unknown user", func(t *testing.T) {
		resp, body := e.do(e.request(http.MethodGet, "/files?path=dir/hello.txt&username=nobody", nil))
		if resp.StatusCode != 400 || !strings.HasPrefix(decodeRESTError(t, body).Message, "USER_UNKNOWN: ") {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
	t.Run("user home", func(t *testing.T) {
		e.writeFile("/root/secret.txt", "root's")
		resp, body := e.do(e.request(http.MethodGet, "/files?path=secret.txt&username=root", nil))
		if resp.StatusCode != 200 || string(body) != "root's" {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
	})
}

// TestFilesReadExecd1018: execd v1.0.18 reports a missing path as 500
// RUNTIME_ERROR; it is still a 404 for the SDK.
func TestFilesReadExecd1018(t *testing.T) {
	e := newTestEnv(t, func(_ *Config, x *execdstub.Config) { x.Version = execdstub.Version1018 })
	resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/nope", nil))
	if resp.StatusCode != 404 || decodeRESTError(t, body).Code != 404 {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	// v1.0.18's stat has no type: the directory shows in the download's
	// MaxInt64 Content-Length, and is refused instead of relayed broken.
	if err := os.MkdirAll(e.hostPath("/home/user/adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	resp, body = e.do(e.request(http.MethodGet, "/files?path=/home/user/adir", nil))
	if resp.StatusCode != 400 || decodeRESTError(t, body).Message != "IS_A_DIRECTORY: path '/home/user/adir' is a directory" {
		t.Fatalf("directory on v1.0.18: status %d body %s", resp.StatusCode, body)
	}
}

// multipartBody builds a write request body; each file part's filename is
// written raw into Content-Disposition, as the SDKs do.
func multipartBody(t *testing.T, files [][2]string) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+f[0]+`"`)
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(f[1]))
	}
	_ = mw.Close()
	return mw.FormDataContentType(), buf.Bytes()
}

func TestFilesWrite(t *testing.T) {
	e := newTestEnv(t)
	write := func(query, ctype string, body []byte, hdr map[string]string) (*http.Response, []byte) {
		req := e.request(http.MethodPost, "/files"+query, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return e.do(req)
	}
	readBack := func(p string) string {
		b, err := os.ReadFile(e.hostPath(p))
		if err != nil {
			t.Fatalf("reading back %s: %v", p, err)
		}
		return string(b)
	}

	t.Run("single file, path in query", func(t *testing.T) {
		ct, body := multipartBody(t, [][2]string{{"/home/user/dir/hello.txt", "hello"}})
		resp, out := write("?path=/home/user/dir/hello.txt", ct, body, nil)
		if resp.StatusCode != 200 || string(out) != `[{"name":"hello.txt","type":"file","path":"/home/user/dir/hello.txt"}]`+"\n" {
			t.Fatalf("status %d body %q", resp.StatusCode, out)
		}
		if readBack("/home/user/dir/hello.txt") != "hello" {
			t.Fatal("content")
		}
		fi, _ := os.Stat(e.hostPath("/home/user/dir/hello.txt"))
		if fi.Mode().Perm() != 0o644 {
			t.Fatalf("mode %v, want 0644 as envd writes", fi.Mode())
		}
	})
	t.Run("several files, full paths in filenames, unicode and relative", func(t *testing.T) {
		ct, body := multipartBody(t, [][2]string{{"/home/user/m/a.txt", "A"}, {"rel/ünï cødé/文件.txt", "B"}})
		resp, out := write("", ct, body, nil)
		var infos []map[string]string
		if err := json.Unmarshal(out, &infos); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d body %q", resp.StatusCode, out)
		}
		want := []map[string]string{{"name": "a.txt", "type": "file", "path": "/home/user/m/a.txt"},
			{"name": "文件.txt", "type": "file", "path": "/home/user/rel/ünï cødé/文件.txt"}}
		got, _ := json.Marshal(infos)
		exp, _ := json.Marshal(want)
		if string(got) != string(exp) {
			t.Fatalf("infos %s, want %s", got, exp)
		}
		if readBack("/home/user/m/a.txt") != "A" || readBack("/home/user/rel/ünï cødé/文件.txt") != "B" {
			t.Fatal("content")
		}
	})
	t.Run("octet-stream", func(t *testing.T) {
		resp, out := write("?path=oct.bin", "application/octet-stream", []byte{0, 1, 2, 255}, nil)
		if resp.StatusCode != 200 || readBack("/home/user/oct.bin") != "\x00\x01\x02\xff" {
			t.Fatalf("status %d body %q", resp.StatusCode, out)
		}
	})
	t.Run("octet-stream gzip", func(t *testing.T) {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write([]byte(strings.Repeat("zip", 1000)))
		_ = zw.Close()
		resp, out := write("?path=z.txt", "application/octet-stream", gz.Bytes(), map[string]string{"Content-Encoding": "gzip"})
		if resp.StatusCode != 200 || readBack("/home/user/z.txt") != strings.Repeat("zip", 1000) {
			t.Fatalf("status %d body %q", resp.StatusCode, out)
		}
	})

	// Refused writes: a clear 400 and nothing written.
	bad := []struct {
		name, query, ctype string
		body               []byte
		hdr                map[string]string
	}{
		{"duplicate paths", "", "", nil, nil},
		{"no file part", "", "", nil, nil},
		{"file part without filename or path", "", "", nil, nil},
		{"octet-stream without path", "", "application/octet-stream", []byte("x"), nil},
		{"bad gzip", "?path=bad.gz", "application/octet-stream", []byte("not gzip"), map[string]string{"Content-Encoding": "gzip"}},
		{"unsupported encoding", "?path=br.bin", "application/octet-stream", []byte("x"), map[string]string{"Content-Encoding": "br"}},
		{"unsupported content type", "?path=x.json", "application/json", []byte("{}"), nil},
		{"broken multipart", "", "multipart/form-data; boundary=zzz", []byte("--zzz\r\nnot a part"), nil},
		// mime/multipart would end the parts there (io.EOF) and write the
		// first file; multipartstream refuses the body.
		{"multipart ending inside a part header", "", "multipart/form-data; boundary=zzz",
			[]byte("--zzz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/dup.txt\"\r\n\r\n1\r\n--zzz\r\nContent-Disposition: form-da"), nil},
		{"multipart part header over 64 KiB", "", "multipart/form-data; boundary=zzz",
			[]byte("--zzz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/dup.txt\"\r\nX-Pad: " +
				strings.Repeat("p", 64<<10) + "\r\n\r\n1\r\n--zzz--\r\n"), nil},
	}
	bad[0].ctype, bad[0].body = multipartBody(t, [][2]string{{"/home/user/dup.txt", "1"}, {"/home/user/dup.txt", "2"}})
	{
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.WriteField("other", "x")
		_ = mw.Close()
		bad[1].ctype, bad[1].body = mw.FormDataContentType(), buf.Bytes()
	}
	bad[2].ctype, bad[2].body = multipartBody(t, [][2]string{{"", "x"}})
	for _, tc := range bad {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			before := e.ingress.Received()
			resp, out := write(tc.query, tc.ctype, tc.body, tc.hdr)
			re := decodeRESTError(t, out)
			if resp.StatusCode != 400 || re.Code != 400 || !strings.HasPrefix(re.Message, "BAD_REQUEST: ") {
				t.Fatalf("status %d body %s", resp.StatusCode, out)
			}
			if _, err := os.Stat(e.hostPath("/home/user/dup.txt")); err == nil {
				t.Fatal("a refused write wrote a file")
			}
			for _, r := range e.ingress.RequestsAfter(before) {
				if r.UpstreamPath == "/files/upload" && r.Status == 200 {
					t.Fatalf("execd accepted an upload for a refused write: %+v", r)
				}
			}
		})
	}
}

// TestFilesWriteLargeMultipart streams a 24 MiB file part, full of
// near-boundaries, and a second small file through the gateway's
// multipart reader (package multipartstream, contents passed on in place):
// both arrive byte for byte.
func TestFilesWriteLargeMultipart(t *testing.T) {
	e := newTestEnv(t)
	data := make([]byte, 24<<20)
	_, _ = rand.Read(data)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	near := []byte("\r\n--" + mw.Boundary())
	for i := 0; i+len(near) < len(data); i += 100003 {
		copy(data[i:], near[:len(near)-1-i%len(near)]) // a prefix of the delimiter, never all of it
	}
	fw, _ := mw.CreateFormFile("file", "/home/user/big.bin")
	_, _ = fw.Write(data)
	fw, _ = mw.CreateFormFile("file", "/home/user/small.txt")
	_, _ = fw.Write([]byte("small\r\n"))
	_ = mw.Close()
	req := e.request(http.MethodPost, "/files", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, out := e.do(req)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d body %s", resp.StatusCode, out)
	}
	got, err := os.ReadFile(e.hostPath("/home/user/big.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("big.bin differs (err %v, %d bytes)", err, len(got))
	}
	if got, _ := os.ReadFile(e.hostPath("/home/user/small.txt")); string(got) != "small\r\n" {
		t.Fatalf("small.txt = %q", got)
	}
}

// TestFilesWriteLarge streams 64 MiB through the gateway; the upload is
// piped, never buffered (the 1 GiB figure is in docs/benchmarks.md).
func TestFilesWriteLarge(t *testing.T) {
	e := newTestEnv(t)
	data := make([]byte, 64<<20)
	_, _ = rand.Read(data)
	req := e.request(http.MethodPost, "/files?path=/home/user/big.bin", bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, out := e.do(req)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d body %s", resp.StatusCode, out)
	}
	got, err := os.ReadFile(e.hostPath("/home/user/big.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("content differs (err %v)", err)
	}
	resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/big.bin", nil))
	if resp.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("download differs: status %d, %d bytes", resp.StatusCode, len(body))
	}
}

func TestFilesDelete(t *testing.T) {
	e := newTestEnv(t)
	e.writeFile("/home/user/del.txt", "x")
	if err := os.MkdirAll(e.hostPath("/home/user/adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	resp, body := e.do(e.request(http.MethodDelete, "/files?path=del.txt", nil))
	if resp.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if _, err := os.Stat(e.hostPath("/home/user/del.txt")); !os.IsNotExist(err) {
		t.Fatal("file still there")
	}
	resp, body = e.do(e.request(http.MethodDelete, "/files?path=missing.txt", nil))
	if resp.StatusCode != 200 {
		t.Fatalf("missing file: status %d body %q", resp.StatusCode, body)
	}
	resp, body = e.do(e.request(http.MethodDelete, "/files?path=adir", nil))
	if resp.StatusCode != 400 || decodeRESTError(t, body).Message != "IS_A_DIRECTORY: path '/home/user/adir' is a directory" {
		t.Fatalf("directory: status %d body %s", resp.StatusCode, body)
	}
	if _, err := os.Stat(e.hostPath("/home/user/adir")); err != nil {
		t.Fatal("directory was removed by a file delete")
	}
}

// TestFilesWriteUpstreamFraming: an octet-stream write with a
// Content-Length reaches execd with its exact Content-Length (the
// multipart framing plus the file); a chunked client body, a gzip body and
// a multipart write go chunked. Every one writes the file whole, and a
// large file streams through.
func TestFilesWriteUpstreamFraming(t *testing.T) {
	e := newTestEnv(t)
	big := make([]byte, 3<<20+17)
	_, _ = rand.Read(big)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(big)
	_ = zw.Close()
	mct, mbody := multipartBody(t, [][2]string{{"/home/user/f/m.bin", string(big)}})
	for _, tc := range []struct {
		name, target, ctype string
		body                []byte
		hdr                 map[string]string
		chunkedClient       bool
		sized               bool
	}{
		{"octet-stream with length", "/home/user/f/o.bin", "application/octet-stream", big, nil, false, true},
		{"octet-stream chunked", "/home/user/f/c.bin", "application/octet-stream", big, nil, true, false},
		{"octet-stream gzip", "/home/user/f/g.bin", "application/octet-stream", gz.Bytes(), map[string]string{"Content-Encoding": "gzip"}, false, false},
		{"multipart", "/home/user/f/m.bin", mct, mbody, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.ingress.Received()
			var body io.Reader = bytes.NewReader(tc.body)
			if tc.chunkedClient {
				body = io.MultiReader(body) // unknown length: the client sends it chunked
			}
			req := e.request(http.MethodPost, "/files?path="+tc.target, body)
			req.Header.Set("Content-Type", tc.ctype)
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, out := e.do(req)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d body %s", resp.StatusCode, out)
			}
			got, err := os.ReadFile(e.hostPath(tc.target))
			if err != nil || !bytes.Equal(got, big) {
				t.Fatalf("file written: %d bytes, %v", len(got), err)
			}
			var uploads []int64
			for _, r := range e.ingress.RequestsAfter(before) {
				if r.UpstreamPath == "/files/upload" {
					uploads = append(uploads, r.ContentLength)
				}
			}
			if len(uploads) != 1 {
				t.Fatalf("%d uploads reached execd", len(uploads))
			}
			if tc.sized && uploads[0] <= int64(len(big)) {
				t.Fatalf("upload Content-Length %d, want the file's %d bytes plus the multipart framing", uploads[0], len(big))
			}
			if !tc.sized && uploads[0] != -1 {
				t.Fatalf("upload Content-Length %d, want chunked", uploads[0])
			}
		})
	}
}

// stallingWriter is a response writer whose Write, once the status is
// sent, either panics (panicWith) or blocks until its request's context
// is done and then fails, as a client that stopped reading does.
type stallingWriter struct {
	header    http.Header
	ctx       context.Context
	panicWith any
	wrote     chan struct{} // closed at the first Write
	once      sync.Once
}

func (w *stallingWriter) Header() http.Header { return w.header }
func (w *stallingWriter) WriteHeader(int)     {}
func (w *stallingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.wrote) })
	if w.panicWith != nil {
		panic(w.panicWith)
	}
	<-w.ctx.Done()
	return 0, w.ctx.Err()
}

// TestDownloadEveryEnd: a download ends as its cause says however it
// ends: complete, cut off by execd (an aborted response), its client gone
// while the copy is blocked writing (aborted once the request's context
// is canceled), and a panic in the copy (passed on to the handler above,
// which may recover and the process go on).
func TestDownloadEveryEnd(t *testing.T) {
	const p = "/home/user/big.bin"
	body := bytes.Repeat([]byte("a"), 1<<20)
	mux := http.NewServeMux()
	prefix := "/" + testSandbox + "/44772"
	mux.HandleFunc(prefix+"/files/info", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{p: map[string]any{"path": p, "type": "file", "size": len(body), "mode": 644}})
	})
	var cut atomic.Bool // execd cuts the download off half-way
	mux.HandleFunc(prefix+"/files/download", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		if cut.Load() {
			_, _ = w.Write(body[:len(body)/2])
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
		_, _ = w.Write(body)
	})
	h, tok, _ := newFakeHandler(t, mux)
	// serve serves one download and returns what the handler panicked
	// with (net/http recovers http.ErrAbortHandler, with which the handler
	// ends a response cut off after its header).
	serve := func(w http.ResponseWriter, ctx context.Context) (panicked any) {
		defer func() { panicked = recover() }()
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/files?path="+p, nil)
		req.Header.Set(HeaderSandboxID, testSandbox)
		req.Header.Set(HeaderSandboxPort, "49983")
		req.Header.Set(HeaderAccessToken, tok)
		h.ServeHTTP(w, req)
		return nil
	}
	rec := httptest.NewRecorder()
	if v := serve(rec, context.Background()); v != nil {
		t.Fatalf("complete download panicked: %v", v)
	}
	if rec.Code != http.StatusOK || rec.Body.Len() != len(body) {
		t.Fatalf("complete download: status %d, %d bytes", rec.Code, rec.Body.Len())
	}

	cut.Store(true)
	if v := serve(httptest.NewRecorder(), context.Background()); v != http.ErrAbortHandler {
		t.Fatalf("download cut off by execd: handler ended with %v, want an aborted response", v)
	}
	cut.Store(false)

	ctx, cancel := context.WithCancel(context.Background())
	w := &stallingWriter{header: http.Header{}, ctx: ctx, wrote: make(chan struct{})}
	done := make(chan struct{})
	var ended any
	go func() { defer close(done); ended = serve(w, ctx) }()
	select {
	case <-w.wrote: // the copy holds its buffer, blocked writing
	case <-done:
		t.Fatalf("download whose client went away: ended (%v) before it wrote", ended)
	}
	cancel()
	<-done
	if ended != http.ErrAbortHandler {
		t.Fatalf("download whose client went away: handler ended with %v, want an aborted response", ended)
	}

	w = &stallingWriter{header: http.Header{}, ctx: context.Background(), panicWith: "broken writer", wrote: make(chan struct{})}
	if v := serve(w, context.Background()); v != "broken writer" {
		t.Fatalf("download whose writer panicked: handler ended with %v, want the writer's panic", v)
	}
}

// TestWriteOntoADirectory: a write onto a directory is IS_A_DIRECTORY and
// one under a regular file NOT_A_DIRECTORY (400, as envd answers both),
// from the stand-in execd's 500s; a write that fails for another reason
// whose path merely contains those words keeps fromExecd's class.
func TestWriteOntoADirectory(t *testing.T) {
	e := newTestEnv(t)
	if err := os.MkdirAll(e.hostPath("/home/user/wd/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.hostPath("/home/user/wd/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(p string) (*http.Response, []byte) {
		req := e.request(http.MethodPost, "/files?path="+p, strings.NewReader("y"))
		req.Header.Set("Content-Type", "application/octet-stream")
		return e.do(req)
	}
	for _, c := range []struct {
		path   string
		status int
		code   Code
	}{
		{"/home/user/wd/sub", http.StatusBadRequest, CodeIsADirectory},
		{"/home/user/wd/f/x", http.StatusBadRequest, CodeNotADirectory},
		{"/home/user/wd/f/deeper/x", http.StatusBadRequest, CodeNotADirectory},
	} {
		resp, out := write(c.path)
		if resp.StatusCode != c.status || resp.Header.Get("Sandgate-Error-Code") != string(c.code) {
			t.Errorf("write %s: %d %s %s, want %d %s", c.path, resp.StatusCode, resp.Header.Get("Sandgate-Error-Code"), out, c.status, c.code)
		}
	}
	if b, err := os.ReadFile(e.hostPath("/home/user/wd/f")); err != nil || string(b) != "x" {
		t.Fatalf("the file after the refused writes: %q %v", b, err)
	}
	// Only the message's end counts: a failure for another reason whose
	// path contains the words keeps fromExecd's class.
	for _, msg := range []string{
		"error opening destination file /home/user/x is a directory. open /home/user/x is a directory: permission denied",
		"error creating target directory /home/user/not a directory. mkdir /home/user/not a directory: no space left on device",
	} {
		got := uploadError(&execd.Error{Kind: execd.KindExecd, Status: http.StatusInternalServerError, Code: "RUNTIME_ERROR", Message: msg})
		if got.Code != CodeExecdFailed {
			t.Errorf("%q: %s, want EXECD_FAILED", msg, got.Code)
		}
	}
}

// TestReadOfADirectoryOnTmpfs: where execd's download of a directory is
// tmpfs's 500 "seeker can't seek" (the stand-in's DirectoriesOnTmpfs), a
// read of a directory (v1.0.18's stat gives no type) or of a symlink to
// one (HEAD's stat gives the link's) is IS_A_DIRECTORY, found by one more
// command, the type with links followed; a regular file reads as itself
// without it, and a 500 for a file that is not a directory stays the 500.
func TestReadOfADirectoryOnTmpfs(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newTestEnv(t, func(_ *Config, x *execdstub.Config) { x.Version = version; x.DirectoriesOnTmpfs = true })
			if err := os.MkdirAll(e.hostPath("/home/user/rd/sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("sub", e.hostPath("/home/user/rd/link")); err != nil {
				t.Fatal(err)
			}
			e.writeFile("/home/user/rd/f", "x")
			paths := []string{"/home/user/rd/link"}
			if version == execdstub.Version1018 {
				paths = append(paths, "/home/user/rd/sub")
			}
			for _, p := range paths {
				before := len(e.execd.Commands())
				resp, body := e.do(e.request(http.MethodGet, "/files?path="+p, nil))
				if resp.StatusCode != 400 || decodeRESTError(t, body).Message != "IS_A_DIRECTORY: path '"+p+"' is a directory" {
					t.Errorf("read %s: %d %s, want 400 IS_A_DIRECTORY", p, resp.StatusCode, body)
				}
				if n := len(e.execd.Commands()) - before; n != 1 {
					t.Errorf("read %s ran %d commands, want 1 (the type with links followed)", p, n)
				}
			}
			before := len(e.execd.Commands())
			resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/rd/f", nil))
			if resp.StatusCode != 200 || string(body) != "x" {
				t.Errorf("read of the file: %d %q", resp.StatusCode, body)
			}
			if n := len(e.execd.Commands()) - before; version == execdstub.VersionHEAD && n != 0 {
				t.Errorf("read of a file ran %d commands on HEAD, want 0", n)
			}
		})
	}
}
