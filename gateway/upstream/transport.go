// Package upstream is an HTTP/1.1 client for the data plane's unary calls
// to a cluster's fixed entry: a bodyless request whose answer is read
// whole (execd's file info, listings, deletes, command status).
//
// It exists for CPU: net/http's Transport runs a read goroutine and a write
// goroutine per connection and hands every request and response between
// them and the caller through channels; here the calling goroutine writes
// the request and parses the answer itself on a pooled connection, with
// no goroutine per connection (docs/benchmarks.md "Issue 33: an upstream
// client of the data plane's own").
//
// What it does not carry it passes to Config.Fallback unchanged: requests
// with a body, schemes other than http (TLS), and requests the Proxy
// function sends to a proxy. Responses are read strictly (RFC 9112): a
// malformed status line or header, a header section over
// MaxResponseHeaderBytes, both Transfer-Encoding and Content-Length, a
// transfer coding other than chunked, differing Content-Length values and
// bad chunk sizes are errors wrapping ErrFraming, never guessed at. A
// connection goes back to the pool only after its response's body was
// read to its end, and never after "Connection: close", an HTTP/1.0
// answer without keep-alive or a body delimited by the connection's end.
package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Defaults of Config's zero values.
const (
	// DefaultMaxResponseHeaderBytes bounds one response head (status line
	// and header fields, CRLFs included) and, separately, a chunked body's
	// trailer section: 64 KiB.
	DefaultMaxResponseHeaderBytes = 64 << 10
	// DefaultReadBufferSize is each connection's read buffer (bytes); it is
	// also the longest line of a response head or chunk size: 8 KiB.
	DefaultReadBufferSize = 8 << 10
	// DefaultWriteBufferSize is each connection's write buffer (bytes), in
	// which a request head is written at once: 4 KiB.
	DefaultWriteBufferSize = 4 << 10
	// DefaultMaxIdleConnsPerHost is net/http's DefaultMaxIdleConnsPerHost.
	DefaultMaxIdleConnsPerHost = http.DefaultMaxIdleConnsPerHost
	// defaultDialTimeout is Caddy's HTTP transport's dial timeout default.
	defaultDialTimeout = 3 * time.Second
	// recentIdle is how long after its last answer an idle connection
	// carries a replayable request (replayable: GET, HEAD, OPTIONS, TRACE
	// or an idempotency key) without the liveness peek (alive): 2 ms.
	// A host that closed it in that time costs the request one failed
	// attempt, sent once more on a new connection (RoundTrip's retry rule,
	// whose second attempt peeks); every other request, and a replayable
	// one on a connection idle for longer, is peeked at first, so a
	// DELETE is never sent on a connection the host closed while it sat
	// idle for longer than the peek's own race. Bytes nobody asked for
	// that arrive in those 2 ms are read as the request's answer, as are
	// bytes that arrive during any request's round trip, which no peek
	// can catch; a host's idle timeout (and the 408 answer some send
	// with it) is seconds, far past it. docs/dataplane.md "The unary
	// client".
	recentIdle = 2 * time.Millisecond
)

