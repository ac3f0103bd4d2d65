package proto

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Frame is one protocol frame: *Hello, *Welcome, *Heartbeat, *HeartbeatAck,
// *Request, *Response, *Retention or *RetentionAck.
type Frame interface {
	// FrameType returns the frame's "type" value (TypeHello, …); it does
	// not read the receiver, so a nil pointer of a frame type answers too.
	FrameType() string
}

// FrameType returns TypeHello.
func (*Hello) FrameType() string { return TypeHello }

// FrameType returns TypeWelcome.
func (*Welcome) FrameType() string { return TypeWelcome }

// FrameType returns TypeHeartbeat.
func (*Heartbeat) FrameType() string { return TypeHeartbeat }

// FrameType returns TypeHeartbeatAck.
func (*HeartbeatAck) FrameType() string { return TypeHeartbeatAck }

// FrameType returns TypeRequest.
func (*Request) FrameType() string { return TypeRequest }

// FrameType returns TypeResponse.
func (*Response) FrameType() string { return TypeResponse }

// FrameType returns TypeRetention.
func (*Retention) FrameType() string { return TypeRetention }

// FrameType returns TypeRetentionAck.
func (*RetentionAck) FrameType() string { return TypeRetentionAck }

// IsControlType reports whether typ names a control frame (hello, welcome,
// heartbeat, heartbeat_ack, retention, retention_ack), whose limit is
// MaxControlFrame bytes; request and response frames may be up to
// MaxRequestFrame bytes.
func IsControlType(typ string) bool {
	switch typ {
	case TypeHello, TypeWelcome, TypeHeartbeat, TypeHeartbeatAck, TypeRetention, TypeRetentionAck:
		return true
	}
	return false
}

// FrameLimit returns the size limit in bytes of a frame of type typ:
// MaxControlFrame for control frames, MaxRequestFrame otherwise.
func FrameLimit(typ string) int {
	if IsControlType(typ) {
		return MaxControlFrame
	}
	return MaxRequestFrame
}

// knownType returns the frame type constant equal to name, or "".
func knownType(name []byte) string {
	for _, typ := range [...]string{TypeHello, TypeWelcome, TypeHeartbeat, TypeHeartbeatAck,
		TypeRequest, TypeResponse, TypeRetention, TypeRetentionAck} {
		if string(name) == typ {
			return typ
		}
	}
	return ""
}

func newFrame(typ string) Frame {
	switch typ {
	case TypeHello:
		return new(Hello)
	case TypeWelcome:
		return new(Welcome)
	case TypeHeartbeat:
		return new(Heartbeat)
	case TypeHeartbeatAck:
		return new(HeartbeatAck)
	case TypeRequest:
		return new(Request)
	case TypeResponse:
		return new(Response)
	case TypeRetention:
		return new(Retention)
	case TypeRetentionAck:
		return new(RetentionAck)
	}
	return nil
}

// Options of the strict decoder and of the encoder: exact, unique member
// names, valid UTF-8, unknown members refused, deterministic map order.
var (
	decodeOptions = json.JoinOptions(
		json.RejectUnknownMembers(true),
		json.MatchCaseInsensitiveNames(false),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false),
	)
	tokenizerOptions = json.JoinOptions(
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false),
	)
	// fillOptions fill a frame the walk has already checked (see Decode):
	// names are neither tracked for duplicates nor UTF-8 checked again.
	fillOptions = json.JoinOptions(
		json.RejectUnknownMembers(true),
		json.MatchCaseInsensitiveNames(false),
		jsontext.AllowDuplicateNames(true),
		jsontext.AllowInvalidUTF8(true),
	)
	encodeOptions = json.JoinOptions(
		json.Deterministic(true),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false),
	)
)

// decodeState is the pooled tokenizer state of one Decode call.
type decodeState struct {
	buf bytes.Buffer
	dec jsontext.Decoder
	w   walker
}

var decodeStates = sync.Pool{New: func() any { return new(decodeState) }}

func (st *decodeState) reset(data []byte) *jsontext.Decoder {
	st.buf = *bytes.NewBuffer(data)
	st.dec.Reset(&st.buf, tokenizerOptions)
	return &st.dec
}

func (st *decodeState) release() {
	st.buf = bytes.Buffer{}
	st.dec.Reset(&st.buf) // drop the reference to the frame
	if cap(st.w.ptr) > 1<<10 {
		st.w.ptr = nil
	}
	if cap(st.w.name) > 1<<10 {
		st.w.name = nil
	}
	decodeStates.Put(st)
}

