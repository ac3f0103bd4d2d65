// Package admin is the operator's HTTP routes for sandbox nodes, served
// under Caddy's admin endpoint (module admin.api.sandgate): the node pools
// and their deployments, changed at run time without a reload, and the
// one-time enrolment tokens of new nodes.
//
// Routes (JSON; the reference is docs/node-machine-api.md):
//
//	GET /sandgate/pools                          200 {"pools": [pool.Status, …]}
//	GET /sandgate/pools/<name>                   200 pool.Status | 404
//	PUT /sandgate/pools/<name>/deployment        DeploymentRequest → 200 {"deployment": …} | 4xx
//	POST /sandgate/enrolment-tokens              TokenRequest → 201 TokenResponse | 4xx
//	GET  /sandgate/enrolled-nodes                200 {"nodes": [enrolment.Record, …]}
//	POST /sandgate/enrolled-nodes/<id>/disable   200 enrolment.Record | 404   (…/enable likewise)
//	DELETE /sandgate/enrolled-nodes/<id>         204 | 404
//
// Caddy's admin endpoint is not authenticated by itself; it listens on
// localhost:2019 unless configured otherwise, like /load and /config/.
package admin

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

// PoolsPath is the prefix of the pool routes.
const PoolsPath = "/sandgate/pools"

// TokensPath is the enrolment token route.
const TokensPath = "/sandgate/enrolment-tokens"

// EnrolledPath is the prefix of the enrolled-node routes.
const EnrolledPath = "/sandgate/enrolled-nodes"

// MaxBody is the largest request body, in bytes (64 KiB).
const MaxBody = 64 << 10

// State gives the handler the current configuration's pieces; nil values
// mean "not configured".
type State interface {
	// Pools returns the pool registry.
	Pools() *pool.Registry
	// Releases returns the release store.
	Releases() *releasestore.Store
	// Enrolment returns the enrolment store (nil: enrolment is off).
	Enrolment() Enrolments
}

// Enrolments issues enrolment tokens and manages the enrolled nodes (an
// *enrolment.Store; a cluster-wide store can take its place).
type Enrolments interface {
	// Issue creates a one-time token for pool valid for ttl
	// (enrolment.Store.Issue).
	Issue(pool string, ttl time.Duration) (string, time.Time, error)
	// Records lists the enrolled nodes.
	Records() []enrolment.Record
	// SetEnabled enables or disables a node; false when it does not exist.
	SetEnabled(nodeID string, enabled bool) (bool, error)
	// Remove forgets a node; false when it does not exist.
	Remove(nodeID string) (bool, error)
}

// TokenRequest is the body of POST TokensPath.
type TokenRequest struct {
	// Pool is the configured pool the token enrols a node into. Required.
	Pool string `json:"pool"`
	// TTL is the token's lifetime as a Go duration ("1h", "30m"), 1m..720h.
	// Optional, default 1h.
	TTL string `json:"ttl,omitempty"`
}

// TokenResponse is the answer of POST TokensPath. The token is shown this
// once; Core keeps only its SHA-256.
type TokenResponse struct {
	// EnrolmentToken is the one-time token for `nodeagent enrol --token`.
	EnrolmentToken string `json:"enrolment_token"`
	// Pool is the token's pool.
	Pool string `json:"pool"`
	// ExpiresAt is when the token stops being accepted.
	ExpiresAt time.Time `json:"expires_at"`
}

// Handler serves the routes. State is looked up on every request, so the
// handler follows config reloads.
type Handler struct {
	// State returns the current pieces; nil or a nil registry answers 503.
	State func() State
}

// DeploymentRequest is the body of PUT …/deployment: the new target and
// serving generations. When the target generation is not yet bound in the
// pool, Release (a release of the store; Core computes its
// specification digest) or SpecificationDigest binds it; when it is,
// either given must agree with the binding.
type DeploymentRequest struct {
	// Generation is the target generation, > 0. Required.
	Generation int64 `json:"generation"`
	// ServingGeneration is the serving generation, > 0, or null. Required
	// (null must be written out).
	ServingGeneration *int64 `json:"serving_generation"`
	// Release binds Generation to this release. Optional.
	Release string `json:"release,omitempty"`
	// SpecificationDigest binds Generation to this digest. Optional.
	SpecificationDigest string `json:"specification_digest,omitempty"`
}

// DeploymentResponse is the answer of a successful PUT.
type DeploymentResponse struct {
	// Deployment is the pool's new deployment, as welcome and
	// heartbeat_ack now advertise it.
	Deployment proto.Deployment `json:"deployment"`
}

// Pools is the body of GET /sandgate/pools.
type Pools struct {
	// Pools are the configured pools, sorted by name.
	Pools []pool.Status `json:"pools"`
}

