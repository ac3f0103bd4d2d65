package httpapi

import (
	"testing"

	"github.com/sandgate/sandgate/internal/strictjson/strictjsontest"
)

// TestBodyClasses: a create, timeout, refresh or connect body that is
// malformed JSON (cut short, a syntax error, invalid UTF-8, an unpaired
// surrogate escape, trailing data), repeats a key or nests too deep is
// answered "the body is invalid JSON: ..." (the 400 bad_request message)
// with strictjson's class and the offset where there is one; a
// well-formed body that is not an object is answered as not an object;
// neither quotes a value.
func TestBodyClasses(t *testing.T) {
	t.Run("create", func(t *testing.T) {
		strictjsontest.Answers(t, func(body []byte) error { _, err := decodeCreate(body); return err },
			"the body is ", "the body is not a JSON object of the right shape")
	})
	t.Run("timeout, refresh, connect", func(t *testing.T) {
		strictjsontest.Answers(t, func(body []byte) error { _, err := decodeObject(body); return err },
			"the body is ", "the body is not a JSON object")
	})
}
