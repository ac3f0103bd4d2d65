// Package httpapi is corectl's HTTP API: the network routes of spec
// §3.1 and §3.2 for sandboxes and templates, authenticated by API key and
// scoped to the caller's resource credential (package apikey), and the
// OpenAPI document of every route (openapi.json, served at
// GET /openapi.json).
//
// Routes (docs/corectl.md has the request and answer shapes):
//
//	PUT|GET /sandboxes/{sandboxID}/network            egress (spec §3.1.1); PUT also takes
//	                                                  E2B's SandboxNetworkUpdateConfig (→ 204)
//	PUT|GET /api/v1/sandbox/instances/{sandboxID}/network   egress, sandgate's body only
//	PUT|GET /sandboxes/{sandboxID}/network/ingress    ingress allowlist (spec §5.2)
//	PUT|GET /sandbox-templates/{templateId}/network   template defaults (spec §3.2)
//	PUT|GET /api/v1/sandbox/templates/{templateId}/network   (alias)
//	POST    /sandbox-templates/{templateId}/network/resolve  create-time resolution (spec §3.1.1 II)
//	POST    /api/v1/sandbox/templates/{templateId}/network/resolve   (alias)
//	GET     /openapi.json
//	POST    /sandboxes, /v2/sandboxes                create (spec §4.1) → 201
//	POST    /sandboxes/{sandboxID}/connect (and /v2) → 200 with a new token
//	GET     /sandboxes/{sandboxID}                   lifecycle, network, endpoints
//	GET     /sandboxes/{sandboxID}/endpoints?port=N  one business port's projection (spec §4.4)
//	GET     /api/v1/sandbox/instances/{sandboxID}/endpoint?port=6080   the Native Browser (spec §4.4)
//	DELETE  /sandboxes/{sandboxID}                   fail-closed delete → 204
//	POST    /sandboxes/{sandboxID}/timeout           set the end time → 204
//	POST    /sandboxes/{sandboxID}/refreshes         extend the end time → 204
//	GET     /sandboxes, /v2/sandboxes                list (E2B ListedSandbox)
//	GET     /sandboxes/metrics                       E2B SandboxesWithMetrics (sandbox_ids)
//	GET     /sandboxes/{sandboxID}/metrics           E2B SandboxMetric list
//	GET     /sandboxes/{sandboxID}/logs (and /v2)    E2B SandboxLogs (v2: SandboxLogsV2Response)
//	POST    /sandboxes/{sandboxID}/pause, /resume    501 not_supported
//	GET     /internal/v1/authorize                   the gateway's authorizer (internal token)
//	GET     /health                                  E2B's health check → 204 (no API key)
//
// E2B's other routes (UnsupportedRoutes: snapshots, fork, templates,
// volumes, secrets, teams, API keys, access tokens, nodes, admin) answer
// 501 not_supported after authentication; anything else is 404.
//
// Every error is the flat E2B envelope {"code": <HTTP status>, "error":
// "<stable code>", "message": "<stable code>: <text>"}.
package httpapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/browser"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/fairshare"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/quota"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/corectl/sandboxlogs"
	"github.com/sandgate/sandgate/corectl/template"
	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/credential"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document of the API.
func OpenAPI() []byte { return openAPI }

// APIKeyHeader carries the API key (the E2B SDKs send X-API-Key).
const APIKeyHeader = "X-API-Key"

// Hint headers and query parameters: a caller may state the cluster or
// namespace it expects; a hint that disagrees with its credential is
// refused (spec §3.1).
const (
	ClusterHintHeader   = "X-Sandgate-Cluster-Id"
	NamespaceHintHeader = "X-Sandgate-Namespace"
	ClusterHintQuery    = "clusterId"
	NamespaceHintQuery  = "namespace"
)

