package api

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/nodecore/hub"
)

// testLimits are short server limits, so that a test waits for them
// briefly; WriteTimeout is not above ReadTimeout (stalledClock).
var testLimits = ServerLimits{
	ReadHeaderTimeout: 200 * time.Millisecond,
	ReadTimeout:       300 * time.Millisecond,
	WriteTimeout:      300 * time.Millisecond,
	IdleTimeout:       10 * time.Second,
	MaxHeaderBytes:    64 << 10,
}

// failsafe bounds each client read of these tests: a server that never
// acts fails the test instead of hanging it. It is not what is measured.
const failsafe = 15 * time.Second

// serve runs NewServer(h, testLimits) on a loopback listener and returns
// its address.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	return serveWith(t, h, testLimits)
}

// serveWith runs NewServer(h, limits) on a loopback listener and returns
// its address.
func serveWith(t *testing.T, h http.Handler, limits ServerLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(h, limits, nil, nil)
	go func() { _ = srv.Serve(limits.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// slowLimits are testLimits whose read timeouts are past the failsafe: a
// connection the server closes under them is closed by something else.
func slowLimits() ServerLimits {
	l := testLimits
	l.ReadHeaderTimeout, l.ReadTimeout = 2*failsafe, 2*failsafe
	return l
}

// rawConn dials addr and writes req as is.
func rawConn(t *testing.T, addr, req string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(failsafe)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// readAnswer reads one answer from br, its body whole.
func readAnswer(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return resp, string(body)
}

// closedByServer reports whether the server closed the connection: the
// next read gets EOF or a reset, not data and not the failsafe's timeout.
func closedByServer(br *bufio.Reader) (bool, error) {
	n, err := io.Copy(io.Discard, br)
	var ne net.Error
	if n > 0 || (errors.As(err, &ne) && ne.Timeout()) {
		return false, err
	}
	return true, nil
}

// stalledClock opens a connection that sends a POST's headers with a
// 10-byte body and never the body, and returns once the server closed it:
// at least testLimits.ReadTimeout after the server began reading it,
// which is later than anything the test did before calling it. A handler
// that reads the body must be behind path.
func stalledClock(t *testing.T, addr, path string) {
	t.Helper()
	_, br := rawConn(t, addr, "POST "+path+" HTTP/1.1\r\nHost: api\r\nContent-Length: 10\r\n\r\n")
	// The handler's refusal may come first; then the connection ends.
	_, err := io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a request whose body never came was not cut off by the read timeout: %v", err)
	}
}

// TestServerRefusalClosesWithoutReadingBody sends requests without a
// valid token whose body never ends (chunked, or shorter than its
// Content-Length), and one without a body: each is answered 401 with
// "Connection: close" at once, without waiting for its body, and the
// server closes the connection, long before its read timeout: a client
// without a token holds none.
func TestServerRefusalClosesWithoutReadingBody(t *testing.T) {
	h := &Handler{Hub: hub.New(), Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(apiToken))}}
	addr := serveWith(t, h, slowLimits())
	op := Prefix + "/" + nodeA + "/operations"
	for name, req := range map[string]string{
		"no token, chunked body without end": "POST " + op + " HTTP/1.1\r\nHost: api\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		"wrong token, Content-Length lies":   "POST " + op + " HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer x\r\nContent-Length: 100000\r\n\r\n0123456789",
		"no token, no body, keep-alive":      "GET " + Prefix + " HTTP/1.1\r\nHost: api\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, br := rawConn(t, addr, req)
			resp, body := readAnswer(t, br, strings.Fields(req)[0])
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"unauthorized"`) || !resp.Close {
				t.Fatalf("answer %d (close %v) %s; want 401 unauthorized with Connection: close", resp.StatusCode, resp.Close, body)
			}
			if closed, err := closedByServer(br); !closed {
				t.Fatalf("the connection stayed open after the 401: %v", err)
			}
		})
	}
}

// TestServerOutsidePathCloses: a path outside the API is 404 not_found
// and its connection is closed at once, token or not, body or not.
func TestServerOutsidePathCloses(t *testing.T) {
	h := &Handler{Hub: hub.New(), Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(apiToken))}}
	addr := serveWith(t, h, slowLimits())
	for _, auth := range []string{"", "Authorization: Bearer " + apiToken + "\r\nContent-Length: 10\r\n"} {
		_, br := rawConn(t, addr, "GET /other HTTP/1.1\r\nHost: api\r\n"+auth+"\r\n")
		resp, body := readAnswer(t, br, http.MethodGet)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"not_found"`) || !resp.Close {
			t.Fatalf("GET /other (token %v): %d (close %v) %s; want 404 not_found, Connection: close", auth != "", resp.StatusCode, resp.Close, body)
		}
		if closed, err := closedByServer(br); !closed {
			t.Fatalf("the connection stayed open after the 404: %v", err)
		}
	}
}

