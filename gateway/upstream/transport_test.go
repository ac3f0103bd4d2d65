package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer is a loopback HTTP/1.1 server that answers each request it
// reads with the next of its canned answers (the last one repeats), byte
// for byte, and counts the connections it accepted.
type rawServer struct {
	ln      net.Listener
	answers []string
	// closeAfter closes each connection after its first answer.
	closeAfter bool
	// reset makes that close a reset (RST, SO_LINGER 0) instead of a FIN.
	reset bool
	// silent reads requests and never answers.
	silent bool

	mu       sync.Mutex
	n        int
	requests []string
	accepted atomic.Int32
}

func newRawServer(t *testing.T, answers ...string) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, answers: answers}
	t.Cleanup(func() { _ = ln.Close() })
	go s.serve()
	return s
}

func (s *rawServer) url(path string) *url.URL {
	return &url.URL{Scheme: "http", Host: s.ln.Addr().String(), Path: path}
}

func (s *rawServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				var head strings.Builder
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					head.WriteString(line)
					if line == "\r\n" {
						break
					}
				}
				s.mu.Lock()
				s.requests = append(s.requests, head.String())
				a := s.answers[min(s.n, len(s.answers)-1)]
				s.n++
				s.mu.Unlock()
				if s.silent {
					_, _ = io.Copy(io.Discard, br)
					return
				}
				if _, err := io.WriteString(c, a); err != nil || s.closeAfter {
					if tc, ok := c.(*net.TCPConn); ok && s.reset {
						_ = tc.SetLinger(0)
					}
					return
				}
			}
		}()
	}
}

// failTransport is a Fallback that must not be used.
type failTransport struct{ used atomic.Int32 }

func (f *failTransport) RoundTrip(*http.Request) (*http.Response, error) {
	f.used.Add(1)
	return nil, errors.New("fallback used")
}