// Config sets a Transport's limits and timeouts. Its fields mirror the
// net/http.Transport fields of the same names, which FromHTTPTransport
// copies (in the gateway: from Caddy's transport http block).
type Config struct {
	// DialContext opens a connection to "host:port" over "tcp". Default: a
	// net.Dialer with a 3 s timeout.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Proxy, when set, is asked for every request as net/http asks it; a
	// request it gives a proxy URL for goes to Fallback. Default none.
	Proxy func(*http.Request) (*url.URL, error)
	// Fallback carries the requests this Transport does not: with a body,
	// to another scheme than http, through a proxy. Required.
	Fallback http.RoundTripper
	// ResponseHeaderTimeout bounds the wait for a response head after the
	// request was written; 0 means no limit (the request's context still
	// applies). Its expiry is a net.Error whose Timeout() is true.
	ResponseHeaderTimeout time.Duration
	// MaxResponseHeaderBytes bounds a response head, and a chunked body's
	// trailers (bytes). Default DefaultMaxResponseHeaderBytes.
	MaxResponseHeaderBytes int64
	// ReadBufferSize is a connection's read buffer and the longest line
	// read (bytes). Default DefaultReadBufferSize.
	ReadBufferSize int
	// WriteBufferSize is a connection's write buffer (bytes). Default
	// DefaultWriteBufferSize.
	WriteBufferSize int
	// DisableKeepAlives sends "Connection: close" and closes every
	// connection after one request. Default false.
	DisableKeepAlives bool
	// MaxIdleConns bounds the idle connections to all hosts; 0 means no
	// limit.
	MaxIdleConns int
	// MaxIdleConnsPerHost bounds the idle connections kept per host.
	// Default DefaultMaxIdleConnsPerHost (2).
	MaxIdleConnsPerHost int
	// IdleConnTimeout closes a connection idle for longer; 0 means never.
	IdleConnTimeout time.Duration
	// MaxConnsPerHost bounds the connections open to one host, idle and
	// busy; a request waits for one to close (a connection that ends its
	// answer while all are open is closed, not kept idle). 0 means no
	// limit.
	MaxConnsPerHost int
}

// FromHTTPTransport returns the Config of a Transport that keeps t's
// dialer, proxy choice, timeouts and limits, with fallback (usually the
// RoundTripper that wraps t) carrying what it does not.
func FromHTTPTransport(t *http.Transport, fallback http.RoundTripper) Config {
	return Config{
		DialContext:            t.DialContext,
		Proxy:                  t.Proxy,
		Fallback:               fallback,
		ResponseHeaderTimeout:  t.ResponseHeaderTimeout,
		MaxResponseHeaderBytes: t.MaxResponseHeaderBytes,
		ReadBufferSize:         t.ReadBufferSize,
		WriteBufferSize:        t.WriteBufferSize,
		DisableKeepAlives:      t.DisableKeepAlives,
		MaxIdleConns:           t.MaxIdleConns,
		MaxIdleConnsPerHost:    t.MaxIdleConnsPerHost,
		IdleConnTimeout:        t.IdleConnTimeout,
		MaxConnsPerHost:        t.MaxConnsPerHost,
	}
}

// Transport is an http.RoundTripper for bodyless HTTP/1.1 requests; see
// the package documentation. Its zero value is not usable: call New.
type Transport struct {
	cfg         Config
	maxHeader   int
	maxIdleHost int
	recentIdle  time.Duration       // recentIdle; tests change it
	alive       func(net.Conn) bool // alive; tests count its calls

	mu     sync.Mutex
	idle   map[string][]*conn // per host:port, the most recently used last
	nidle  int
	slots  map[string]chan struct{} // per host:port, one token per open conn (MaxConnsPerHost)
	closed bool
}

// New returns a Transport with cfg's limits. It fails without a Fallback.
func New(cfg Config) (*Transport, error) {
	if cfg.Fallback == nil {
		return nil, errors.New("upstream: Config.Fallback is required")
	}
	if cfg.DialContext == nil {
		d := &net.Dialer{Timeout: defaultDialTimeout}
		cfg.DialContext = d.DialContext
	}
	if cfg.MaxResponseHeaderBytes <= 0 {
		cfg.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
	}
	if cfg.ReadBufferSize <= 0 {
		cfg.ReadBufferSize = DefaultReadBufferSize
	}
	if cfg.WriteBufferSize <= 0 {
		cfg.WriteBufferSize = DefaultWriteBufferSize
	}
	t := &Transport{cfg: cfg, idle: map[string][]*conn{}, slots: map[string]chan struct{}{}, recentIdle: recentIdle, alive: alive}
	t.maxHeader = int(min(cfg.MaxResponseHeaderBytes, 1<<30))
	t.maxIdleHost = cfg.MaxIdleConnsPerHost
	if t.maxIdleHost <= 0 {
		t.maxIdleHost = DefaultMaxIdleConnsPerHost
	}
	return t, nil
}

