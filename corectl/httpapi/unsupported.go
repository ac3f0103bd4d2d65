package httpapi

import (
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/corectl/apikey"
)

// Unsupported is one route of E2B's control API that sandgate does not
// serve: it answers 501 not_supported in E2B's error shape after
// authentication, so an SDK raises an error that says "not supported"
// (JS SandboxError "501: not_supported: …", Python SandboxException)
// rather than a not-found error.
type Unsupported struct {
	// Method and Pattern are the route as E2B's OpenAPI document names it
	// ({name} is one path segment).
	Method, Pattern string
	// Feature names what the route belongs to, for the answer and the
	// docs ("snapshots", "templates", ...).
	Feature string
}

// Reasons of the 501 answers, by feature: why sandgate has no such thing.
var unsupportedWhy = map[string]string{
	"fork":          "OpenSandbox sandboxes cannot copy their running state",
	"snapshots":     "OpenSandbox sandboxes cannot keep their process and filesystem state",
	"templates":     "templates are set up by the operator in corectl's configuration, not built through the API",
	"volumes":       "sandgate has no persistent volumes",
	"secrets":       "sandgate keeps no secrets for sandboxes",
	"teams":         "teams are the operator's API-key and credential files",
	"API keys":      "API keys are the operator's API-key file",
	"access tokens": "sandgate authenticates API keys only",
	"nodes":         "compute nodes are the Kubernetes clusters' own",
	"admin":         "administration is the operator's, through the key and credential files and Kubernetes",
}

// UnsupportedRoutes lists the routes of E2B's control API (e2b-dev/infra
// spec/openapi.yml at 54693ff35) that sandgate does not serve; every other
// route of that document is in Routes (a test checks both, and the table
// in docs/corectl.md).
var UnsupportedRoutes = []Unsupported{
	{"GET", "/teams", "teams"},
	{"GET", "/teams/{teamID}/metrics", "teams"},
	{"GET", "/teams/{teamID}/metrics/max", "teams"},
	{"POST", "/sandboxes/{sandboxID}/fork", "fork"},
	{"POST", "/sandboxes/{sandboxID}/snapshots", "snapshots"},
	{"GET", "/snapshots", "snapshots"},
	{"POST", "/v3/templates", "templates"},
	{"GET", "/v2/templates", "templates"},
	{"POST", "/v2/templates", "templates"},
	{"GET", "/templates/{templateID}/files/{hash}", "templates"},
	{"GET", "/templates", "templates"},
	{"POST", "/templates", "templates"},
	{"GET", "/templates/{templateID}", "templates"},
	{"POST", "/templates/{templateID}", "templates"},
	{"DELETE", "/templates/{templateID}", "templates"},
	{"PATCH", "/templates/{templateID}", "templates"},
	{"POST", "/templates/{templateID}/builds/{buildID}", "templates"},
	{"POST", "/v2/templates/{templateID}/builds/{buildID}", "templates"},
	{"PATCH", "/v2/templates/{templateID}", "templates"},
	{"GET", "/templates/{templateID}/builds/{buildID}/status", "templates"},
	{"GET", "/templates/{templateID}/builds/{buildID}/logs", "templates"},
	{"POST", "/templates/tags", "templates"},
	{"DELETE", "/templates/tags", "templates"},
	{"GET", "/templates/{templateID}/tags", "templates"},
	{"GET", "/templates/aliases/{alias}", "templates"},
	{"GET", "/nodes", "nodes"},
	{"GET", "/nodes/{nodeID}", "nodes"},
	{"POST", "/nodes/{nodeID}", "nodes"},
	{"POST", "/admin/teams/{teamID}/sandboxes/kill", "admin"},
	{"GET", "/admin/sandboxes/running-counts", "admin"},
	{"POST", "/admin/teams/{teamID}/builds/cancel", "admin"},
	{"POST", "/admin/teams/{teamID}/api-keys", "admin"},
	{"DELETE", "/admin/teams/{teamID}/api-keys/{apiKeyID}", "admin"},
	{"POST", "/access-tokens", "access tokens"},
	{"DELETE", "/access-tokens/{accessTokenID}", "access tokens"},
	{"GET", "/api-keys", "API keys"},
	{"POST", "/api-keys", "API keys"},
	{"PATCH", "/api-keys/{apiKeyID}", "API keys"},
	{"DELETE", "/api-keys/{apiKeyID}", "API keys"},
	{"GET", "/volumes", "volumes"},
	{"POST", "/volumes", "volumes"},
	{"GET", "/volumes/{volumeID}", "volumes"},
	{"DELETE", "/volumes/{volumeID}", "volumes"},
	{"GET", "/secrets", "secrets"},
	{"POST", "/secrets", "secrets"},
	{"GET", "/secrets/{secretID}", "secrets"},
	{"POST", "/secrets/{secretID}", "secrets"},
	{"DELETE", "/secrets/{secretID}", "secrets"},
}

// Message is the text of the route's 501 answer: "<Method> <Pattern> is
// not supported by sandgate (<feature>): <why>".
func (u Unsupported) Message() string {
	return u.Method + " " + u.Pattern + " is not supported by sandgate (" + u.Feature + "): " + unsupportedWhy[u.Feature]
}

// match reports whether r is this route, with the values of its {name}
// segments. The net/http ServeMux cannot hold these patterns beside each
// other (GET /templates/aliases/{alias} and GET
// /templates/{templateID}/tags both match /templates/aliases/tags, and
// neither is more specific), so Handler matches them itself, after every
// served route.
func (u Unsupported) match(r *http.Request) (map[string]string, bool) {
	if r.Method != u.Method {
		return nil, false
	}
	want := strings.Split(strings.TrimPrefix(u.Pattern, "/"), "/")
	got := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(want) != len(got) {
		return nil, false
	}
	vals := map[string]string{}
	for i, w := range want {
		if name, ok := strings.CutPrefix(w, "{"); ok {
			if got[i] == "" {
				return nil, false
			}
			vals[strings.TrimSuffix(name, "}")] = got[i]
			continue
		}
		if w != got[i] {
			return nil, false
		}
	}
	return vals, true
}

// refuseUnsupported answers route u: a route on one sandbox checks the
// caller's ownership and the sandbox first (a missing, another owner's or
// a deleting sandbox is 404 as on every sandbox route), any other route
// authenticates the API key (401/403 as everywhere); then 501
// not_supported.
func (s *Server) refuseUnsupported(w http.ResponseWriter, r *http.Request, u Unsupported) {
	if strings.Contains(u.Pattern, "{sandboxID}") {
		s.notSupported(w, r, u.Message())
		return
	}
	_, err := apikey.Authenticate(r.Context(), s.Keys, s.Credentials, r.Header.Get(APIKeyHeader), false)
	if !s.authError(w, r, err) {
		return
	}
	s.fail(w, r, http.StatusNotImplemented, CodeNotSupported, u.Message())
}

// health is E2B's GET /health: 204, no authentication.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusNoContent)
}
