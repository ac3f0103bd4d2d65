// Package controlapi is a stand-in for the E2B control API (the Portal's
// lifecycle API) that hands the SDK a sandbox and its envd access token, so
// the official SDKs can be driven at a local gateway (docs/wire-facts.md §E7.1).
// It serves only what Sandbox.connect() and Sandbox.create() call:
//
//	POST /sandboxes/{id}/connect, POST /v2/sandboxes/{id}/connect   → 200
//	POST /sandboxes, POST /v2/sandboxes                              → 201
//	DELETE /sandboxes/{id}                                           → 204
//
// The body is the Sandbox object the SDKs decode: templateID, sandboxID,
// clientID, envdVersion (required by Python) and envdAccessToken.
package controlapi

import (
	"encoding/json"
	"net/http"
	"strings"
)

// EnvdVersion is the envd version reported to the SDKs: 0.5.7 gives the
// modern default-user behaviour and octet-stream uploads, and claims nothing
// the gateway does not implement (docs/wire-facts.md §E5).
const EnvdVersion = "0.5.7"

// Server answers control-API calls. Token returns the envdAccessToken for a
// sandbox ID, or an error that becomes a 404 (SandboxNotFoundError).
// CreateID is the sandbox ID create() returns.
type Server struct {
	// Token returns the envdAccessToken for a sandbox ID; an error
	// becomes a 404.
	Token func(sandboxID string) (string, error)
	// CreateID is the sandbox ID create() returns.
	CreateID string
}

type sandbox struct {
	TemplateID       string  `json:"templateID"`
	SandboxID        string  `json:"sandboxID"`
	ClientID         string  `json:"clientID"`
	EnvdVersion      string  `json:"envdVersion"`
	EnvdAccessToken  string  `json:"envdAccessToken,omitempty"`
	Domain           *string `json:"domain"`
	TrafficAccessTok *string `json:"trafficAccessToken"`
}

// ServeHTTP implements the routes above; anything else is 404 JSON.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/v2")
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "sandboxes" && parts[2] == "connect":
		s.answer(w, parts[1], http.StatusOK)
	case r.Method == http.MethodPost && len(parts) == 1 && parts[0] == "sandboxes":
		s.answer(w, s.CreateID, http.StatusCreated)
	case r.Method == http.MethodDelete && len(parts) == 2 && parts[0] == "sandboxes":
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "not found"})
	}
}

func (s *Server) answer(w http.ResponseWriter, id string, status int) {
	tok, err := s.Token(id)
	if err != nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "sandbox not found"})
		return
	}
	writeJSON(w, status, sandbox{TemplateID: "base", SandboxID: id, ClientID: "sandgate", EnvdVersion: EnvdVersion, EnvdAccessToken: tok})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
