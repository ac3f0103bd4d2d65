// Package strictjson checks JSON request bodies before they are decoded,
// for the rules encoding/json does not enforce: exactly one value, no
// trailing data, and no duplicate object keys at any depth (encoding/json
// silently keeps the last, so "{"cidr":"a","cidr":"b"}" would lose "a").
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrInvalid wraps every error of Check.
var ErrInvalid = errors.New("invalid JSON")

// MaxDepth bounds nesting (objects and arrays), 32.
const MaxDepth = 32

// Check reports whether data is exactly one JSON value (surrounded by
// optional whitespace) with no duplicate keys in any object and at most
// MaxDepth levels of nesting. The error wraps ErrInvalid and gives the
// byte offset or the duplicated key.
func Check(data []byte) error { return check(data, false) }

// CheckFold is Check that also refuses two keys of one object that are
// equal under Unicode case folding ("egress" and "EGRESS"): encoding/json
// matches struct fields case-insensitively and keeps the last, so a body
// decoded into a struct would silently lose one of them.
func CheckFold(data []byte) error { return check(data, true) }

func check(data []byte, fold bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := value(dec, 0, fold); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after offset %d", ErrInvalid, dec.InputOffset())
	}
	return nil
}

func value(dec *json.Decoder, depth int, fold bool) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: at offset %d: %s", ErrInvalid, dec.InputOffset(), syntaxText(err))
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth >= MaxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrInvalid, MaxDepth)
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return fmt.Errorf("%w: at offset %d: %s", ErrInvalid, dec.InputOffset(), syntaxText(err))
			}
			k, _ := kt.(string)
			if fold {
				k = strings.ToLower(strings.ToUpper(k))
			}
			if seen[k] {
				return fmt.Errorf("%w: duplicate key %q", ErrInvalid, k)
			}
			seen[k] = true
			if err := value(dec, depth+1, fold); err != nil {
				return err
			}
		}
	case '[':
		for dec.More() {
			if err := value(dec, depth+1, fold); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%w: at offset %d: %s", ErrInvalid, dec.InputOffset(), syntaxText(err))
	}
	return nil
}

func syntaxText(err error) string {
	if err == io.EOF {
		return "unexpected end of input"
	}
	return err.Error()
}