// Decode parses one frame strictly (spec "Frames and version"). In order:
//
//  1. len(data) ≤ MaxRequestFrame, else ErrTooLarge;
//  2. a streaming tokenizer finds the top-level "type" and "version"
//     without decoding the rest (ErrSyntax, ErrNotObject, ErrType); a
//     frame that starts with the header Encode writes skips this scan,
//     which would find the same type and no error;
//  3. a control frame longer than MaxControlFrame is refused (ErrTooLarge);
//  4. "version" must be the literal ProtocolVersion (ErrVersion);
//  5. a walk over the whole frame refuses duplicate, unknown (including
//     case-variant), null (except Deployment.serving_generation), missing
//     required and empty optional members, and data after the object
//     (ErrDuplicateMember, ErrUnknownMember, ErrNull, ErrMissingMember,
//     ErrEmpty, ErrSyntax);
//  6. the v2 decoder fills the concrete struct on the same pooled
//     tokenizer, without checking names and UTF-8 again (ErrKind);
//  7. the field rules of docs/node-protocol.md are checked (ErrField,
//     ErrParameters, ErrResult).
//
// Every error is an *Error. On error the returned Frame is nil, with one
// exception: a request frame that passed steps 1-6 and whose envelope (id,
// sequence, connection_id, owner_epoch) is valid, but which breaks a field
// or parameter rule, is returned as its *Request together with the
// ErrField or ErrParameters error, so that the node can answer it with
// error_code "invalid" after its connection, epoch and sequence checks
// (spec "Provider requests": a malformed request receives an invalid
// response). Callers that do not answer requests treat any error as an
// invalid frame.
//
// Neither the frame nor the error keeps a reference to data: the caller
// may reuse data once Decode returns (the node hub decodes from a pooled
// read buffer; TestDecodeKeepsNoReferenceToItsInput).
//
// A heartbeat in the exact layout Encode writes is read by a path of its
// own (fast.go) that replaces steps 2-6 and accepts nothing the general
// path refuses, with an equal frame; any other heartbeat takes the
// general path.
func Decode(data []byte) (Frame, error) { return decode(data, true) }

// decode is Decode; fast false takes the general path for every frame
// (the reference the heartbeat's own path is tested against).
func decode(data []byte, fast bool) (Frame, error) {
	if len(data) > MaxRequestFrame {
		return nil, newError(ErrTooLarge, "", "a frame is at most 72 MiB")
	}
	typ, ok := canonicalHeader(data)
	if fast && ok && typ == TypeHeartbeat {
		// The most frequent frame, in the layout Encode writes: read
		// without the walk and the reflective fill (fast.go).
		if h, ok := decodeHeartbeatCanonical(data); ok {
			if err := h.validate(); err != nil {
				return nil, err
			}
			return h, nil
		}
	}
	st := decodeStates.Get().(*decodeState)
	defer st.release()
	if !ok {
		var err error
		if typ, err = scanHeader(st.reset(data), len(data)); err != nil {
			return nil, err
		}
	}

	st.w.d = st.reset(data)
	st.w.ptr = st.w.ptr[:0]
	if err := st.w.value(frameSchemas[typ], nil); err != nil {
		return nil, err
	}
	if _, err := st.w.d.ReadToken(); err != io.EOF {
		return nil, newError(ErrSyntax, "", "data after the top-level object")
	}

	// The walk above has checked the syntax, the UTF-8, unique and known
	// member names: the fill runs on the same pooled decoder without
	// tracking names again.
	f := newFrame(typ)
	st.buf = *bytes.NewBuffer(data)
	st.dec.Reset(&st.buf, fillOptions)
	if err := json.UnmarshalDecode(&st.dec, f, fillOptions); err != nil {
		return nil, valueError(err)
	}
	if err := validate(f); err != nil {
		if r, ok := f.(*Request); ok && r.envelopeValid() {
			return r, err
		}
		return nil, err
	}
	return f, nil
}

// PeekType returns the frame type (TypeResponse, …) named by the top-level
// "type" member of a frame whose first bytes are prefix, and true, when
// that member lies entirely within prefix and names a known frame type;
// otherwise "" and false (the prefix is not the start of a JSON object, or
// "type" comes later). A reader uses it to decide a frame's size limit
// from its first MaxControlFrame bytes, before reading the rest: Encode
// writes "version" and "type" first.
func PeekType(prefix []byte) (string, bool) {
	d := jsontext.NewDecoder(bytes.NewReader(prefix), tokenizerOptions)
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", false
	}
	for d.PeekKind() == '"' {
		tok, err := d.ReadToken()
		if err != nil {
			return "", false
		}
		if tok.String() != "type" {
			if err := d.SkipValue(); err != nil {
				return "", false
			}
			continue
		}
		v, err := d.ReadToken()
		if err != nil || v.Kind() != '"' {
			return "", false
		}
		typ := knownType([]byte(v.String()))
		return typ, typ != ""
	}
	return "", false
}

