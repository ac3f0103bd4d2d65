package httpapi_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

// e2bRoutes is every route of E2B's control API: the paths and methods of
// e2b-dev/infra spec/openapi.yml at 54693ff35 (the document corectl's
// E2B models come from, package e2bmodeltest), in its order.
var e2bRoutes = []string{
	"GET /health", "GET /teams", "GET /teams/{teamID}/metrics", "GET /teams/{teamID}/metrics/max",
	"GET /sandboxes", "POST /sandboxes", "GET /v2/sandboxes", "GET /sandboxes/metrics",
	"GET /sandboxes/{sandboxID}/logs", "GET /v2/sandboxes/{sandboxID}/logs",
	"GET /sandboxes/{sandboxID}", "DELETE /sandboxes/{sandboxID}", "GET /sandboxes/{sandboxID}/metrics",
	"POST /sandboxes/{sandboxID}/pause", "POST /sandboxes/{sandboxID}/resume", "POST /sandboxes/{sandboxID}/fork",
	"POST /sandboxes/{sandboxID}/connect", "POST /sandboxes/{sandboxID}/timeout", "PUT /sandboxes/{sandboxID}/network",
	"POST /sandboxes/{sandboxID}/refreshes", "POST /sandboxes/{sandboxID}/snapshots", "GET /snapshots",
	"POST /v3/templates", "GET /v2/templates", "POST /v2/templates", "GET /templates/{templateID}/files/{hash}",
	"GET /templates", "POST /templates", "GET /templates/{templateID}", "POST /templates/{templateID}",
	"DELETE /templates/{templateID}", "PATCH /templates/{templateID}", "POST /templates/{templateID}/builds/{buildID}",
	"POST /v2/templates/{templateID}/builds/{buildID}", "PATCH /v2/templates/{templateID}",
	"GET /templates/{templateID}/builds/{buildID}/status", "GET /templates/{templateID}/builds/{buildID}/logs",
	"POST /templates/tags", "DELETE /templates/tags", "GET /templates/{templateID}/tags", "GET /templates/aliases/{alias}",
	"GET /nodes", "GET /nodes/{nodeID}", "POST /nodes/{nodeID}",
	"POST /admin/teams/{teamID}/sandboxes/kill", "GET /admin/sandboxes/running-counts", "POST /admin/teams/{teamID}/builds/cancel",
	"POST /admin/teams/{teamID}/api-keys", "DELETE /admin/teams/{teamID}/api-keys/{apiKeyID}",
	"POST /access-tokens", "DELETE /access-tokens/{accessTokenID}",
	"GET /api-keys", "POST /api-keys", "PATCH /api-keys/{apiKeyID}", "DELETE /api-keys/{apiKeyID}",
	"GET /volumes", "POST /volumes", "GET /volumes/{volumeID}", "DELETE /volumes/{volumeID}",
	"GET /secrets", "POST /secrets", "GET /secrets/{secretID}", "POST /secrets/{secretID}", "DELETE /secrets/{secretID}",
}

// routeStatus is how corectl answers route: served (E2B's route, in
// Routes), 501 (in UnsupportedRoutes, or pause and resume) or
// sandgate-only (in Routes, not E2B's); "" when it is none of them.
func routeStatus(route string) string {
	served := slices.ContainsFunc(httpapi.Routes, func(r httpapi.Route) bool { return r.Method+" "+r.Pattern == route })
	refused := slices.ContainsFunc(httpapi.UnsupportedRoutes, func(u httpapi.Unsupported) bool { return u.Method+" "+u.Pattern == route })
	e2b := slices.Contains(e2bRoutes, route)
	switch {
	case served && refused:
		return "both served and refused"
	case served && e2b && (route == "POST /sandboxes/{sandboxID}/pause" || route == "POST /sandboxes/{sandboxID}/resume"):
		return "501" // served by a handler that answers 501 after the ownership check
	case served && e2b:
		return "served"
	case served:
		return "sandgate-only"
	case refused && e2b:
		return "501"
	case refused:
		return "refused but not E2B's"
	}
	return ""
}

// TestEveryE2BRouteAnswered: every E2B route is served or refused with
// 501, never both, nothing refused is not E2B's, and the table in
// docs/corectl.md says the same for every E2B and corectl route.
func TestEveryE2BRouteAnswered(t *testing.T) {
	for _, r := range e2bRoutes {
		if st := routeStatus(r); st != "served" && st != "501" {
			t.Errorf("E2B route %s: %q", r, st)
		}
	}
	for _, u := range httpapi.UnsupportedRoutes {
		if st := routeStatus(u.Method + " " + u.Pattern); st != "501" || !strings.Contains(u.Message(), " is not supported by sandgate ("+u.Feature+"): ") ||
			strings.HasSuffix(u.Message(), ": ") {
			t.Errorf("refused route %s %s: %q, message %q", u.Method, u.Pattern, st, u.Message())
		}
	}
	f, err := os.Open("../../docs/corectl.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `([A-Z]+ /[^`]*)` \\| (served|501|sandgate-only)[ |]")
	documented := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			if _, dup := documented[m[1]]; dup {
				t.Errorf("docs/corectl.md lists %s twice", m[1])
			}
			documented[m[1]] = m[2]
		}
	}
	all := slices.Clone(e2bRoutes)
	for _, r := range httpapi.Routes {
		all = append(all, r.Method+" "+r.Pattern)
	}
	for _, r := range all {
		if got, want := documented[r], routeStatus(r); got != want {
			t.Errorf("docs/corectl.md: %s is %q, want %q", r, got, want)
		}
	}
	for r := range documented {
		if !slices.Contains(all, r) {
			t.Errorf("docs/corectl.md lists %s, which is neither E2B's nor corectl's", r)
		}
	}
}

// TestOwnershipFailsClosed: a cluster handle without a Reader cannot
// check who owns a sandbox, so every sandbox route answers 503 and does
// not run (it used to skip the check); the refusal is counted.
func TestOwnershipFailsClosed(t *testing.T) {
	keys, err := apikey.Parse([]byte("keys:\n  - {name: a, sha256: " + apikey.Digest("key-a") + ", credentialId: a}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	s := &httpapi.Server{Keys: keys, Metrics: m,
		Credentials: credential.Static{"a": {ID: "a", Enabled: true, ProjectNamespace: "ns-a", ClusterID: "c1"}},
		Clusters:    map[string]*httpapi.ClusterHandle{"c1": {Cluster: &cluster.Cluster{ID: "c1"}}}}
	h := s.Handler()
	for _, r := range [][2]string{{"GET", "/sandboxes/sbx1/network"}, {"PUT", "/sandboxes/sbx1/network"}, {"GET", "/sandboxes/sbx1/network/ingress"},
		{"PUT", "/sandboxes/sbx1/network/ingress"}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(r[0], r[1], strings.NewReader(`{}`))
		req.Header.Set(httpapi.APIKeyHeader, "key-a")
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"error":"unavailable"`) {
			t.Errorf("%s %s = %d %s", r[0], r[1], rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	samples, err := scrapetest.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := samples.Value("corectl_api_refusals_total", "reason", metrics.RefusalOwnerUnchecked); got != 4 {
		t.Fatalf("owner_unchecked refusals = %g", got)
	}
}
