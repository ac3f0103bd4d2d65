package strictjson

import (
	"errors"
	"testing"
)

func TestBreakCheckFoldRefusesCaseVariants(t *testing.T) {
	for _, in := range []string{`{"egress":[],"EGRESS":[]}`, `{"a":{"cidr":"1.1.1.1","CIDR":"0.0.0.0/0"}}`,
		"{\"k\":1,\"\u212a\":2}", "{\"s\":1,\"\u017f\":2}", `{"a":1,"a":2}`} {
		if err := CheckFold([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckFold(%s) = %v, want ErrInvalid", in, err)
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
}
