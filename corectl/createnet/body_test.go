package createnet

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate/internal/strictjson/strictjsontest"
)

// TestDecodeBodyClasses: a network object that is malformed JSON (cut
// short, a syntax error, invalid UTF-8, an unpaired surrogate escape,
// trailing data), repeats a key or nests too deep is bad_request naming
// that, with strictjson's class and offset; one that is well-formed but
// not an object is bad_request saying so; neither quotes a value.
func TestDecodeBodyClasses(t *testing.T) {
	strictjsontest.Answers(t, func(body []byte) error {
		req, err := Decode(body)
		if ce := (*Error)(nil); req != nil || !errors.As(err, &ce) || ce.Code != CodeBadRequest {
			t.Errorf("Decode(%q) = %+v, %v; want a %s *Error", body, req, err, CodeBadRequest)
		}
		return err
	}, "bad_request: network: ", "bad_request: network must be a JSON object")
}
