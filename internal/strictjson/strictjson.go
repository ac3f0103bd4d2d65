// Package strictjson decodes small JSON documents (configuration answers,
// manifests, request bodies of a few KiB) as strictly as the node frame
// codec: exactly one top-level object, member names exact (no
// case-insensitive match) and unique, no unknown members, no null except
// where allowed, and every required member present. Errors name a JSON
// pointer and the rule, never a value.
//
// It decodes the document twice (once generically to find nulls and
// missing members, once into the target), so it is meant for documents
// whose size the caller has already bounded.
package strictjson

import (
	"errors"
	"fmt"

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
