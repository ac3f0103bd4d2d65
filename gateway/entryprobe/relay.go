package entryprobe

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/sandgate/sandgate/internal/bearer"
	"github.com/sandgate/sandgate/internal/strictjson"
)

// Prefix is the relay's path: GET Prefix lists the clusters, POST
// Prefix/<cluster ID>/probe sends one probe.
const Prefix = "/internal/v1/fixed-entries"

// MaxRequestBody bounds a probe request's body, in bytes; it is checked
// before the body is parsed.
const MaxRequestBody = 1 << 10

// Owns reports whether path is the relay's.
func Owns(path string) bool { return path == Prefix || strings.HasPrefix(path, Prefix+"/") }

// Cluster is one compute cluster as the relay reports it.
type Cluster struct {
	// ID is the cluster ID (the resource credentials' clusterId).
	ID string `json:"id"`
	// FixedEntry is the fixed entry's base URL.
	FixedEntry string `json:"fixed_entry"`
	// Host is the Host header the data plane sends to it.
	Host string `json:"host"`
}

// Clusters is the answer of GET Prefix.
type Clusters struct {
	// Clusters are sorted by ID.
	Clusters []Cluster `json:"clusters"`
}

// ProbeRequest is the body of POST Prefix/<id>/probe.
type ProbeRequest struct {
	// Path is the path to probe (ValidPath).
	Path string `json:"path"`
}

// Error is the body of every refusal: {"error": {"code", "message"}}.
type Error struct {
	// Error is the refusal's code and message.
	Error ErrorBody `json:"error"`
}

// ErrorBody is an error's code and message.
type ErrorBody struct {
	// Code is one of unauthorized, not_found, method_not_allowed,
	// bad_request, path_not_allowed, cluster_not_found, no_data_plane,
	// fixed_entry_unreachable.
	Code string `json:"code"`
	// Message says why, without secrets or bodies.
	Message string `json:"message"`
}

// Target is what the relay needs of one cluster: its fixed entry and the
// data plane's Host for it.
type Target struct {
	// FixedEntry is the cluster's fixed entry base URL.
	FixedEntry *url.URL
	// Host is the Host header the data plane sends; empty means
	// FixedEntry's host.
	Host string
	// ExecdAccessToken is the cluster's execd_access_token, sent on
	// readiness pings as the data plane sends it (see
	// Direct.ExecdAccessToken); empty sends none. Never listed.
	ExecdAccessToken string
	// ExecdTokenSecrets are the cluster's execd_token_secret values (see
	// Direct.ExecdTokenSecrets); none derives no token. Never listed.
	ExecdTokenSecrets [][]byte
}

// Handler is the relay: an HTTP handler for the gateway's internal
// listener, authenticated with its own bearer token.
//
//	GET  /internal/v1/fixed-entries              200 {"clusters": [{"id", "fixed_entry", "host"}]}
//	POST /internal/v1/fixed-entries/<id>/probe   {"path": "/<sandboxID>/44772/ping"} → 200 {"status", "body", "host"}
//
// A probe is sent with Transport (the data plane's) and Host, exactly as
// the data plane sends its requests to that cluster; the fixed entry's
// answer, whatever its status, is a 200 of the relay. Refusals: 401
// unauthorized, 404 not_found or cluster_not_found, 405, 400 bad_request
// (body over MaxRequestBody, malformed, unknown or missing member) or
// path_not_allowed (ValidPath), 503 no_data_plane (no transport), 502
// fixed_entry_unreachable.
type Handler struct {
	// Tokens are the SHA-256 digests of the accepted bearer tokens.
	Tokens [][sha256.Size]byte
	// Targets returns the clusters by ID.
	Targets func() map[string]Target
	// Transport returns the data plane's transport; nil answers 503.
	Transport func() http.RoundTripper
	// Logger receives one debug line per probe; nil means none.
	Logger *zap.Logger
}

func (h *Handler) authorized(r *http.Request) bool { return bearer.MatchesDigest(r, h.Tokens) }

// ServeHTTP serves the relay's paths (see Owns).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandgate-fixed-entries"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
		return
	}
	rest, _ := strings.CutPrefix(r.URL.Path, Prefix)
	switch {
	case rest == "" || rest == "/":
		if !allow(w, r, http.MethodGet) {
			return
		}
		targets := h.Targets()
		out := Clusters{Clusters: make([]Cluster, 0, len(targets))}
		for id, t := range targets {
			out.Clusters = append(out.Clusters, Cluster{ID: id, FixedEntry: t.FixedEntry.String(), Host: effectiveHost(t)})
		}
		sort.Slice(out.Clusters, func(i, j int) bool { return out.Clusters[i].ID < out.Clusters[j].ID })
		writeJSON(w, http.StatusOK, out)
	case strings.HasSuffix(rest, "/probe") && strings.Count(rest, "/") == 2:
		if !allow(w, r, http.MethodPost) {
			return
		}
		h.probe(w, r, strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/probe"))
	default:
		writeError(w, http.StatusNotFound, "not_found", "no such path")
	}
}

func (h *Handler) probe(w http.ResponseWriter, r *http.Request, id string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusBadRequest, "bad_request", "the body is larger than 1024 bytes")
			return
		}
		writeError(w, http.StatusBadRequest, "bad_request", "the body could not be read")
		return
	}
	var req ProbeRequest
	if err := strictjson.Decode(body, &req, strictjson.Schema{Required: map[string][]string{"": {"path"}}}); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if err := ValidPath(req.Path); err != nil {
		writeError(w, http.StatusBadRequest, "path_not_allowed", err.Error())
		return
	}
	t, ok := h.Targets()[id]
	if !ok || t.FixedEntry == nil {
		writeError(w, http.StatusNotFound, "cluster_not_found", "no such cluster on this gateway")
		return
	}
	var rt http.RoundTripper
	if h.Transport != nil {
		rt = h.Transport()
	}
	if rt == nil {
		writeError(w, http.StatusServiceUnavailable, "no_data_plane", "this gateway has no e2b_dataplane whose transport probes could use")
		return
	}
	a, err := Direct{FixedEntry: t.FixedEntry, Host: t.Host, ExecdAccessToken: t.ExecdAccessToken, ExecdTokenSecrets: t.ExecdTokenSecrets, Transport: rt}.Probe(r.Context(), req.Path)
	if err != nil {
		if h.Logger != nil {
			h.Logger.Debug("fixed entry probe failed", zap.String("cluster", id), zap.Error(err))
		}
		writeError(w, http.StatusBadGateway, "fixed_entry_unreachable", err.Error())
		return
	}
	if h.Logger != nil {
		h.Logger.Debug("fixed entry probe", zap.String("cluster", id), zap.Int("status", a.Status))
	}
	writeJSON(w, http.StatusOK, a)
}

// effectiveHost is the Host the data plane sends: t.Host, or the fixed
// entry URL's host.
func effectiveHost(t Target) string {
	if t.Host != "" {
		return t.Host
	}
	return t.FixedEntry.Host
}

func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use "+method)
	return false
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, Error{Error: ErrorBody{Code: code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
