package lifecycle

import (
	"errors"
	"testing"
	"time"
)

// FuzzDecodeToken: a nextToken either decodes to the cursor it encodes
// (and re-encodes to itself) or is ErrBadToken; it never panics.
func FuzzDecodeToken(f *testing.F) {
	for _, s := range []string{"", encodeToken(Listed{SandboxID: "sb0123", start: time.Unix(1800000000, 0)}), "!!", "MTIz", "LTEvc2I"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		l, err := decodeToken(tok)
		switch {
		case err != nil:
			if !errors.Is(err, ErrBadToken) || l != nil {
				t.Fatalf("error %v with cursor %+v", err, l)
			}
		case tok == "":
			if l != nil {
				t.Fatalf("empty token gave %+v", l)
			}
		default:
			if again := encodeToken(*l); again != tok {
				t.Fatalf("token %q decodes to %+v, which encodes to %q", tok, l, again)
			}
		}
	})
}
