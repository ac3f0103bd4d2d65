// Package strictjson decodes small JSON documents (configuration answers,
// manifests, request bodies of a few KiB, the credential files' records)
// as strictly as the node frame codec: exactly one top-level object,
// member names exact (no case-insensitive match) and unique, no unknown
// members, no null except where allowed, and every required member
// present. Errors name the rule and, where there is one, a JSON pointer;
// never a value.
//
// Decode decodes the document twice (once generically to find nulls and
// missing members, once into the target), so it is meant for documents
// whose size the caller has already bounded. EachMember is the cheaper
// first half for many small records: one tokenizer pass over an object's
// top-level members, after which the caller decodes once with Options.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
// first problem found: malformed JSON (with its byte offset), a
// duplicate or unknown member, a null, a missing member or a value of the
// wrong kind, each with its JSON pointer.
func Decode(b []byte, v any, s Schema) error {
	var generic any
	if err := jsonv2.Unmarshal(b, &generic, Options); err != nil {
		return Describe(err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return errors.New("the top-level value must be a JSON object")
	}
	if err := walk(generic, "", "", s); err != nil {
		return err
	}
	if err := jsonv2.Unmarshal(b, v, Options); err != nil {
		return Describe(err)
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

// Describe turns a jsonv2 decoding error into one naming the JSON pointer
// and the rule, never a value.
func Describe(err error) error {
	var se *jsonv2.SemanticError
	if errors.As(err, &se) {
		if errors.Is(se.Err, jsonv2.ErrUnknownName) {
			return fmt.Errorf("unknown member at %s", se.JSONPointer)
		}
		return fmt.Errorf("wrong JSON kind or value at %s", se.JSONPointer)
	}
	var te *jsontext.SyntacticError
	if errors.As(err, &te) {
		if errors.Is(te.Err, jsontext.ErrDuplicateName) {
			return fmt.Errorf("duplicate member at %s", te.JSONPointer)
		}
		return fmt.Errorf("malformed JSON near byte %d", te.ByteOffset)
	}
	return errors.New("malformed JSON")
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

// ErrNotObject is returned by EachMember when its input is not exactly one
// well-formed JSON object.
var ErrNotObject = errors.New("not a JSON object")

// ErrDuplicateMember is returned by EachMember when a member name appears
// twice in the object.
var ErrDuplicateMember = errors.New("duplicate member name")

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
// Errors: member's first error, returned as it is; ErrDuplicateMember
// (wrapped, with the member's JSON pointer, "/name") when a top-level name
// repeats; ErrNotObject when b is not one well-formed JSON object, which
// includes a fault inside a member's value (a repeated name in a nested
// object, invalid UTF-8, an unpaired surrogate escape such as "\ud800":
// jsontext's rules, RFC 8259 and RFC 7493), found when that member is
// read, after the callback has seen the members before it.
func EachMember(b []byte, member func(name string, value jsontext.Value) error) error {
	// A bytes.Buffer lets the tokenizer read b in place instead of
	// copying it; the decoder is reused across calls.
	p := memberDecoders.Get().(*memberDecoder)
	defer p.release()
	p.buf = *bytes.NewBuffer(b)
	p.dec.Reset(&p.buf, jsontext.AllowDuplicateNames(false), jsontext.AllowInvalidUTF8(false))
	dec := &p.dec
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return ErrNotObject
	}
	for {
		switch dec.PeekKind() {
		case '}':
			if _, err := dec.ReadToken(); err != nil {
				return ErrNotObject
			}
			if _, err := dec.ReadToken(); err != io.EOF {
				return ErrNotObject
			}
			return nil
		case '"':
		default:
			return ErrNotObject
		}
		tok, err := dec.ReadToken()
		if err != nil {
			var se *jsontext.SyntacticError
			if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
				return fmt.Errorf("%w at %s", ErrDuplicateMember, se.JSONPointer)
			}
			return ErrNotObject
		}
		name := tok.String() // before the next read voids tok
		value, err := dec.ReadValue()
		if err != nil {
			return ErrNotObject
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

// memberDecoder is EachMember's reusable tokenizer and its input.
type memberDecoder struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

var memberDecoders = sync.Pool{New: func() any { return new(memberDecoder) }}

// release drops the decoder's references to the caller's bytes and pools it.
func (p *memberDecoder) release() {
	p.buf = bytes.Buffer{}
	p.dec.Reset(&p.buf)
	memberDecoders.Put(p)
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
