package template

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate/internal/strictjson/strictjsontest"
)

// TestDecodeRequestBodyClasses: a PUT body that is malformed JSON (cut
// short, a syntax error, invalid UTF-8, an unpaired surrogate escape,
// trailing data), repeats a key or nests too deep is ErrBadRequest with
// strictjson's class and "invalid JSON: ..." (the offset where there is
// one); a well-formed body that is not an object is ErrBadRequest saying
// so; neither quotes a value.
func TestDecodeRequestBodyClasses(t *testing.T) {
	strictjsontest.Answers(t, func(body []byte) error {
		_, err := DecodeRequest(body)
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("DecodeRequest(%q) = %v, want ErrBadRequest", body, err)
		}
		return err
	}, "template: bad request: ", "template: bad request: body must be a JSON object")
}
