package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

type member struct {
	name  string
	value string
}

func members(t *testing.T, b string) ([]member, error) {
	t.Helper()
	var got []member
	err := EachMember([]byte(b), func(name string, v jsontext.Value) error {
		got = append(got, member{name, string(v)})
		return nil
	})
	return got, err
}

// TestEachMemberInOrder: every top-level member, with its raw value, in
// document order; nested objects are values, not members.
func TestEachMemberInOrder(t *testing.T) {
	got, err := members(t, " {\"b\": 1, \"a\": {\"b\": null}, \"c\\u0041\": [true, \"x\"], \"d\": null}\n ")
	want := []member{{"b", "1"}, {"a", `{"b": null}`}, {"cA", `[true, "x"]`}, {"d", "null"}}
	if err != nil || len(got) != len(want) {
		t.Fatalf("EachMember = %v, %v; want %v", got, err, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("member %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got, err := members(t, "{}"); err != nil || len(got) != 0 {
		t.Errorf("empty object: %v, %v", got, err)
	}
}

// TestEachMemberRefuses: anything but one well-formed object with unique
// names is refused with its class (and the offset, pointer or kind), and
// the error quotes no value.
func TestEachMemberRefuses(t *testing.T) {
	cases := []struct {
		name, in string
		want     error
		text     string
	}{
		{"empty", "", ErrMalformed, "malformed JSON at byte 0: empty input"},
		{"white space", " \t\r\n", ErrMalformed, "malformed JSON at byte 0: empty input"},
		{"unterminated", `{"a": "secret`, ErrMalformed, "malformed JSON at byte 13: unexpected end of input"},
		{"unterminated object", `{"a": 1`, ErrMalformed, "malformed JSON at byte 7: unexpected end of input"},
		{"truncated array", `["secret"`, ErrMalformed, "malformed JSON at byte 9: unexpected end of input"},
		{"missing value", `{"a": }`, ErrMalformed, "malformed JSON at byte 6: syntax error"},
		{"bare word", `{"a": secret}`, ErrMalformed, "malformed JSON at byte 6: syntax error"},
		{"number name", `{1: 2}`, ErrMalformed, "malformed JSON at byte 1: syntax error"},
		{"trailing value", `{"a": 1} {}`, ErrMalformed, "malformed JSON at byte 9: data after the top-level value"},
		{"trailing garbage", `{"a": 1}x`, ErrMalformed, "malformed JSON at byte 8: data after the top-level value"},
		{"trailing after a non-object", `[1] x`, ErrMalformed, "malformed JSON at byte 4: data after the top-level value"},
		{"invalid UTF-8 in a value", "{\"a\": \"se\xffcret\"}", ErrMalformed, "malformed JSON at byte 9: invalid UTF-8"},
		{"invalid UTF-8 in a name", "{\"\xff\": 1}", ErrMalformed, "malformed JSON at byte 2: invalid UTF-8"},
		{"truncated UTF-8", "{\"a\": \"\xe2\x82\"}", ErrMalformed, "malformed JSON at byte 7: invalid UTF-8"},
		{"unpaired surrogate escape", `{"a": "\ud800secret"}`, ErrMalformed, "malformed JSON at byte 7: unpaired surrogate escape"},
		{"reversed surrogate pair", `{"a": "\udc00\ud800"}`, ErrMalformed, "malformed JSON at byte 7: unpaired surrogate escape"},
		{"invalid escape", `{"a": "\q"}`, ErrMalformed, "malformed JSON at byte 7: invalid escape sequence"},
		{"null", "null", ErrNotObject, "not a JSON object: the value is a JSON null"},
		{"number", " 1 ", ErrNotObject, "not a JSON object: the value is a JSON number"},
		{"array", `["secret"]`, ErrNotObject, "not a JSON object: the value is a JSON array"},
		{"string", `"secret"`, ErrNotObject, "not a JSON object: the value is a JSON string"},
		{"duplicate name", `{"a": "secret", "a": "secret"}`, ErrDuplicateMember, "duplicate member name at /a"},
		{"duplicate name by escape", `{"a": 1, "\u0061": 2}`, ErrDuplicateMember, "duplicate member name at /a"},
		{"duplicate name inside a value", `{"a": {"b": 1, "b": 2}}`, ErrDuplicateMember, "duplicate member name at /a/b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := members(t, tc.in)
			if classOf(t, err) != tc.want || err.Error() != tc.text {
				t.Fatalf("EachMember(%q) = %v, want %q (%v)", tc.in, err, tc.text, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q quotes a value", err)
			}
		})
	}
}

// TestDecodeClasses: Decode's malformed JSON has EachMember's class and
// words, a non-object and a repeated member their classes with Decode's
// own texts; never a value.
func TestDecodeClasses(t *testing.T) {
	var v struct {
		A string `json:"a"`
	}
	for in, want := range map[string]string{
		`{"a": "secret`:           "malformed JSON at byte 13: unexpected end of input",
		"{\"a\": \"se\xffcret\"}": "malformed JSON at byte 9: invalid UTF-8",
		`{"a": "\ud800secret"}`:   "malformed JSON at byte 7: unpaired surrogate escape",
		`{"a": "x"} {}`:           "malformed JSON at byte 11: data after the top-level value",
		``:                        "malformed JSON at byte 0: empty input",
	} {
		err := Decode([]byte(in), &v, Schema{})
		if !errors.Is(err, ErrMalformed) || err.Error() != want {
			t.Errorf("Decode(%q) = %v, want %q", in, err, want)
		}
	}
	if err := Decode([]byte(`["secret"]`), &v, Schema{}); classOf(t, err) != ErrNotObject || err.Error() != "the top-level value must be a JSON object" {
		t.Errorf("Decode(an array) = %v", err)
	}
	if err := Decode([]byte(`{"a": "x", "a": "secret"}`), &v, Schema{}); classOf(t, err) != ErrDuplicateMember || err.Error() != "duplicate member at /a" {
		t.Errorf("Decode(a repeated member) = %v", err)
	}
}

// classOf returns the one class err has (nil for nil), failing the test
// when it has none or more than one.
func classOf(t *testing.T, err error) error {
	t.Helper()
	if err == nil {
		return nil
	}
	var class error
	for _, c := range []error{ErrMalformed, ErrNotObject, ErrDuplicateMember, ErrTooDeep} {
		if errors.Is(err, c) {
			if class != nil {
				t.Fatalf("error %v is both %v and %v", err, class, c)
			}
			class = c
		}
	}
	if class == nil {
		t.Fatalf("error %v has no class", err)
	}
	return class
}

// jsontextClass is jsontext's judgement of b: ErrMalformed if it is not
// one well-formed JSON text even with duplicate names allowed,
// ErrDuplicateMember if it is but has a repeated name, else nil.
func jsontextClass(b []byte) error {
	switch {
	case !jsontext.Value(b).IsValid(jsontext.AllowDuplicateNames(true)):
		return ErrMalformed
	case !jsontext.Value(b).IsValid():
		return ErrDuplicateMember
	}
	return nil
}

// TestEachMemberStopsAtCallbackError: the callback's error comes back as
// it is and no later member is read.
func TestEachMemberStopsAtCallbackError(t *testing.T) {
	stop := errors.New("stop")
	var seen []string
	err := EachMember([]byte(`{"a": 1, "b": 2, "c": 3}`), func(name string, _ jsontext.Value) error {
		seen = append(seen, name)
		if name == "b" {
			return stop
		}
		return nil
	})
	if err != stop || strings.Join(seen, ",") != "a,b" {
		t.Fatalf("EachMember = %v after %v; want the callback's error after a,b", err, seen)
	}
}

// TestKindName: the words of encoding/json's type errors, never a value.
func TestKindName(t *testing.T) {
	for in, want := range map[string]string{`null`: "null", `true`: "bool", `false`: "bool", `"x"`: "string",
		`1.5`: "number", `{}`: "object", `[]`: "array"} {
		if got := KindName(jsontext.Value(in).Kind()); got != want {
			t.Errorf("KindName(%s) = %q, want %q", in, got, want)
		}
	}
	if got := KindName(0); got != "value" {
		t.Errorf("KindName(0) = %q, want \"value\"", got)
	}
}

// FuzzEachMember: EachMember accepts exactly what jsonv2 decodes as one
// object with unique names into a map, with the same members; refuses
// everything else with the class jsontext's own judgement gives it (a
// well-formed value that is not an object: ErrNotObject); and never
// panics.
func FuzzEachMember(f *testing.F) {
	for _, s := range []string{`{"a": 1, "b": [null, {"c": "d"}]}`, `{}`, `{"a": 1, "a": 2}`, `[1]`, `{"a": 1} x`, "{\"\xff\": 1}", `{"a": "\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := map[string]string{}
		n := 0
		err := EachMember(b, func(name string, v jsontext.Value) error {
			n++
			got[name] = string(v)
			return nil
		})
		class := classOf(t, err)
		want := jsontextClass(b)
		if want == nil && jsontext.Value(b).Kind() != '{' {
			want = ErrNotObject
		}
		// A repeated name ahead of a later malformation is reported first.
		if class != want && (class != ErrDuplicateMember || want != ErrMalformed) {
			t.Fatalf("EachMember(%q) = %v, want class %v", b, err, want)
		}
		var wantMembers map[string]jsontext.Value
		werr := jsonv2.Unmarshal(b, &wantMembers, Options)
		if werr == nil && wantMembers == nil {
			werr = errors.New("null") // jsonv2 takes null for an empty map; EachMember wants an object
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("EachMember = %v, jsonv2 = %v for %q", err, werr, b)
		}
		if err != nil {
			return
		}
		if n != len(wantMembers) || len(got) != len(wantMembers) {
			t.Fatalf("EachMember saw %d members (%d names), jsonv2 %d", n, len(got), len(wantMembers))
		}
		for k, v := range wantMembers {
			if g, ok := got[k]; !ok || !jsontext.Value(g).IsValid() || string(jsontext.Value(g).Clone()) != string(v.Clone()) {
				t.Fatalf("member %q = %q, jsonv2 %q", k, g, v)
			}
		}
	})
}

// TestEachMemberPooledDecoder: the pooled decoders are safe to share
// between goroutines (run with -race), leave the caller's bytes as they
// were (each input is overwritten after its call, so a decoder that wrote
// to or read from an earlier caller's bytes would show it), and a callback
// that panics does not leave a decoder mid-object in the pool.
func TestEachMemberPooledDecoder(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				in := fmt.Appendf(nil, `{"g": %d, "i": "%d", "n": {"x": [%d]}}`, g, i, i)
				before := bytes.Clone(in)
				var got []string
				err := EachMember(in, func(name string, v jsontext.Value) error {
					got = append(got, name+"="+string(v))
					return nil
				})
				want := fmt.Sprintf(`[g=%d i="%d" n={"x": [%d]}]`, g, i, i)
				if err != nil || fmt.Sprint(got) != want || !bytes.Equal(in, before) {
					t.Errorf("EachMember(%s) = %v, %v (input now %q); want %s", before, got, err, in, want)
					return
				}
				for k := range in {
					in[k] = 'x'
				}
			}
		})
	}
	wg.Wait()

	func() {
		defer func() { _ = recover() }()
		_ = EachMember([]byte(`{"a": 1, "b": 2}`), func(string, jsontext.Value) error { panic("callback") })
	}()
	for range 4 { // sync.Pool may hand back the decoder the panic released
		got, err := members(t, `{"c": 3}`)
		if err != nil || len(got) != 1 || got[0] != (member{"c", "3"}) {
			t.Fatalf("after a panicking callback: %v, %v", got, err)
		}
	}
}

// TestKindMismatch: a member of the wrong JSON kind is named with the
// kind it had and the Go kind wanted, never its value; other errors are
// not kind mismatches.
func TestKindMismatch(t *testing.T) {
	var v struct {
		G int64 `json:"g"`
	}
	err := jsonv2.Unmarshal([]byte(`{"g":"secret"}`), &v, Options)
	if m, got, want, ok := KindMismatch(err); !ok || m != "g" || got != "string" || want != reflect.Int64 {
		t.Fatalf("KindMismatch(%v) = %q %q %v %v", err, m, got, want, ok)
	}
	for _, err := range []error{nil, errors.New("other"), jsonv2.Unmarshal([]byte(`{"g":`), &v, Options)} {
		if _, _, _, ok := KindMismatch(err); ok {
			t.Errorf("KindMismatch(%v) = ok", err)
		}
	}
}