func newTransport(t *testing.T, cfg Config) *Transport {
	t.Helper()
	if cfg.Fallback == nil {
		cfg.Fallback = &failTransport{}
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func get(t *testing.T, tr http.RoundTripper, u *url.URL) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, b, err
}

func TestContentLengthAndReuse(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello")
	tr := newTransport(t, Config{})
	for i := range 3 {
		resp, b, err := get(t, tr, s.url("/a/b"))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if resp.StatusCode != 200 || resp.Status != "200 OK" || string(b) != "hello" || resp.ContentLength != 5 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("request %d: %d %q %q %d %v", i, resp.StatusCode, resp.Status, b, resp.ContentLength, resp.Header)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("3 requests read whole used %d connections, want 1", n)
	}
}

func TestRequestHead(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 204 No Content\r\n\r\n")
	tr := newTransport(t, Config{})
	u := s.url("/sbx/44772/directories/list")
	u.RawQuery = "depth=1&path=%2Fhome"
	req, _ := http.NewRequest(http.MethodGet, u.String(), nil)
	req.Host = "entry.example"
	req.Header.Set("X-Execd-Access-Token", "tok")
	req.Header.Set("User-Agent", "sandgate")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	want := "GET /sbx/44772/directories/list?depth=1&path=%2Fhome HTTP/1.1\r\nHost: entry.example\r\n"
	s.mu.Lock()
	got := s.requests[0]
	s.mu.Unlock()
	if !strings.HasPrefix(got, want) || !strings.Contains(got, "\r\nX-Execd-Access-Token: tok\r\n") || !strings.Contains(got, "\r\nUser-Agent: sandgate\r\n") || strings.Contains(got, "Accept-Encoding") {
		t.Fatalf("request head:\n%s", got)
	}
}

func TestHeaderInjectionRefused(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 204 No Content\r\n\r\n")
	tr := newTransport(t, Config{})
	for _, h := range []http.Header{{"X-A": {"v\r\nX-B: w"}}, {"X-A\r\nX-B": {"v"}}, {"X-A": {"v\x00"}}} {
		req, _ := http.NewRequest(http.MethodGet, s.url("/").String(), nil)
		req.Header = h
		if _, err := tr.RoundTrip(req); err == nil {
			t.Fatalf("header %q was sent", h)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, s.url("/").String(), nil)
	req.Host = "a\r\nb"
	if _, err := tr.RoundTrip(req); err == nil {
		t.Fatal("a Host with CRLF was sent")
	}
	if n := s.accepted.Load(); n != 0 {
		t.Fatalf("%d connections opened for refused requests", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) != 0 {
		t.Fatalf("a refused request reached the server: %q", s.requests)
	}
}

func TestChunkedAndTrailers(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
	tr := newTransport(t, Config{})
	for range 2 {
		resp, b, err := get(t, tr, s.url("/"))
		if err != nil || string(b) != "hello world" || resp.ContentLength != -1 || len(resp.TransferEncoding) != 1 {
			t.Fatalf("%v %q %v", err, b, resp)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("chunked bodies read whole used %d connections, want 1", n)
	}
}

func TestNotReused(t *testing.T) {
	for name, answer := range map[string]string{
		"until close":       "HTTP/1.1 200 OK\r\n\r\nbody",
		"Connection: close": "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbody",
		"HTTP/1.0":          "HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nbody",
	} {
		t.Run(name, func(t *testing.T) {
			s := newRawServer(t, answer)
			s.closeAfter = true
			tr := newTransport(t, Config{})
			for i := range 2 {
				resp, b, err := get(t, tr, s.url("/"))
				if err != nil || string(b) != "body" || !resp.Close {
					t.Fatalf("request %d: %v %q %v", i, err, b, resp)
				}
			}
			if n := s.accepted.Load(); n != 2 {
				t.Fatalf("%d connections, want 2", n)
			}
		})
	}
}

func TestBodyClosedEarlyIsNotReused(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789")
	tr := newTransport(t, Config{})
	req, _ := http.NewRequest(http.MethodGet, s.url("/").String(), nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 3)
	if _, err := io.ReadFull(resp.Body, p); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if _, err := resp.Body.Read(p); err == nil {
		t.Fatal("a read after Close succeeded")
	}
	if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "0123456789" {
		t.Fatalf("%v %q", err, b)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections after a body closed unread, want 2", n)
	}
}

func TestBytesPastTheAnswerAreNotReadAsTheNext(t *testing.T) {
	// Content-Length 2 but 6 bytes: what follows must never become the
	// next request's answer.
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil")
	tr := newTransport(t, Config{})
	for i := range 2 {
		_, b, err := get(t, tr, s.url("/"))
		if err != nil || string(b) != "ok" {
			t.Fatalf("request %d: %v %q", i, err, b)
		}
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestRefusedFraming(t *testing.T) {
	long := strings.Repeat("a", DefaultReadBufferSize)
	many := strings.Repeat("X-A: "+strings.Repeat("b", 1000)+"\r\n", 70)
	for name, answer := range map[string]string{
		"both CL and TE":        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"TE gzip":               "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"TE twice":              "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"TE in HTTP/1.0":        "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"differing CL":          "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"signed CL":             "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc",
		"CL list":               "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc",
		"huge CL":               "HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\n",
		"bad status":            "HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/2 status":         "HTTP/2 200 OK\r\n\r\n",
		"no status":             "hello\r\n\r\n",
		"bare LF":               "HTTP/1.1 200 OK\nContent-Length: 0\n\n",
		"obs-fold":              "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n",
		"space before colon":    "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
		"no colon":              "HTTP/1.1 200 OK\r\nX-A\r\n\r\n",
		"NUL in value":          "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n",
		"line too long":         "HTTP/1.1 200 OK\r\nX-A: " + long + "\r\n\r\n",
		"header section large":  "HTTP/1.1 200 OK\r\n" + many + "\r\n",
		"101":                   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
		"too many 1xx":          strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", maxInformational+1) + "HTTP/1.1 204 No Content\r\n\r\n",
		"truncated head":        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n",
		"empty answer":          "",
		"bad chunk size":        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\nabc\r\n0\r\n\r\n",
		"chunk size too long":   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\nabc\r\n0\r\n\r\n",
		"chunk data too long":   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
		"chunk without CRLF":    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
		"negative chunk size":   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n",
		"chunked cut":           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
		"CL cut":                "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
		"trailers over limit":   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + many + "\r\n",
		"empty chunk size line": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\nabc\r\n0\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			s := newRawServer(t, answer)
			s.closeAfter = true
			tr := newTransport(t, Config{})
			_, b, err := get(t, tr, s.url("/"))
			if err == nil {
				t.Fatalf("accepted, body %q", b)
			}
		})
	}
}

func TestInformationalSkipped(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	tr := newTransport(t, Config{})
	resp, b, err := get(t, tr, s.url("/"))
	if err != nil || resp.StatusCode != 200 || string(b) != "ok" || resp.Header.Get("Link") != "" {
		t.Fatalf("%v %v %q", err, resp, b)
	}
}

func TestNoBodyStatuses(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	tr := newTransport(t, Config{})
	resp, b, err := get(t, tr, s.url("/"))
	if err != nil || resp.StatusCode != 304 || len(b) != 0 {
		t.Fatalf("%v %v %q", err, resp, b)
	}
	resp, b, err = get(t, tr, s.url("/"))
	if err != nil || resp.StatusCode != 200 || string(b) != "ok" {
		t.Fatalf("after a 304: %v %v %q", err, resp, b)
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestResponseHeaderTimeout(t *testing.T) {
	s := newRawServer(t, "")
	s.silent = true
	tr := newTransport(t, Config{ResponseHeaderTimeout: 50 * time.Millisecond})
	_, _, err := get(t, tr, s.url("/"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %v, want a net.Error whose Timeout() is true", err)
	}
}

func TestContextCanceledWhileWaiting(t *testing.T) {
	s := newRawServer(t, "")
	s.silent = true
	tr := newTransport(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url("/").String(), nil)
	done := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		done <- err
	}()
	// Cancel once the request has reached the server.
	for deadline := time.Now().Add(10 * time.Second); ; {
		s.mu.Lock()
		n := len(s.requests)
		s.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the server")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestStaleIdleConnectionRetried(t *testing.T) {
	// The server closes each connection after its answer without saying
	// so: the idle connection is dead when the next GET takes it.
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	s.closeAfter = true
	tr := newTransport(t, Config{})
	for i := range 3 {
		if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "ok" {
			t.Fatalf("request %d: %v %q", i, err, b)
		}
	}
	if n := s.accepted.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

// closedWhileIdle returns a transport whose one idle connection to s
// (which closes every connection after its first answer) the server has
// closed, the close already on the idle connection's socket; recentIdle is
// an hour, so the connection counts as just gone idle. peeks counts the
// liveness peeks from then on.
func closedWhileIdle(t *testing.T, s *rawServer) (tr *Transport, peeks *atomic.Int32) {
	t.Helper()
	tr = newTransport(t, Config{})
	tr.recentIdle = time.Hour
	if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "ok" {
		t.Fatalf("first: %v %q", err, b)
	}
	tr.mu.Lock()
	idle := tr.idle[s.ln.Addr().String()]
	tr.mu.Unlock()
	if len(idle) != 1 {
		t.Fatalf("%d idle connections after the first answer, want 1", len(idle))
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(idle[0].nc) {
		if time.Now().After(deadline) {
			t.Fatal("the server's close never reached the idle connection")
		}
		runtime.Gosched()
	}
	peeks = new(atomic.Int32)
	tr.alive = func(nc net.Conn) bool { peeks.Add(1); return alive(nc) }
	return tr, peeks
}

// TestRecentIdleDeleteNotSentOnClosedConnection: a DELETE (not
// replayable) on a connection the server closed while it sat idle, however
// recently, is not sent on it: the connection is peeked at, dropped, and
// the DELETE goes once, on a new connection, and succeeds (sent on the
// closed one it would have failed, never to be sent again).
func TestRecentIdleDeleteNotSentOnClosedConnection(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	s.closeAfter = true
	tr, peeks := closedWhileIdle(t, s)
	req, _ := http.NewRequest(http.MethodDelete, s.url("/f").String(), nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("DELETE: %v", err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
		t.Fatalf("DELETE answer: %v %q", err, b)
	}
	if n := peeks.Load(); n != 1 {
		t.Fatalf("%d peeks, want 1 (the idle connection)", n)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) != 2 || !strings.HasPrefix(s.requests[1], "DELETE /f ") {
		t.Fatalf("requests the server read: %q", s.requests)
	}
}

// TestRecentIdleGetRetriedOnClosedConnection: a GET takes a connection
// that went idle within recentIdle without peeking at it; the server had
// closed it, so the GET's first attempt fails before any answer and the
// GET is sent once more, on a new connection, and gets its answer.
func TestRecentIdleGetRetriedOnClosedConnection(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	s.closeAfter = true
	tr, peeks := closedWhileIdle(t, s)
	if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "ok" {
		t.Fatalf("GET: %v %q", err, b)
	}
	if n := peeks.Load(); n != 0 {
		t.Fatalf("%d peeks, want 0 (the connection had just gone idle; the retry found no idle one)", n)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestRecentIdleGetRetriedOnResetConnection: the same when the server
// reset the connection (RST) instead of closing it: the GET's write or read
// fails with a reset before any answer, and it is sent once more.
func TestRecentIdleGetRetriedOnResetConnection(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	s.closeAfter, s.reset = true, true
	tr, peeks := closedWhileIdle(t, s)
	if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "ok" {
		t.Fatalf("GET: %v %q", err, b)
	}
	if n := peeks.Load(); n != 0 {
		t.Fatalf("%d peeks, want 0", n)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestRecentIdleGetPeeksAfterRecentIdle: a GET on a connection idle for
// longer than recentIdle peeks at it first.
func TestRecentIdleGetPeeksAfterRecentIdle(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	s.closeAfter = true
	tr, peeks := closedWhileIdle(t, s)
	tr.recentIdle = 0
	if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "ok" {
		t.Fatalf("GET: %v %q", err, b)
	}
	if n := peeks.Load(); n != 1 {
		t.Fatalf("%d peeks, want 1", n)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestMaxIdleConnsPerHost(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	tr := newTransport(t, Config{MaxIdleConnsPerHost: 1})
	// Two responses open at once, then both read: one connection kept.
	var resps []*http.Response
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, s.url("/").String(), nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resps = append(resps, resp)
	}
	for _, r := range resps {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	tr.mu.Lock()
	n := tr.nidle
	tr.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d idle connections, want 1", n)
	}
}

func TestFallback(t *testing.T) {
	fb := &failTransport{}
	tr := newTransport(t, Config{Fallback: fb, Proxy: func(r *http.Request) (*url.URL, error) {
		if r.URL.Host == "proxied.example:80" {
			return &url.URL{Scheme: "http", Host: "proxy.example:3128"}, nil
		}
		return nil, nil
	}})
	for _, r := range []*http.Request{
		must(http.NewRequest(http.MethodPost, "http://127.0.0.1:1/", bytes.NewReader([]byte("x")))),
		must(http.NewRequest(http.MethodGet, "https://127.0.0.1:1/", nil)),
		must(http.NewRequest(http.MethodGet, "http://proxied.example:80/", nil)),
	} {
		before := fb.used.Load()
		_, _ = tr.RoundTrip(r)
		if fb.used.Load() != before+1 {
			t.Fatalf("%s %s did not go to the fallback", r.Method, r.URL)
		}
	}
}

func must(r *http.Request, err error) *http.Request {
	if err != nil {
		panic(err)
	}
	return r
}

// TestConcurrentAgainstNetHTTPServer sends many requests at once to a
// net/http server answering with Content-Length or chunked bodies: every
// body arrives whole and in order, and the pool never holds more idle
// connections than its bound.
func TestConcurrentAgainstNetHTTPServer(t *testing.T) {
	var opened atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := strings.Repeat(r.URL.Query().Get("v"), 1000)
		if r.URL.Path == "/chunked" {
			_, _ = io.WriteString(w, body[:500])
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, body[500:])
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = io.WriteString(w, body)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tr := newTransport(t, Config{MaxIdleConnsPerHost: 4})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				path := "/length"
				if i%2 == 0 {
					path = "/chunked"
				}
				v := string(rune('a' + (g+i)%26))
				u, _ := url.Parse(srv.URL + path + "?v=" + v)
				_, b, err := get(t, tr, u)
				if err != nil {
					errs <- err
					return
				}
				if string(b) != strings.Repeat(v, 1000) {
					errs <- fmt.Errorf("%s: %d bytes, not 1000 of %q", path, len(b), v)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tr.mu.Lock()
	idle := tr.nidle
	tr.mu.Unlock()
	if idle > 4 {
		t.Fatalf("%d idle connections, bound 4", idle)
	}
	t.Logf("800 requests over %d connections", opened.Load())
}

// TestMaxConnsPerHostWaiter: with one connection allowed, a second
// request waits while the first answer's body is unread, and proceeds
// once it is read.
func TestMaxConnsPerHostWaiter(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	tr := newTransport(t, Config{MaxConnsPerHost: 1})
	req, _ := http.NewRequest(http.MethodGet, s.url("/").String(), nil)
	first, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, b, err := get(t, tr, s.url("/"))
		if err == nil && string(b) != "ok" {
			err = fmt.Errorf("body %q", b)
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the second request did not wait for the only connection: %v", err)
	default:
	}
	if _, err := io.ReadAll(first.Body); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second request still waits after the first answer was read")
	}
	if n := s.accepted.Load(); n > 2 {
		t.Fatalf("%d connections, want at most 2 (one at a time)", n)
	}
}

// TestLateBytesOnAnIdleConnectionAreNotReadAsTheNextAnswer: an answer
// whose server sends a forged second answer after the first was read
// whole (the connection already idle in the pool) never becomes the next
// request's answer: the idle connection is dropped and the request gets
// its own answer on a new one.
func TestLateBytesOnAnIdleConnectionAreNotReadAsTheNextAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	forge := make(chan struct{})
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := accepted.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line != "\r\n" {
						continue
					}
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
						return
					}
					if n == 1 {
						<-forge
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil")
					}
				}
			}()
		}
	}()
	tr := newTransport(t, Config{})
	// The connection counts as idle for longer than recentIdle, after
	// which a GET peeks too (within it, see TestRecentIdle*).
	tr.recentIdle = 0
	u := &url.URL{Scheme: "http", Host: ln.Addr().String(), Path: "/"}
	if _, b, err := get(t, tr, u); err != nil || string(b) != "ok" {
		t.Fatalf("first: %v %q", err, b)
	}
	tr.mu.Lock()
	idle := tr.idle[u.Host]
	tr.mu.Unlock()
	if len(idle) != 1 {
		t.Fatalf("%d idle connections after the first answer, want 1", len(idle))
	}
	close(forge)
	// Wait until the forged answer reached the idle connection's socket.
	deadline := time.Now().Add(10 * time.Second)
	for alive(idle[0].nc) {
		if time.Now().After(deadline) {
			t.Fatal("the forged answer never reached the idle connection")
		}
		runtime.Gosched()
	}
	if _, b, err := get(t, tr, u); err != nil || string(b) != "ok" {
		t.Fatalf("second: %v %q", err, b)
	}
	if n := accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the one with unasked bytes dropped)", n)
	}
}

// TestNoBodyAnswerFollowedByABody: a 204 (or an answer to HEAD) that a
// server follows with a chunked body anyway: the body's bytes are not
// read as the next answer.
func TestNoBodyAnswerFollowedByABody(t *testing.T) {
	for name, method := range map[string]string{"204": http.MethodGet, "HEAD": http.MethodHead} {
		t.Run(name, func(t *testing.T) {
			first := "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"
			if method == http.MethodHead {
				first = "HTTP/1.1 200 OK\r\nContent-Length: 24\r\n\r\n"
			}
			s := newRawServer(t, first+"18\r\nHTTP/1.1 200 OK\r\n\r\nevil\r\n0\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			tr := newTransport(t, Config{})
			req, _ := http.NewRequest(method, s.url("/").String(), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 0 {
				t.Fatalf("the bodyless answer: %v %q", err, b)
			}
			_ = resp.Body.Close()
			if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "ok" {
				t.Fatalf("the next answer: %v %q", err, b)
			}
			if n := s.accepted.Load(); n != 2 {
				t.Fatalf("%d connections, want 2", n)
			}
		})
	}
}

// TestContinueThenAnswerThenReuse: 100 Continue and 103 before an answer
// are skipped, and the connection then carries the next request.
func TestContinueThenAnswerThenReuse(t *testing.T) {
	s := newRawServer(t, "HTTP/1.1 100 Continue\r\nContent-Length: 10\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	tr := newTransport(t, Config{})
	for i := range 3 {
		if _, b, err := get(t, tr, s.url("/")); err != nil || string(b) != "ok" {
			t.Fatalf("request %d: %v %q", i, err, b)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}
