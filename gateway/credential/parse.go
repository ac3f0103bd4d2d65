package credential

import (
	"errors"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sandgate/sandgate/internal/listfile"
	"github.com/sandgate/sandgate/internal/strictjson"
)

// MaxFileSize is the largest credential file OpenFile and reloads accept,
// in bytes (16 MiB).
const MaxFileSize = 16 << 20

// parse decodes a credential file: JSON or YAML shaped
// {"credentials": [ {Credential}, ... ]}, one credential at a time
// (package listfile: JSON streamed, a YAML block list item by item, so a
// parse holds the file and the credentials but no copy of the whole
// document). Decoding is strict: the top level must be a mapping with
// exactly the key "credentials" holding a list; every element must be a
// mapping whose keys are exactly (case-sensitively) Credential's JSON
// names, unique, with non-null values of the right JSON type (YAML numbers
// are not accepted for string fields: quote them); each Credential must
// pass Validate and IDs must be unique. Errors wrap ErrInvalid and locate
// the problem by index and field name, never by value.
func parse(data []byte) (map[string]Credential, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxFileSize)
	}
	out := map[string]Credential{}
	first := map[string]int{}
	err := listfile.Parse(data, listfile.Format{Key: "credentials", Noun: "field", Invalid: ErrInvalid},
		func(i int, raw []byte) error {
			c, err := decodeCredential(raw)
			if err != nil {
				return fmt.Errorf("credentials[%d]: %w", i, err)
			}
			if j, dup := first[c.ID]; dup {
				return fmt.Errorf("%w: credentials[%d] repeats the id of credentials[%d]", ErrInvalid, i, j)
			}
			first[c.ID] = i
			out[c.ID] = c
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decodeCredential strictly decodes one JSON object into a Credential and
// validates it, in one pass of the tokenizer (unknown and null fields
// refused in document order) and one typed decode. Used by both the file
// and the HTTP source. Errors wrap ErrInvalid and name the field, never its
// value; a body that is not one well-formed JSON object also wraps
// strictjson's class (ErrMalformed with the byte offset, ErrNotObject with
// the kind it is, ErrDuplicateMember with the pointer).
func decodeCredential(raw []byte) (Credential, error) {
	err := strictjson.EachMember(raw, func(name string, v jsontext.Value) error {
		if !fieldNames[name] {
			return fmt.Errorf("%w: unknown field %q", ErrInvalid, name)
		}
		if v.Kind() == 'n' {
			return fmt.Errorf("%w: field %s is null", ErrInvalid, name)
		}
		return nil
	})
	switch {
	case errors.Is(err, strictjson.ErrMalformed), errors.Is(err, strictjson.ErrNotObject), errors.Is(err, strictjson.ErrDuplicateMember):
		return Credential{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	case err != nil:
		return Credential{}, err
	}
	var c Credential
	if err := jsonv2.Unmarshal(raw, &c, strictjson.Options); err != nil {
		if f, got, want, ok := strictjson.KindMismatch(err); ok {
			return Credential{}, fmt.Errorf("%w: field %s is a JSON %s, want %s", ErrInvalid, f, got, jsonKind(want.String()))
		}
		return Credential{}, fmt.Errorf("%w: undecodable credential object", ErrInvalid)
	}
	if err := c.Validate(); err != nil {
		return Credential{}, err
	}
	return c, nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	default:
		return goKind
	}
}