// TestServerStalledBody sends an operation with a valid token whose body
// stops arriving: at ReadTimeout the body fails to read, the operation is
// refused 400 invalid_request (nothing dispatched) and the connection is
// closed.
func TestServerStalledBody(t *testing.T) {
	h := &Handler{Hub: hub.New(), Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(apiToken))}}
	addr := serve(t, h)
	_, br := rawConn(t, addr, "POST "+Prefix+"/"+nodeA+"/operations HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer "+apiToken+
		"\r\nContent-Length: 1000\r\n\r\n{\"operation\":")
	resp, body := readAnswer(t, br, http.MethodPost)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "the body could not be read") {
		t.Fatalf("a stalled body: %d %s; want 400 invalid_request, the body could not be read", resp.StatusCode, body)
	}
	if closed, err := closedByServer(br); !closed {
		t.Fatalf("the connection stayed open after the stalled body: %v", err)
	}
}

// TestServerHandlerOutlivesReadTimeout holds a request whose body was
// read (a POST) and one without a body (a GET) in their handler past the
// ReadTimeout (a stalled request on another connection, begun later, has
// been cut off by it): their context is not cancelled and their answers
// arrive. The read timeout bounds the request's reading, not an
// operation's wait for its outcome.
func TestServerHandlerOutlivesReadTimeout(t *testing.T) {
	entered, release := make(chan struct{}, 2), make(chan struct{})
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if r.URL.Path == Prefix+"/clock" {
			http.Error(w, "clock", http.StatusBadRequest)
			return
		}
		entered <- struct{}{}
		<-release
		if err := r.Context().Err(); err != nil {
			http.Error(w, "cancelled: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "done "+string(b))
	}))
	_, postBR := rawConn(t, addr, "POST "+Prefix+" HTTP/1.1\r\nHost: api\r\nContent-Length: 4\r\n\r\nbody")
	_, getBR := rawConn(t, addr, "GET "+Prefix+" HTTP/1.1\r\nHost: api\r\n\r\n")
	for range 2 {
		select {
		case <-entered:
		case <-time.After(failsafe):
			t.Fatal("the handlers did not get their requests")
		}
	}
	stalledClock(t, addr, Prefix+"/clock")
	close(release)
	for _, c := range []struct {
		method string
		br     *bufio.Reader
		want   string
	}{{http.MethodPost, postBR, "done body"}, {http.MethodGet, getBR, "done "}} {
		resp, body := readAnswer(t, c.br, c.method)
		if resp.StatusCode != http.StatusOK || body != c.want {
			t.Errorf("%s held past the read timeout: %d %q; want 200 %q", c.method, resp.StatusCode, body, c.want)
		}
	}
}

// TestServerAnswerNotRead has a client that never reads a large answer:
// the handler's write fails once the answer's WriteTimeout passed, and
// the server closes the connection (the client gets part of the answer,
// then the end).
func TestServerAnswerNotRead(t *testing.T) {
	const size = 64 << 20
	wrote := make(chan error, 1)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "67108864")
		_, err := w.Write(make([]byte, size))
		wrote <- err
	}))
	c, br := rawConn(t, addr, "GET "+Prefix+" HTTP/1.1\r\nHost: api\r\n\r\n")
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("the server wrote a 64 MiB answer its client never read")
		}
	case <-time.After(failsafe):
		t.Fatal("the answer's write is still blocked: no write deadline")
	}
	n, _ := io.Copy(io.Discard, br)
	if n >= size {
		t.Fatalf("the client read %d bytes, the whole answer", n)
	}
	_ = c.Close()
}

// TestServerExpectContinueAfterAnswerDeadline keeps a connection alive
// past its first answer's write deadline, then sends a request with
// "Expect: 100-continue" on it: the 100 Continue and the answer arrive
// (the first answer's write deadline does not outlive it).
func TestServerExpectContinueAfterAnswerDeadline(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "got "+string(b))
	}))
	c, br := rawConn(t, addr, "GET "+Prefix+" HTTP/1.1\r\nHost: api\r\n\r\n")
	if resp, body := readAnswer(t, br, http.MethodGet); resp.StatusCode != http.StatusOK || body != "got " {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	stalledClock(t, addr, Prefix)
	if _, err := io.WriteString(c, "POST "+Prefix+" HTTP/1.1\r\nHost: api\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("after the first answer's deadline, Expect: 100-continue got %q, %v", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "body"); err != nil {
		t.Fatal(err)
	}
	if resp, body := readAnswer(t, br, http.MethodPost); resp.StatusCode != http.StatusOK || body != "got body" {
		t.Fatalf("the second request: %d %q", resp.StatusCode, body)
	}
}

