package createnet

import (
	"errors"
	"slices"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/template"
)

var tpl = template.Network{
	Ingress: []v1alpha1.IngressRule{{CIDR: "172.28.0.0/16", Description: "office"}},
	Egress:  []v1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}},
}

func resolve(t *testing.T, body string) *Initial {
	t.Helper()
	req, err := Decode([]byte(body))
	if err != nil {
		t.Fatalf("Decode(%s): %v", body, err)
	}
	in, err := Resolve(tpl, req)
	if err != nil {
		t.Fatalf("Resolve(%s): %v", body, err)
	}
	return in
}

func cidrs(r []v1alpha1.IngressRule) []string {
	out := []string{}
	for _, x := range r {
		out = append(out, x.CIDR)
	}
	return out
}

func TestResolveFollowsTheSpecTable(t *testing.T) {
	for _, tc := range []struct {
		name          string
		body          string
		egress        []string
		ingress       []string
		egSrc, ingSrc Source
	}{
		{"not passed", ``, []string{"10.0.0.0/8"}, []string{"172.28.0.0/16"}, FromTemplate, FromTemplate},
		{"null", `null`, []string{"10.0.0.0/8"}, []string{"172.28.0.0/16"}, FromTemplate, FromTemplate},
		{"empty object", `{}`, []string{"10.0.0.0/8"}, []string{"172.28.0.0/16"}, FromTemplate, FromTemplate},
		{"allowOut normalised", `{"allowOut":["203.0.113.9/24","198.51.100.7","198.51.100.7/32"]}`, []string{"198.51.100.7/32", "203.0.113.0/24"}, []string{"172.28.0.0/16"}, FromRequest, FromTemplate},
		{"allowPublicTraffic true: never an egress rule", `{"allowPublicTraffic":true}`, []string{"10.0.0.0/8"}, []string{"172.28.0.0/16"}, FromTemplate, FromTemplate},
		{"allowPublicTraffic true with allowOut: allowOut only", `{"allowPublicTraffic":true,"allowOut":["198.51.100.7"]}`, []string{"198.51.100.7/32"}, []string{"172.28.0.0/16"}, FromRequest, FromTemplate},
		{"native egress wins", `{"allowPublicTraffic":true,"allowOut":["198.51.100.7"],"egress":[{"cidr":"192.0.2.1"}]}`, []string{"192.0.2.1/32"}, []string{"172.28.0.0/16"}, FromRequest, FromTemplate},
		{"empty lists inherit", `{"allowOut":[],"egress":[],"ingress":[]}`, []string{"10.0.0.0/8"}, []string{"172.28.0.0/16"}, FromTemplate, FromTemplate},
		{"ingress overrides", `{"ingress":[{"cidr":"203.0.113.0/24","description":"办公网"},{"cidr":"172.28.100.31"}]}`, []string{"10.0.0.0/8"}, []string{"172.28.100.31/32", "203.0.113.0/24"}, FromTemplate, FromRequest},
		{"empty unsupported members and unknown members", `{"egressProxy":null,"maskRequestHost":"","rules":{},"httpsPorts":null,"somethingElse":1}`, []string{"10.0.0.0/8"}, []string{"172.28.0.0/16"}, FromTemplate, FromTemplate},
		{"denyOut outside the allowlist: nothing", `{"denyOut":["1.1.1.1"]}`, []string{"10.0.0.0/8"}, []string{"172.28.0.0/16"}, FromRequest, FromTemplate},
		{"denyOut covering the allowlist: deny all", `{"denyOut":["0.0.0.0/0"]}`, []string{}, []string{"172.28.0.0/16"}, FromRequest, FromTemplate},
		{"allowOut wins over denyOut (E2B)", `{"allowOut":["198.51.100.7"],"denyOut":["0.0.0.0/0"]}`, []string{"198.51.100.7/32"}, []string{"172.28.0.0/16"}, FromRequest, FromTemplate},
	} {
		in := resolve(t, tc.body)
		if !slices.Equal(in.Egress, tc.egress) || !slices.Equal(cidrs(in.Ingress), tc.ingress) || in.EgressSource != tc.egSrc || in.IngressSource != tc.ingSrc {
			t.Errorf("%s: got egress %v (%s), ingress %v (%s)", tc.name, in.Egress, in.EgressSource, cidrs(in.Ingress), in.IngressSource)
		}
	}
	in := resolve(t, `{"ingress":[{"cidr":"203.0.113.0/24","description":"办公网"}]}`)
	if in.Ingress[0].Description != "办公网" {
		t.Fatalf("description lost: %+v", in.Ingress)
	}
}

