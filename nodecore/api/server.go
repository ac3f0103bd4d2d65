package api

import (
	"log"
	"net/http"
	"time"
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
}

// DefaultServerLimits are the limits of the sandgate app's own API
// server (the nodes block's api): headers within 10 s and 64 KiB, the
// whole request (a body of up to 72 MiB) within 1 min, each answer
// written within 1 min, kept-alive connections idle up to 5 min (Caddy's
// default).
var DefaultServerLimits = ServerLimits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       time.Minute,
	WriteTimeout:      time.Minute,
	IdleTimeout:       5 * time.Minute,
	MaxHeaderBytes:    64 << 10,
}

// NewServer returns an HTTP/1.1 server of the API alone, for a listener
// of its own outside any other server: requests on the API's paths (Owns)
// go to h (normally a *Handler), any other path is answered 404
// not_found. The connection of a request answered 401 (no valid token)
// or 404 for a path outside the API is closed after that answer, without
// reading the request's body: a client without a token cannot keep a
// connection. limits bound each connection (ServerLimits); errorLog
// receives net/http's own errors (nil: the standard logger). The caller
// serves it (Serve) and shuts it down.
func NewServer(h http.Handler, limits ServerLimits, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           &limitedHandler{next: h, writeTimeout: limits.WriteTimeout},
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
}

func (l *limitedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	aw := &answerWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: l.writeTimeout}
	if !Owns(r.URL.Path) {
		aw.Header().Set("Connection", "close")
		NotFound(aw)
		return
	}
	l.next.ServeHTTP(aw, r)
}

// answerWriter sets the connection's write deadline when the answer
// begins, and closes the connection after a 401 or a 404 outside the API.
type answerWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	begun   bool
}

func (w *answerWriter) WriteHeader(status int) {
	if !w.begun {
		w.begun = true
		if status == http.StatusUnauthorized {
			w.Header().Set("Connection", "close")
		}
		if w.timeout > 0 {
			_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *answerWriter) Write(p []byte) (int, error) {
	if !w.begun {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap returns the server's ResponseWriter (http.ResponseController).
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