// ClusterHandle is what the API needs of one compute cluster.
type ClusterHandle struct {
	// Cluster is its configuration.
	Cluster *cluster.Cluster
	// Egress runs the egress flows.
	Egress *egress.Engine
	// Ingress runs the ingress allowlist flows (SetDesired and Get here;
	// Reconcile in the leader's reconciler).
	Ingress *ingressallow.Engine
	// Cache reads BatchSandboxes from the manager's informer cache, for
	// the gateway's authorizer (GET /internal/v1/authorize); nil answers
	// every authorization not_found.
	Cache client.Reader
	// CacheSynced reports whether Cache has synced at least once (nil:
	// always). The Locate question, which asks every cluster's Cache
	// (locate.go), leaves out a cluster whose Cache has not, so that a
	// cluster whose apiserver has not answered since corectl started does
	// not hold up, or fail, the answers about the other clusters'
	// sandboxes.
	CacheSynced func() bool
	// Reader reads BatchSandboxes for the ownership check of every
	// sandbox route (a direct, uncached client: a route must never act on
	// a stale owner).
	Reader client.Reader
	// Logs streams the sandbox containers' logs (pods/log) for the log
	// routes; nil answers them 503.
	Logs sandboxlogs.Source
	// Lifecycle runs create/connect/get/delete (spec §3.1, §4.1); nil
	// when no token signing key is configured (those routes then answer
	// 503 lifecycle_disabled).
	Lifecycle *lifecycle.Orchestrator
	// Browser binds the Native Browser carrier (GET
	// /api/v1/sandbox/instances/{id}/endpoint); nil answers that route
	// 503 unavailable.
	Browser *browser.Binder
	// NotReadyRereads bounds the authorizer's re-reads from Reader of a
	// sandbox the cache shows not ready (authorize.go): a token bucket
	// shared by every question about the cluster's sandboxes. nil means a
	// bucket of DefaultNotReadyRereadBurst refilled at
	// DefaultNotReadyRereadRate a second, made on first use.
	NotReadyRereads *rate.Limiter

	rereadsOnce sync.Once
	// credRereads are each credential's shares of NotReadyRereads
	// (allowReread).
	credMu      sync.Mutex
	credRereads map[string]*rate.Limiter
}

// The authorizer's re-reads of not-ready sandboxes per cluster by default:
// a burst of 100, then 50 a second, a sixth of the direct client's default
// rate limit per resource type (cluster.DefaultClientQPS, 300), which for
// BatchSandboxes they share with every route's ownership check and every
// create and delete of the cluster. Past it the cache's not_ready answer
// stands (the gateway asks again within a second).
const (
	DefaultNotReadyRereadRate  = 50
	DefaultNotReadyRereadBurst = 100
)

// Each credential's share of its cluster's re-reads: a burst of 20, then
// 10 a second, a fifth of the cluster's, so a tenant keeping its
// sandboxes not ready and asking about them without pause leaves the
// others at least 40 re-reads a second (and the burst's rest); it takes
// five such tenants to empty the cluster's bucket.
const (
	NotReadyRereadCredentialRate  = 10
	NotReadyRereadCredentialBurst = 20
)

// maxCredRereads is the number of credentials' shares past which the idle
// ones (bucket full again) are dropped when another is added: the map
// holds at most the credentials that asked within the last 2 s, plus
// this many.
const maxCredRereads = 1024

// allowReread reports whether credential cred may read a not-ready
// sandbox again now: within its own share (NotReadyRereadCredentialRate,
// NotReadyRereadCredentialBurst) and then within the cluster's
// NotReadyRereads. A refusal by the share takes nothing from the
// cluster's bucket.
func (ch *ClusterHandle) allowReread(cred string) bool {
	ch.credMu.Lock()
	l, ok := ch.credRereads[cred]
	if !ok {
		if ch.credRereads == nil {
			ch.credRereads = map[string]*rate.Limiter{}
		}
		if len(ch.credRereads) >= maxCredRereads {
			for k, v := range ch.credRereads {
				if v.Tokens() >= NotReadyRereadCredentialBurst {
					delete(ch.credRereads, k)
				}
			}
		}
		l = rate.NewLimiter(NotReadyRereadCredentialRate, NotReadyRereadCredentialBurst)
		ch.credRereads[cred] = l
	}
	ch.credMu.Unlock()
	return l.Allow() && ch.notReadyRereads().Allow()
}

