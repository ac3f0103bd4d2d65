// Package connect implements the parts of the Connect protocol
// (https://connectrpc.com/docs/protocol) that the E2B SDKs speak to envd:
// JSON unary calls and JSON server streams.
//
// A server-stream body is a sequence of envelopes. An envelope is 1 flag byte,
// a 4-byte big-endian payload length and the payload. Flag 0x00 marks a
// message; flag 0x02 (FlagEndStream) marks the final end-stream message, whose
// payload is a JSON EndStreamResponse. Flag 0x01 (compressed) is never written
// and is refused on input, because neither SDK compresses (docs/wire-facts.md §E2.2).
// The protocol defines no other flag bit: an envelope with one is refused
// (ErrFlags), and so is the response-only end-stream flag in a request.
//
// Errors carry a Code, the snake_case string the Connect spec defines. Unary
// errors are written as an HTTP status from Code.HTTPStatus with a JSON body
// {"code":"<code>","message":"..."}; stream errors are written as HTTP 200 and
// an end-stream envelope {"error":{...}}, because the JS SDK does not read the
// body of a non-200 stream response (docs/wire-facts.md §E2.2, §E2.3).
package connect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Content types of the Connect protocol with the JSON codec.
const (
	// ContentTypeUnaryJSON is the Content-Type of unary JSON requests and responses.
	ContentTypeUnaryJSON = "application/json"
	// ContentTypeStreamJSON is the Content-Type of streaming JSON requests and responses.
	ContentTypeStreamJSON = "application/connect+json"
)

// Envelope flags (Connect protocol, "Streaming-Request" and
// "Streaming-Response": Envelope-Flags is 8 bit flags of which a request
// defines only compressed, a response compressed and end-stream).
const (
	// FlagCompressed marks a compressed envelope. sandgate never sends it and
	// refuses it on input.
	FlagCompressed byte = 0x01
	// FlagEndStream marks the end-stream envelope that closes a server stream
	// (responses only).
	FlagEndStream byte = 0x02
)

// HeaderSize is the size in bytes of an envelope prefix: 1 flag byte and a
// 4-byte big-endian length.
const HeaderSize = 5

// Code is a Connect error code as its snake_case string.
type Code string

// The Connect error codes used by sandgate (Connect protocol, "Error Codes").
const (
	Canceled           Code = "canceled"
	Unknown            Code = "unknown"
	InvalidArgument    Code = "invalid_argument"
	DeadlineExceeded   Code = "deadline_exceeded"
	NotFound           Code = "not_found"
	AlreadyExists      Code = "already_exists"
	PermissionDenied   Code = "permission_denied"
	ResourceExhausted  Code = "resource_exhausted"
	FailedPrecondition Code = "failed_precondition"
	Aborted            Code = "aborted"
	OutOfRange         Code = "out_of_range"
	Unimplemented      Code = "unimplemented"
	Internal           Code = "internal"
	Unavailable        Code = "unavailable"
	DataLoss           Code = "data_loss"
	Unauthenticated    Code = "unauthenticated"
)

// HTTPStatus returns the HTTP status a unary error with this code is sent
// with. The table is connect-go's and connect-es's codeToHttpStatus
// (docs/wire-facts.md §E2.3); an unrecognised code gives 500.
func (c Code) HTTPStatus() int {
	switch c {
	case Canceled:
		return 499
	case InvalidArgument, FailedPrecondition, OutOfRange:
		return http.StatusBadRequest
	case DeadlineExceeded:
		return http.StatusGatewayTimeout
	case NotFound:
		return http.StatusNotFound
	case AlreadyExists, Aborted:
		return http.StatusConflict
	case PermissionDenied:
		return http.StatusForbidden
	case ResourceExhausted:
		return http.StatusTooManyRequests
	case Unimplemented:
		return http.StatusNotImplemented
	case Unavailable:
		return http.StatusServiceUnavailable
	case Unauthenticated:
		return http.StatusUnauthorized
	default:
		return http.StatusInternalServerError
	}
}

// Error is the JSON shape of a Connect error, used both as a unary error body
// and inside an end-stream message.
type Error struct {
	// Code is the Connect code, e.g. "not_found".
	Code Code `json:"code"`
	// Message is the human-readable detail; omitted when empty.
	Message string `json:"message,omitempty"`
}

