package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// The classes of a refused input. Every error EachMember and Check return
// of their own wraps exactly one of them, and Decode's errors for
// malformed JSON wrap ErrMalformed. None quotes a value: jsontext's own
// error texts can (an invalid surrogate escape is quoted with the bytes
// after it), so they are never passed on.
var (
	// ErrMalformed: the input is not one well-formed JSON text (RFC 8259
	// §2 and §8.1, RFC 7493 §2.1): empty, a syntax error, truncated,
	// invalid UTF-8, an escape of an unpaired UTF-16 surrogate
	// ("\ud800", "\udc00"), or data after the value. EachMember and Decode
	// wrap it as "malformed JSON at byte 7: invalid UTF-8", the byte
	// offset where the fault is (the input's length when it ends early)
	// and one of the words of malformation's list.
	ErrMalformed = errors.New("malformed JSON")

	// ErrNotObject: the input is one well-formed JSON value, but not an
	// object (EachMember). Wrapped with the kind the value has ("not a
	// JSON object: the value is a JSON array", KindName's words).
	ErrNotObject = errors.New("not a JSON object")

	// ErrDuplicateMember: a member name appears twice in one object
	// (RFC 7493 §2.3). EachMember wraps it with the second occurrence's
	// JSON pointer ("duplicate member name at /a").
	ErrDuplicateMember = errors.New("duplicate member name")

	// ErrTooDeep: Check's input nests objects and arrays more than
	// MaxDepth levels deep.
	ErrTooDeep = errors.New("nested too deeply")
)

// classError is an error whose text is its own (the text a caller has
// always answered with) and whose class is one of the above.
type classError struct {
	text  string
	class error
}

func (e *classError) Error() string { return e.text }
func (e *classError) Unwrap() error { return e.class }

// Fault classifies err, an error of a jsontext.Decoder (or of
// jsonv2.Unmarshal) reading all of b from its start, for a caller that
// tokenizes b itself: a repeated name is ErrDuplicateMember at its JSON
// pointer ("duplicate member name at /nodes/0/a"), anything else
// ErrMalformed at its byte offset with locate's words ("malformed JSON at
// byte 16: unpaired surrogate escape"). Unlike err's own text, the result
// never quotes b.
func Fault(b []byte, err error) error {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return fmt.Errorf("%w at %s", ErrDuplicateMember, se.JSONPointer)
	}
	return malformed(locate(b, err))
}

// malformed is the ErrMalformed error for a fault at byte off.
func malformed(off int64, what string) error {
	return fmt.Errorf("%w at byte %d: %s", ErrMalformed, off, what)
}

// locate returns where in b the malformation err (from jsontext or jsonv2
// reading b) is, and what it is, read from b itself rather than from err's
// text (which may quote b): "empty input", "unexpected end of input",
// "data after the top-level value", "invalid UTF-8", "unpaired surrogate
// escape", "invalid escape sequence", or else "syntax error".
func locate(b []byte, err error) (off int64, what string) {
	off = int64(len(b))
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		off = min(max(se.ByteOffset, 0), off)
	}
	rest := b[off:]
	switch {
	case len(bytes.Trim(b, jsonSpace)) == 0:
		return 0, "empty input"
	case err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || len(rest) == 0:
		return off, "unexpected end of input"
	case off > 0 && jsontext.Value(b[:off]).IsValid(jsontext.AllowDuplicateNames(true)):
		return skipSpace(b, off), "data after the top-level value"
	case !utf8.FullRune(rest) || isInvalidRune(rest):
		return off, "invalid UTF-8"
	case isSurrogateEscape(rest):
		return off, "unpaired surrogate escape"
	case rest[0] == '\\':
		return off, "invalid escape sequence"
	}
	return off, "syntax error"
}

// jsonSpace is JSON's white space (RFC 8259 §2).
const jsonSpace = " \t\r\n"

// skipSpace returns the offset of the first byte at or after off in b that
// is not JSON white space.
func skipSpace(b []byte, off int64) int64 {
	return off + int64(len(b[off:])-len(bytes.TrimLeft(b[off:], jsonSpace)))
}

// isInvalidRune reports whether b starts with a byte that is not valid
// UTF-8.
func isInvalidRune(b []byte) bool {
	r, n := utf8.DecodeRune(b)
	return r == utf8.RuneError && n <= 1
}

// isSurrogateEscape reports whether b starts with a \u escape of a UTF-16
// surrogate (U+D800 to U+DFFF), which jsontext refuses unless it is the
// high half of a pair followed by the low half.
func isSurrogateEscape(b []byte) bool {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return false
		}
	}
	return utf16.IsSurrogate(r)
}

// trailing reads past the value dec has just read and reports whether
// anything but white space follows it, and if so the offset right after
// the value.
func trailing(dec *jsontext.Decoder) (off int64, found bool) {
	off = dec.InputOffset()
	if _, err := dec.ReadToken(); err == io.EOF {
		return 0, false
	}
	return off, true
}