func TestResolveErrors(t *testing.T) {
	for _, tc := range []struct{ body, code string }{
		{`{"allowOut":["1.2.3.4/24/24"]}`, CodeNetworkCIDRInvalid},
		{`{"allowOut":["1.1.1.1 2.2.2.2"]}`, CodeNetworkCIDRInvalid},
		{`{"egress":[{"cidr":"::1"}]}`, CodeNetworkCIDRInvalid},
		{`{"egress":[{"cidr":"1.1.1.1"}],"allowOut":["bad"]}`, CodeNetworkCIDRInvalid},
		{`{"denyOut":["1.1.1.1/33"]}`, CodeNetworkCIDRInvalid},
		{`{"allowOut":["example.com"]}`, CodeBadRequest},
		{`{"allowOut":["*.example.com"]}`, CodeBadRequest},
		{`{"denyOut":["evil.example."]}`, CodeBadRequest},
		{`{"maskRequestHost":"x.example"}`, CodeBadRequest},
		{`{"rules":{"api.example.com":[]}}`, CodeBadRequest},
		{`{"egressProxy":{"address":"p:1080"}}`, CodeBadRequest},
		{`{"httpsPorts":[3000]}`, CodeBadRequest},
		{`{"ingress":[{"cidr":"300.1.1.1"}]}`, CodeIngressCIDRInvalid},
		{`{"ingress":[{"cidr":"1.1.1.1,2.2.2.2"}]}`, CodeIngressCIDRInvalid},
		{`{"allowOut":"1.1.1.1"}`, CodeBadRequest},
		{`{"egress":[{"cidr":7}]}`, CodeBadRequest},
		{`[]`, CodeBadRequest},
	} {
		req, err := Decode([]byte(tc.body))
		if err == nil {
			_, err = Resolve(tpl, req)
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != tc.code {
			t.Errorf("%s: %v, want code %s", tc.body, err, tc.code)
		}
	}
	_, err := Resolve(tpl, &Request{AllowOut: []string{"1.1.1.1", "x"}})
	if err == nil || err.Error() != "network_cidr_invalid: network.allowOut[1]: \"x\" contains \"x\" (only digits, '.' and one '/')" {
		t.Fatalf("message = %v", err)
	}
}

// TestResolveCarvesDenyOut: denyOut and allow_internet_access false are
// carved out of the template's or the native egress allowlist (the
// policy's ipBlock.except), never out of allowOut (E2B ranks allowOut
// above denyOut); each refusal names its field.
func TestResolveCarvesDenyOut(t *testing.T) {
	no, yes := false, true
	for _, tc := range []struct {
		name           string
		body           string
		internet       *bool
		egress, except []string
	}{
		{"denyOut inside the template's CIDR", `{"denyOut":["10.1.0.0/16","10.1.2.3"]}`, nil, []string{"10.0.0.0/8"}, []string{"10.1.0.0/16"}},
		{"denyOut inside the native egress", `{"egress":[{"cidr":"0.0.0.0/0"}],"denyOut":["169.254.169.254","10.0.0.0/8"]}`, nil, []string{"0.0.0.0/0"}, []string{"10.0.0.0/8", "169.254.169.254/32"}},
		{"allow_internet_access false, no network", ``, &no, []string{}, []string{}},
		{"allow_internet_access false with allowOut", `{"allowOut":["1.1.1.1"]}`, &no, []string{"1.1.1.1/32"}, []string{}},
		{"allow_internet_access true: the template", ``, &yes, []string{"10.0.0.0/8"}, []string{}},
	} {
		req, err := Decode([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		in, err := ResolveCreate(tpl, req, tc.internet)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(in.Egress, tc.egress) || !slices.Equal(in.EgressExcept, tc.except) {
			t.Errorf("%s: egress %v except %v, want %v except %v", tc.name, in.Egress, in.EgressExcept, tc.egress, tc.except)
		}
	}
	for body, msg := range map[string]string{
		`{"allowOut":["1.1.1.1","api.example.com"]}`: "bad_request: network.allowOut[1]: not supported: domain names: sandgate enforces egress with a Kubernetes NetworkPolicy, which matches IP ranges only; give CIDRs or IP addresses",
	} {
		req, err := Decode([]byte(body))
		if err == nil {
			_, err = Resolve(tpl, req)
		}
		if err == nil || err.Error() != msg {
			t.Errorf("%s: %v, want %q", body, err, msg)
		}
	}
}

func TestResolveCopiesTheTemplate(t *testing.T) {
	local := template.Network{Ingress: slices.Clone(tpl.Ingress), Egress: slices.Clone(tpl.Egress)}
	in, err := Resolve(local, nil)
	if err != nil {
		t.Fatal(err)
	}
	local.Ingress[0].CIDR = "0.0.0.0/0"
	local.Egress[0].CIDR = "0.0.0.0/0"
	if in.Ingress[0].CIDR != "172.28.0.0/16" || in.Egress[0] != "10.0.0.0/8" {
		t.Fatalf("a template change reached the resolved network: %+v", in)
	}
}
