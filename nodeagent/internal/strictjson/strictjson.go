// Package strictjson decodes nodeagent's small private records (lease
// identity, preparation plan, provider configuration, reclamation journal,
// dropped marker, node identity) strictly: one JSON object, exact and
// unique member names, no unknown members, no null anywhere, valid UTF-8,
// nothing after the object. Callers bound the input's size before calling
// (records are read with a limit) and check their own field rules after.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

var (
	decodeOptions = json.JoinOptions(
		json.RejectUnknownMembers(true),
		json.MatchCaseInsensitiveNames(false),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false),
	)
	encodeOptions = json.JoinOptions(
		json.Deterministic(true),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false),
	)
)

// Unmarshal decodes b, which must hold exactly one JSON object, into v.
// Errors name the JSON pointer and the rule, never a value: "null at
// /x", "unknown member at /x", "duplicate member at /x", "wrong JSON kind
// or value at /x", "malformed JSON near byte N", "not an object".
func Unmarshal(b []byte, v any) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b), decodeOptions)
	first := true
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return describe(err)
		}
		if first && tok.Kind() != '{' {
			return errors.New("not an object")
		}
		first = false
		if tok.Kind() == 'n' {
			return fmt.Errorf("null at %s", dec.StackPointer())
		}
		if dec.StackDepth() == 0 {
			// The top-level object ended; anything after it is an error.
			if _, err := dec.ReadToken(); err != io.EOF {
				return errors.New("data after the object")
			}
			break
		}
	}
	if first {
		return errors.New("empty document")
	}
	if err := json.Unmarshal(b, v, decodeOptions); err != nil {
		return describe(err)
	}
	return nil
}

// Marshal encodes v deterministically (sorted map keys) with a trailing
// newline.
func Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v, encodeOptions)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// describe turns a decoding error into a message with the JSON pointer and
// the rule, never a value.
func describe(err error) error {
	var se *json.SemanticError
	if errors.As(err, &se) {
		if errors.Is(se.Err, json.ErrUnknownName) {
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
