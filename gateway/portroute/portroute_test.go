package portroute

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"testing"

	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/sandboxhost"
	"github.com/sandgate/sandgate/gateway/token"
)

// tokens verifies "traffic-<sandbox>" as a traffic token of cred-a,
// "trafficb-<sandbox>" as one of cred-b, "envd-<sandbox>" as an envd
// token, and nothing else.
type tokens struct{}

func (tokens) Verify(raw string) (token.Target, error) {
	switch {
	case len(raw) > 8 && raw[:8] == "traffic-":
		return token.Target{CredentialID: "cred-a", SandboxID: raw[8:], Audience: token.AudienceTraffic}, nil
	case len(raw) > 9 && raw[:9] == "trafficb-":
		return token.Target{CredentialID: "cred-b", SandboxID: raw[9:], Audience: token.AudienceTraffic}, nil
	case len(raw) > 5 && raw[:5] == "envd-":
		return token.Target{CredentialID: "cred-a", SandboxID: raw[5:], Port: 49983}, nil
	}
	return token.Target{}, token.ErrSignature
}

type creds map[string]credential.Credential

func (c creds) Lookup(_ context.Context, id string) (credential.Credential, error) {
	if cr, ok := c[id]; ok {
		return cr, nil
	}
	return credential.Credential{}, credential.ErrNotFound
}

type clusters map[string]dataplane.Cluster

func (c clusters) Cluster(id string) (dataplane.Cluster, bool) { cl, ok := c[id]; return cl, ok }

// corectl answers Authorize and Locate from a table of sandboxes.
type corectl struct {
	sandboxes map[string]authorizer.Decision // by sandbox ID, as Locate answers
	owner     map[string]string              // sandbox → credential
	err       error
}

func (c corectl) Locate(_ context.Context, id string) (authorizer.Decision, error) {
	if c.err != nil {
		return authorizer.Decision{}, c.err
	}
	if d, ok := c.sandboxes[id]; ok {
		return d, nil
	}
	return authorizer.Decision{Reason: authorizer.ReasonNotFound}, nil
}

func (c corectl) Authorize(_ context.Context, cred, id string) (authorizer.Decision, error) {
	if c.err != nil {
		return authorizer.Decision{}, c.err
	}
	d, ok := c.sandboxes[id]
	if !ok || c.owner[id] != cred {
		return authorizer.Decision{Reason: authorizer.ReasonNotFound}, nil
	}
	return authorizer.Decision{Allowed: d.Allowed, Reason: d.Reason}, nil
}