// CloseIdleConnections closes the idle connections and every connection
// that becomes idle from now on: a Transport whose configuration was
// replaced lets its requests in flight finish and keeps nothing open.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	t.closed = true
	idle := t.idle
	t.idle, t.nidle = map[string][]*conn{}, 0
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.close()
		}
	}
}

// conn is one connection to a host and its buffers.
type conn struct {
	t         *Transport
	key       string
	nc        net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	slot      chan struct{} // returned on close when MaxConnsPerHost is set
	closeOnce sync.Once
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		_ = c.nc.Close()
		if c.slot != nil {
			<-c.slot
		}
	})
}

// aLongTimeAgo is a read or write deadline that has passed: setting it
// unblocks a connection's pending I/O.
var aLongTimeAgo = time.Unix(1, 0)

// RoundTrip sends req and returns its response, whose Body the caller must
// read to its end (the connection then returns to the pool) or Close (the
// connection is closed). Requests it does not carry go to Fallback.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "http" || req.Body != nil && req.Body != http.NoBody || req.ContentLength > 0 {
		return t.cfg.Fallback.RoundTrip(req)
	}
	if t.cfg.Proxy != nil {
		u, err := t.cfg.Proxy(req)
		if err != nil {
			return nil, err
		}
		if u != nil {
			return t.cfg.Fallback.RoundTrip(req)
		}
	}
	uri := req.URL.RequestURI()
	if err := checkRequest(req, uri); err != nil {
		return nil, err
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	ctx := req.Context()
	replay := replayable(req)
	for attempt := 0; ; attempt++ {
		// A replayable request's first attempt may skip the peek at a
		// connection that went idle moments ago (recentIdle): a close
		// found by its write or read is answered by the retry below.
		c, reused, err := t.get(ctx, addr, replay && attempt == 0)
		if err != nil {
			return nil, err
		}
		resp, err := t.send(ctx, c, req, uri)
		if err == nil {
			return resp, nil
		}
		// A reused connection the host closed while it sat idle fails
		// before any byte of an answer: send a replayable request once
		// more on a new connection, as net/http does.
		if attempt == 0 && reused && ctx.Err() == nil && replay && nothingReceived(err) {
			continue
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
}

func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

func nothingReceived(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// errHeaderTimeout is ResponseHeaderTimeout's expiry.
type headerTimeoutError struct{}

func (headerTimeoutError) Error() string   { return "upstream: timeout awaiting response headers" }
func (headerTimeoutError) Timeout() bool   { return true }
func (headerTimeoutError) Temporary() bool { return true }

// send writes req on c and reads the response head. On error c is closed.
func (t *Transport) send(ctx context.Context, c *conn, req *http.Request, uri string) (*http.Response, error) {
	var stop func() bool
	if ctx.Done() != nil {
		nc := c.nc
		stop = context.AfterFunc(ctx, func() { _ = nc.SetDeadline(aLongTimeAgo) })
	}
	fail := func(err error) (*http.Response, error) {
		if stop != nil {
			stop()
		}
		c.close()
		return nil, err
	}
	if err := t.writeRequest(c.bw, req, uri); err != nil {
		return fail(err)
	}
	if t.cfg.ResponseHeaderTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(t.cfg.ResponseHeaderTimeout))
	}
	h, err := readHead(c.br, req.Method, t.maxHeader)
	if err != nil {
		var ne net.Error
		if t.cfg.ResponseHeaderTimeout > 0 && ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
			err = headerTimeoutError{}
		}
		return fail(err)
	}
	if t.cfg.ResponseHeaderTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Time{})
		if err := ctx.Err(); err != nil { // canceled while the deadline was cleared
			return fail(err)
		}
	}
	keep := !h.close && !t.cfg.DisableKeepAlives && !req.Close
	resp := &http.Response{
		Status:        h.statusText,
		StatusCode:    h.status,
		Proto:         h.proto,
		ProtoMajor:    h.major,
		ProtoMinor:    h.minor,
		Header:        h.header,
		ContentLength: h.length,
		Close:         !keep,
		Request:       req,
	}
	if h.length == 0 {
		resp.Body = http.NoBody
		if stop != nil && !stop() {
			keep = false
		}
		if keep {
			t.put(c)
		} else {
			c.close()
		}
		return resp, nil
	}
	b := &body{c: c, stop: stop, keep: keep, left: h.length}
	switch {
	case h.chunked:
		resp.TransferEncoding = []string{"chunked"}
		b.r = &chunkReader{br: c.br, maxTrailerBytes: t.maxHeader}
	default:
		b.r = c.br
	}
	resp.Body = b
	return resp, nil
}