// TestServerMaxConns serves with MaxConns 1: a second connection's
// request is answered only once the first connection has closed, and the
// server never has two connections open at once (counted on the
// listener below the limit, where a connection's Close comes before the
// next Accept).
func TestServerMaxConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln}
	limits := testLimits
	limits.MaxConns = 1
	limits.ReadHeaderTimeout, limits.ReadTimeout = failsafe, failsafe // the held connection is not cut off
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }), limits, nil, nil)
	go func() { _ = srv.Serve(limits.Listener(counted)) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	first, firstBR := rawConn(t, addr, "GET "+Prefix+" HTTP/1.1\r\nHost: api\r\n\r\n")
	if resp, body := readAnswer(t, firstBR, http.MethodGet); resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("first connection: %d %q", resp.StatusCode, body)
	}
	_, secondBR := rawConn(t, addr, "GET "+Prefix+" HTTP/1.1\r\nHost: api\r\n\r\n")
	_ = first.Close() // kept alive until now
	if resp, body := readAnswer(t, secondBR, http.MethodGet); resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("second connection: %d %q", resp.StatusCode, body)
	}
	if most := counted.most(); most != 1 {
		t.Fatalf("%d connections were open at once, want at most 1", most)
	}
}

// countingListener counts its connections open at once.
type countingListener struct {
	net.Listener
	mu         sync.Mutex
	open, peak int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.peak = max(l.peak, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) most() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peak
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return err
}

// TestServerTooLargeClosesAtOnce sends a release declaring a body past
// its 64 KiB limit, without the body: 413 request_too_large, and the
// connection is closed at once (not at the read timeout, after net/http
// tried to drain the body).
func TestServerTooLargeClosesAtOnce(t *testing.T) {
	h := &Handler{Hub: hub.New(), Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(apiToken))}}
	addr := serveWith(t, h, slowLimits())
	_, br := rawConn(t, addr, "POST "+Prefix+"/"+nodeA+"/placements/release HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer "+apiToken+
		"\r\nContent-Length: 70000\r\n\r\n{")
	resp, body := readAnswer(t, br, http.MethodPost)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"request_too_large"`) || !resp.Close {
		t.Fatalf("a release of 70000 bytes: %d (close %v) %s; want 413 request_too_large, Connection: close", resp.StatusCode, resp.Close, body)
	}
	if closed, err := closedByServer(br); !closed {
		t.Fatalf("the connection stayed open after the 413: %v", err)
	}
}

// TestServerAnswered: NewServer's answered receives each answered
// request's status once, after its handler: a node list with the token
// (200), one without (401), a path outside the API (404), and a handler
// that writes nothing (200, as net/http answers it).
func TestServerAnswered(t *testing.T) {
	h := &Handler{Hub: hub.New(), Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(apiToken))}}
	statuses := make(chan int, 8)
	answered := func(status int) { statuses <- status }
	start := func(h http.Handler) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(h, slowLimits(), nil, answered)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	addr := start(h)
	for _, c := range []struct {
		req  string
		want int
	}{
		{"GET " + Prefix + " HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer " + apiToken + "\r\n\r\n", http.StatusOK},
		{"GET " + Prefix + " HTTP/1.1\r\nHost: api\r\n\r\n", http.StatusUnauthorized},
		{"GET /other HTTP/1.1\r\nHost: api\r\n\r\n", http.StatusNotFound},
	} {
		_, br := rawConn(t, addr, c.req)
		if resp, body := readAnswer(t, br, http.MethodGet); resp.StatusCode != c.want {
			t.Fatalf("%q: %d %s, want %d", c.req, resp.StatusCode, body, c.want)
		}
		if got := <-statuses; got != c.want {
			t.Fatalf("%q: answered(%d), want %d", c.req, got, c.want)
		}
	}
	silent := start(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	_, br := rawConn(t, silent, "GET "+Prefix+" HTTP/1.1\r\nHost: api\r\n\r\n")
	if resp, _ := readAnswer(t, br, http.MethodGet); resp.StatusCode != http.StatusOK {
		t.Fatalf("a handler that writes nothing: %d", resp.StatusCode)
	}
	if got := <-statuses; got != http.StatusOK {
		t.Fatalf("a handler that writes nothing: answered(%d), want 200", got)
	}
	select {
	case got := <-statuses:
		t.Fatalf("an answer counted twice: %d", got)
	default:
	}
}