// Error is the body of a refusal.
type Error struct {
	// Error is the code: invalid_request, not_found, method_not_allowed,
	// request_too_large, release_not_found, generation_conflict,
	// generation_unbound, unavailable, state_write_failed.
	Error string `json:"error"`
	// Detail explains it (names, never secrets).
	Detail string `json:"detail,omitempty"`
}

// Owns reports whether path is one of the handler's.
func Owns(path string) bool {
	return path == PoolsPath || strings.HasPrefix(path, PoolsPath+"/") || path == TokensPath ||
		path == EnrolledPath || strings.HasPrefix(path, EnrolledPath+"/")
}

// EnrolledNodes is the body of GET EnrolledPath.
type EnrolledNodes struct {
	// Nodes are the enrolled nodes, sorted by node ID.
	Nodes []enrolment.Record `json:"nodes"`
}

// ServeHTTP routes one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var st State
	if h.State != nil {
		st = h.State()
	}
	if st == nil || st.Pools() == nil {
		write(w, http.StatusServiceUnavailable, Error{Error: "unavailable", Detail: "the sandgate app has no nodes block"})
		return
	}
	reg := st.Pools()
	if r.URL.Path == TokensPath {
		if allow(w, r, http.MethodPost) {
			h.issueToken(w, r, st)
		}
		return
	}
	if r.URL.Path == EnrolledPath || strings.HasPrefix(r.URL.Path, EnrolledPath+"/") {
		h.enrolled(w, r, st)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, PoolsPath)
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	switch {
	case rest == "" || rest == "/":
		if allow(w, r, http.MethodGet) {
			write(w, http.StatusOK, Pools{Pools: reg.Pools()})
		}
	case len(parts) == 1:
		if !allow(w, r, http.MethodGet) {
			return
		}
		for _, p := range reg.Pools() {
			if p.Name == parts[0] {
				write(w, http.StatusOK, p)
				return
			}
		}
		write(w, http.StatusNotFound, Error{Error: "not_found", Detail: "no such pool"})
	case len(parts) == 2 && parts[1] == "deployment":
		if r.Method == http.MethodGet {
			d, ok := reg.Deployment(parts[0])
			if !ok {
				write(w, http.StatusNotFound, Error{Error: "not_found", Detail: "no such pool, or it has no deployment"})
				return
			}
			write(w, http.StatusOK, DeploymentResponse{Deployment: d})
			return
		}
		if allow(w, r, http.MethodPut, http.MethodGet) {
			h.setDeployment(w, r, st, parts[0])
		}
	default:
		write(w, http.StatusNotFound, Error{Error: "not_found", Detail: "no such path"})
	}
}

func (h *Handler) setDeployment(w http.ResponseWriter, r *http.Request, st State, name string) {
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	var in DeploymentRequest
	err := strictjson.Decode(b, &in, strictjson.Schema{
		Required: map[string][]string{"": {"generation", "serving_generation"}},
		Nullable: map[string]bool{"/serving_generation": true},
	})
	switch {
	case err != nil:
		write(w, http.StatusBadRequest, Error{Error: "invalid_request", Detail: err.Error()})
		return
	case in.Generation <= 0 || (in.ServingGeneration != nil && *in.ServingGeneration <= 0):
		write(w, http.StatusBadRequest, Error{Error: "invalid_request", Detail: "generation and serving_generation must be positive"})
		return
	case in.Release != "" && in.SpecificationDigest != "":
		write(w, http.StatusBadRequest, Error{Error: "invalid_request", Detail: "give release or specification_digest, not both"})
		return
	case in.SpecificationDigest != "" && !proto.IsDigest(in.SpecificationDigest):
		write(w, http.StatusBadRequest, Error{Error: "invalid_request", Detail: "specification_digest must be 64 lowercase hexadecimal digits"})
		return
	}
	var bind *pool.Binding
	switch {
	case in.Release != "":
		store := st.Releases()
		if store == nil {
			write(w, http.StatusNotFound, Error{Error: "release_not_found", Detail: "no release store is configured (releases <dir>)"})
			return
		}
		rel, err := store.Release(in.Release)
		if err != nil {
			write(w, http.StatusNotFound, Error{Error: "release_not_found", Detail: err.Error()})
			return
		}
		bind = &pool.Binding{Generation: in.Generation, SpecificationDigest: rel.Digest, Source: in.Release}
	case in.SpecificationDigest != "":
		bind = &pool.Binding{Generation: in.Generation, SpecificationDigest: in.SpecificationDigest}
	}
	d, err := st.Pools().Set(name, in.Generation, in.ServingGeneration, bind)
	switch {
	case err == nil:
		write(w, http.StatusOK, DeploymentResponse{Deployment: d})
	case errors.Is(err, pool.ErrUnknownPool):
		write(w, http.StatusNotFound, Error{Error: "not_found", Detail: "no such pool"})
	case errors.Is(err, pool.ErrConflict):
		write(w, http.StatusConflict, Error{Error: "generation_conflict", Detail: err.Error()})
	case errors.Is(err, pool.ErrUnbound):
		write(w, http.StatusConflict, Error{Error: "generation_unbound", Detail: err.Error() + "; give release or specification_digest"})
	case errors.Is(err, pool.ErrInvalid):
		write(w, http.StatusBadRequest, Error{Error: "invalid_request", Detail: err.Error()})
	default:
		write(w, http.StatusInternalServerError, Error{Error: "state_write_failed", Detail: "the pool state could not be written; nothing changed"})
	}
}

