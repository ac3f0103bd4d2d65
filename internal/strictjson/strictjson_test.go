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
// names is refused with its class, before or after the callback has seen
// the members ahead of the problem, and the error quotes no value.
func TestEachMemberRefuses(t *testing.T) {
	cases := []struct {
		name, in string
		want     error
	}{
		{"empty", "", ErrNotObject},
		{"null", "null", ErrNotObject},
		{"number", "1", ErrNotObject},
		{"array", `["secret"]`, ErrNotObject},
		{"string", `"secret"`, ErrNotObject},
		{"unterminated", `{"a": "secret"`, ErrNotObject},
		{"missing value", `{"a": }`, ErrNotObject},
		{"trailing value", `{"a": 1} {}`, ErrNotObject},
		{"trailing garbage", `{"a": 1}x`, ErrNotObject},
		{"invalid UTF-8 in a value", "{\"a\": \"\xff\"}", ErrNotObject},
		{"invalid UTF-8 in a name", "{\"\xff\": 1}", ErrNotObject},
		{"unpaired surrogate escape", `{"a": "\ud800"}`, ErrNotObject},
		{"reversed surrogate pair", `{"a": "\udc00\ud800"}`, ErrNotObject},
		{"duplicate name inside a value", `{"a": {"b": 1, "b": 2}}`, ErrNotObject},
		{"duplicate name", `{"a": "secret", "a": "secret"}`, ErrDuplicateMember},
		{"duplicate name by escape", `{"a": 1, "\u0061": 2}`, ErrDuplicateMember},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := members(t, tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("EachMember(%q) = %v, want %v", tc.in, err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q quotes a value", err)
			}
		})
	}
	if _, err := members(t, `{"a": 1, "a": 2}`); err == nil || !strings.Contains(err.Error(), "/a") {
		t.Errorf("duplicate error %v does not name the member", err)
	}
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
// object with unique names into a map, with the same members, and never
// panics.
func FuzzEachMember(f *testing.F) {
	for _, s := range []string{`{"a": 1, "b": [null, {"c": "d"}]}`, `{}`, `{"a": 1, "a": 2}`, `[1]`, `{"a": 1} x`, "{\"\xff\": 1}"} {
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
		var want map[string]jsontext.Value
		werr := jsonv2.Unmarshal(b, &want, Options)
		if werr == nil && want == nil {
			werr = errors.New("null") // jsonv2 takes null for an empty map; EachMember wants an object
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("EachMember = %v, jsonv2 = %v for %q", err, werr, b)
		}
		if err != nil {
			if !errors.Is(err, ErrNotObject) && !errors.Is(err, ErrDuplicateMember) {
				t.Fatalf("error %v is neither class", err)
			}
			return
		}
		if n != len(want) || len(got) != len(want) {
			t.Fatalf("EachMember saw %d members (%d names), jsonv2 %d", n, len(got), len(want))
		}
		for k, v := range want {
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
