package createnet

import (
	"errors"
	"testing"
)

// TestBreakDuplicateKeysAreRefused: encoding/json keeps the last of two
// equal keys, so {"egress":[narrow],"egress":[]} would silently drop the
// caller's narrow allowlist and inherit the (possibly wider) template;
// such a network object is refused as bad_request instead, as the PUT
// routes refuse it (strictjson).
func TestBreakDuplicateKeysAreRefused(t *testing.T) {
	for _, body := range []string{
		`{"egress":[{"cidr":"203.0.113.1"}],"egress":[]}`,
		`{"allowOut":["203.0.113.1"],"allowOut":[]}`,
		`{"ingress":[{"cidr":"203.0.113.1"}],"ingress":[]}`,
		`{"egress":[{"cidr":"203.0.113.1","cidr":"0.0.0.0/0"}]}`,
		`{"egress":[{"cidr":"203.0.113.1"}],"Egress":[]}`,
		`{"egress":[{"cidr":"203.0.113.1","CIDR":"0.0.0.0/0"}]}`,
		`{"allowOut":["203.0.113.1"],"ALLOWOUT":["0.0.0.0/0"]}`,
	} {
		req, err := Decode([]byte(body))
		var ce *Error
		if !errors.As(err, &ce) || ce.Code != CodeBadRequest {
			t.Errorf("Decode(%s) = %+v, %v; want %s", body, req, err, CodeBadRequest)
		}
	}
	if _, err := Decode([]byte(`{"egress":[{"cidr":"203.0.113.1"}],"denyOut":["x"],"rules":{},"other":{"b":1}}`)); err != nil {
		t.Errorf("a well-formed object with ignored fields: %v", err)
	}
}