func (h *Handler) issueToken(w http.ResponseWriter, r *http.Request, st State) {
	store := st.Enrolment()
	if store == nil {
		write(w, http.StatusServiceUnavailable, Error{Error: "unavailable", Detail: "enrolment is off: set state_dir or store kubernetes in the nodes block"})
		return
	}
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	var in TokenRequest
	if err := strictjson.Decode(b, &in, strictjson.Schema{Required: map[string][]string{"": {"pool"}}}); err != nil {
		write(w, http.StatusBadRequest, Error{Error: "invalid_request", Detail: err.Error()})
		return
	}
	var ttl time.Duration
	if in.TTL != "" {
		d, err := time.ParseDuration(in.TTL)
		if err != nil {
			write(w, http.StatusBadRequest, Error{Error: "invalid_request", Detail: "ttl must be a duration such as 1h or 30m"})
			return
		}
		ttl = d
	}
	if !st.Pools().Configured(in.Pool) {
		write(w, http.StatusNotFound, Error{Error: "not_found", Detail: "no such pool"})
		return
	}
	tok, exp, err := store.Issue(in.Pool, ttl)
	switch {
	case errors.Is(err, enrolment.ErrInvalid):
		write(w, http.StatusBadRequest, Error{Error: "invalid_request", Detail: strings.TrimPrefix(err.Error(), enrolment.ErrInvalid.Error()+": ")})
	case err != nil:
		write(w, http.StatusInternalServerError, Error{Error: "state_write_failed", Detail: "the token could not be recorded; none was issued"})
	default:
		write(w, http.StatusCreated, TokenResponse{EnrolmentToken: tok, Pool: in.Pool, ExpiresAt: exp})
	}
}

// enrolled serves the enrolled-node routes.
func (h *Handler) enrolled(w http.ResponseWriter, r *http.Request, st State) {
	store := st.Enrolment()
	if store == nil {
		write(w, http.StatusServiceUnavailable, Error{Error: "unavailable", Detail: "enrolment is off: set state_dir or store kubernetes in the nodes block"})
		return
	}
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, EnrolledPath), "/")
	parts := strings.Split(rest, "/")
	var (
		found bool
		err   error
	)
	switch {
	case rest == "":
		if allow(w, r, http.MethodGet) {
			write(w, http.StatusOK, EnrolledNodes{Nodes: store.Records()})
		}
		return
	case len(parts) == 1:
		if !allow(w, r, http.MethodDelete) {
			return
		}
		if found, err = store.Remove(parts[0]); err == nil && found {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	case len(parts) == 2 && (parts[1] == "disable" || parts[1] == "enable"):
		if !allow(w, r, http.MethodPost) {
			return
		}
		if found, err = store.SetEnabled(parts[0], parts[1] == "enable"); err == nil && found {
			for _, rec := range store.Records() {
				if rec.NodeID == parts[0] {
					write(w, http.StatusOK, rec)
					return
				}
			}
		}
	default:
		write(w, http.StatusNotFound, Error{Error: "not_found", Detail: "no such path"})
		return
	}
	if err != nil {
		write(w, http.StatusInternalServerError, Error{Error: "state_write_failed", Detail: "the enrolment state could not be written; nothing changed"})
		return
	}
	write(w, http.StatusNotFound, Error{Error: "not_found", Detail: "no such enrolled node"})
}

// readBody reads at most MaxBody bytes; it answers 413 or 400 itself.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		write(w, http.StatusBadRequest, Error{Error: "invalid_request", Detail: "reading the body failed"})
		return nil, false
	}
	if len(b) > MaxBody {
		write(w, http.StatusRequestEntityTooLarge, Error{Error: "request_too_large", Detail: "the body is over 64 KiB"})
		return nil, false
	}
	return b, true
}

func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	write(w, http.StatusMethodNotAllowed, Error{Error: "method_not_allowed", Detail: "use " + strings.Join(methods, " or ")})
	return false
}

func write(w http.ResponseWriter, status int, v any) {
	b, err := jsonv2.Marshal(v, jsonv2.Deterministic(true))
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
