// Package machineserver is Core's handler of the machine API (package
// node/machine holds the shared types): enrolment with one-time tokens and
// its preview, the node's authenticated configuration, and the release
// manifest and artifact downloads. The gateway serves it on the node
// connect listener, beside /api/v1/sandbox-node/connect (Caddy module
// http.handlers.sandbox_node_connect).
//
// Every JSON body is read up to machine.MaxBody (64 KiB) before it is
// parsed; answers are JSON except the downloads. Tokens and credentials are
// never logged or echoed. The reference is docs/node-machine-api.md.
package machineserver

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sandgate/sandgate/internal/bearer"
	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

// Enroller issues node identities for enrolment tokens (an
// *enrolment.Store).
type Enroller interface {
	// Check returns the pool of a usable token without using it, or an
	// error wrapping enrolment.ErrRefused.
	Check(token string) (string, error)
	// Enrol uses token once and enrols a node (enrolment.Store.Enrol).
	Enrol(token string, r enrolment.Request, resolve func(pool string) (enrolment.Generation, error)) (*enrolment.Enrolled, error)
}

// Handler serves the machine API. Its fields must not change while it
// serves.
type Handler struct {
	// Credentials authenticates nodes (the same store as the WebSocket's).
	// Required.
	Credentials credential.Store
	// Pools gives the pools' deployments and generations. Required.
	Pools *pool.Registry
	// Releases is the release store; nil: no downloads, and no pool can
	// enrol nodes (the runtime could not be installed).
	Releases *releasestore.Store
	// Enrolment enrols nodes; nil: enrolment is off (503 unavailable).
	Enrolment Enroller
	// Logger receives enrolments and refusals; nil: none.
	Logger *zap.Logger
}

// Owns reports whether path is one of the machine API's (not the connect
// path).
func Owns(path string) bool {
	return path == machine.EnrolPath || path == machine.ConfigPath || strings.HasPrefix(path, machine.ReleasesPrefix)
}

// errNoRuntime: the pool cannot say which runtime a node installs.
var errNoRuntime = errors.New("the pool has no deployment whose runtime comes from a published release")

// errEnrolmentChanged: the pool's enrolled generation is not the one the
// enrolment request states.
var errEnrolmentChanged = errors.New("the pool's enrolled generation changed since the preview; the token was not used")

// ServeHTTP routes one machine API request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.Path; {
	case p == machine.EnrolPath:
		switch r.Method {
		case http.MethodPost:
			h.enrol(w, r)
		case http.MethodGet:
			h.preview(w, r)
		default:
			methodNotAllowed(w, "GET, POST")
		}
	case p == machine.ConfigPath:
		if r.Method != http.MethodGet {
			methodNotAllowed(w, "GET")
			return
		}
		h.config(w, r)
	case strings.HasPrefix(p, machine.ReleasesPrefix):
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, "GET, HEAD")
			return
		}
		h.download(w, r, strings.TrimPrefix(p, machine.ReleasesPrefix))
	default:
		writeError(w, http.StatusNotFound, machine.CodeNotFound, "")
	}
}

func (h *Handler) log() *zap.Logger {
	if h.Logger == nil {
		return zap.NewNop()
	}
	return h.Logger
}

// runtimeFor returns the runtime of generation gen of pool p, when it
// comes from a release.
func (h *Handler) runtimeFor(p string, gen int64) (machine.Runtime, bool) {
	b, ok := h.Pools.Binding(p, gen)
	if !ok || b.Source == "" {
		return machine.Runtime{}, false
	}
	return machine.Runtime{Generation: gen, SpecificationDigest: b.SpecificationDigest, Source: b.Source,
		ManifestURL: machine.ManifestURL(b.Source)}, true
}

// runtimes lists the runtimes of the given generations (deduplicated,
// ascending) that come from a release.
func (h *Handler) runtimes(p string, gens ...int64) []machine.Runtime {
	seen := map[int64]bool{}
	out := []machine.Runtime{}
	for _, g := range gens {
		if g <= 0 || seen[g] {
			continue
		}
		seen[g] = true
		if rt, ok := h.runtimeFor(p, g); ok {
			out = append(out, rt)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Generation < out[j].Generation })
	return out
}

// enrolledGeneration is the generation a node enrolling into pool p gets:
// the serving generation, else the target; it must come from a release
// the store holds, so that the node can install exactly it.
func (h *Handler) enrolledGeneration(p string) (proto.Deployment, machine.Runtime, error) {
	d, ok := h.Pools.Deployment(p)
	if !ok {
		return d, machine.Runtime{}, errNoRuntime
	}
	gen := d.Generation
	if d.ServingGeneration != nil {
		gen = *d.ServingGeneration
	}
	rt, ok := h.runtimeFor(p, gen)
	if !ok || h.Releases == nil {
		return d, machine.Runtime{}, errNoRuntime
	}
	if _, err := h.Releases.Release(rt.Source); err != nil {
		return d, machine.Runtime{}, errNoRuntime
	}
	return d, rt, nil
}

