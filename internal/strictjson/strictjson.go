// Package strictjson holds sandgate's rules for strict JSON: exactly one
// well-formed value (RFC 8259, in UTF-8 with no unpaired surrogate
// escapes, RFC 7493 §2.1), member names exact (no case-insensitive match)
// and unique, no unknown members, no null except where allowed, and every
// required member present; and the one set of error classes for what
// breaks them (ErrMalformed, ErrNotObject, ErrDuplicateMember,
// ErrTooDeep). Errors name the rule, the byte offset or a JSON pointer;
// never a value.
//
// Three ways in, by what the caller decodes with:
//   - Decode, for small documents decoded whole (configuration answers,
//     manifests): it decodes the document twice (once generically to find
//     nulls and missing members, once into the target), so it is meant
//     for documents whose size the caller has already bounded.
//   - EachMember, the cheaper first half for many small records (the
//     credential files' records, a credential portal's answer): one
//     tokenizer pass over an object's top-level members, after which the
//     caller decodes once with Options.
//   - Check and CheckFold, for request bodies that are then decoded with
//     encoding/json (corectl's): they enforce before it what it does not
//     (one value, no trailing data, no duplicate keys at any depth, valid
//     UTF-8, bounded nesting).
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Options are the jsonv2 options of a strict decode: unknown members
// refused, case-sensitive names, duplicate names and invalid UTF-8
// refused.
var Options = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	jsonv2.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

// Schema lists what the generic walk checks.
type Schema struct {
	// Required lists the required members of each object, keyed by the
	// object's JSON pointer with array indices written "-" ("" is the top
	// level, "/artifacts/-" every element of the artifacts array).
	Required map[string][]string
	// Nullable lists the pointers (same form as Required's keys) whose
	// value may be null.
	Nullable map[string]bool
}

