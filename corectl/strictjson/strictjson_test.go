package strictjson

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckAcceptsOneValue(t *testing.T) {
	for _, in := range []string{`{}`, ` {"a":[1,{"b":null}],"c":"x"} `, `[]`, `"s"`, `12`, `{"a":{"a":1}}`, `[{"k":1},{"k":2}]`} {
		if err := Check([]byte(in)); err != nil {
			t.Errorf("Check(%s) = %v", in, err)
		}
	}
}

func TestCheckRefusesDuplicatesTrailingAndSyntax(t *testing.T) {
	for _, in := range []string{
		``, `{`, `{"a":1,"a":2}`, `{"x":[{"cidr":"1.1.1.1","cidr":"2.2.2.2"}]}`,
		`{} {}`, `{}x`, `{"a":1}]`, `[1,]`, `{"a" 1}`, strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	} {
		if err := Check([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(`{"a":1}`)
	f.Add(`{"a":1,"a":1}`)
	f.Fuzz(func(t *testing.T, s string) {
		if err := Check([]byte(s)); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v does not wrap ErrInvalid", err)
		}
	})
}
