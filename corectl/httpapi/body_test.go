package httpapi

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate/corectl/createnet"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/template"
	"github.com/sandgate/sandgate/internal/strictjson/strictjsontest"
)

// TestBodyClasses: every route's request body that is malformed JSON (cut
// short, a syntax error, invalid UTF-8, an unpaired surrogate escape,
// trailing data), repeats a key or nests too deep is refused (the 400
// bad_request message) with "invalid JSON: ..." after the route's prefix,
// strictjson's class and the offset where there is one; a well-formed body
// that is not an object gets the route's own "not an object" answer; none
// quotes the body. One table (strictjsontest's) for the decoder of each
// route.
func TestBodyClasses(t *testing.T) {
	var ce *createnet.Error
	routes := []struct {
		name              string
		decode            func([]byte) error
		is                func(error) bool // the decoder's own error type
		prefix, notObject string
	}{
		{"create", func(b []byte) error { _, err := decodeCreate(b); return err }, func(error) bool { return true },
			"the body is ", "the body is not a JSON object of the right shape"},
		{"timeout, refresh, connect", func(b []byte) error { _, err := decodeObject(b); return err }, func(error) bool { return true },
			"the body is ", "the body is not a JSON object"},
		{"create network, resolve", func(b []byte) error { _, err := createnet.Decode(b); return err },
			func(err error) bool { return errors.As(err, &ce) && ce.Code == createnet.CodeBadRequest },
			"bad_request: network: ", "bad_request: network must be a JSON object"},
		{"PUT network", func(b []byte) error { _, err := egress.DecodeRequest(b); return err },
			func(err error) bool { return errors.Is(err, egress.ErrBadRequest) },
			"egress: bad request: ", "egress: bad request: body must be a JSON object"},
		{"PUT network/ingress", func(b []byte) error { _, err := ingressallow.DecodeRequest(b); return err },
			func(err error) bool { return errors.Is(err, ingressallow.ErrBadRequest) },
			"ingressallow: bad request: ", "ingressallow: bad request: body must be a JSON object"},
		{"PUT template network", func(b []byte) error { _, err := template.DecodeRequest(b); return err },
			func(err error) bool { return errors.Is(err, template.ErrBadRequest) },
			"template: bad request: ", "template: bad request: body must be a JSON object"},
	}
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			strictjsontest.Answers(t, func(body []byte) error {
				err := r.decode(body)
				if err == nil || !r.is(err) {
					t.Errorf("%q: %v is not the decoder's bad-request error", body, err)
				}
				return err
			}, r.prefix, r.notObject)
		})
	}
}

// TestCreateBodyNull: a create body of JSON null is a non-object, refused
// as the others are (json.Unmarshal takes it into a nil map without an
// error, which made it an empty create of the default template); an
// empty body is still an empty create.
func TestCreateBodyNull(t *testing.T) {
	for _, body := range []string{"null", " null\n"} {
		if _, err := decodeCreate([]byte(body)); err == nil || err.Error() != "the body is not a JSON object of the right shape" {
			t.Errorf("decodeCreate(%q) = %v", body, err)
		}
	}
	if req, err := decodeCreate(nil); err != nil || req.TemplateID != "" {
		t.Errorf("decodeCreate(empty) = %+v, %v", req, err)
	}
}