func router(t *testing.T, c corectl, locator bool) *Router {
	t.Helper()
	fe, _ := url.Parse("http://10.0.0.1/base/")
	deps := Deps{Tokens: tokens{}, Clusters: clusters{"c1": {ID: "c1", FixedEntry: fe, Host: "entry.c1"}},
		Credentials: creds{"cred-a": {ID: "cred-a", Enabled: true, ClusterID: "c1"}, "cred-off": {ID: "cred-off", ClusterID: "c1"},
			"cred-b": {ID: "cred-b", Enabled: true, ClusterID: "c1"}},
		Authorizer: c}
	if locator {
		deps.Locator = c
	}
	r, err := New(deps)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDecide(t *testing.T) {
	c := corectl{
		sandboxes: map[string]authorizer.Decision{
			"pub":  {Allowed: true, ClusterID: "c1"},
			"priv": {Allowed: true, ClusterID: "c1", TrafficTokenRequired: true},
			"gone": {Reason: authorizer.ReasonDeleting},
			"far":  {Allowed: true, ClusterID: "c9"},
		},
		owner: map[string]string{"pub": "cred-a", "priv": "cred-a", "gone": "cred-a"},
	}
	want := Route{ClusterID: "c1", Dial: "10.0.0.1:80", Host: "entry.c1", PathPrefix: "/base/priv/3000"}
	for _, tc := range []struct {
		name string
		id   string
		port int
		tok  []string
		code Code
	}{
		{"private with its token", "priv", 3000, []string{"traffic-priv"}, ""},
		{"private without", "priv", 3000, nil, CodeTrafficTokenRequired},
		{"private with an envd token", "priv", 3000, []string{"envd-priv"}, CodeTrafficTokenInvalid},
		{"private with another sandbox's token", "priv", 3000, []string{"traffic-pub"}, CodeTrafficTokenInvalid},
		{"private with another credential's token naming it", "priv", 3000, []string{"trafficb-priv"}, CodeSandboxNotFound},
		{"two tokens", "priv", 3000, []string{"traffic-priv", "traffic-priv"}, CodeTrafficTokenInvalid},
		{"garbage token", "priv", 3000, []string{"x"}, CodeTrafficTokenInvalid},
		{"execd port", "pub", 44772, nil, CodePortReserved},
		{"unknown sandbox", "nope", 3000, nil, CodeSandboxNotFound},
		{"unknown sandbox with a token for it", "nope", 3000, []string{"traffic-nope"}, CodeSandboxNotFound},
		{"deleting", "gone", 3000, nil, CodeSandboxGone},
		{"deleting with its token", "gone", 3000, []string{"traffic-gone"}, CodeSandboxGone},
		{"cluster not here", "far", 3000, nil, CodeClusterUnknown},
	} {
		h := http.Header{}
		for _, v := range tc.tok {
			h.Add(HeaderTrafficToken, v)
		}
		got, r := router(t, c, true).Decide(context.Background(), sandboxhost.Target{Port: tc.port, SandboxID: tc.id}, h)
		switch {
		case tc.code == "" && r != nil:
			t.Errorf("%s: refused %v", tc.name, r)
		case tc.code == "":
			w := want
			w.CredentialID = "cred-a"
			if got != w {
				t.Errorf("%s: %+v, want %+v", tc.name, got, w)
			}
		case r == nil || r.Code != tc.code:
			t.Errorf("%s: %+v %v, want %s", tc.name, got, r, tc.code)
		}
	}
	got, r := router(t, c, true).Decide(context.Background(), sandboxhost.Target{Port: 8080, SandboxID: "pub"}, http.Header{})
	if r != nil || got.PathPrefix != "/base/pub/8080" || got.CredentialID != "" || got.Dial != "10.0.0.1:80" {
		t.Fatalf("public port: %+v %v", got, r)
	}
	if _, r := router(t, c, false).Decide(context.Background(), sandboxhost.Target{Port: 8080, SandboxID: "pub"}, http.Header{}); r == nil || r.Code != CodeUnavailable {
		t.Fatalf("no locator: %v", r)
	}
	c.err = errors.New("down")
	if _, r := router(t, c, true).Decide(context.Background(), sandboxhost.Target{Port: 8080, SandboxID: "pub"}, http.Header{}); r == nil || r.Code != CodeUnavailable || r.Code.Status() != 503 {
		t.Fatalf("authorizer down: %v", r)
	}
}

// TestDisabledCredential: a traffic token of a disabled credential is refused.
func TestDisabledCredential(t *testing.T) {
	rt := router(t, corectl{}, true)
	rt.deps.Tokens = offTokens{}
	if _, r := rt.Decide(context.Background(), sandboxhost.Target{Port: 80, SandboxID: "priv"}, http.Header{HeaderTrafficToken: {"t"}}); r == nil || r.Code != CodeCredentialRefused {
		t.Fatalf("got %v", r)
	}
}

type offTokens struct{}

func (offTokens) Verify(string) (token.Target, error) {
	return token.Target{CredentialID: "cred-off", SandboxID: "priv", Audience: token.AudienceTraffic}, nil
}

// TestHostOnlyCookies: every Domain attribute goes, whatever its case,
// spacing or value, and nothing else of a field changes.
func TestHostOnlyCookies(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a=1; Domain=sbx.test; Path=/", "a=1; Path=/"},
		{"a=1;domain=.SBX.TEST", "a=1"},
		{"a=1; Path=/;  DOMAIN = sbx.test ; Secure", "a=1; Path=/; Secure"},
		{"a=1; Domain=; Domain=x.sbx.test; HttpOnly", "a=1; HttpOnly"},
		{"__Host-a=1; Secure; Path=/; Domain=sbx.test", "__Host-a=1; Secure; Path=/"},
		{"domain=1; Path=/", "domain=1; Path=/"},             // the cookie's name is not an attribute
		{"a=domain; Path=/domain", "a=domain; Path=/domain"}, // nor a value
		{"a=1; Domainx=sbx.test", "a=1; Domainx=sbx.test"},   // an unknown attribute stays
		{"a=1", "a=1"},
	} {
		h := http.Header{"Set-Cookie": {c.in, "other=2; Domain=sbx.test"}, "X-Domain": {"Domain=sbx.test"}}
		HostOnlyCookies(h)
		if got := h.Values("Set-Cookie"); len(got) != 2 || got[0] != c.want || got[1] != "other=2" {
			t.Errorf("%q: got %q, want [%q \"other=2\"]", c.in, got, c.want)
		}
		if h.Get("X-Domain") != "Domain=sbx.test" {
			t.Errorf("%q: another header changed: %q", c.in, h.Get("X-Domain"))
		}
	}
}

