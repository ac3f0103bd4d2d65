package wire

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate/corectl/cidr"
)

// FuzzDecodeBodies feeds one input to every request decoder: none may
// panic; an egress or ingress PUT either fails with its bad-request class
// or gives a normalised answer (egress: masked, sorted, no repeats — what
// egress.Engine.Put takes; ingress: at least one rule, as an empty
// allowlist is refused).
func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{
		`{"defaultAction":"deny","egress":[{"cidr":"203.0.113.10"}]}`,
		`{"defaultAction":"deny","egress":[{"cidr":"10.0.0.0/8"},{"cidr":"10.0.0.0/8"}]}`,
		`{"defaultAction":"deny","egress":[{"cidr":"10.1.2.3/16"}]}`,
		`{"ingress":[{"cidr":"192.0.2.0/24","description":"office"}]}`,
		`{"templateID":"base","timeout":60,"metadata":{"a":"b"},"network":{"allowOut":["1.1.1.1"],"denyOut":["10.0.0.0/8"]}}`,
		`{"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"],"allowInternetAccess":false}`,
		`{"egress":[{"cidr":"1.1.1.1"}],"ingress":[{"cidr":"2.2.2.2"}]}`,
		`{"a":1,"a":2}`, `[]`, `null`, ``, `{"egress":[{"cidr":"1.1.1.1","cidr":"2.2.2.2"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if p, err := DecodeEgressPut(body); err != nil {
			if !errors.Is(err, ErrEgressBadRequest) {
				t.Fatalf("egress error without its class: %v", err)
			}
		} else {
			for i, q := range p {
				if q != q.Masked() || (i > 0 && cidr.Compare(p[i-1], q) >= 0) {
					t.Fatalf("egress answer not normalised (masked, sorted, no repeats): %v", p)
				}
			}
		}
		if r, err := DecodeIngressPut(body); err != nil {
			if !errors.Is(err, ErrIngressBadRequest) {
				t.Fatalf("ingress error without its class: %v", err)
			}
		} else if len(r) == 0 {
			t.Fatalf("ingress answer with no rule")
		}
		if _, err := DecodeTemplateNetwork(body); err != nil && !errors.Is(err, ErrTemplateBadRequest) {
			t.Fatalf("template error without its class: %v", err)
		}
		_, _ = DecodeNewSandbox(body)
		_, _ = DecodeNetwork(body)
		_, _ = DecodeNetworkUpdate(body)
	})
}
