package lifecycle_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/template"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestCreateCarvesEgress runs on the real apiserver: denyOut and
// allow_internet_access false become the NetworkPolicy's ipBlock.except
// carve-outs (deny-all but the platform DNS rule when nothing is left),
// read back through GET /sandboxes/{id}/network as configured and last
// verified egress; allowOut wins over denyOut; allowPublicTraffic adds no
// egress. Each policy is logged as the apiserver stores it.
func TestCreateCarvesEgress(t *testing.T) {
	w := start(t)
	if _, err := w.orch.Templates.Put(context.Background(), "base", template.Network{Egress: []v1alpha1.EgressRule{{CIDR: "0.0.0.0/0"}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body string
		want []egress.Rule // the ipBlock rules after the DNS rule
	}{
		{"denyOut carved out of the template's 0.0.0.0/0",
			`{"templateID":"base","network":{"denyOut":["10.0.0.0/8","169.254.169.254"]}}`,
			[]egress.Rule{{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "169.254.169.254/32"}}}},
		{"allow_internet_access false: deny all but DNS",
			`{"templateID":"base","allow_internet_access":false}`,
			[]egress.Rule{}},
		{"allow_internet_access false with allowOut: allowOut only",
			`{"templateID":"base","allow_internet_access":false,"network":{"allowOut":["1.1.1.1"],"denyOut":["1.0.0.0/8"]}}`,
			[]egress.Rule{{CIDR: "1.1.1.1/32"}}},
		{"allowPublicTraffic true: the template's egress, nothing added",
			`{"templateID":"base","network":{"allowPublicTraffic":true,"egress":[{"cidr":"192.0.2.0/24"}]}}`,
			[]egress.Rule{{CIDR: "192.0.2.0/24"}}},
	} {
		sb := w.create(tc.body)
		np := &networkingv1.NetworkPolicy{}
		if err := get(np, w.nsA, policyOf(t, w.nsA, bs(w.nsA, sb.SandboxID))); err != nil {
			t.Fatal(err)
		}
		shown, _ := json.MarshalIndent(np.Spec.Egress, "", "  ")
		t.Logf("%s: %s\nspec.egress as stored:\n%s", tc.name, tc.body, shown)
		if len(np.Spec.Egress) == 0 || np.Spec.Egress[0].To[0].IPBlock != nil || len(np.Spec.Egress[0].Ports) != 2 {
			t.Fatalf("%s: the first rule is not the platform DNS rule", tc.name)
		}
		var got []egress.Rule
		for _, r := range np.Spec.Egress[1:] {
			got = append(got, egress.Rule{CIDR: r.To[0].IPBlock.CIDR, Except: r.To[0].IPBlock.Except})
		}
		if !rulesEqual(got, tc.want) {
			t.Fatalf("%s: ipBlocks %+v, want %+v", tc.name, got, tc.want)
		}
		var st egress.Status
		if code, raw := w.do("GET", "/sandboxes/"+sb.SandboxID+"/network", "key-a", "", &st); code != http.StatusOK ||
			!st.NetworkReady || st.ConfiguredEgress == nil || st.LastVerifiedEgress == nil ||
			!rulesEqual(*st.ConfiguredEgress, tc.want) || !rulesEqual(*st.LastVerifiedEgress, tc.want) {
			t.Fatalf("%s: GET network = %d %s", tc.name, code, raw)
		}
		if code, raw := w.do("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", "", nil); code != http.StatusNoContent {
			t.Fatalf("DELETE = %d %s", code, raw)
		}
	}
	w.nothingLeft()
}

func rulesEqual(a, b []egress.Rule) bool {
	return slices.EqualFunc(a, b, func(x, y egress.Rule) bool { return x.CIDR == y.CIDR && slices.Equal(x.Except, y.Except) })
}

// TestCreateRefusesWhatItCannotHonour: every NewSandbox member sandgate
// cannot honour is a 400 bad_request whose message names the member and
// why, is counted in corectl_create_refusals_total, and nothing is
// written; the members that change nothing are accepted.
func TestCreateRefusesWhatItCannotHonour(t *testing.T) {
	w := start(t)
	for body, field := range map[string]string{
		`{"templateID":"base","autoPause":true}`:                                           "autoPause: not supported",
		`{"templateID":"base","autoResume":{"enabled":true}}`:                              "autoResume.enabled: not supported",
		`{"templateID":"base","lifecycle":{"onTimeout":"pause"}}`:                          "lifecycle.onTimeout: not supported",
		`{"templateID":"base","lifecycle":{"onTimeout":"kill","autoResume":true}}`:         "lifecycle.autoResume: not supported",
		`{"templateID":"base","volumeMounts":[{"name":"v","path":"/data"}]}`:               "volumeMounts: not supported",
		`{"templateID":"base","mcp":{"github":{}}}`:                                        "mcp: not supported",
		`{"templateID":"base","allowInternetAccess":false}`:                                "allowInternetAccess: not supported",
		`{"templateID":"base","allow_internet_access":"no"}`:                               "allow_internet_access must be a boolean",
		`{"templateID":"base","network":{"allowOut":["example.com"]}}`:                     "network.allowOut[0]: not supported: domain names",
		`{"templateID":"base","network":{"denyOut":["1.1.1.1","*.example.com"]}}`:          "network.denyOut[1]: not supported: domain names",
		`{"templateID":"base","network":{"maskRequestHost":"${PORT}-x.example"}}`:          "network.maskRequestHost: not supported",
		`{"templateID":"base","network":{"rules":{"api.example.com":[{"transform":{}}]}}}`: "network.rules: not supported",
		`{"templateID":"base","network":{"egressProxy":{"address":"p.example:1080"}}}`:     "network.egressProxy: not supported",
		`{"templateID":"base","network":{"httpsPorts":[3000]}}`:                            "network.httpsPorts: not supported",
	} {
		var eb struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		if st, raw := w.do("POST", "/sandboxes", "key-a", body, &eb); st != http.StatusBadRequest || eb.Error != "bad_request" || !strings.HasPrefix(eb.Message, "bad_request: "+field) {
			t.Errorf("%s → %d %s, want 400 %q…", body, st, raw, field)
		}
	}
	w.nothingLeft()
	// Every refusal but the wrongly typed allow_internet_access is counted.
	if got := w.metrics().Value("corectl_create_refusals_total", "reason", "unsupported_field"); got != 13 {
		t.Errorf("corectl_create_refusals_total{reason=unsupported_field} = %g, want 13", got)
	}
	// Accepted, changing nothing: the defaults and secure.
	sb := w.create(`{"templateID":"base","secure":true,"autoPause":false,"autoResume":{"enabled":false},"lifecycle":{"onTimeout":"kill","autoResume":false},"volumeMounts":[],"mcp":null,"allow_internet_access":true,"network":{"allowPublicTraffic":true,"maskRequestHost":"","rules":{},"egressProxy":null,"httpsPorts":[]}}`)
	if code, raw := w.do("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", "", nil); code != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", code, raw)
	}
}

