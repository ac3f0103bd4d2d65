package credential

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/sandgate/sandgate/internal/listfile"
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
// validates it. Used by both the file and the HTTP source.
func decodeCredential(raw []byte) (Credential, error) {
	var fields map[string]json.RawMessage
	if err := strictJSON(raw, &fields); err != nil || fields == nil {
		return Credential{}, fmt.Errorf("%w: not a JSON object", ErrInvalid)
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !fieldNames[k] {
			return Credential{}, fmt.Errorf("%w: unknown field %q", ErrInvalid, k)
		}
		if string(bytes.TrimSpace(fields[k])) == "null" {
			return Credential{}, fmt.Errorf("%w: field %s is null", ErrInvalid, k)
		}
	}
	var c Credential
	if err := strictJSON(raw, &c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Credential{}, fmt.Errorf("%w: field %s is a JSON %s, want %s", ErrInvalid, te.Field, te.Value, jsonKind(te.Type.Kind().String()))
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

// strictJSON decodes exactly one JSON value from data into v, refusing
// unknown struct fields and trailing data.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after JSON value")
	}
	return nil
}