// canonicalHeaders are the first bytes Encode writes for each frame type,
// `{"version":1,"type":"<type>",`, with the type they name.
var canonicalHeaders = func() map[string]string {
	m := map[string]string{}
	for _, typ := range [...]string{TypeHello, TypeWelcome, TypeHeartbeat, TypeHeartbeatAck,
		TypeRequest, TypeResponse, TypeRetention, TypeRetentionAck} {
		m[`{"version":`+strconv.Itoa(ProtocolVersion)+`,"type":"`+typ+`",`] = typ
	}
	return m
}()

// canonicalHeader returns the type of a frame that starts with the header
// Encode writes and is within its type's size limit, and true; then
// scanHeader would find that type and no error, and the frame is read
// once less. Otherwise it returns "" and false, and scanHeader decides.
func canonicalHeader(data []byte) (string, bool) {
	const prefix = `{"version":`
	if len(data) < len(prefix) || string(data[:len(prefix)]) != prefix {
		return "", false
	}
	i := len(prefix) + len(`1,"type":"`)
	if i > len(data) {
		return "", false
	}
	for j := i; j < len(data) && j < i+16; j++ {
		if data[j] == '"' {
			if j+1 >= len(data) || data[j+1] != ',' {
				return "", false
			}
			typ, ok := canonicalHeaders[string(data[:j+2])]
			if !ok || (IsControlType(typ) && len(data) > MaxControlFrame) {
				return "", false
			}
			return typ, true
		}
	}
	return "", false
}

// scanHeader finds the top-level "type" and "version" of a frame of size
// bytes and checks them and the control-frame limit.
func scanHeader(d *jsontext.Decoder, size int) (string, error) {
	switch d.PeekKind() {
	case '{':
	case 0:
		_, err := d.ReadToken()
		return "", tokenError(err)
	default:
		return "", newError(ErrNotObject, "", "a frame is a JSON object")
	}
	if _, err := d.ReadToken(); err != nil {
		return "", tokenError(err)
	}
	var (
		typ            string
		haveType       bool
		haveVersion    bool
		versionProblem string
		nameBuf        [32]byte
		name           = nameBuf[:0]
	)
	for !(haveType && haveVersion) && d.PeekKind() != '}' {
		v, err := d.ReadValue()
		if err != nil {
			return "", tokenError(err)
		}
		if name, err = jsontext.AppendUnquote(name[:0], v); err != nil {
			return "", tokenError(err)
		}
		switch string(name) {
		case "type":
			if d.PeekKind() != '"' {
				if _, err := d.ReadValue(); err != nil {
					return "", tokenError(err)
				}
				return "", newError(ErrType, "/type", "type is not a string")
			}
			v, err := d.ReadValue()
			if err != nil {
				return "", tokenError(err)
			}
			if name, err = jsontext.AppendUnquote(name[:0], v); err != nil {
				return "", tokenError(err)
			}
			if typ = knownType(name); typ == "" {
				return "", newError(ErrType, "/type", "type names no frame")
			}
			if IsControlType(typ) && size > MaxControlFrame {
				return "", newError(ErrTooLarge, "", "a control frame is at most 32 KiB")
			}
			haveType = true
		case "version":
			v, err := d.ReadValue()
			if err != nil {
				return "", tokenError(err)
			}
			switch {
			case v.Kind() != '0':
				versionProblem = "version is not a number"
			case string(v) != strconv.Itoa(ProtocolVersion):
				versionProblem = "version is not " + strconv.Itoa(ProtocolVersion)
			}
			haveVersion = true
		default:
			if err := d.SkipValue(); err != nil {
				return "", tokenError(err)
			}
		}
	}
	if !haveType {
		if d.PeekKind() == 0 {
			_, err := d.ReadToken()
			return "", tokenError(err)
		}
		return "", newError(ErrType, "/type", "type is missing")
	}
	if !haveVersion {
		if d.PeekKind() == 0 {
			_, err := d.ReadToken()
			return "", tokenError(err)
		}
		return "", newError(ErrVersion, "/version", "version is missing")
	}
	if versionProblem != "" {
		return "", newError(ErrVersion, "/version", versionProblem)
	}
	return typ, nil
}

