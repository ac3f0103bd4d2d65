package strictjson

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckAcceptsOneValue(t *testing.T) {
	for _, in := range []string{`{}`, ` {"a":[1,{"b":null}],"c":"x"} `, `[]`, `"s"`, `12`, `{"a":{"a":1}}`, `[{"k":1},{"k":2}]`,
		`{"a":"\ud83d\ude00","b":"é"}`, strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)} {
		if err := Check([]byte(in)); err != nil {
			t.Errorf("Check(%s) = %v", in, err)
		}
	}
}

// TestCheckRefuses: each refusal has its class and the text corectl's
// request bodies answer with ("invalid JSON: ..."), the offset where
// there is one, and no value.
func TestCheckRefuses(t *testing.T) {
	cases := []struct {
		name, in string
		class    error
		text     string
	}{
		{"empty", ``, ErrMalformed, "invalid JSON: at offset 0: empty input"},
		{"white space", " \n", ErrMalformed, "invalid JSON: at offset 0: empty input"},
		{"truncated object", `{`, ErrMalformed, "invalid JSON: at offset 1: unexpected end of input"},
		{"truncated string", `{"token":"secret`, ErrMalformed, "invalid JSON: at offset 16: unexpected end of input"},
		{"missing colon", `{"a" 1}`, ErrMalformed, "invalid JSON: at offset 5: syntax error"},
		{"trailing comma", `[1,]`, ErrMalformed, "invalid JSON: at offset 2: syntax error"},
		{"bare word", `{"token":secret}`, ErrMalformed, "invalid JSON: at offset 9: syntax error"},
		{"invalid UTF-8", "{\"token\":\"se\xffcret\"}", ErrMalformed, "invalid JSON: at offset 12: invalid UTF-8"},
		{"invalid UTF-8 in a key", "{\"\xff\":1}", ErrMalformed, "invalid JSON: at offset 2: invalid UTF-8"},
		{"unpaired high surrogate", `{"token":"\ud800secret"}`, ErrMalformed, "invalid JSON: at offset 10: unpaired surrogate escape"},
		{"lone low surrogate", `["\udc00"]`, ErrMalformed, "invalid JSON: at offset 2: unpaired surrogate escape"},
		{"invalid escape", `["\q"]`, ErrMalformed, "invalid JSON: at offset 2: invalid escape sequence"},
		{"second value", `{} {}`, ErrMalformed, "invalid JSON: trailing data after offset 2"},
		{"trailing garbage", `{}x`, ErrMalformed, "invalid JSON: trailing data after offset 2"},
		{"trailing bracket", `{"a":1}]`, ErrMalformed, "invalid JSON: trailing data after offset 7"},
		{"duplicate key", `{"a":1,"a":2}`, ErrDuplicateMember, `invalid JSON: duplicate key "a"`},
		{"duplicate key by escape", `{"a":1,"\u0061":2}`, ErrDuplicateMember, `invalid JSON: duplicate key "a"`},
		{"nested duplicate key", `{"x":[{"cidr":"1.1.1.1","cidr":"2.2.2.2"}]}`, ErrDuplicateMember, `invalid JSON: duplicate key "cidr"`},
		{"too deep", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), ErrTooDeep, "invalid JSON: nested deeper than 32"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Check([]byte(tc.in))
			if !errors.Is(err, tc.class) || err.Error() != tc.text {
				t.Fatalf("Check(%q) = %v; want %q (%v)", tc.in, err, tc.text, tc.class)
			}
			for _, other := range []error{ErrMalformed, ErrDuplicateMember, ErrTooDeep, ErrNotObject} {
				if other != tc.class && errors.Is(err, other) {
					t.Errorf("Check(%q) = %v is also %v", tc.in, err, other)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q quotes a value", err)
			}
		})
	}
}

func TestCheckFoldRefusesCaseVariants(t *testing.T) {
	for _, in := range []string{`{"egress":[],"EGRESS":[]}`, `{"a":{"cidr":"1.1.1.1","CIDR":"0.0.0.0/0"}}`,
		"{\"k\":1,\"\u212a\":2}", "{\"s\":1,\"\u017f\":2}", `{"a":1,"a":2}`} {
		if err := CheckFold([]byte(in)); !errors.Is(err, ErrDuplicateMember) {
			t.Errorf("CheckFold(%s) = %v, want ErrDuplicateMember", in, err)
		}
	}
	for _, in := range []string{`{"egress":[],"ingress":[]}`, `[{"a":1},{"A":1}]`, `{"a":{"A":1}}`} {
		if err := CheckFold([]byte(in)); err != nil {
			t.Errorf("CheckFold(%s) = %v", in, err)
		}
	}
	if err := Check([]byte(`{"egress":[],"EGRESS":[]}`)); err != nil {
		t.Errorf("Check refuses case variants: %v", err)
	}
	if err := CheckFold([]byte(`{"Egress":[],"EGRESS":[]}`)); err == nil || err.Error() != `invalid JSON: duplicate key "egress"` {
		t.Errorf("CheckFold names %v, want the folded key", err)
	}
}

// FuzzCheck: Check accepts exactly the well-formed JSON texts without
// duplicate keys (jsontext's judgement) nested at most MaxDepth deep, and
// each error has the class of the first fault in the text.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":1}`, `[{"k":"\ud800"}]`, "{\"\xff\":1}", `{} {}`, `[[[[1]]]]`, `"\u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Check(b)
		class := classOf(t, err)
		want := jsontextClass(b)
		// The first fault wins: a duplicate key or too deep a nesting
		// can come before a malformation further on.
		switch {
		case class == want:
		case class == ErrTooDeep:
		case class == ErrDuplicateMember && want == ErrMalformed:
		default:
			t.Fatalf("Check(%q) = %v, want class %v", b, err, want)
		}
	})
}
