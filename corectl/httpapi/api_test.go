package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/gateway/credential"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	kubetest.Main(m, &env)
}

// api is a running daemon with keys:
//
//	key-a → credential a (a fresh cluster ID, namespace nsA)
//	key-b → credential b (the same cluster, namespace nsB)
//	key-off → a disabled credential; key-lost → a credential of an
//	unconfigured cluster; key-admin → template admin without credential;
//	key-wide → a project-wide credential of nsA.
type api struct {
	t        *testing.T
	url      string
	nsA, nsB string
	ingNS    string // the cluster's ingress namespace (the carriers')
	host     string
	cluster  string
}

var starts atomic.Int64

func start(t *testing.T) *api {
	t.Helper()
	return startWrapped(t, nil)
}

// startWrapped is start with every apiserver request of the daemon sent
// through wrap (nil: none), e.g. to make a write race another writer.
func startWrapped(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper) *api {
	t.Helper()
	nsA, nsB, ingNS, tplNS := env.Namespace(t), env.Namespace(t), env.Namespace(t), env.Namespace(t)
	// Every daemon gets its own cluster ID, so it never reconciles
	// allowlists another test left behind.
	id := fmt.Sprintf("c%d", starts.Add(1))
	c := *kubetest.Cluster(id, ingNS)
	c.Ingress.Host = nsA + ".example.test"
	cfg := &cluster.Config{Clusters: []cluster.Cluster{c}, Templates: cluster.TemplateStore{ClusterID: id, Namespace: tplNS}}
	keyFile := "keys:\n"
	for _, k := range []struct{ name, cred, admin string }{{"key-a", "a", "false"}, {"key-b", "b", "false"}, {"key-off", "off", "false"}, {"key-lost", "lost", "false"}, {"key-admin", "", "true"}, {"key-wide", "wide", "false"}} {
		keyFile += "  - {name: " + k.name + ", sha256: " + apikey.Digest(k.name) + ", templateAdmin: " + k.admin
		if k.cred != "" {
			keyFile += ", credentialId: '" + k.cred + "'"
		}
		keyFile += "}\n"
	}
	keys, err := apikey.Parse([]byte(keyFile))
	if err != nil {
		t.Fatal(err)
	}
	src := credential.Static{
		"a":    {ID: "a", Enabled: true, ProjectNamespace: nsA, ClusterID: id},
		"b":    {ID: "b", Enabled: true, ProjectNamespace: nsB, ClusterID: id},
		"off":  {ID: "off", Enabled: false, ProjectNamespace: nsA, ClusterID: id},
		"lost": {ID: "lost", Enabled: true, ProjectNamespace: nsA, ClusterID: "c9"},
		"wide": {ID: "wide", Enabled: true, ProjectNamespace: nsA, ClusterID: id, ProjectWide: true},
	}
	d, err := daemon.New(daemon.Options{
		Config: cfg, Keys: keys, Credentials: src, Listen: "127.0.0.1:0", IngressWait: 20 * time.Second,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) {
			rc := rest.CopyConfig(env.Config)
			rc.WrapTransport = wrap
			return rc, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	return &api{t: t, url: "http://" + d.Addr(), nsA: nsA, nsB: nsB, ingNS: ingNS, host: c.Ingress.Host, cluster: id}
}

// do sends a request and decodes the JSON answer into out (if not nil).
func (a *api) do(method, path, key, body string, out any, hdr ...string) int {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(httpapi.APIKeyHeader, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

func (a *api) errorCode(method, path, key, body string, hdr ...string) (int, string) {
	a.t.Helper()
	var e httpapi.ErrorBody
	st := a.do(method, path, key, body, &e, hdr...)
	if e.Code != st || !strings.HasPrefix(e.Message, e.Error+": ") {
		a.t.Fatalf("%s %s: envelope %+v does not match status %d", method, path, e, st)
	}
	return st, e.Error
}

func policyRV(t *testing.T, ns string) string {
	t.Helper()
	np := &networkingv1.NetworkPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sandbox-egress-a1"}, np); err != nil {
		t.Fatal(err)
	}
	return np.ResourceVersion
}

func TestEgressRoutes(t *testing.T) {
	a := start(t)
	env.OwnedBatchSandbox(t, a.nsA, "sbx", "a", map[string]string{"allocation-id": "a1", "app": "sbx"})
	var st egress.Status
	if code := a.do("PUT", "/sandboxes/sbx/network", "key-a", `{"defaultAction":"deny","egress":[{"cidr":"203.0.113.10"}]}`, &st); code != 200 ||
		!st.NetworkReady || st.VerificationState != "Verified" || (*st.ConfiguredEgress)[0].CIDR != "203.0.113.10/32" {
		t.Fatalf("PUT = %d %+v", code, st)
	}
	if code := a.do("GET", "/sandboxes/sbx/network", "key-a", "", &st); code != 200 || !st.NetworkReady || (*st.LastVerifiedEgress)[0].CIDR != "203.0.113.10/32" {
		t.Fatalf("GET = %d %+v", code, st)
	}

	rv := policyRV(t, a.nsA)
	for _, body := range []string{
		`{"defaultAction":"deny","egress":[{"cidr":"1.1.1.1","protocol":"TCP","port":443}]}`,
		`{"defaultAction":"allow","egress":[]}`,
		`{"defaultAction":"deny","egress":[{"cidr":"1.2.3.4/24/24"}]}`,
		`not json`,
	} {
		if st, code := a.errorCode("PUT", "/sandboxes/sbx/network", "key-a", body); st != 400 || code != "bad_request" {
			t.Errorf("PUT %s = %d %s, want 400 bad_request", body, st, code)
		}
	}
	if policyRV(t, a.nsA) != rv {
		t.Fatal("a refused PUT changed the policy")
	}
	if st, code := a.errorCode("PUT", "/sandboxes/nope/network", "key-a", `{"defaultAction":"deny","egress":[]}`); st != 404 || code != "sandbox_not_found" {
		t.Fatalf("missing sandbox = %d %s", st, code)
	}
	if st, code := a.errorCode("GET", "/sandboxes/Bad_Id/network", "key-a", ""); st != 400 || code != "bad_request" {
		t.Fatalf("invalid ID = %d %s", st, code)
	}

	// A hand-written policy widening the sandbox: 409 PolicyConflict, LKG restored.
	open := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-all", Namespace: a.nsA},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{}}}}
	if err := env.Client.Create(context.Background(), open); err != nil {
		t.Fatal(err)
	}
	var f httpapi.EgressFailure
	if code := a.do("PUT", "/sandboxes/sbx/network", "key-a", `{"defaultAction":"deny","egress":[{"cidr":"0.0.0.0/0"}]}`, &f); code != 409 ||
		f.Error != "PolicyConflict" || f.Outcome != egress.OutcomeLKGRestored || !slices.Equal(f.Conflicts, []string{"allow-all"}) ||
		f.Network == nil || f.Network.NetworkReady || (*f.Network.ConfiguredEgress)[0].CIDR != "203.0.113.10/32" ||
		!strings.HasPrefix(f.Message, "PolicyConflict: update failed, LKG restored") {
		t.Fatalf("conflicting PUT = %d %+v", code, f)
	}
}

func TestAuthenticationAndCredentialScope(t *testing.T) {
	a := start(t)
	env.OwnedBatchSandbox(t, a.nsA, "sbx", "a", map[string]string{"allocation-id": "a1"})
	env.OwnedBatchSandbox(t, a.nsB, "other", "b", map[string]string{"allocation-id": "b1"})
	for _, tc := range []struct {
		name, path, key string
		hdr             []string
		status          int
		code            string
	}{
		{"no key", "/sandboxes/sbx/network", "", nil, 401, "unauthenticated"},
		{"unknown key", "/sandboxes/sbx/network", "nope", nil, 401, "unauthenticated"},
		{"disabled credential", "/sandboxes/sbx/network", "key-off", nil, 403, "credential_disabled"},
		{"key without credential", "/sandboxes/sbx/network", "key-admin", nil, 403, "forbidden"},
		{"unconfigured cluster", "/sandboxes/sbx/network", "key-lost", nil, 500, "cluster_unknown"},
		{"cluster hint (query)", "/sandboxes/sbx/network?clusterId=no-such-cluster", "key-a", nil, 403, "credential_mismatch"},
		{"namespace hint (query)", "/sandboxes/sbx/network?namespace=" + a.nsB, "key-a", nil, 403, "credential_mismatch"},
		{"cluster hint (header)", "/sandboxes/sbx/network/ingress", "key-a", []string{httpapi.ClusterHintHeader, "no-such-cluster"}, 403, "credential_mismatch"},
		{"namespace hint (header)", "/sandboxes/sbx/network/ingress", "key-a", []string{httpapi.NamespaceHintHeader, a.nsB}, 403, "credential_mismatch"},
		{"another credential's sandbox", "/sandboxes/other/network", "key-a", nil, 404, "sandbox_not_found"},
		{"another credential's sandbox (ingress)", "/sandboxes/other/network/ingress", "key-a", nil, 404, "sandbox_not_found"},
	} {
		if st, code := a.errorCode("GET", tc.path, tc.key, "", tc.hdr...); st != tc.status || code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, st, code, tc.status, tc.code)
		}
	}
	var st egress.Status
	if code := a.do("GET", "/sandboxes/sbx/network?clusterId="+a.cluster+"&namespace="+a.nsA, "key-a", "", &st); code != 200 {
		t.Fatalf("agreeing hints = %d", code)
	}
	if code := a.do("GET", "/sandboxes/other/network", "key-b", "", &st); code != 200 || st.NotReadyReason != egress.ReasonPolicyMissing {
		t.Fatalf("key-b on its own sandbox = %d %+v", code, st)
	}
	if st, code := a.errorCode("GET", "/nowhere", "key-a", ""); st != 404 || code != "not_found" {
		t.Fatalf("unknown route = %d %s", st, code)
	}
}

func TestIngressRoutes(t *testing.T) {
	a := start(t)
	env.OwnedBatchSandbox(t, a.nsA, "sbx", "a", map[string]string{"allocation-id": "a1"})
	var st ingressallow.Status
	if code := a.do("PUT", "/sandboxes/sbx/network/ingress", "key-a", `{"ingress":[{"cidr":"203.0.113.0/24","description":"office"},{"cidr":"198.51.100.7"}]}`, &st); code != 200 ||
		!st.Ready || st.VerificationState != "Verified" || len(*st.LastVerified) != 2 || st.DesiredVersion != 1 || st.AppliedVersion == "" {
		t.Fatalf("PUT = %d %+v", code, st)
	}
	if code := a.do("GET", "/sandboxes/sbx/network/ingress", "key-a", "", &st); code != 200 || !st.Ready ||
		(*st.Desired)[1].Description != "office" || (*st.Configured)[0].CIDR != "198.51.100.7/32" || st.CarrierRef.Path != "/sbx/" {
		t.Fatalf("GET = %d %+v", code, st)
	}
	for _, body := range []string{`{"ingress":[]}`, `{"ingress":[{"cidr":"1.1.1.1 2.2.2.2"}]}`, `{"ingress":[{"cidr":"1.1.1.1/24/24"}]}`, `{}`} {
		if s, code := a.errorCode("PUT", "/sandboxes/sbx/network/ingress", "key-a", body); s != 400 || code != "bad_request" {
			t.Errorf("PUT %s = %d %s", body, s, code)
		}
	}
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: a.nsA, Name: "sbx"}, al); err != nil || al.Generation != 1 {
		t.Fatalf("refused PUTs changed the desired version: %d, %v", al.Generation, err)
	}

	// Another Ingress claims the path: 409, LKG kept on the carrier.
	nginx := "nginx"
	prefix := networkingv1.PathTypePrefix
	intruder := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: a.nsB},
		Spec: networkingv1.IngressSpec{IngressClassName: &nginx, Rules: []networkingv1.IngressRule{{Host: a.host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/sbx/", PathType: &prefix, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "x", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}}
	if err := env.Client.Create(context.Background(), intruder); err != nil {
		t.Fatal(err)
	}
	var f httpapi.IngressFailure
	if code := a.do("PUT", "/sandboxes/sbx/network/ingress", "key-a", `{"ingress":[{"cidr":"0.0.0.0/0"}]}`, &f); code != 409 || f.Error != "PathClaimed" ||
		f.Ingress.VerificationState != "UnverifiedSpec" || len(*f.Ingress.LastVerified) != 2 || (*f.Ingress.Configured)[0].CIDR != "198.51.100.7/32" {
		t.Fatalf("PUT with a claimed path = %d %+v", code, f)
	}
}

// TestIngressPlatformPath: the platform-side path of spec §5.2.1,
// /api/v1/sandbox/instances/{id}/network/ingress, is the same route as
// /sandboxes/{id}/network/ingress (issue 30 item 11; 404 no such route
// before).
func TestIngressPlatformPath(t *testing.T) {
	a := start(t)
	env.OwnedBatchSandbox(t, a.nsA, "sbx", "a", map[string]string{"allocation-id": "a1"})
	const p = "/api/v1/sandbox/instances/sbx/network/ingress"
	var st ingressallow.Status
	if code := a.do("PUT", p, "key-a", `{"ingress":[{"cidr":"203.0.113.0/24","description":"office"}]}`, &st); code != 200 ||
		!st.Ready || st.DesiredVersion != 1 {
		t.Fatalf("PUT %s = %d %+v", p, code, st)
	}
	var viaE2B ingressallow.Status
	if code := a.do("GET", "/sandboxes/sbx/network/ingress", "key-a", "", &viaE2B); code != 200 || !viaE2B.Ready ||
		(*viaE2B.Desired)[0].Description != "office" {
		t.Fatalf("GET after the platform PUT = %d %+v", code, viaE2B)
	}
	if code := a.do("GET", p, "key-a", "", &st); code != 200 || st.AppliedVersion != viaE2B.AppliedVersion {
		t.Fatalf("GET %s = %d %+v", p, code, st)
	}
	if s, code := a.errorCode("PUT", p, "key-a", `{"ingress":[]}`); s != 400 || code != "bad_request" {
		t.Fatalf("PUT %s with an empty list = %d %s", p, s, code)
	}
}

func TestTemplateRoutes(t *testing.T) {
	a := start(t)
	body := `{"ingress":[{"cidr":"172.28.0.0/16","description":"office"}],"egress":[{"cidr":"10.1.2.3/8"}]}`
	if s, code := a.errorCode("PUT", "/sandbox-templates/e2b-test/network", "key-a", body); s != 403 || code != "forbidden" {
		t.Fatalf("non-admin PUT = %d %s", s, code)
	}
	if s, code := a.errorCode("PUT", "/sandbox-templates/Bad_ID/network", "key-admin", body); s != 400 || code != "bad_request" {
		t.Fatalf("invalid template ID = %d %s", s, code)
	}
	if s, code := a.errorCode("GET", "/sandbox-templates/e2b-test/network", "key-a", ""); s != 404 || code != "template_not_found" {
		t.Fatalf("GET before PUT = %d %s", s, code)
	}
	type view struct {
		TemplateID string                 `json:"templateID"`
		Ingress    []v1alpha1.IngressRule `json:"ingress"`
		Egress     []v1alpha1.EgressRule  `json:"egress"`
		Version    int64                  `json:"version"`
	}
	var v view
	if code := a.do("PUT", "/sandbox-templates/e2b-test/network", "key-admin", body, &v); code != 200 || v.Egress[0].CIDR != "10.0.0.0/8" || v.Version != 1 {
		t.Fatalf("PUT = %d %+v", code, v)
	}
	var alias view
	if code := a.do("GET", "/api/v1/sandbox/templates/e2b-test/network", "key-a", "", &alias); code != 200 || alias.Version != v.Version || alias.Ingress[0].Description != "office" {
		t.Fatalf("GET alias = %d %+v", code, alias)
	}
	if s, code := a.errorCode("PUT", "/api/v1/sandbox/templates/e2b-test/network", "key-admin", `{"egress":[{"cidr":"1.1.1.1","port":1}]}`); s != 400 || code != "bad_request" {
		t.Fatalf("bad PUT on alias = %d %s", s, code)
	}

	type initial struct {
		Ingress       []v1alpha1.IngressRule `json:"ingress"`
		Egress        []string               `json:"egress"`
		IngressSource string                 `json:"ingressSource"`
		EgressSource  string                 `json:"egressSource"`
	}
	var in initial
	if code := a.do("POST", "/sandbox-templates/e2b-test/network/resolve", "key-a", ``, &in); code != 200 || in.Egress[0] != "10.0.0.0/8" || in.IngressSource != "template" {
		t.Fatalf("resolve without network = %d %+v", code, in)
	}
	if code := a.do("POST", "/api/v1/sandbox/templates/e2b-test/network/resolve", "key-a", `{"allowOut":["198.51.100.7"],"allowPublicTraffic":true,"denyOut":["0.0.0.0/0"]}`, &in); code != 200 ||
		!slices.Equal(in.Egress, []string{"198.51.100.7/32"}) || in.EgressSource != "request" || in.IngressSource != "template" {
		t.Fatalf("resolve with allowOut = %d %+v", code, in)
	}
	for _, tc := range []struct{ body, code string }{
		{`{"allowOut":["1.2.3.4/24/24"]}`, "network_cidr_invalid"},
		{`{"egress":[{"cidr":"x"}]}`, "network_cidr_invalid"},
		{`{"ingress":[{"cidr":"1.1.1.1 2.2.2.2"}]}`, "ingress_cidr_invalid"},
		{`{"denyOut":["x"]}`, "network_cidr_invalid"},
		{`{"allowOut":["example.com"]}`, "bad_request"},
	} {
		if s, code := a.errorCode("POST", "/sandbox-templates/e2b-test/network/resolve", "key-a", tc.body); s != 400 || code != tc.code {
			t.Errorf("resolve %s = %d %s, want 400 %s", tc.body, s, code, tc.code)
		}
	}

	// A sandbox created from the template keeps its copy when the template
	// changes: its allowlist is the resolved value, set through its own API.
	env.OwnedBatchSandbox(t, a.nsA, "sbx", "a", map[string]string{"allocation-id": "a1"})
	a.do("POST", "/sandbox-templates/e2b-test/network/resolve", "key-a", ``, &in)
	reqBody, _ := json.Marshal(map[string]any{"ingress": in.Ingress})
	var st ingressallow.Status
	if code := a.do("PUT", "/sandboxes/sbx/network/ingress", "key-a", string(reqBody), &st); code != 200 {
		t.Fatalf("PUT ingress = %d %+v", code, st)
	}
	if code := a.do("PUT", "/sandbox-templates/e2b-test/network", "key-admin", `{"ingress":[{"cidr":"0.0.0.0/0"}]}`, &v); code != 200 || v.Version != 2 {
		t.Fatalf("template change = %d %+v", code, v)
	}
	if code := a.do("GET", "/sandboxes/sbx/network/ingress", "key-a", "", &st); code != 200 || (*st.LastVerified)[0].CIDR != "172.28.0.0/16" || st.DesiredVersion != 1 {
		t.Fatalf("sandbox after a template change = %d %+v", code, st)
	}
}

// TestOpenAPIDescribesEveryRoute checks that openapi.json has exactly the
// routes the server registers, each with its methods, and that it is
// valid JSON with every $ref resolvable.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	var doc struct {
		OpenAPI    string                                `json:"openapi"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, r := range httpapi.Routes {
		want = append(want, r.Method+" "+r.Pattern)
	}
	for p, ops := range doc.Paths {
		for m := range ops {
			if m != "parameters" {
				got = append(got, strings.ToUpper(m)+" "+p)
			}
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(want, got) {
		t.Fatalf("OpenAPI routes\n%v\nserver routes\n%v", got, want)
	}
	for _, ref := range refs(httpapi.OpenAPI()) {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		if _, ok := doc.Components.Schemas[name]; !ok {
			t.Errorf("unresolved $ref %s", ref)
		}
	}
	a := start(t)
	resp, err := http.Get(a.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(b, httpapi.OpenAPI()) {
		t.Fatalf("GET /openapi.json = %d", resp.StatusCode)
	}
}

func refs(doc []byte) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "$ref" {
					out = append(out, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		panic(errors.New("openapi.json is not JSON"))
	}
	walk(v)
	return out
}

// TestUnownedSandboxSeenOnlyProjectWide: a BatchSandbox with no recorded
// creating credential (not created by corectl, or created before
// ownership was recorded) is absent for an ordinary credential of its
// namespace and served to the project-wide one.
func TestUnownedSandboxSeenOnlyProjectWide(t *testing.T) {
	a := start(t)
	env.BatchSandbox(t, a.nsA, "legacy", map[string]string{"allocation-id": "l1"})
	for _, p := range []string{"/sandboxes/legacy/network", "/sandboxes/legacy/network/ingress"} {
		var e httpapi.ErrorBody
		if code := a.do("GET", p, "key-a", "", &e); code != 404 || e.Error != httpapi.CodeSandboxNotFound {
			t.Fatalf("key-a GET %s = %d %+v", p, code, e)
		}
	}
	var st egress.Status
	if code := a.do("GET", "/sandboxes/legacy/network", "key-wide", "", &st); code != 200 || st.SandboxID != "legacy" {
		t.Fatalf("key-wide GET = %d %+v", code, st)
	}
}
