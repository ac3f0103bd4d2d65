package strictjson

import (
	"fmt"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxDepth bounds Check's nesting of objects and arrays: 32 levels.
const MaxDepth = 32

// Check checks a request body before encoding/json decodes it, for the
// rules encoding/json does not enforce: data must be exactly one
// well-formed JSON value (surrounded by optional white space; no trailing
// data), valid UTF-8 without unpaired surrogate escapes (encoding/json
// would turn each into U+FFFD, so two different bodies would decode as
// one), with no duplicate keys in any object (encoding/json silently keeps
// the last, so {"cidr":"a","cidr":"b"} would lose "a") and at most
// MaxDepth levels of nesting. Any kind of value passes: the caller says
// what it wants instead.
//
// Every error's text starts "invalid JSON: " (the answer corectl's
// request bodies have always given) and it wraps ErrMalformed ("invalid
// JSON: at offset 7: invalid UTF-8", locate's words, or "invalid JSON:
// trailing data after offset 2", the end of the value),
// ErrDuplicateMember ("invalid JSON: duplicate key "cidr"") or ErrTooDeep
// ("invalid JSON: nested deeper than 32"); it never quotes a value.
func Check(data []byte) error { return check(data, false) }

// CheckFold is Check that also refuses two keys of one object that are
// equal under Unicode case folding ("egress" and "EGRESS", "k" and the
// Kelvin sign): encoding/json matches struct fields case-insensitively and
// keeps the last, so a body decoded into a struct would silently lose one
// of them. The duplicate error names the folded key.
func CheckFold(data []byte) error { return check(data, true) }

func check(data []byte, fold bool) error {
	// Duplicates are found here rather than by jsontext, which cannot
	// fold case.
	p := newDecoder(data, true)
	defer p.release()
	c := checker{dec: &p.dec, data: data, fold: fold}
	if err := c.value(0); err != nil {
		return err
	}
	if off, ok := trailing(c.dec); ok {
		return &classError{fmt.Sprintf("invalid JSON: trailing data after offset %d", off), ErrMalformed}
	}
	return nil
}

// checker walks one value for Check.
type checker struct {
	dec  *jsontext.Decoder
	data []byte
	fold bool
}

// value reads one value at nesting depth (0: the top level).
func (c *checker) value(depth int) error {
	tok, err := c.dec.ReadToken()
	if err != nil {
		return c.fault(err)
	}
	var end jsontext.Kind
	switch tok.Kind() {
	case '{':
		end = '}'
	case '[':
		end = ']'
	default:
		return nil
	}
	if depth >= MaxDepth {
		return &classError{fmt.Sprintf("invalid JSON: nested deeper than %d", MaxDepth), ErrTooDeep}
	}
	var seen map[string]bool
	if end == '}' {
		seen = map[string]bool{}
	}
	for {
		switch c.dec.PeekKind() {
		case end:
			if _, err := c.dec.ReadToken(); err != nil {
				return c.fault(err)
			}
			return nil
		case 0: // PeekKind's answer to an error or the end of input
			_, err := c.dec.ReadToken()
			return c.fault(err)
		}
		if seen != nil {
			name, err := c.dec.ReadToken()
			if err != nil {
				return c.fault(err)
			}
			k := name.String()
			if c.fold {
				k = strings.ToLower(strings.ToUpper(k))
			}
			if seen[k] {
				return &classError{fmt.Sprintf("invalid JSON: duplicate key %q", k), ErrDuplicateMember}
			}
			seen[k] = true
		}
		if err := c.value(depth + 1); err != nil {
			return err
		}
	}
}

// fault is Check's error for a malformation err.
func (c *checker) fault(err error) error {
	off, what := locate(c.data, err)
	return &classError{fmt.Sprintf("invalid JSON: at offset %d: %s", off, what), ErrMalformed}
}