// notReadyRereads returns NotReadyRereads, made on first use when nil.
func (ch *ClusterHandle) notReadyRereads() *rate.Limiter {
	ch.rereadsOnce.Do(func() {
		if ch.NotReadyRereads == nil {
			ch.NotReadyRereads = rate.NewLimiter(DefaultNotReadyRereadRate, DefaultNotReadyRereadBurst)
		}
	})
	return ch.NotReadyRereads
}

// Server serves the API.
type Server struct {
	// Keys are the API keys (looked up on every request, so a reloaded
	// key file is in force at once).
	Keys apikey.Source
	// Credentials re-reads resource credentials.
	Credentials credential.Source
	// Clusters maps cluster IDs to handles.
	Clusters map[string]*ClusterHandle
	// Templates stores template defaults.
	Templates *template.Store
	// IngressWait bounds how long an ingress PUT waits for the reconciler
	// to finish the new desired version (default 15 s); on timeout the
	// answer is 202 with the current state.
	IngressWait time.Duration
	// InternalToken authenticates the gateway's authorizer on GET
	// /internal/v1/authorize (Authorization: Bearer); empty: that route
	// answers 404 unless InternalTokens has one. Never logged.
	InternalToken string
	// InternalTokens are further accepted internal tokens, beside
	// InternalToken: several are accepted at once so the token can be
	// rotated without refusing the gateway (docs/runbook.md "Rotating
	// secrets"). Empty strings are ignored. Never logged.
	InternalTokens []string
	// Log receives one line per failed request (zero value: discard).
	Log logr.Logger
	// Metrics counts and times every request by route
	// (corectl_http_requests_total, corectl_http_request_duration_seconds);
	// nil records nothing.
	Metrics *metrics.Metrics

	// Shares are the credentials' shares of the apiserver requests made
	// for their calls and of calls in progress (package fairshare): a call
	// of a credential whose share is spent, or that has its calls in
	// progress, is 429 rate_limited before it does anything, and
	// every apiserver request of an admitted call is charged to it (the
	// clusters' transports must be wrapped with fairshare.Transport). nil:
	// no shares.
	Shares *fairshare.Shares

	// logReadsLimiter bounds the log reads in progress (logReads).
	logReadsOnce    sync.Once
	logReadsLimiter *admission.Limiter

	// quota enforces the credentials' create limits (its zero value is
	// ready).
	quota quota.Gate
}

// Route is one route of the API.
type Route struct {
	// Method and Pattern are the net/http ServeMux pattern parts.
	Method, Pattern string
	handler         func(*Server, http.ResponseWriter, *http.Request)
}