// TestScrubAnswer: the gateway's own header names go from a head and its
// trailers (announced, or under http.TrailerPrefix), whatever their case;
// a trailer's cookie is made host-only as a head's is; the rest stays.
func TestScrubAnswer(t *testing.T) {
	h := http.Header{
		"Sandgate-Error-Code":                      {"SANDBOX_NOT_FOUND"},
		"sandgate-error-code":                      {"SANDBOX_GONE"},
		http.TrailerPrefix + "Sandgate-Error-Code": {"GATEWAY_BUSY"},
		http.TrailerPrefix + "Set-Cookie":          {"t=1; Domain=sbx.test; Path=/"},
		"Set-Cookie":                               {"a=1; domain=sbx.test"},
		"X-Sandgate-Error-Code":                    {"kept"},
		"Trailer":                                  {"Sandgate-Error-Code"},
	}
	ScrubAnswer(h)
	want := http.Header{
		http.TrailerPrefix + "Set-Cookie": {"t=1; Path=/"},
		"Set-Cookie":                      {"a=1"},
		"X-Sandgate-Error-Code":           {"kept"},
		"Trailer":                         {"Sandgate-Error-Code"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("scrubbed:\n  %v\nwant\n  %v", h, want)
	}
}

// TestAdmission: a sandbox gets at most its bound, the gateway at most the
// total; a place given back (once, however often release is called) is
// taken again; the defaults and bad bounds.
func TestAdmission(t *testing.T) {
	a, err := NewAdmission(2, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, ref := a.Admit("a")
	if ref != nil {
		t.Fatal(ref)
	}
	r2, _ := a.Admit("a")
	if _, ref := a.Admit("a"); ref == nil || ref.Code != CodeTooManyRequests || ref.Code.Status() != http.StatusTooManyRequests {
		t.Fatalf("a third request of a: %v, want TOO_MANY_PORT_REQUESTS (429)", ref)
	}
	r3, ref := a.Admit("b")
	if ref != nil {
		t.Fatal(ref)
	}
	if _, ref := a.Admit("c"); ref == nil || ref.Code != CodeGatewayBusy || ref.Code.Status() != http.StatusServiceUnavailable {
		t.Fatalf("a fourth request: %v, want GATEWAY_BUSY (503)", ref)
	}
	r1()
	r1()
	if s, n := a.InProgress("a"); s != 1 || n != 2 {
		t.Fatalf("after one release, released twice: a has %d, all %d; want 1, 2", s, n)
	}
	r4, ref := a.Admit("c")
	if ref != nil {
		t.Fatal(ref)
	}
	r2()
	r3()
	r4()
	if s, n := a.InProgress("a"); s != 0 || n != 0 || a.slots.Keys() != 0 {
		t.Fatalf("after every release: a %d, all %d, %d sandboxes kept", s, n, a.slots.Keys())
	}
	d, err := NewAdmission(0, 0, nil)
	if err != nil || d.perSandbox != DefaultMaxRequestsPerSandbox || d.total != DefaultMaxRequests {
		t.Fatalf("defaults: %+v %v", d, err)
	}
	if d, err := NewAdmission(8192, 0, nil); err != nil || d.total != 8192 {
		t.Fatalf("a per-sandbox bound over the default total: %+v %v, want the total raised to it", d, err)
	}
	for _, b := range [][2]int{{-1, 0}, {0, -1}, {5, 4}} {
		if _, err := NewAdmission(b[0], b[1], nil); err == nil {
			t.Errorf("NewAdmission(%d, %d): no error", b[0], b[1])
		}
	}
}

// TestAdmissionsShareCounts: two Admissions over the same Counts (the
// configurations before and after a reload) count each other's requests,
// each against its own bounds, and a release by either frees the place
// for both.
func TestAdmissionsShareCounts(t *testing.T) {
	c := NewCounts()
	old, err := NewAdmission(2, 3, c)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := NewAdmission(3, 4, c)
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := old.Admit("a")
	r2, _ := old.Admit("a")
	if _, ref := old.Admit("a"); ref == nil || ref.Code != CodeTooManyRequests {
		t.Fatalf("a third request of a under the old bounds: %v, want TOO_MANY_PORT_REQUESTS", ref)
	}
	r3, ref := cur.Admit("a")
	if ref != nil {
		t.Fatalf("a third request of a under the new bounds (3): %v", ref)
	}
	if _, ref := cur.Admit("a"); ref == nil || ref.Code != CodeTooManyRequests {
		t.Fatalf("a fourth request of a: %v, want TOO_MANY_PORT_REQUESTS (the old configuration's two count)", ref)
	}
	r4, _ := cur.Admit("b")
	if _, ref := cur.Admit("c"); ref == nil || ref.Code != CodeGatewayBusy {
		t.Fatalf("a fifth request in all: %v, want GATEWAY_BUSY", ref)
	}
	if s, n := cur.InProgress("a"); s != 3 || n != 4 {
		t.Fatalf("in progress: a %d, all %d; want 3, 4", s, n)
	}
	r1() // the old configuration's request ends
	if _, ref := cur.Admit("c"); ref != nil {
		t.Fatalf("after a release by the old configuration: %v", ref)
	}
	r2()
	r3()
	r4()
}
