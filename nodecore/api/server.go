package api

import (
	"log"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// ServerLimits bound what one connection of a Server may hold, so that a
// client that has no token, or one that stalls, costs the gateway a
// bounded time. Zero fields are not defaulted: use DefaultServerLimits.
type ServerLimits struct {
	// ReadHeaderTimeout bounds the reading of a request's headers, from
	// its first byte (or from the connection's start). Past it the
	// connection is closed.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, headers and
	// body, from the same start; it must be at least ReadHeaderTimeout.
	// A body that has not arrived by then fails to read (the operation is
	// refused, 400 invalid_request, and its connection is closed after
	// the answer), and a body the handler did not read (a refusal) is not
	// waited for past it. It does not bound the handler's work once the
	// body is read: net/http clears the read deadline when the body ends,
	// so an operation may take its timeout_ms.
	ReadTimeout time.Duration
	// WriteTimeout bounds the writing of one answer, from the moment the
	// handler begins it (net/http clears the deadline after the answer,
	// so the next request on the connection is not affected); a client
	// that does not read its answer loses the connection then. The
	// handler's wait before it answers is not bounded by it.
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers, in bytes; past it
	// net/http answers 431 before any handler.
	MaxHeaderBytes int
	// MaxConns bounds the connections open at once (Listener): past it a
	// new connection waits in the kernel's accept queue until one closes,
	// so a flood of connections takes no more of the process's file
	// descriptors than this. 0: no bound.
	MaxConns int
}

// DefaultServerLimits are the limits of the sandgate app's own API
// server (the nodes block's api): headers within 10 s and 64 KiB, the
// whole request (a body of up to 72 MiB) within 1 min, each answer
// written within 1 min, kept-alive connections idle up to 5 min (Caddy's
// default), 4096 connections at once.
var DefaultServerLimits = ServerLimits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       time.Minute,
	WriteTimeout:      time.Minute,
	IdleTimeout:       5 * time.Minute,
	MaxHeaderBytes:    64 << 10,
	MaxConns:          4096,
}

// Listener returns ln accepting at most l.MaxConns connections at once
// (ln itself when MaxConns is 0): Accept waits while that many are open.
// Closing it closes ln each time it is closed.
func (l ServerLimits) Listener(ln net.Listener) net.Listener {
	if l.MaxConns <= 0 {
		return ln
	}
	return netutil.LimitListener(ln, l.MaxConns)
}

// NewServer returns an HTTP/1.1 server of the API alone, for a listener
// of its own outside any other server: requests on the API's paths (Owns)
// go to h (normally a *Handler), any other path is answered 404
// not_found. The connection of a request answered 401 (no valid token),
// 413 (a body past its limit) or 404 for a path outside the API is
// closed right after that answer ("Connection: close"), the rest of the
// request's body unread: a client without a token cannot keep a
// connection, nor make the server read a body. (A body larger than
// net/http's 4 KiB read buffer may turn that close into a reset, and the
// client may then miss the answer.) limits bound each connection
// (ServerLimits); errorLog receives net/http's own errors (nil: the
// standard logger); answered, when not nil, is called once per request
// the handlers answered, with the answer's HTTP status, after the handler
// returned (the sandgate app counts them as
// sandgate_node_api_requests_total{code}); what net/http refuses before
// any handler (a 431 for headers past MaxHeaderBytes, a 400 for a request
// it cannot parse, a header read that timed out) is not. The caller serves
// it on limits.Listener(ln) (MaxConns) and shuts it down.
func NewServer(h http.Handler, limits ServerLimits, errorLog *log.Logger, answered func(status int)) *http.Server {
	return &http.Server{
		Handler:           &limitedHandler{next: h, writeTimeout: limits.WriteTimeout, answered: answered},
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		ReadTimeout:       limits.ReadTimeout,
		IdleTimeout:       limits.IdleTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		ErrorLog:          errorLog,
	}
}

// limitedHandler routes a NewServer's requests and gives each answer its
// write deadline.
type limitedHandler struct {
	next         http.Handler
	writeTimeout time.Duration
	answered     func(status int)
}

func (l *limitedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dl, ok := w.(deadlines) // net/http's own ResponseWriter: no ResponseController to allocate
	if !ok {
		dl = http.NewResponseController(w)
	}
	aw := &answerWriter{ResponseWriter: w, rc: dl, timeout: l.writeTimeout}
	if Owns(r.URL.Path) {
		l.next.ServeHTTP(aw, r)
	} else {
		aw.refused = true
		NotFound(aw)
	}
	if aw.refused {
		// net/http would read up to 256 KiB of the unread body, at the
		// client's pace, before closing: end the reading now. (A body
		// past the 4 KiB net/http already buffered may then make the
		// close a reset.)
		_ = aw.rc.SetReadDeadline(time.Now())
	}
	if l.answered != nil {
		status := aw.status
		if status == 0 {
			status = http.StatusOK // nothing written: net/http answers 200
		}
		l.answered(status)
	}
}

// deadlines sets a connection's deadlines: net/http's ResponseWriter, or
// an http.ResponseController over another one.
type deadlines interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// answerWriter sets the connection's write deadline when the answer
// begins, and closes the connection after a 401, a 413 or a 404 outside
// the API (refused).
type answerWriter struct {
	http.ResponseWriter
	rc      deadlines
	timeout time.Duration
	status  int // the answer's; 0 until it begins
	refused bool
}

func (w *answerWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
		w.refused = w.refused || status == http.StatusUnauthorized || status == http.StatusRequestEntityTooLarge
		if w.refused {
			w.Header().Set("Connection", "close")
		}
		if w.timeout > 0 {
			_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *answerWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap returns the server's ResponseWriter (http.ResponseController).
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