// Routes lists every route; the OpenAPI document must describe exactly
// these (a test checks it).
var Routes = []Route{
	{"PUT", "/sandboxes/{sandboxID}/network", (*Server).putEgress},
	{"GET", "/sandboxes/{sandboxID}/network", (*Server).getEgress},
	{"PUT", "/api/v1/sandbox/instances/{sandboxID}/network", (*Server).putEgressPlatform},
	{"GET", "/api/v1/sandbox/instances/{sandboxID}/network", (*Server).getEgress},
	{"PUT", "/sandboxes/{sandboxID}/network/ingress", (*Server).putIngress},
	{"GET", "/sandboxes/{sandboxID}/network/ingress", (*Server).getIngress},
	{"PUT", "/api/v1/sandbox/instances/{sandboxID}/network/ingress", (*Server).putIngress}, // spec §5.2.1's platform-side path
	{"GET", "/api/v1/sandbox/instances/{sandboxID}/network/ingress", (*Server).getIngress},
	{"PUT", "/sandbox-templates/{templateId}/network", (*Server).putTemplate},
	{"GET", "/sandbox-templates/{templateId}/network", (*Server).getTemplate},
	{"POST", "/sandbox-templates/{templateId}/network/resolve", (*Server).resolve},
	{"PUT", "/api/v1/sandbox/templates/{templateId}/network", (*Server).putTemplate},
	{"GET", "/api/v1/sandbox/templates/{templateId}/network", (*Server).getTemplate},
	{"POST", "/api/v1/sandbox/templates/{templateId}/network/resolve", (*Server).resolve},
	{"GET", "/openapi.json", (*Server).openapi},
	{"POST", "/sandboxes", (*Server).createSandbox},
	{"POST", "/v2/sandboxes", (*Server).createSandbox},
	{"POST", "/sandboxes/{sandboxID}/connect", (*Server).connectSandbox},
	{"POST", "/v2/sandboxes/{sandboxID}/connect", (*Server).connectSandbox},
	{"GET", "/sandboxes/{sandboxID}", (*Server).getSandbox},
	{"GET", "/sandboxes/{sandboxID}/endpoints", (*Server).getEndpoint},
	{"GET", "/api/v1/sandbox/instances/{sandboxID}/endpoint", (*Server).nativeEndpoint},
	{"DELETE", "/sandboxes/{sandboxID}", (*Server).deleteSandbox},
	{"POST", "/sandboxes/{sandboxID}/timeout", (*Server).setTimeout},
	{"POST", "/sandboxes/{sandboxID}/refreshes", (*Server).refresh},
	{"GET", "/sandboxes", (*Server).listSandboxes},
	{"GET", "/v2/sandboxes", (*Server).listSandboxes},
	{"GET", "/sandboxes/metrics", (*Server).sandboxesMetrics},
	{"GET", "/sandboxes/{sandboxID}/metrics", (*Server).sandboxMetrics},
	{"GET", "/sandboxes/{sandboxID}/logs", (*Server).sandboxLogs},
	{"GET", "/v2/sandboxes/{sandboxID}/logs", (*Server).sandboxLogs},
	{"POST", "/sandboxes/{sandboxID}/pause", (*Server).pauseSandbox},
	{"POST", "/sandboxes/{sandboxID}/resume", (*Server).resumeSandbox},
	{"GET", "/internal/v1/authorize", (*Server).authorize},
	{"GET", "/health", (*Server).health},
}

// Handler returns the API's http.Handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range Routes {
		h := r.handler
		route := r.Method + " " + r.Pattern
		mux.Handle(route, s.Metrics.Instrument(route, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			ctx, done := fairshare.Tag(req.Context())
			defer done()
			h(s, w, req.WithContext(ctx))
		})))
	}
	// E2B's routes that sandgate does not serve (501 not_supported; see
	// Unsupported.match for why they are matched here), then 404.
	refused := make([]http.Handler, len(UnsupportedRoutes))
	for i, u := range UnsupportedRoutes {
		refused[i] = s.Metrics.Instrument(u.Method+" "+u.Pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.refuseUnsupported(w, r, u) }))
	}
	unmatched := s.Metrics.Instrument(metrics.RouteUnmatched, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, "not_found", "no such route")
	}))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i, u := range UnsupportedRoutes {
			if vals, ok := u.match(r); ok {
				for k, v := range vals {
					r.SetPathValue(k, v)
				}
				refused[i].ServeHTTP(w, r)
				return
			}
		}
		unmatched.ServeHTTP(w, r)
	}))
	return mux
}

// Stable error codes of the envelope, besides the egress and ingress
// failure codes and createnet's.
const (
	CodeBadRequest         = "bad_request"
	CodeUnauthenticated    = "unauthenticated"
	CodeForbidden          = "forbidden"
	CodeCredentialMismatch = "credential_mismatch"
	CodeCredentialDisabled = "credential_disabled"
	CodeSandboxNotFound    = "sandbox_not_found"
	CodeSandboxDeleting    = "sandbox_deleting"
	CodeAllocationUnknown  = "allocation_unknown"
	CodeIndeterminate      = "policy_indeterminate"
	CodeClusterUnknown     = "cluster_unknown"
	CodeTemplateNotFound   = "template_not_found"
	CodeUnavailable        = "unavailable"
	CodeNotFound           = "not_found"
	CodeStateUncertain     = "state_uncertain"
)