// Decode decodes b, one JSON object, into v. The error describes the
// first problem found: malformed JSON (wrapping ErrMalformed, with its
// byte offset), a value that is not an object (wrapping ErrNotObject), a
// duplicate member (wrapping ErrDuplicateMember), an unknown member, a
// null, a missing member or a value of the wrong kind, each with its JSON
// pointer.
func Decode(b []byte, v any, s Schema) error {
	var generic any
	if err := jsonv2.Unmarshal(b, &generic, Options); err != nil {
		return describe(b, err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return &classError{"the top-level value must be a JSON object", ErrNotObject}
	}
	if err := walk(generic, "", "", s); err != nil {
		return err
	}
	if err := jsonv2.Unmarshal(b, v, Options); err != nil {
		return describe(b, err)
	}
	return nil
}

// Members decodes b (already accepted by Decode) generically and returns
// its top-level members, for checks such as "present but empty".
func Members(b []byte) map[string]any {
	var m map[string]any
	_ = jsonv2.Unmarshal(b, &m, Options)
	return m
}

// IsEmpty reports whether a generically decoded value is "", [], {}, 0
// or false.
func IsEmpty(v any) bool {
	switch v := v.(type) {
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	case float64:
		return v == 0
	case bool:
		return !v
	}
	return false
}

func walk(v any, ptr, pattern string, s Schema) error {
	switch v := v.(type) {
	case nil:
		if s.Nullable[pattern] {
			return nil
		}
		if ptr == "" {
			return errors.New("null at the top level")
		}
		return fmt.Errorf("null at %s", ptr)
	case map[string]any:
		for _, m := range s.Required[pattern] {
			if _, ok := v[m]; !ok {
				return fmt.Errorf("missing member %s/%s", ptr, m)
			}
		}
		for k, e := range v {
			if err := walk(e, ptr+"/"+k, pattern+"/"+k, s); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := walk(e, fmt.Sprintf("%s/%d", ptr, i), pattern+"/-", s); err != nil {
				return err
			}
		}
	}
	return nil
}

// describe turns a jsonv2 error decoding b into one naming the JSON
// pointer and the rule, never a value; malformed JSON wraps ErrMalformed.
func describe(b []byte, err error) error {
	var se *jsonv2.SemanticError
	if errors.As(err, &se) {
		if errors.Is(se.Err, jsonv2.ErrUnknownName) {
			return fmt.Errorf("unknown member at %s", se.JSONPointer)
		}
		return fmt.Errorf("wrong JSON kind or value at %s", se.JSONPointer)
	}
	var te *jsontext.SyntacticError
	if errors.As(err, &te) && errors.Is(te.Err, jsontext.ErrDuplicateName) {
		return &classError{fmt.Sprintf("duplicate member at %s", te.JSONPointer), ErrDuplicateMember}
	}
	return malformed(locate(b, err))
}

// Encode returns v as deterministic JSON (map keys sorted) with a
// trailing newline: the form of the small records written with it.
func Encode(v any) ([]byte, error) {
	b, err := jsonv2.Marshal(v, jsonv2.Deterministic(true))
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// EachMember reads b, which must be exactly one JSON object (valid UTF-8,
// member names unique, nothing but white space after it), in one pass of
// the tokenizer, and calls member with each top-level member's name and
// raw value in document order. name is unescaped ("c\u0041" is "cA");
// value is only valid during the call; its Kind is 'n' for null, 't' or
// 'f', '"', '0', '{' or '['. b is read in place, neither modified nor kept
// after the call; EachMember is safe for concurrent use (its tokenizers
// come from a sync.Pool).
//
// It is the cheap half of a strict decode of many small records (the
// node and resource credential files, one call per record): the caller
// refuses unknown names and nulls in the callback, checks which required
// members it saw, and then decodes b once with jsonv2.Unmarshal and
// Options, instead of decoding it twice.
//
// Errors: member's first error, returned as it is; otherwise one of three
// classes, never quoting a value:
//   - ErrMalformed (wrapped, with the byte offset and what is wrong
//     there) when b is not one well-formed JSON text: empty, a syntax
//     error, truncated, invalid UTF-8, an unpaired surrogate escape such
//     as "\ud800" (jsontext's rules, RFC 8259 and RFC 7493), or data
//     after the value;
//   - ErrDuplicateMember (wrapped, with the JSON pointer of the second
//     occurrence: "/name", or "/name/inner" in a nested object) when a
//     name repeats in one object;
//   - ErrNotObject (wrapped, with the JSON kind the value has) when b is
//     one well-formed JSON value that is not an object.
//
// A fault inside a member's value is found when that member is read, after
// the callback has seen the members before it, so a callback's error about
// an earlier member comes first.
func EachMember(b []byte, member func(name string, value jsontext.Value) error) error {
	p := newDecoder(b, false)
	defer p.release()
	dec := &p.dec
	switch k := dec.PeekKind(); k {
	case '{':
		if _, err := dec.ReadToken(); err != nil {
			return Fault(b, err)
		}
	case 0: // PeekKind's answer to an error or the end of input
		_, err := dec.ReadToken()
		return Fault(b, err)
	default:
		if _, err := dec.ReadValue(); err != nil {
			return Fault(b, err)
		}
		if off, ok := trailing(dec); ok {
			return malformed(skipSpace(b, off), "data after the top-level value")
		}
		return fmt.Errorf("%w: the value is a JSON %s", ErrNotObject, KindName(k))
	}
	for {
		switch dec.PeekKind() {
		case '}':
			if _, err := dec.ReadToken(); err != nil {
				return Fault(b, err)
			}
			if off, ok := trailing(dec); ok {
				return malformed(skipSpace(b, off), "data after the top-level value")
			}
			return nil
		case '"':
		default:
			_, err := dec.ReadToken()
			return Fault(b, err)
		}
		tok, err := dec.ReadToken()
		if err != nil {
			return Fault(b, err)
		}
		name := tok.String() // before the next read voids tok
		value, err := dec.ReadValue()
		if err != nil {
			return Fault(b, err)
		}
		if err := member(name, value); err != nil {
			return err
		}
	}
}

// KindMismatch reports whether err, from jsonv2.Unmarshal with Options
// into a flat struct, is a top-level member whose value has the wrong JSON
// kind, and returns the member's name, the word for the kind it had
// (KindName) and the Go kind its field wants; never the value. ok is false
// for any other error.
func KindMismatch(err error) (member, got string, want reflect.Kind, ok bool) {
	var se *jsonv2.SemanticError
	if !errors.As(err, &se) || se.GoType == nil || se.JSONPointer == "" {
		return "", "", reflect.Invalid, false
	}
	return strings.TrimPrefix(string(se.JSONPointer), "/"), KindName(se.JSONKind), se.GoType.Kind(), true
}

// decoder is a reusable tokenizer and its input, for EachMember and Check.
type decoder struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

var decoders = sync.Pool{New: func() any { return new(decoder) }}

// newDecoder returns a pooled tokenizer reading b in place (a bytes.Buffer
// lets it read b without copying), refusing invalid UTF-8, and repeated
// names unless allowDuplicates. (No variadic options: appending to them
// cost an allocation per record.)
func newDecoder(b []byte, allowDuplicates bool) *decoder {
	p := decoders.Get().(*decoder)
	p.buf = *bytes.NewBuffer(b)
	p.dec.Reset(&p.buf, jsontext.AllowDuplicateNames(allowDuplicates), jsontext.AllowInvalidUTF8(false))
	return p
}

// release drops the decoder's references to the caller's bytes and pools it.
func (p *decoder) release() {
	p.buf = bytes.Buffer{}
	p.dec.Reset(&p.buf)
	decoders.Put(p)
}

// KindName is the word for a JSON value's kind in error messages:
// "null", "bool", "string", "number", "object" or "array" (the words
// encoding/json's UnmarshalTypeError used), never the value itself;
// "value" for any other Kind (the zero Kind a SemanticError may carry).
func KindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "bool"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
}
