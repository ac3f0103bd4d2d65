// Package strictjsontest holds the request bodies that break each rule of
// strictjson.Check, with the class and the text of the error Check gives
// them, and well-formed bodies that are not objects: the table every
// caller of Check tests its own answers with, so each shows that
// malformed JSON and a well-formed non-object get different errors.
package strictjsontest

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/strictjson"
)

// Secret is the value hidden in every body of Refused and NotObjects: an
// error that contains it quotes the body.
const Secret = "secret-DO-NOT-ECHO"

// Body is a request body and what strictjson.Check says of it.
type Body struct {
	// Name says which rule the body breaks.
	Name string
	// Body is the request body.
	Body []byte
	// Class is the strictjson class of Check's error: ErrMalformed,
	// ErrDuplicateMember or ErrTooDeep.
	Class error
	// Text is the text of Check's error.
	Text string
}

// Refused returns one body for each kind of input Check refuses, with its
// error (all but an empty body, which several callers take as "nothing
// given"). Each call returns new slices.
func Refused() []Body {
	deep := strings.Repeat("[", strictjson.MaxDepth+1) + `"` + Secret + `"` + strings.Repeat("]", strictjson.MaxDepth+1)
	return []Body{
		{"truncated", []byte(`{"a":"` + Secret), strictjson.ErrMalformed, "invalid JSON: at offset 24: unexpected end of input"},
		{"syntax error", []byte(`{"a" "` + Secret + `"}`), strictjson.ErrMalformed, "invalid JSON: at offset 5: syntax error"},
		{"bare word", []byte(`{"a":` + Secret + `}`), strictjson.ErrMalformed, "invalid JSON: at offset 5: syntax error"},
		{"invalid UTF-8", []byte(`{"a":"sec` + "\xff" + Secret[3:] + `"}`), strictjson.ErrMalformed, "invalid JSON: at offset 9: invalid UTF-8"},
		{"unpaired surrogate", []byte(`{"a":"\ud800` + Secret + `"}`), strictjson.ErrMalformed, "invalid JSON: at offset 6: unpaired surrogate escape"},
		{"trailing data", []byte(`{"a":"` + Secret + `"} {}`), strictjson.ErrMalformed, "invalid JSON: trailing data after offset 26"},
		{"duplicate key", []byte(`{"a":"` + Secret + `","a":"x"}`), strictjson.ErrDuplicateMember, `invalid JSON: duplicate key "a"`},
		{"too deep", []byte(deep), strictjson.ErrTooDeep, "invalid JSON: nested deeper than 32"},
	}
}

// NotObjects returns well-formed bodies that are not JSON objects (null
// left out: several callers take it as "nothing given"), which Check
// passes and the caller must refuse as not an object.
func NotObjects() [][]byte {
	return [][]byte{[]byte(`["` + Secret + `"]`), []byte(`"` + Secret + `"`), []byte(`12`), []byte(`true`)}
}

// Answers tests a caller of strictjson.Check against the table: answer
// returns the caller's error for a request body. Each body of Refused must
// get an error that wraps the body's Class and reads prefix + Text; each
// of NotObjects one that wraps none of strictjson's classes and reads
// notObject; no error may quote Secret.
func Answers(t *testing.T, answer func(body []byte) error, prefix, notObject string) {
	t.Helper()
	for _, b := range Refused() {
		err := answer(b.Body)
		if err != nil && strings.Contains(err.Error(), Secret) {
			t.Errorf("%s: answer(%q) = %q quotes the body", b.Name, b.Body, err)
		}
		if !errors.Is(err, b.Class) || err.Error() != prefix+b.Text {
			t.Errorf("%s: answer(%q) = %v; want %q wrapping %v", b.Name, b.Body, err, prefix+b.Text, b.Class)
		}
	}
	for _, body := range NotObjects() {
		err := answer(body)
		if err == nil || err.Error() != notObject {
			t.Errorf("answer(%s) = %v; want %q", body, err, notObject)
			continue
		}
		for _, class := range []error{strictjson.ErrMalformed, strictjson.ErrDuplicateMember, strictjson.ErrTooDeep, strictjson.ErrNotObject} {
			if errors.Is(err, class) {
				t.Errorf("answer(%s) = %v wraps %v", body, err, class)
			}
		}
	}
}