// tokenError maps a jsontext error to an *Error without its text (which may
// quote frame bytes).
func tokenError(err error) error {
	if err == nil {
		return nil
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		if errors.Is(se.Err, jsontext.ErrDuplicateName) {
			return newError(ErrDuplicateMember, string(se.JSONPointer), "member names must be unique")
		}
		return newError(ErrSyntax, string(se.JSONPointer), "malformed JSON at byte offset "+strconv.FormatInt(se.ByteOffset, 10))
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return newError(ErrSyntax, "", "unexpected end of data")
	}
	return newError(ErrSyntax, "", "malformed JSON")
}

// valueError maps a v2 unmarshal or marshal error to an *Error without its
// text.
func valueError(err error) error {
	var se *json.SemanticError
	if errors.As(err, &se) {
		if errors.Is(se.Err, json.ErrUnknownName) {
			return newError(ErrUnknownMember, string(se.JSONPointer), "the object defines no such member")
		}
		return newError(ErrKind, string(se.JSONPointer), "the value does not fit the member's type")
	}
	return tokenError(err)
}

// Encode validates f with the rules Decode applies and marshals it. It sets
// f's Version to ProtocolVersion and its Type to f.FrameType() first (so it
// writes to f: do not Encode a frame another goroutine reads). Map members
// are written in sorted order, so equal frames encode to equal bytes. A
// frame over its size limit is refused with ErrTooLarge; every error is an
// *Error, and anything Encode returns, Decode accepts.
func Encode(f Frame) ([]byte, error) {
	if err := prepareEncode(f); err != nil {
		return nil, err
	}
	if a, ok := f.(*HeartbeatAck); ok {
		return appendHeartbeatAck(nil, a), nil // far under its size limit
	}
	b, err := json.Marshal(f, encodeOptions)
	if err := checkEncoded(f, b, err); err != nil {
		return nil, err
	}
	return b, nil
}

// AppendEncode appends f's encoding, the bytes Encode returns, to dst and
// returns the extended slice, so that a caller can encode into a buffer
// it reuses. It writes to f and fails as Encode does; on error it returns
// dst with its length unchanged (the bytes past it may have been written).
func AppendEncode(dst []byte, f Frame) ([]byte, error) {
	if err := prepareEncode(f); err != nil {
		return dst, err
	}
	if a, ok := f.(*HeartbeatAck); ok {
		return appendHeartbeatAck(dst, a), nil // far under its size limit
	}
	buf := bytes.NewBuffer(dst) // writes append after dst's bytes
	err := json.MarshalWrite(buf, f, encodeOptions)
	b := buf.Bytes()
	if err := checkEncoded(f, b[len(dst):], err); err != nil {
		return dst, err
	}
	return b, nil
}

// prepareEncode sets f's header and checks f with the rules Decode
// applies (Encode's first two steps).
func prepareEncode(f Frame) error {
	if !setHeader(f) {
		return newError(ErrType, "", "not a frame, or a nil frame")
	}
	return validate(f)
}

// checkEncoded turns the marshaller's error into an *Error and refuses an
// encoding b over f's size limit.
func checkEncoded(f Frame, b []byte, err error) error {
	if err != nil {
		e := valueError(err).(*Error)
		e.Rule, e.Detail = ErrField, "the value cannot be encoded as JSON"
		return e
	}
	if len(b) > FrameLimit(f.FrameType()) {
		return newError(ErrTooLarge, "", "the encoded frame is over its size limit")
	}
	return nil
}

func setHeader(f Frame) bool {
	switch f := f.(type) {
	case *Hello:
		if f != nil {
			f.Version, f.Type = ProtocolVersion, TypeHello
			return true
		}
	case *Welcome:
		if f != nil {
			f.Version, f.Type = ProtocolVersion, TypeWelcome
			return true
		}
	case *Heartbeat:
		if f != nil {
			f.Version, f.Type = ProtocolVersion, TypeHeartbeat
			return true
		}
	case *HeartbeatAck:
		if f != nil {
			f.Version, f.Type = ProtocolVersion, TypeHeartbeatAck
			return true
		}
	case *Request:
		if f != nil {
			f.Version, f.Type = ProtocolVersion, TypeRequest
			return true
		}
	case *Response:
		if f != nil {
			f.Version, f.Type = ProtocolVersion, TypeResponse
			return true
		}
	case *Retention:
		if f != nil {
			f.Version, f.Type = ProtocolVersion, TypeRetention
			return true
		}
	case *RetentionAck:
		if f != nil {
			f.Version, f.Type = ProtocolVersion, TypeRetentionAck
			return true
		}
	}
	return false
}