// EndStream is the JSON payload of the end-stream envelope. A nil Error means
// success and is written as {}.
type EndStream struct {
	// Error is the stream's failure; nil for success.
	Error *Error `json:"error,omitempty"`
}

// Errors returned by ReadEnvelope.
var (
	// ErrCompressed is returned for an envelope with the compressed flag set.
	ErrCompressed = errors.New("connect: compressed envelopes are not supported")
	// ErrFlags is returned for an envelope with a flag bit the Connect
	// protocol does not define (any bit other than 0x01 and 0x02), and by
	// ReadSingleEnvelope for the end-stream flag, which only responses carry.
	ErrFlags = errors.New("connect: envelope flags not defined by the Connect protocol")
	// ErrTooLarge is returned when an envelope's length exceeds the limit.
	ErrTooLarge = errors.New("connect: envelope exceeds the size limit")
	// ErrTruncated is returned when the body ends inside an envelope.
	ErrTruncated = errors.New("connect: truncated envelope")
	// ErrTrailing is returned by ReadSingleEnvelope when bytes follow the first envelope.
	ErrTrailing = errors.New("connect: unexpected data after the request envelope")
)

// ReadEnvelope reads one envelope from r and returns its flags and payload.
// The payload may be at most limit bytes; memory grows with the bytes that
// arrive, not with the declared length. It returns io.EOF when r is empty
// at an envelope boundary, ErrTruncated when r ends inside an envelope,
// ErrTooLarge when the declared length exceeds limit, ErrFlags for a flag
// bit other than FlagCompressed and FlagEndStream, and ErrCompressed for the
// compressed flag; nothing past the 5-byte header is read for these three.
func ReadEnvelope(r io.Reader, limit uint32) (flags byte, payload []byte, err error) {
	var hdr [HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, io.EOF
		}
		return 0, nil, ErrTruncated
	}
	flags = hdr[0]
	if flags&^(FlagCompressed|FlagEndStream) != 0 {
		return flags, nil, fmt.Errorf("%w: 0x%02x", ErrFlags, flags)
	}
	payload, err = readPayload(r, hdr, limit)
	return flags, payload, err
}

// readPayload checks the compressed flag and the length of the envelope
// whose header is hdr, then reads its payload from r.
func readPayload(r io.Reader, hdr [HeaderSize]byte, limit uint32) ([]byte, error) {
	if hdr[0]&FlagCompressed != 0 {
		return nil, ErrCompressed
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > limit {
		return nil, fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, n, limit)
	}
	// The payload grows as its bytes arrive, never to its declared length
	// before they do: a client that declares the limit and sends a few
	// bytes costs what it sent, not the limit, per request it keeps open.
	payload, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil || uint32(len(payload)) != n {
		return nil, ErrTruncated
	}
	return payload, nil
}

// ReadSingleEnvelope reads the one message envelope that a server-stream
// request carries (Connect protocol: a server-streaming request body is
// exactly one message). It returns ErrTruncated for an empty body or one
// that ends inside the envelope, ErrFlags for any flag bit but
// FlagCompressed (a request defines no other; end-stream is response-only),
// ErrCompressed, ErrTooLarge, and ErrTrailing when more bytes follow. The
// flags and length are checked before the payload is read, so a refused
// request costs no more than its 5-byte header.
func ReadSingleEnvelope(r io.Reader, limit uint32) ([]byte, error) {
	var hdr [HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, ErrTruncated
	}
	if hdr[0]&^FlagCompressed != 0 {
		return nil, fmt.Errorf("%w in a request: 0x%02x", ErrFlags, hdr[0])
	}
	payload, err := readPayload(r, hdr, limit)
	if err != nil {
		return nil, err
	}
	var one [1]byte
	if n, _ := io.ReadFull(r, one[:]); n > 0 {
		return nil, ErrTrailing
	}
	return payload, nil
}

// AppendEnvelope appends an envelope with the given flags and payload to dst
// and returns the extended slice.
func AppendEnvelope(dst []byte, flags byte, payload []byte) []byte {
	var hdr [HeaderSize]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	dst = append(dst, hdr[:]...)
	return append(dst, payload...)
}
