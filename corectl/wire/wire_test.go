package wire_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/createnet"
	"github.com/sandgate/sandgate/corectl/wire"
	"github.com/sandgate/sandgate/internal/strictjson/strictjsontest"
)

func egressCIDRs(rs []v1alpha1.EgressRule) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.CIDR
	}
	return out
}

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
		{"create", func(b []byte) error { _, err := wire.DecodeNewSandbox(b); return err }, func(error) bool { return true },
			"the body is ", "the body is not a JSON object of the right shape"},
		{"timeout, refresh, connect", func(b []byte) error { _, _, err := wire.Seconds(b, "timeout"); return err }, func(error) bool { return true },
			"the body is ", "the body is not a JSON object"},
		{"create network, resolve", func(b []byte) error { _, err := createnet.Decode(b); return err },
			func(err error) bool { return errors.As(err, &ce) && ce.Code == createnet.CodeBadRequest },
			"bad_request: network: ", "bad_request: network must be a JSON object"},
		{"PUT network", func(b []byte) error { _, err := wire.DecodeEgressPut(b); return err },
			func(err error) bool { return errors.Is(err, wire.ErrEgressBadRequest) },
			"egress: bad request: ", "egress: bad request: body must be a JSON object"},
		{"PUT network, E2B's body", func(b []byte) error { _, err := wire.DecodeNetworkUpdate(b); return err },
			func(err error) bool { return errors.Is(err, wire.ErrNetworkUpdateBadRequest) },
			"network: bad request: ", "network: bad request: body must be a JSON object"},
		{"PUT network/ingress", func(b []byte) error { _, err := wire.DecodeIngressPut(b); return err },
			func(err error) bool { return errors.Is(err, wire.ErrIngressBadRequest) },
			"ingressallow: bad request: ", "ingressallow: bad request: body must be a JSON object"},
		{"PUT template network", func(b []byte) error { _, err := wire.DecodeTemplateNetwork(b); return err },
			func(err error) bool { return errors.Is(err, wire.ErrTemplateBadRequest) },
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
		if _, err := wire.DecodeNewSandbox([]byte(body)); err == nil || err.Error() != "the body is not a JSON object of the right shape" {
			t.Errorf("wire.DecodeNewSandbox(%q) = %v", body, err)
		}
	}
	if req, err := wire.DecodeNewSandbox(nil); err != nil || req.TemplateID != "" {
		t.Errorf("wire.DecodeNewSandbox(empty) = %+v, %v", req, err)
	}
}