func servingOf(d proto.Deployment) int64 {
	if d.ServingGeneration == nil {
		return 0
	}
	return *d.ServingGeneration
}

// preview answers GET EnrolPath with an enrolment token.
func (h *Handler) preview(w http.ResponseWriter, r *http.Request) {
	if h.Enrolment == nil {
		writeError(w, http.StatusServiceUnavailable, machine.CodeUnavailable, "enrolment is off (no state_dir or store kubernetes)")
		return
	}
	token, _ := bearer.FromRequest(r)
	p, err := h.Enrolment.Check(token)
	if err != nil {
		h.refuseEnrolment(w, "preview")
		return
	}
	d, rt, err := h.enrolledGeneration(p)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, machine.CodeDeploymentUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, machine.EnrolPreview{Pool: p,
		Enrolled:   machine.Generation{DeploymentGeneration: rt.Generation, SpecificationDigest: rt.SpecificationDigest},
		Deployment: d, Runtimes: h.runtimes(p, d.Generation, servingOf(d), rt.Generation)})
}

func (h *Handler) refuseEnrolment(w http.ResponseWriter, what string) {
	h.log().Info("node enrolment refused", zap.String("step", what), zap.String("reason", "unknown, used or expired token"))
	w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-node-enrolment", error="invalid_token"`)
	writeError(w, http.StatusUnauthorized, machine.CodeEnrolmentRefused, "")
}

// enrol answers POST EnrolPath.
func (h *Handler) enrol(w http.ResponseWriter, r *http.Request) {
	if h.Enrolment == nil {
		writeError(w, http.StatusServiceUnavailable, machine.CodeUnavailable, "enrolment is off (no state_dir or store kubernetes)")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" && !strings.HasPrefix(ct, "application/json;") {
		writeError(w, http.StatusUnsupportedMediaType, machine.CodeUnsupportedMediaType, "the body must be application/json")
		return
	}
	req, err := machine.DecodeEnrolRequest(r.Body)
	switch {
	case errors.Is(err, machine.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, machine.CodeRequestTooLarge, "the body is over 64 KiB")
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, machine.CodeInvalidRequest, strings.TrimPrefix(err.Error(), machine.ErrMalformed.Error()+": "))
		return
	}
	var deployErr error
	e, err := h.Enrolment.Enrol(req.EnrolmentToken, enrolment.Request{InstallationID: req.InstallationID,
		Provider: req.Provider, BackendFingerprint: req.BackendFingerprint, MaxActive: req.MaxActive,
		MaxRetained: req.MaxRetained, GenerationManagement: req.GenerationManaging()},
		func(p string) (enrolment.Generation, error) {
			_, rt, err := h.enrolledGeneration(p)
			if err != nil {
				deployErr = err
				return enrolment.Generation{}, err
			}
			if req.Enrolled != nil && (req.Enrolled.DeploymentGeneration != rt.Generation ||
				req.Enrolled.SpecificationDigest != rt.SpecificationDigest) {
				// The node verified another runtime than the one it
				// would be registered with: refused before the token is
				// used (spec "Exact-match new installation").
				return enrolment.Generation{}, errEnrolmentChanged
			}
			return enrolment.Generation{Generation: rt.Generation, SpecificationDigest: rt.SpecificationDigest}, nil
		})
	switch {
	case err == nil:
	case errors.Is(err, enrolment.ErrRefused):
		h.refuseEnrolment(w, "enrol")
		return
	case errors.Is(err, errEnrolmentChanged):
		writeError(w, http.StatusConflict, machine.CodeEnrolmentChanged, err.Error())
		return
	case deployErr != nil:
		writeError(w, http.StatusServiceUnavailable, machine.CodeDeploymentUnavailable, deployErr.Error())
		return
	case errors.Is(err, enrolment.ErrInvalid):
		writeError(w, http.StatusBadRequest, machine.CodeInvalidRequest, "malformed enrolment request")
		return
	default:
		h.log().Error("node enrolment could not be recorded", zap.Error(err))
		writeError(w, http.StatusServiceUnavailable, machine.CodeUnavailable, "the enrolment could not be recorded; the token was not used")
		return
	}
	h.log().Info("node enrolled", zap.String("node_id", e.Node.NodeID), zap.String("pool", e.Node.Pool),
		zap.Int64("deployment_generation", e.Node.DeploymentGeneration), zap.String("installation_id", e.Node.InstallationID))
	writeJSON(w, http.StatusCreated, machine.EnrolResponse{NodeID: e.Node.NodeID, Credential: e.Credential, Pool: e.Node.Pool})
}

