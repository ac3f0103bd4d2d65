package credential

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"sigs.k8s.io/yaml"
)

// MaxFileSize is the largest credential file OpenFile and reloads accept,
// in bytes (16 MiB).
const MaxFileSize = 16 << 20

// parse decodes a credential file: JSON or YAML (sigs.k8s.io/yaml accepts
// both; YAML duplicate mapping keys are refused), shaped
// {"credentials": [ {Credential}, ... ]}. Decoding is strict: the top level
// must be a mapping with exactly the key "credentials" holding a list;
// every element must be a mapping whose keys are exactly (case-sensitively)
// Credential's JSON names, with non-null values of the right JSON type
// (YAML numbers are not accepted for string fields: quote them); each
// Credential must pass Validate and IDs must be unique. Errors wrap
// ErrInvalid and locate the problem by index and field name, never by value.
func parse(data []byte) (map[string]Credential, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxFileSize)
	}
	// YAMLToJSONStrict keeps scalars' YAML types (no coercion towards a Go
	// target), so `id: 12` stays a number and is refused below.
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%w: not valid JSON or YAML: %s", ErrInvalid, err.Error())
	}
	var top map[string]json.RawMessage
	if err := strictJSON(j, &top); err != nil || top == nil {
		return nil, fmt.Errorf("%w: top level must be a mapping with a credentials list", ErrInvalid)
	}
	for k := range top {
		if k != "credentials" {
			return nil, fmt.Errorf("%w: unknown top-level field %q", ErrInvalid, k)
		}
	}
	list, ok := top["credentials"]
	if !ok {
		return nil, fmt.Errorf("%w: missing top-level field \"credentials\"", ErrInvalid)
	}
	var items []json.RawMessage
	if err := strictJSON(list, &items); err != nil || items == nil {
		return nil, fmt.Errorf("%w: credentials must be a list", ErrInvalid)
	}
	out := make(map[string]Credential, len(items))
	first := make(map[string]int, len(items))
	for i, raw := range items {
		c, err := decodeCredential(raw)
		if err != nil {
			return nil, fmt.Errorf("credentials[%d]: %w", i, err)
		}
		if j, dup := first[c.ID]; dup {
			return nil, fmt.Errorf("%w: credentials[%d] repeats the id of credentials[%d]", ErrInvalid, i, j)
		}
		first[c.ID] = i
		out[c.ID] = c
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