func TestEgressPutAcceptsTheRuleModel(t *testing.T) {
	set, err := wire.DecodeEgressPut([]byte(`{"defaultAction":"deny","egress":[{"cidr":"203.0.113.10"},{"cidr":"10.0.0.0/8"},{"cidr":"203.0.113.10/32"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.0/8", "203.0.113.10/32"}; !slices.Equal(cidr.Strings(set), want) {
		t.Fatalf("set = %v, want %v", set, want)
	}
	set, err = wire.DecodeEgressPut([]byte(`{"egress":[],"defaultAction":"deny"}`))
	if err != nil || set == nil || len(set) != 0 {
		t.Fatalf("empty egress = %#v, %v; want an empty set (deny all but DNS)", set, err)
	}
}

func TestEgressPutRefusesEverythingElse(t *testing.T) {
	for _, body := range []string{
		``,
		`[]`,
		`null`,
		`{"defaultAction":"allow","egress":[]}`,
		`{"defaultAction":"DENY","egress":[]}`,
		`{"egress":[]}`,
		`{"defaultAction":"deny"}`,
		`{"defaultAction":"deny","egress":null}`,
		`{"defaultAction":null,"egress":[]}`,
		`{"defaultAction":"deny","egress":[{"cidr":"1.1.1.1","protocol":"TCP"}]}`,
		`{"defaultAction":"deny","egress":[{"cidr":"1.1.1.1","port":443}]}`,
		`{"defaultAction":"deny","egress":[{"cidr":"1.1.1.1"}],"ingress":[]}`,
		`{"defaultAction":"deny","egress":[{}]}`,
		`{"defaultAction":"deny","egress":[null]}`,
		`{"defaultAction":"deny","egress":[{"cidr":null}]}`,
		`{"defaultAction":"deny","egress":[{"cidr":7}]}`,
		`{"defaultAction":"deny","egress":["1.1.1.1"]}`,
		`{"defaultAction":"deny","egress":{"cidr":"1.1.1.1"}}`,
		`{"defaultAction":"deny","egress":[{"cidr":"1.2.3.4/24/24"}]}`,
		`{"defaultAction":"deny","egress":[{"cidr":"1.1.1.1 2.2.2.2"}]}`,
		`{"defaultAction":"deny","egress":[{"cidr":"2001:db8::/32"}]}`,
		`{"defaultAction":"deny","egress":[{"cidr":"1.1.1.1","cidr":"2.2.2.2"}]}`,
		`{"defaultAction":"deny","defaultAction":"deny","egress":[]}`,
		`{"defaultAction":"deny","egress":[]} {}`,
		`{"defaultAction":"deny","egress":[]`,
	} {
		if _, err := wire.DecodeEgressPut([]byte(body)); !errors.Is(err, wire.ErrEgressBadRequest) {
			t.Errorf("wire.DecodeEgressPut(%s) = %v, want the route's bad-request class", body, err)
		}
	}
	// A CIDR with host bits set is refused, not rewritten into its
	// network (issue 30 item 13); a bare address is its /32.
	_, err := wire.DecodeEgressPut([]byte(`{"defaultAction":"deny","egress":[{"cidr":"1.1.1.1"},{"cidr":"10.1.2.3/16"}]}`))
	if !errors.Is(err, wire.ErrEgressBadRequest) || !errors.Is(err, cidr.ErrNotNormalized) || !strings.Contains(err.Error(), "egress[1].cidr") ||
		!strings.Contains(err.Error(), "10.1.0.0/16") {
		t.Fatalf("host bits set: %v; want cidr.ErrNotNormalized naming egress[1] and the network", err)
	}
	if set, err := wire.DecodeEgressPut([]byte(`{"defaultAction":"deny","egress":[{"cidr":"1.1.1.1"},{"cidr":"10.1.0.0/16"}]}`)); err != nil || len(set) != 2 {
		t.Fatalf("normalised entries and a bare address: %v, %v", set, err)
	}
	_, err = wire.DecodeEgressPut([]byte(`{"defaultAction":"deny","egress":[{"cidr":"1.1.1.1"},{"cidr":"x"}]}`))
	if !errors.Is(err, cidr.ErrInvalid) || !strings.Contains(err.Error(), "egress[1]") {
		t.Fatalf("invalid second CIDR: %v; want cidr.ErrInvalid naming egress[1]", err)
	}
}

func TestIngressPut(t *testing.T) {
	got, err := wire.DecodeIngressPut([]byte(`{"ingress":[{"cidr":"203.0.113.9/24","description":"office"},{"cidr":"198.51.100.7"},{"cidr":"203.0.113.0/24","description":"dup"},{"cidr":"198.51.100.7/32","description":"later"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.IngressRule{{CIDR: "198.51.100.7/32", Description: "later"}, {CIDR: "203.0.113.0/24", Description: "office"}}
	if !slices.Equal(got, want) {
		t.Fatalf("decoded = %+v, want %+v", got, want)
	}
	for _, body := range []string{
		``, `{}`, `{"ingress":[]}`, `{"ingress":null}`, `{"ingress":[null]}`, `{"ingress":[{}]}`,
		`{"ingress":[{"cidr":"1.1.1.1"}],"egress":[]}`,
		`{"ingress":[{"cidr":"1.1.1.1","port":80}]}`,
		`{"ingress":[{"cidr":"1.1.1.1","description":null}]}`,
		`{"ingress":[{"cidr":"1.1.1.1","description":7}]}`,
		`{"ingress":[{"cidr":"1.1.1.1 2.2.2.2"}]}`,
		`{"ingress":[{"cidr":"1.1.1.1/24/24"}]}`,
		`{"ingress":[{"cidr":"1.1.1.1,2.2.2.2"}]}`,
		`{"ingress":[{"cidr":"::1"}]}`,
		`{"ingress":[{"cidr":"1.1.1.1","cidr":"2.2.2.2"}]}`,
		`{"ingress":[{"cidr":"1.1.1.1"}]}x`,
	} {
		if _, err := wire.DecodeIngressPut([]byte(body)); !errors.Is(err, wire.ErrIngressBadRequest) {
			t.Errorf("wire.DecodeIngressPut(%s) = %v, want the route's bad-request class", body, err)
		}
	}
	if _, err := wire.DecodeIngressPut([]byte(`{"ingress":[{"cidr":"1.1.1.1"},{"cidr":"1.2.3.4/24/24"}]}`)); !errors.Is(err, cidr.ErrInvalid) {
		t.Fatalf("double mask: %v, want cidr.ErrInvalid", err)
	}
}

func TestTemplateNetwork(t *testing.T) {
	n, err := wire.DecodeTemplateNetwork([]byte(`{"ingress":[{"cidr":"203.0.113.9/24","description":"office"}],"egress":[{"cidr":"10.1.1.1/8"},{"cidr":"1.1.1.1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(n.Ingress, []v1alpha1.IngressRule{{CIDR: "203.0.113.0/24", Description: "office"}}) ||
		!slices.Equal(egressCIDRs(n.Egress), []string{"1.1.1.1/32", "10.0.0.0/8"}) {
		t.Fatalf("decoded = %+v", n)
	}
	n, err = wire.DecodeTemplateNetwork([]byte(`{}`))
	if err != nil || n.Ingress == nil || n.Egress == nil || len(n.Ingress)+len(n.Egress) != 0 {
		t.Fatalf("empty object = %+v, %v; want two empty lists", n, err)
	}
	for _, body := range []string{``, `[]`, `{"ingress":null}`, `{"egress":[{"cidr":"1.1.1.1","port":1}]}`, `{"other":1}`,
		`{"egress":[{"cidr":"1.2.3.4/24/24"}]}`, `{"ingress":[{"cidr":"x"}]}`, `{"egress":[],"egress":[]}`} {
		if _, err := wire.DecodeTemplateNetwork([]byte(body)); !errors.Is(err, wire.ErrTemplateBadRequest) {
			t.Errorf("wire.DecodeTemplateNetwork(%s) = %v, want the route's bad-request class", body, err)
		}
	}
	if _, err := wire.DecodeTemplateNetwork([]byte(`{"egress":[{"cidr":"1.1.1.1"},{"cidr":"1.1.1.1 2.2.2.2"}]}`)); !errors.Is(err, cidr.ErrInvalid) {
		t.Fatalf("invalid egress CIDR: %v", err)
	}
}

// TestNetworkUpdate: E2B's SandboxNetworkUpdateConfig is told apart from
// sandgate's body by defaultAction alone, decoded strictly, and refuses
// what sandgate cannot honour.
func TestNetworkUpdate(t *testing.T) {
	for body, want := range map[string]bool{
		`{}`: true, `{"allowOut":["1.1.1.1"]}`: true, `{"defaultAction":"deny","egress":[]}`: false,
		`{"defaultAction":1}`: false, `[]`: false, `{`: false, ``: false, `null`: false,
	} {
		if got := wire.IsNetworkUpdate([]byte(body)); got != want {
			t.Errorf("IsNetworkUpdate(%s) = %v", body, got)
		}
	}
	u, err := wire.DecodeNetworkUpdate([]byte(`{"allowOut":["1.1.1.1"],"denyOut":null,"allow_internet_access":false,"rules":{},"egressProxy":null}`))
	if err != nil || len(u.AllowOut) != 1 || u.DenyOut != nil || u.AllowInternetAccess == nil || *u.AllowInternetAccess {
		t.Fatalf("DecodeNetworkUpdate = %+v, %v", u, err)
	}
	for body, msg := range map[string]string{
		`{"allowOut":"1.1.1.1"}`:               "network: bad request: allowOut must be an array of strings",
		`{"allow_internet_access":"no"}`:       "network: bad request: allow_internet_access must be a boolean",
		`{"allowInternetAccess":false}`:        `network: bad request: unknown field "allowInternetAccess" (only allowOut, denyOut, allow_internet_access)`,
		`{"rules":{"a.example":[]}}`:           "network: bad request: rules: not supported: sandgate has no egress HTTP proxy to apply per-domain transforms",
		`{"egressProxy":{"address":"p:1080"}}`: "network: bad request: egressProxy: not supported: sandgate cannot tunnel egress through a proxy",
	} {
		if _, err := wire.DecodeNetworkUpdate([]byte(body)); err == nil || err.Error() != msg || !errors.Is(err, wire.ErrNetworkUpdateBadRequest) {
			t.Errorf("DecodeNetworkUpdate(%s) = %v, want %q", body, err, msg)
		}
	}
}

// TestNewSandboxRefusals: the NewSandbox members sandgate cannot honour
// are *wire.UnsupportedError naming the member; their defaults pass.
func TestNewSandboxRefusals(t *testing.T) {
	for body, field := range map[string]string{
		`{"autoPause":true}`: "autoPause", `{"autoResume":{"enabled":true}}`: "autoResume.enabled",
		`{"lifecycle":{"onTimeout":"pause"}}`: "lifecycle.onTimeout", `{"volumeMounts":[{}]}`: "volumeMounts",
		`{"mcp":{}}`: "mcp", `{"allowInternetAccess":true}`: "allowInternetAccess",
	} {
		var ue *wire.UnsupportedError
		if _, err := wire.DecodeNewSandbox([]byte(body)); !errors.As(err, &ue) || ue.Field != field {
			t.Errorf("DecodeNewSandbox(%s) = %v, want a refusal of %s", body, err, field)
		}
	}
	req, err := wire.DecodeNewSandbox([]byte(`{"secure":false,"autoPause":false,"autoResume":null,"lifecycle":{"onTimeout":"kill"},"volumeMounts":[],"mcp":null,"allow_internet_access":false}`))
	if err != nil || req.AllowInternetAccess == nil || *req.AllowInternetAccess {
		t.Fatalf("defaults: %+v, %v", req, err)
	}
	for _, body := range []string{`{"secure":"yes"}`, `{"lifecycle":{"onTimeout":"sleep"}}`, `{"volumeMounts":{}}`} {
		if _, err := wire.DecodeNewSandbox([]byte(body)); err == nil {
			t.Errorf("DecodeNewSandbox(%s) accepted", body)
		}
	}
}
