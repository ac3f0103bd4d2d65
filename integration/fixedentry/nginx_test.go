package fixedentry_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/fixedentry"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ingress(host, path string, ann map[string]string) networkingv1.Ingress {
	return networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
		Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: path}}}}}}}}
}

// TestNginxHostAndWhitelist: the emulation answers like ingress-nginx for
// the fixed entry's host: another Host gets nginx's 404 (restricted path or
// not), a restricted path admits only its whitelist's sources (403
// otherwise), an echo path answers the source; IngressRoute picks the
// longest matching path among the rules for the host.
func TestNginxHostAndWhitelist(t *testing.T) {
	ings := []networkingv1.Ingress{
		ingress("sandbox.a.example", "/", nil),
		ingress("sandbox.a.example", "/sbx-1", map[string]string{fixedentry.AnnotationWhitelist: "203.0.113.0/24,10.0.0.2/32"}),
		ingress("sandbox.a.example", "/sandbox-probe-echo-ab", map[string]string{fixedentry.AnnotationSnippet: fixedentry.EchoSnippet}),
		ingress("other.example", "/sbx-2", map[string]string{fixedentry.AnnotationWhitelist: "198.51.100.0/24"}),
	}
	if r, ok := fixedentry.IngressRoute(ings, "sandbox.a.example", "/sbx-2/44772/ping"); !ok || r.Restricted {
		t.Fatalf("another host's rule applied: %+v %v", r, ok)
	}
	if r, ok := fixedentry.IngressRoute(ings, "", "/sbx-10/44772/ping"); !ok || r.Restricted || r.Echo {
		t.Fatalf("/sbx-1 matched /sbx-10: %+v %v", r, ok)
	}
	in := fixedentry.New()
	src := "10.0.0.2"
	in.SetNginx(&fixedentry.Nginx{Host: "sandbox.a.example", Source: func(string) string { return src },
		Route: func(p string) (fixedentry.NginxRoute, bool) {
			return fixedentry.IngressRoute(ings, "sandbox.a.example", p)
		}})
	srv := httptest.NewServer(in)
	defer srv.Close()
	get := func(host, path string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Host = host
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		src, host, path string
		status          int
		body            string
	}{
		{"10.0.0.2", "sandbox.a.example:80", "/sandbox-probe-echo-ab", 200, "10.0.0.2"},
		{"10.0.0.2", "Sandbox.A.Example", "/sandbox-probe-echo-ab", 200, "10.0.0.2"},
		{"10.0.0.2", "10.9.9.9:80", "/sandbox-probe-echo-ab", 404, fixedentry.NginxNotFound},
		{"10.0.0.2", "other.example", "/sbx-1/44772/ping", 404, fixedentry.NginxNotFound},
		{"10.0.0.3", "sandbox.a.example", "/sbx-1/44772/ping", 403, "403 Forbidden"},
		{"203.0.113.9", "sandbox.a.example", "/sbx-1/44772/ping", 404, "OpenSandbox Ingress"}, // admitted: no such sandbox behind
	} {
		src = tc.src
		status, body := get(tc.host, tc.path)
		if status != tc.status || !strings.Contains(body, tc.body) {
			t.Errorf("%s → Host %s %s: %d %q, want %d with %q", tc.src, tc.host, tc.path, status, body, tc.status, tc.body)
		}
	}
}
