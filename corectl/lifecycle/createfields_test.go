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
// why, and nothing is written; the members that change nothing are
// accepted.
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
		`{"templateID":"base","network":{"allowPublicTraffic":false}}`:                     "network.allowPublicTraffic: not supported",
		`{"templateID":"base","network":{"maskRequestHost":"${PORT}-x.example"}}`:          "network.maskRequestHost: not supported",
		`{"templateID":"base","network":{"rules":{"api.example.com":[{"transform":{}}]}}}`: "network.rules: not supported",
		`{"templateID":"base","network":{"egressProxy":{"address":"p.example:1080"}}}`:     "network.egressProxy: not supported",
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
	// Accepted, changing nothing: the defaults and secure.
	sb := w.create(`{"templateID":"base","secure":true,"autoPause":false,"autoResume":{"enabled":false},"lifecycle":{"onTimeout":"kill","autoResume":false},"volumeMounts":[],"mcp":null,"allow_internet_access":true,"network":{"allowPublicTraffic":true,"maskRequestHost":"","rules":{},"egressProxy":null}}`)
	if code, raw := w.do("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", "", nil); code != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", code, raw)
	}
}