// ErrorBody is the flat error envelope.
type ErrorBody struct {
	// Code is the HTTP status.
	Code int `json:"code"`
	// Error is the stable error code.
	Error string `json:"error"`
	// Message is "<error>: <text>".
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, code, text string) {
	s.Log.Info("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "error", code)
	writeJSON(w, status, ErrorBody{Code: status, Error: code, Message: code + ": " + text})
}

// readBody reads at most limit bytes; a larger body is an error.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("body larger than %d bytes", limit)
	}
	return b, nil
}

// decodeBody reads a request body of at most limit bytes and decodes it
// with decode; on either failure it writes 400 bad_request and returns
// false.
func decodeBody[T any](s *Server, w http.ResponseWriter, r *http.Request, limit int64, decode func([]byte) (T, error)) (T, bool) {
	var v T
	body, err := readBody(r, limit)
	if err == nil {
		v, err = decode(body)
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return v, false
	}
	return v, true
}

// scopeCredential authenticates a route scoped to the caller's resource
// credential and returns the credential's cluster handle and the
// credential (its ProjectNamespace is the only namespace the route may
// touch), or writes the error and returns false.
func (s *Server) scopeCredential(w http.ResponseWriter, r *http.Request) (*ClusterHandle, credential.Credential, bool) {
	p, err := apikey.Authenticate(r.Context(), s.Keys, s.Credentials, r.Header.Get(APIKeyHeader), true)
	if !s.authError(w, r, err) {
		return nil, credential.Credential{}, false
	}
	c := p.Credential
	for _, h := range []struct{ got, want, what string }{
		{r.Header.Get(ClusterHintHeader), c.ClusterID, "cluster"},
		{r.URL.Query().Get(ClusterHintQuery), c.ClusterID, "cluster"},
		{r.Header.Get(NamespaceHintHeader), c.ProjectNamespace, "namespace"},
		{r.URL.Query().Get(NamespaceHintQuery), c.ProjectNamespace, "namespace"},
	} {
		if h.got != "" && h.got != h.want {
			s.Metrics.Refused(metrics.RefusalHintMismatch)
			s.fail(w, r, http.StatusForbidden, CodeCredentialMismatch, "the request's "+h.what+" differs from the credential's")
			return nil, credential.Credential{}, false
		}
	}
	if !s.Shares.Admit(r.Context(), c.ID) {
		s.Metrics.Refused(metrics.RefusalShareSpent)
		s.fail(w, r, http.StatusTooManyRequests, CodeRateLimited, "rate limit exceeded: this credential's share of the cluster's apiserver requests, or of calls in progress, is spent; retry in a second")
		return nil, credential.Credential{}, false
	}
	ch, ok := s.Clusters[c.ClusterID]
	if !ok {
		s.Metrics.Refused(metrics.RefusalClusterUnknown)
		s.fail(w, r, http.StatusInternalServerError, CodeClusterUnknown, "the credential's cluster is not configured on corectl")
		return nil, credential.Credential{}, false
	}
	return ch, c, true
}

// sandboxScope authenticates a route on the sandbox {sandboxID} and checks
// that the caller's credential sees it (credential.Credential.Sees: the
// sandbox's recorded creating credential, or a project-wide credential of
// its namespace). A sandbox the caller does not see is answered exactly as
// one that does not exist (404 sandbox_not_found, the same body), so
// another owner's sandbox IDs are not revealed. A sandbox ID that is not a
// DNS label, or a sandbox that does not exist, is left to the route's own
// answer. The check fails closed: a cluster handle without a Reader, or an
// owner that cannot be read, is 503 unavailable and the route does not
// run. With lifecycle set the route needs the lifecycle orchestrator
// (503 lifecycle_disabled without a token signing key).
func (s *Server) sandboxScope(w http.ResponseWriter, r *http.Request, lifecycle bool) (*ClusterHandle, credential.Credential, string, bool) {
	ch, c, id, _, ok := s.sandboxRead(w, r, lifecycle)
	return ch, c, id, ok
}

