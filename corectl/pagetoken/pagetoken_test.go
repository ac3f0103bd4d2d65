package pagetoken

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRoundTripAndRefusals: a cursor decodes to what it encodes; forged
// ones are ErrInvalid.
func TestRoundTripAndRefusals(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	tok := Encode(at, "sb0123")
	got, id, err := Decode(tok)
	if err != nil || !got.Equal(at) || id != "sb0123" {
		t.Fatalf("Decode(Encode) = %v %q %v", got, id, err)
	}
	for _, bad := range []string{"!!", "MTIz", Encode(at, "Bad_ID"), "MDEvc2I", "KzEvc2I", "MC80Y0", "LTYvY2\r0", strings.Repeat("A", MaxLength+1)} {
		if _, _, err := Decode(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Decode(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// FuzzDecodeToken: a token either decodes to a cursor that encodes back to the
// same token or is ErrInvalid; it never panics.
func FuzzDecodeToken(f *testing.F) {
	for _, s := range []string{"", Encode(time.Unix(1_800_000_000, 0), "sb0123"), "!!", "MTIz", "LTEvc2I", "MDEvc2I"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		at, id, err := Decode(tok)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || id != "" {
				t.Fatalf("error %v with id %q", err, id)
			}
			return
		}
		if again := Encode(at, id); again != tok {
			t.Fatalf("token %q decodes to %v %q, which encodes to %q", tok, at, id, again)
		}
	})
}
