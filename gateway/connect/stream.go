package connect

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// StreamWriter writes a Connect JSON server-stream response. The HTTP status
// is always 200 (docs/wire-facts.md §E2.2: errors travel in the end-stream message).
// Every Send and Close is flushed at once, because the SDKs read streams over
// chunked HTTP/1.1 and must see each event as it is produced. A StreamWriter
// is safe for concurrent use.
type StreamWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	closed  bool
	buf     []byte
}

// NewStreamWriter returns a StreamWriter on w. Nothing is written until the
// first Send or Close.
func NewStreamWriter(w http.ResponseWriter) *StreamWriter {
	return &StreamWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *StreamWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", ContentTypeStreamJSON)
	h.Del("Content-Length")
	s.w.WriteHeader(http.StatusOK)
}

// Started reports whether the response header has been written.
func (s *StreamWriter) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// Send marshals msg to JSON and writes it as one message envelope, then
// flushes. It returns the marshalling or write error; after Close it returns
// http.ErrHandlerTimeout-like net errors from the writer or nil if closed.
func (s *StreamWriter) Send(msg any) error {
	payload, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return s.write(0, payload)
}

// SendJSON writes payload, a message's JSON encoding made by the caller, as
// one message envelope, then flushes; as Send after json.Marshal.
func (s *StreamWriter) SendJSON(payload []byte) error { return s.write(0, payload) }

// Close writes the end-stream envelope: {} when e is nil, otherwise
// {"error":e}. Later calls do nothing.
func (s *StreamWriter) Close(e *Error) error {
	payload, err := json.Marshal(EndStream{Error: e})
	if err != nil {
		return err
	}
	return s.write(FlagEndStream, payload)
}

func (s *StreamWriter) write(flags byte, payload []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if flags&FlagEndStream != 0 {
		s.closed = true
	}
	s.start()
	if len(payload) > keptBuffer-HeaderSize {
		// Not copied into s.buf, which would keep its size for the
		// stream's life: the header, then the payload itself.
		var hdr [HeaderSize]byte
		hdr[0] = flags
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
		if _, err := s.w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := s.w.Write(payload); err != nil {
			return err
		}
		return s.rc.Flush()
	}
	s.buf = AppendEnvelope(s.buf[:0], flags, payload)
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// keptBuffer bounds the buffer a StreamWriter keeps between messages
// (bytes): a larger message is written without it.
const keptBuffer = 64 << 10

// WriteUnaryError writes a unary Connect error: the HTTP status of e.Code,
// Content-Type application/json and the JSON body {"code","message"}.
func WriteUnaryError(w http.ResponseWriter, e Error) {
	body, _ := json.Marshal(e)
	h := w.Header()
	h.Set("Content-Type", ContentTypeUnaryJSON)
	h.Del("Content-Length")
	w.WriteHeader(e.Code.HTTPStatus())
	_, _ = w.Write(body)
}

// JSONAppender is a message that appends its own JSON encoding to a
// byte slice, without reflection (envd.ListDirResponse).
type JSONAppender interface {
	// AppendJSON appends the message's JSON encoding to b and returns
	// the extended slice.
	AppendJSON(b []byte) []byte
}

// JSONPartAppender is a JSONAppender that can also append its encoding in
// parts (envd.ListDirResponse: one part per entry), so that WriteUnary
// need not hold a large message's whole encoding at once.
type JSONPartAppender interface {
	JSONAppender
	// SizeHint is about the encoding's length (bytes).
	SizeHint() int
	// AppendJSONPart appends part i (from 0) of the encoding to b and
	// reports whether parts follow; parts 0, 1, … up to the one that
	// reports none, concatenated, are AppendJSON's bytes.
	AppendJSONPart(b []byte, i int) ([]byte, bool)
}

// unaryBuffers holds the buffers WriteUnary encodes JSONAppender messages
// into; buffers that grew past maxPooledUnary are not kept.
var unaryBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledUnary = 64 << 10

// WriteUnary writes a unary success: HTTP 200, Content-Type
// application/json, a Content-Length, and msg as JSON: through its own
// AppendJSON when msg is a JSONAppender (into a pooled buffer), else
// encoding/json. The SDKs require exactly 200 and a JSON body of at least
// {} (docs/wire-facts.md §E2.1).
//
// A JSONPartAppender whose SizeHint is over maxPooledUnary is encoded twice
// in parts through one pooled buffer: once to count its length, once to
// write it, about half of maxPooledUnary bytes a write. The gateway then holds that
// buffer instead of the whole encoding (a listing of 16,384 entries: about
// 5 MiB, for as long as the client takes to read it), for the CPU of
// encoding it twice (docs/dataplane.md "Bounded cost per request and per
// tenant").
func WriteUnary(w http.ResponseWriter, msg any) error {
	if p, ok := msg.(JSONPartAppender); ok && p.SizeHint() > maxPooledUnary {
		return writeUnaryParts(w, p)
	}
	if a, ok := msg.(JSONAppender); ok {
		bp := unaryBuffers.Get().(*[]byte)
		body := a.AppendJSON((*bp)[:0])
		err := writeUnaryBody(w, body)
		if cap(body) <= maxPooledUnary {
			*bp = body[:0]
			unaryBuffers.Put(bp)
		}
		return err
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return writeUnaryBody(w, body)
}

// writeUnaryParts writes p as WriteUnary says: its length counted part by
// part, then its parts gathered up to maxPooledUnary bytes a write.
func writeUnaryParts(w http.ResponseWriter, p JSONPartAppender) error {
	bp := unaryBuffers.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledUnary {
			unaryBuffers.Put(bp)
		}
	}()
	n := 0
	for i, more := 0, true; more; i++ {
		var part []byte
		part, more = p.AppendJSONPart((*bp)[:0], i)
		n += len(part)
		*bp = part[:0]
	}
	h := w.Header()
	h.Set("Content-Type", ContentTypeUnaryJSON)
	h.Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusOK)
	b := (*bp)[:0]
	for i, more := 0, true; more; i++ {
		b, more = p.AppendJSONPart(b, i)
		if len(b) >= maxPooledUnary/2 || !more {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	*bp = b
	return nil
}

func writeUnaryBody(w http.ResponseWriter, body []byte) error {
	h := w.Header()
	h.Set("Content-Type", ContentTypeUnaryJSON)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(body)
	return err
}