// authenticateNode checks "Authorization: Bearer <credential>" for
// nodeID. It writes the 401 itself and returns false on failure.
func (h *Handler) authenticateNode(w http.ResponseWriter, r *http.Request, nodeID string) (credential.Node, bool) {
	secret, ok := bearer.FromRequest(r)
	if !ok || !proto.IsUUID(nodeID) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-node"`)
		writeError(w, http.StatusUnauthorized, machine.CodeUnauthorized, "")
		return credential.Node{}, false
	}
	n, err := h.Credentials.Authenticate(nodeID, credential.Sum(secret))
	if err != nil {
		h.log().Info("node machine API refused", zap.String("node_id", nodeID), zap.Error(err))
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-node", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, machine.CodeUnauthorized, "")
		return credential.Node{}, false
	}
	if n.Pool == "" {
		n.Pool = pool.Default
	}
	return n, true
}

// config answers GET ConfigPath.
func (h *Handler) config(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ids := q["node_id"]
	if len(ids) != 1 || !proto.IsUUID(ids[0]) {
		writeError(w, http.StatusBadRequest, machine.CodeInvalidRequest, "node_id must be given once, a lowercase UUID")
		return
	}
	var gen int64
	if gs, ok := q["generation"]; ok {
		g, err := strconv.ParseInt(strings.Join(gs, ","), 10, 64)
		if len(gs) != 1 || err != nil || g <= 0 {
			writeError(w, http.StatusBadRequest, machine.CodeInvalidRequest, "generation must be given once, a positive integer")
			return
		}
		gen = g
	}
	for k := range q {
		if k != "node_id" && k != "generation" {
			writeError(w, http.StatusBadRequest, machine.CodeInvalidRequest, "unknown query parameter "+strconv.Quote(k))
			return
		}
	}
	n, ok := h.authenticateNode(w, r, ids[0])
	if !ok {
		return
	}
	d, ok := h.Pools.Deployment(n.Pool)
	if !ok {
		writeError(w, http.StatusServiceUnavailable, machine.CodeDeploymentUnavailable, "the node's pool has no deployment")
		return
	}
	c := machine.Config{NodeID: n.NodeID, Pool: n.Pool, Deployment: d,
		Enrolled: machine.Generation{DeploymentGeneration: n.DeploymentGeneration, SpecificationDigest: n.SpecificationDigest}}
	if gen > 0 {
		rt, ok := h.runtimeFor(n.Pool, gen)
		if !ok {
			writeError(w, http.StatusNotFound, machine.CodeGenerationUnknown, fmt.Sprintf("pool %s has no runtime of generation %d", n.Pool, gen))
			return
		}
		c.Runtimes = []machine.Runtime{rt}
	} else {
		c.Runtimes = h.runtimes(n.Pool, d.Generation, servingOf(d), n.DeploymentGeneration)
	}
	writeJSON(w, http.StatusOK, c)
}

// download serves ReleasesPrefix + rest: "<source>/manifest.json" or
// "<source>/<artifact>", to a node of a pool that binds the release (node
// credential with NodeIDHeader) or to the holder of a usable enrolment
// token of such a pool.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, rest string) {
	source, name, ok := strings.Cut(rest, "/")
	if !ok || !release.IsSource(source) || (name != release.ManifestName && !release.IsArtifactName(name)) {
		writeError(w, http.StatusNotFound, machine.CodeNotFound, "")
		return
	}
	var poolName string
	if id := r.Header.Get(machine.NodeIDHeader); id != "" {
		n, ok := h.authenticateNode(w, r, id)
		if !ok {
			return
		}
		poolName = n.Pool
	} else {
		token, _ := bearer.FromRequest(r)
		if h.Enrolment == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-node"`)
			writeError(w, http.StatusUnauthorized, machine.CodeUnauthorized, "")
			return
		}
		p, err := h.Enrolment.Check(token)
		if err != nil {
			h.refuseEnrolment(w, "download")
			return
		}
		poolName = p
	}
	// A caller reads only the releases its pool binds; anything else is
	// answered as if it did not exist.
	if h.Releases == nil || !h.Pools.HasSource(poolName, source) {
		writeError(w, http.StatusNotFound, machine.CodeNotFound, "")
		return
	}
	if name == release.ManifestName {
		rel, err := h.Releases.Release(source)
		if err != nil {
			h.notServed(w, source, name, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", `"sha256:`+rel.Digest+`"`)
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(rel.Raw))
		return
	}
	f, a, err := h.Releases.OpenArtifact(source, name)
	if err != nil {
		h.notServed(w, source, name, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", `"sha256:`+a.SHA256+`"`)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, f)
}

func (h *Handler) notServed(w http.ResponseWriter, source, name string, err error) {
	if errors.Is(err, release.ErrNotFound) {
		writeError(w, http.StatusNotFound, machine.CodeNotFound, "")
		return
	}
	h.log().Error("release artifact not served", zap.String("source", source), zap.String("name", name), zap.Error(err))
	writeError(w, http.StatusInternalServerError, machine.CodeReleaseDamaged, "the stored release does not match its manifest")
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, machine.CodeMethodNotAllowed, "")
}

func writeError(w http.ResponseWriter, status int, code, detail string) {
	writeJSON(w, status, machine.Error{Error: code, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := machine.Encode(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal"}`+"\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