// TestUpdateNetworkE2B runs E2B's PUT /sandboxes/{id}/network
// (SandboxNetworkUpdateConfig) on the real apiserver: each body is
// resolved against the template's egress defaults, written through the
// egress engine, answered 204 and read back as the policy shows; refusals
// write nothing. sandgate's own body (with defaultAction) keeps its 200
// answer at that path and at /api/v1/sandbox/instances/{id}/network,
// which takes only sandgate's body.
func TestUpdateNetworkE2B(t *testing.T) {
	w := start(t)
	if _, err := w.orch.Templates.Put(context.Background(), "base", template.Network{Egress: []v1alpha1.EgressRule{{CIDR: "0.0.0.0/0"}}}); err != nil {
		t.Fatal(err)
	}
	id := w.create(`{"templateID":"base"}`).SandboxID
	policy := func() []egress.Rule {
		t.Helper()
		np := &networkingv1.NetworkPolicy{}
		if err := get(np, w.nsA, policyOf(t, w.nsA, bs(w.nsA, id))); err != nil {
			t.Fatal(err)
		}
		got := []egress.Rule{}
		for _, r := range np.Spec.Egress[1:] {
			got = append(got, egress.Rule{CIDR: r.To[0].IPBlock.CIDR, Except: r.To[0].IPBlock.Except})
		}
		return got
	}
	path := "/sandboxes/" + id + "/network"
	for _, tc := range []struct {
		body string
		want []egress.Rule
	}{
		{`{"allowOut":["1.1.1.1","8.8.8.0/24"],"denyOut":["0.0.0.0/0"]}`, []egress.Rule{{CIDR: "1.1.1.1/32"}, {CIDR: "8.8.8.0/24"}}},
		{`{"denyOut":["10.0.0.0/8"]}`, []egress.Rule{{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}}}},
		{`{"allow_internet_access":false}`, []egress.Rule{}},
		{`{"allow_internet_access":false,"allowOut":["1.1.1.1"]}`, []egress.Rule{{CIDR: "1.1.1.1/32"}}},
		{`{}`, []egress.Rule{{CIDR: "0.0.0.0/0"}}},
	} {
		if st, raw := w.do("PUT", path, "key-a", tc.body, nil); st != http.StatusNoContent || len(raw) != 0 {
			t.Fatalf("PUT %s = %d %s", tc.body, st, raw)
		}
		if got := policy(); !rulesEqual(got, tc.want) {
			t.Fatalf("PUT %s: policy %+v, want %+v", tc.body, got, tc.want)
		}
		var st egress.Status
		if code, raw := w.do("GET", path, "key-a", "", &st); code != http.StatusOK || !st.NetworkReady ||
			st.LastVerifiedEgress == nil || !rulesEqual(*st.LastVerifiedEgress, tc.want) {
			t.Fatalf("GET after %s = %d %s", tc.body, code, raw)
		}
	}
	// Refusals: nothing written (the policy stays the template's 0.0.0.0/0).
	for body, msg := range map[string]string{
		`{"allowOut":["api.example.com"]}`:            "bad_request: network.allowOut[0]: not supported: domain names",
		`{"rules":{"api.example.com":[]}}`:            "bad_request: network: bad request: rules: not supported",
		`{"egressProxy":{"address":"p.example:1"}}`:   "bad_request: network: bad request: egressProxy: not supported",
		`{"allowOut":["1.1.1.1"],"allowPublic":true}`: "bad_request: network: bad request: unknown field \"allowPublic\"",
		`{"denyOut":["300.0.0.0/8"]}`:                 "network_cidr_invalid: network.denyOut[0]",
	} {
		var eb struct {
			Message string `json:"message"`
		}
		if st, raw := w.do("PUT", path, "key-a", body, &eb); st != http.StatusBadRequest || !strings.HasPrefix(eb.Message, msg) {
			t.Errorf("PUT %s = %d %s, want 400 %q…", body, st, raw, msg)
		}
		if got := policy(); !rulesEqual(got, []egress.Rule{{CIDR: "0.0.0.0/0"}}) {
			t.Fatalf("refused %s wrote %+v", body, got)
		}
	}
	if st, _ := w.do("PUT", "/sandboxes/sbnotthere/network", "key-a", `{"allowOut":["1.1.1.1"]}`, nil); st != http.StatusNotFound {
		t.Fatalf("PUT on a missing sandbox = %d", st)
	}
	if st, _ := w.do("PUT", path, "key-b", `{"allowOut":["1.1.1.1"]}`, nil); st != http.StatusNotFound {
		t.Fatalf("PUT by another credential = %d", st)
	}
	// sandgate's body: 200 with the GET view at both paths; E2B's body is
	// not taken at the platform path.
	platform := "/api/v1/sandbox/instances/" + id + "/network"
	for _, p := range []string{path, platform} {
		var st egress.Status
		if code, raw := w.do("PUT", p, "key-a", `{"defaultAction":"deny","egress":[{"cidr":"192.0.2.0/24"}]}`, &st); code != http.StatusOK || !st.NetworkReady ||
			!rulesEqual(*st.ConfiguredEgress, []egress.Rule{{CIDR: "192.0.2.0/24"}}) {
			t.Fatalf("sandgate PUT %s = %d %s", p, code, raw)
		}
	}
	if code, raw := w.do("PUT", platform, "key-a", `{"allowOut":["1.1.1.1"]}`, nil); code != http.StatusBadRequest || !strings.Contains(string(raw), `unknown field \"allowOut\"`) {
		t.Fatalf("E2B body at the platform path = %d %s", code, raw)
	}
	if code, raw := w.do("GET", platform, "key-a", "", nil); code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", platform, code, raw)
	}
}