// sandboxRead is sandboxScope that also returns the BatchSandbox the
// ownership check read (whole, uncached, in this call), for the routes
// that take it instead of reading it again (lifecycle's Status, Connect,
// SetTimeout, Delete, Endpoint, Usage, LogSources; the egress and ingress engines' GetOf for
// the network GET views); nil when the ID is not a DNS
// label or the sandbox does not exist (the route's own read answers
// those). It is the caller's sandbox by the check itself: another
// credential's is refused before it is returned.
func (s *Server) sandboxRead(w http.ResponseWriter, r *http.Request, lifecycle bool) (*ClusterHandle, credential.Credential, string, *unstructured.Unstructured, bool) {
	ch, c, ok := s.scopeCredential(w, r)
	if !ok {
		return nil, c, "", nil, false
	}
	if lifecycle && ch.Lifecycle == nil {
		s.fail(w, r, http.StatusServiceUnavailable, CodeLifecycleDisabled, "corectl has no token signing key configured")
		return nil, c, "", nil, false
	}
	id := r.PathValue("sandboxID")
	if sandbox.ValidateID(id) != nil {
		return ch, c, id, nil, true
	}
	if ch.Reader == nil {
		s.Metrics.Refused(metrics.RefusalOwnerUnchecked)
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "corectl cannot check who owns the sandbox: the cluster has no reader")
		return nil, c, "", nil, false
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	owner, u, err := sandbox.Owner(ctx, ch.Reader, c.ProjectNamespace, id)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return ch, c, id, nil, true
	case err != nil:
		s.Metrics.Refused(metrics.RefusalOwnerUnchecked)
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		return nil, c, "", nil, false
	case !c.Sees(owner, c.ProjectNamespace, c.ClusterID):
		s.Metrics.Refused(metrics.RefusalNotOwner)
		s.notFound(w, r)
		return nil, c, "", nil, false
	}
	return ch, c, id, u, true
}

// notFound is the answer for a sandbox that does not exist or that the
// caller does not see: identical in both cases.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.fail(w, r, http.StatusNotFound, CodeSandboxNotFound, "no such sandbox in the credential's namespace")
}

// authError writes the answer for an authentication error; true when err
// is nil.
func (s *Server) authError(w http.ResponseWriter, r *http.Request, err error) bool {
	if err == nil {
		return true
	}
	s.Metrics.Refused(refusalOf(err))
	switch {
	case errors.Is(err, apikey.ErrMissing), errors.Is(err, apikey.ErrUnknown), errors.Is(err, credential.ErrNotFound):
		s.fail(w, r, http.StatusUnauthorized, CodeUnauthenticated, "missing or unknown API key")
	case errors.Is(err, apikey.ErrNoCredential):
		s.fail(w, r, http.StatusForbidden, CodeForbidden, "this API key has no resource credential")
	case errors.Is(err, credential.ErrDisabled):
		s.fail(w, r, http.StatusForbidden, CodeCredentialDisabled, "the API key's resource credential is disabled")
	default:
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "the credential source cannot answer")
	}
	return false
}

// refusalOf is the corectl_api_refusals_total reason of an
// authentication error.
func refusalOf(err error) string {
	switch {
	case errors.Is(err, apikey.ErrMissing):
		return metrics.RefusalMissingKey
	case errors.Is(err, apikey.ErrUnknown):
		return metrics.RefusalUnknownKey
	case errors.Is(err, credential.ErrNotFound):
		return metrics.RefusalUnknownCredential
	case errors.Is(err, apikey.ErrNoCredential):
		return metrics.RefusalNoCredential
	case errors.Is(err, credential.ErrDisabled):
		return metrics.RefusalCredentialDisabled
	default:
		return metrics.RefusalCredentialUnavailable
	}
}

func (s *Server) ingressWait() time.Duration {
	if s.IngressWait > 0 {
		return s.IngressWait
	}
	return 15 * time.Second
}

// requestContext bounds a request's work.
func requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 60*time.Second)
}
