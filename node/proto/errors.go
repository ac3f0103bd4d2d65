package proto

import (
	"errors"
	"strconv"
)

// The rules a frame can break. Decode and Encode return every refusal as an
// *Error whose Rule is one of these sentinels, so callers test the rule with
// errors.Is(err, ErrNull) and so on. Each rule is a reason to close the
// connection (spec "Frames and version": an invalid frame closes the
// connection), except that a request frame refused only by ErrField or
// ErrParameters is answered with error_code "invalid" (see Decode).
var (
	// ErrTooLarge: the frame is over its size limit (MaxRequestFrame for
	// any frame, MaxControlFrame for a control frame). Pointer is "".
	ErrTooLarge = errors.New("frame too large")
	// ErrSyntax: the data is not one well-formed JSON text in UTF-8 (this
	// includes data after the top-level object). Pointer locates the
	// error where the tokenizer knows it.
	ErrSyntax = errors.New("invalid JSON syntax")
	// ErrNotObject: the top-level JSON value is not an object. Pointer is "".
	ErrNotObject = errors.New("frame is not a JSON object")
	// ErrVersion: "version" is missing, not a JSON number, or not exactly
	// ProtocolVersion (written as the literal 1). There is no fallback.
	// Pointer is "/version".
	ErrVersion = errors.New("unsupported protocol version")
	// ErrType: "type" is missing, not a string, or names no frame type; or
	// Encode was given a nil frame. Pointer is "/type" (or "" for Encode).
	ErrType = errors.New("unknown frame type")
	// ErrUnknownMember: an object has a member its type does not define,
	// including a case-variant alias of a defined member ("Node_ID" for
	// "node_id"). Pointer names the member.
	ErrUnknownMember = errors.New("unknown member")
	// ErrDuplicateMember: an object has the same member name twice (after
	// unescaping). Pointer names the member.
	ErrDuplicateMember = errors.New("duplicate member")
	// ErrNull: a member is null; only Deployment.serving_generation may be.
	// Pointer names the member or array element.
	ErrNull = errors.New("unexpected null")
	// ErrMissingMember: a required member (one without omitempty/omitzero
	// in frames.go) is absent. Pointer names the missing member.
	ErrMissingMember = errors.New("missing required member")
	// ErrEmpty: an optional member is present with an empty value ("",
	// [], {}, or false/0 for omitzero members); Encode omits such members,
	// so Decode refuses them. Pointer names the member.
	ErrEmpty = errors.New("empty optional member")
	// ErrKind: a member has the wrong JSON kind for its Go type, or a
	// number or string that does not fit it (fraction or exponent in an
	// integer, integer overflow, negative unsigned, bad base64 or RFC 3339
	// time). Pointer names the member.
	ErrKind = errors.New("wrong JSON kind or unrepresentable value")
	// ErrField: a member breaks its field rule (format, range, enum,
	// count, cross-member consistency). Pointer names the member; Detail
	// names the rule.
	ErrField = errors.New("field rule violated")
	// ErrParameters: a request's parameter members are not exactly those
	// its operation names (spec operation table): Pointer names the
	// missing or extra parameter.
	ErrParameters = errors.New("request parameters do not match the operation")
	// ErrResult: a response's result members do not have the shape of a
	// success or failure (more than one result, a result on a failure other
	// than an info receipt, unsupported evidence missing or misplaced), or
	// (Response.ValidateFor) not the result of the request's operation.
	// Pointer names the offending member.
	ErrResult = errors.New("response result shape violated")
)

// Error is the error Decode, Encode and Response.ValidateFor return. Its
// text holds the rule, the JSON pointer and a fixed detail, never a member
// value: frames carry environment variables and command output.
type Error struct {
	// Rule is one of the sentinels above (ErrTooLarge … ErrResult).
	Rule error
	// Pointer is the RFC 6901 JSON pointer of the offending member ("" for
	// the whole frame). Member names in it come from the frame, values
	// never do.
	Pointer string
	// Detail is a fixed explanation of the rule that was broken.
	Detail string
}

// maxPointerInText bounds how much of Pointer Error() prints.
const maxPointerInText = 256

// Error returns "proto: <rule> at <quoted pointer>: <detail>".
func (e *Error) Error() string {
	p := e.Pointer
	if len(p) > maxPointerInText {
		p = p[:maxPointerInText] + "…"
	}
	s := "proto: " + e.Rule.Error() + " at " + strconv.Quote(p)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns Rule, so errors.Is(err, ErrField) works.
func (e *Error) Unwrap() error { return e.Rule }

func newError(rule error, pointer, detail string) *Error {
	return &Error{Rule: rule, Pointer: pointer, Detail: detail}
}

func fieldErr(pointer, detail string) error { return newError(ErrField, pointer, detail) }

// under prefixes the pointer of an *Error found below prefix.
func under(err error, prefix string) error {
	if e, ok := err.(*Error); ok {
		e.Pointer = prefix + e.Pointer
	}
	return err
}

// underIndex prefixes the pointer of an *Error found in element i of the
// array prefix.
func underIndex(err error, prefix string, i int) error {
	return under(err, prefix+"/"+strconv.Itoa(i))
}

// appendPointerToken appends "/" and name escaped per RFC 6901.
func appendPointerToken(b []byte, name []byte) []byte {
	b = append(b, '/')
	for _, c := range name {
		switch c {
		case '~':
			b = append(b, '~', '0')
		case '/':
			b = append(b, '~', '1')
		default:
			b = append(b, c)
		}
	}
	return b
}