// checkRequest, given req's request target uri, refuses a request whose head could not be written as one
// request: a method that is not a token, a request target or Host with
// whitespace or controls, a header field name or value with CR, LF or NUL.
// It runs before any connection is taken.
func checkRequest(req *http.Request, uri string) error {
	if req.Method != "" && !validName([]byte(req.Method)) {
		return errors.New("upstream: invalid method")
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !httpguts.ValidHostHeader(host) {
		return errors.New("upstream: invalid Host header")
	}
	for i := 0; i < len(uri); i++ {
		if uri[i] <= ' ' || uri[i] == 0x7f {
			return errors.New("upstream: invalid request target")
		}
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return errors.New("upstream: invalid header field name")
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return errors.New("upstream: invalid header field value")
			}
		}
	}
	return nil
}

// skipHeader reports the fields of req.Header not sent: those the client
// sets itself or that have no place on a bodyless HTTP/1.1 request.
func skipHeader(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Trailer", "Te", "Upgrade", "Keep-Alive", "Proxy-Connection":
		return true
	}
	return false
}

// writeRequest writes req's head (checkRequest passed) with uri as the
// request target: request line,
// Host, req's header fields and "Connection: close" when no connection is
// kept.
func (t *Transport) writeRequest(w *bufio.Writer, req *http.Request, uri string) error {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	for k, vs := range req.Header {
		if skipHeader(k) {
			continue
		}
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		w.WriteString("User-Agent: Go-http-client/1.1\r\n")
	}
	if t.cfg.DisableKeepAlives || req.Close {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
	return w.Flush()
}

// get returns an idle connection to addr that is still open, or a new one.
// With recent set, a connection idle for less than t.recentIdle is taken
// without the peek.
func (t *Transport) get(ctx context.Context, addr string, recent bool) (*conn, bool, error) {
	for {
		c := t.takeIdle(addr)
		if c == nil {
			break
		}
		if recent && time.Since(c.idleSince) < t.recentIdle || t.alive(c.nc) {
			return c, true, nil
		}
		c.close()
	}
	var slot chan struct{}
	if t.cfg.MaxConnsPerHost > 0 {
		t.mu.Lock()
		slot = t.slots[addr]
		if slot == nil {
			slot = make(chan struct{}, t.cfg.MaxConnsPerHost)
			t.slots[addr] = slot
		}
		t.mu.Unlock()
		select {
		case slot <- struct{}{}:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		// A connection may have come back idle while this waited.
		if c := t.takeIdle(addr); c != nil {
			<-slot
			if t.alive(c.nc) {
				return c, true, nil
			}
			c.close()
			return t.get(ctx, addr, recent)
		}
	}
	nc, err := t.cfg.DialContext(ctx, "tcp", addr)
	if err != nil {
		if slot != nil {
			<-slot
		}
		return nil, false, err
	}
	return &conn{
		t:    t,
		key:  addr,
		nc:   nc,
		br:   bufio.NewReaderSize(nc, t.cfg.ReadBufferSize),
		bw:   bufio.NewWriterSize(nc, t.cfg.WriteBufferSize),
		slot: slot,
	}, false, nil
}

// takeIdle removes and returns the most recently used idle connection to
// addr, closing those idle past IdleConnTimeout; nil if none.
func (t *Transport) takeIdle(addr string) *conn {
	t.mu.Lock()
	cs := t.idle[addr]
	if len(cs) == 0 {
		t.mu.Unlock()
		return nil
	}
	c := cs[len(cs)-1]
	cs[len(cs)-1] = nil
	cs = cs[:len(cs)-1]
	t.nidle--
	var stale []*conn
	if t.cfg.IdleConnTimeout > 0 && time.Since(c.idleSince) > t.cfg.IdleConnTimeout {
		// Every connection below it went idle earlier still.
		stale = append(append(stale, cs...), c)
		t.nidle -= len(cs)
		clear(cs)
		cs, c = cs[:0], nil
	}
	t.idle[addr] = cs
	t.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
	return c
}

// put returns c to the pool, or closes it when the pool is full or closed.
func (t *Transport) put(c *conn) {
	now := time.Now()
	t.mu.Lock()
	cs := t.idle[c.key]
	var stale []*conn
	if t.cfg.IdleConnTimeout > 0 {
		n := 0
		for n < len(cs) && now.Sub(cs[n].idleSince) > t.cfg.IdleConnTimeout {
			n++
		}
		if n > 0 {
			stale = append(stale, cs[:n]...)
			cs = append(cs[:0], cs[n:]...)
			t.nidle -= n
		}
	}
	// Bytes past the answer's end would be read as the next answer: such a
	// connection is closed, never reused. Under MaxConnsPerHost, a
	// connection coming back while every slot of its host is taken is
	// closed too, so a request waiting for a slot gets one (it dials).
	if t.closed || c.br.Buffered() > 0 || c.slot != nil && len(c.slot) == cap(c.slot) || len(cs) >= t.maxIdleHost || t.cfg.MaxIdleConns > 0 && t.nidle >= t.cfg.MaxIdleConns {
		stale = append(stale, c)
	} else {
		c.idleSince = now
		cs = append(cs, c)
		t.nidle++
	}
	t.idle[c.key] = cs
	t.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
}

// errBodyClosed is a read after Close.
var errBodyClosed = errors.New("upstream: read on a closed response body")

// body is a response body: Content-Length bytes (left >= 0), a chunked
// body, or everything up to the connection's end (left < 0, r the
// connection's reader). At its end the connection goes back to the pool
// when keep holds and the request's context was not canceled; on an error
// or an early Close it is closed. Read and Close are not to be called
// concurrently (the data plane reads and closes in one goroutine).
type body struct {
	c    *conn
	r    io.Reader
	stop func() bool
	keep bool
	left int64
	done atomic.Bool
	err  error // sticky error after the body ended
}

func (b *body) Read(p []byte) (int, error) {
	if b.done.Load() {
		if b.err == nil {
			return 0, errBodyClosed
		}
		return 0, b.err
	}
	if b.left == 0 {
		b.finish(b.keep, io.EOF)
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
		if b.left == 0 {
			b.finish(b.keep, io.EOF)
			return n, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	}
	switch {
	case err == io.EOF && b.left < 0:
		// The chunked body's end (keep as the head said) or the
		// connection's (keep is false for such a body).
		b.finish(b.keep, io.EOF)
	case err != nil:
		b.finish(false, err)
	}
	return n, err
}

// Close ends the body; before its end the connection is closed, not
// drained.
func (b *body) Close() error {
	b.finish(false, errBodyClosed)
	return nil
}

// finish releases the connection once: to the pool when keep holds and
// the context's cancellation had not fired, else closed.
func (b *body) finish(keep bool, err error) {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	b.err = err
	if b.stop != nil && !b.stop() {
		keep = false
	}
	if keep {
		b.c.t.put(b.c)
	} else {
		b.c.close()
	}
}
