package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/corectl/createnet"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/quota"
	"github.com/sandgate/sandgate/corectl/wire"
	"github.com/sandgate/sandgate/gateway/credential"
)

// Stable error codes of the lifecycle routes, besides lifecycle's Code*
// constants.
const (
	// CodeSandboxStateConflict: the lifecycle state refuses the operation
	// (spec §5.3).
	CodeSandboxStateConflict = "sandbox_state_conflict"
	// CodeLifecycleDisabled: corectl runs without a token signing key, so
	// it cannot create or connect sandboxes.
	CodeLifecycleDisabled = "lifecycle_disabled"
)

// MaxCreateRequestSize bounds the create and connect request bodies.
const MaxCreateRequestSize = 1 << 20

// SandboxBody is the E2B Sandbox object the SDKs decode from create
// (201) and connect (200) (docs/wire-facts.md §E7.1: Python requires templateID,
// sandboxID, clientID and envdVersion; JS needs envdVersion;
// envdAccessToken becomes X-Access-Token; domain is the cluster's E2B
// domain or null; trafficAccessToken is set for a sandbox created with
// network.allowPublicTraffic false, else null).
type SandboxBody struct {
	// TemplateID is the template.
	TemplateID string `json:"templateID"`
	// SandboxID is the sandbox.
	SandboxID string `json:"sandboxID"`
	// ClientID is a constant.
	ClientID string `json:"clientID"`
	// EnvdVersion gates SDK features (docs/wire-facts.md §E5).
	EnvdVersion string `json:"envdVersion"`
	// EnvdAccessToken is the runtime token (credential, sandbox, port
	// 49983) signed with the gateway's key.
	EnvdAccessToken string `json:"envdAccessToken"`
	// Domain is the cluster's E2B domain (corectl's cluster
	// configuration, domain); null without one, so the SDK keeps its
	// sandboxUrl or E2B_DOMAIN.
	Domain *string `json:"domain"`
	// TrafficAccessToken is the sandbox's traffic access token
	// (audience "traffic", signed with the gateway's key) when it was
	// created with network.allowPublicTraffic false, which the SDK user
	// sends as e2b-traffic-access-token to reach its ports; else null.
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

// CreateFailure is the answer of a failed create: the envelope plus the
// failed step and the compensation steps that ran, in order.
type CreateFailure struct {
	ErrorBody
	// Step is the create step that failed.
	Step lifecycle.Step `json:"step"`
	// Cleanup lists the compensation steps (":unconfirmed" suffix when
	// not confirmed).
	Cleanup []string `json:"cleanup"`
}

// decodeCreate decodes a create body (wire.DecodeNewSandbox) and checks
// its values: a timeout given must be greater than 0, metadata and
// envVars within lifecycle's limits.
func decodeCreate(body []byte) (wire.NewSandbox, error) {
	req, err := wire.DecodeNewSandbox(body)
	if err != nil {
		return req, err
	}
	if req.TimeoutGiven && req.Timeout == 0 {
		return req, fmt.Errorf("%w: Timeout must be greater than 0", lifecycle.ErrTimeoutInvalid)
	}
	if err := lifecycle.ValidateMetadata(req.Metadata); err != nil {
		return req, err
	}
	if err := lifecycle.ValidateEnvVars(req.EnvVars); err != nil {
		return req, err
	}
	return req, nil
}

// lifecycleScope is scopeCredential for the lifecycle routes without a
// sandbox (create, list): they need the lifecycle orchestrator.
func (s *Server) lifecycleScope(w http.ResponseWriter, r *http.Request) (*ClusterHandle, credential.Credential, bool) {
	ch, cred, ok := s.scopeCredential(w, r)
	if ok && ch.Lifecycle == nil {
		s.fail(w, r, http.StatusServiceUnavailable, CodeLifecycleDisabled, "corectl has no token signing key configured")
		return nil, cred, false
	}
	return ch, cred, ok
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	ch, cred, ok := s.lifecycleScope(w, r)
	if !ok {
		return
	}
	body, err := readBody(r, MaxCreateRequestSize)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	req, err := decodeCreate(body)
	if err == nil && req.Timeout != 0 {
		err = ch.Lifecycle.CheckTimeout(req.Timeout)
	}
	if err != nil {
		if ue := (*wire.UnsupportedError)(nil); errors.As(err, &ue) {
			s.Metrics.CreateRefused(metrics.RefusalUnsupportedField)
		}
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	release, ok := s.admit(w, r, ch, cred, req.Timeout)
	if !ok {
		return
	}
	defer release()
	s.finishCreate(w, r, ch, lifecycle.CreateRequest{CredentialID: cred.ID, Namespace: cred.ProjectNamespace, TemplateID: req.TemplateID,
		Network: req.Network, AllowInternetAccess: req.AllowInternetAccess, Timeout: req.Timeout, Metadata: req.Metadata, EnvVars: req.EnvVars})
}

// CodeRateLimited is the error code of a create refused by a count limit
// of its credential, and of any call of a credential whose share of the
// apiserver requests is spent (Server.Shares) (429, which the SDKs raise
// as RateLimitError).
const CodeRateLimited = "rate_limited"

// admit checks the caller's credential limits (quota.Gate) for a create
// with timeout (0: the default): a count limit refused is 429
// rate_limited, a timeout over the limit 400 bad_request, each counted in
// corectl_create_refusals_total; no Retry-After is sent (the JS SDK 2.51
// would retry within its request timeout). On admission the create counts
// as running until release is called.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, ch *ClusterHandle, cred credential.Credential, timeout time.Duration) (release func(), ok bool) {
	if cred.Limits == nil {
		return func() {}, true
	}
	if timeout == 0 {
		timeout = lifecycle.DefaultTimeout
	}
	running := 0
	if cred.Limits.ConcurrentSandboxes > 0 {
		ctx, cancel := requestContext(r)
		defer cancel()
		n, err := ch.Lifecycle.Running(ctx, cred.ID, cred.ProjectNamespace)
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
			return nil, false
		}
		running = n
	}
	release, err := s.quota.Admit(cred.ID, cred.Limits, running, timeout)
	if err != nil {
		var q *quota.Refusal
		errors.As(err, &q)
		s.Metrics.CreateRefused(q.Reason)
		if q.RateLimited {
			s.fail(w, r, http.StatusTooManyRequests, CodeRateLimited, q.Message)
		} else {
			s.fail(w, r, http.StatusBadRequest, CodeBadRequest, q.Message)
		}
		return nil, false
	}
	return release, true
}

func (s *Server) finishCreate(w http.ResponseWriter, r *http.Request, ch *ClusterHandle, req lifecycle.CreateRequest) {
	// A create may spend the readiness budget and a probe-source
	// discovery; compensation runs even after this context ends.
	ctx, cancel := context.WithTimeout(r.Context(), createTimeout)
	defer cancel()
	res, err := ch.Lifecycle.Create(ctx, req)
	if err != nil {
		var ce *lifecycle.CreateError
		var ne *createnet.Error
		switch {
		case errors.Is(err, lifecycle.ErrTemplateInvalid):
			s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
			return
		case errors.Is(err, lifecycle.ErrTemplateNotFound):
			s.fail(w, r, http.StatusNotFound, CodeTemplateNotFound, err.Error())
			return
		case errors.As(err, &ne):
			if ue := (*wire.UnsupportedError)(nil); errors.As(err, &ue) {
				s.Metrics.CreateRefused(metrics.RefusalUnsupportedField)
			}
			s.fail(w, r, http.StatusBadRequest, ne.Code, ne.Message)
			return
		case errors.Is(err, lifecycle.ErrUnavailable):
			s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
			return
		}
		if !errors.As(err, &ce) {
			s.fail(w, r, http.StatusInternalServerError, lifecycle.CodeCreateFailed, err.Error())
			return
		}
		status := http.StatusInternalServerError
		switch ce.Code {
		case lifecycle.CodeCNIUnqualified:
			status = http.StatusConflict
		case lifecycle.CodeNotReady:
			status = http.StatusServiceUnavailable
		}
		s.Log.Info("create failed", "namespace", req.Namespace, "code", ce.Code, "step", ce.Step, "cleanup", ce.Cleanup)
		writeJSON(w, status, CreateFailure{ErrorBody: ErrorBody{Code: status, Error: ce.Code, Message: ce.Error()}, Step: ce.Step, Cleanup: ce.Cleanup})
		return
	}
	body := SandboxBody{TemplateID: res.TemplateID, SandboxID: res.SandboxID, ClientID: clientID,
		EnvdVersion: ch.Lifecycle.EnvdVer(), EnvdAccessToken: res.Token, Domain: res.Domain}
	if res.TrafficToken != "" {
		body.TrafficAccessToken = &res.TrafficToken
	}
	writeJSON(w, http.StatusCreated, body)
}

const clientID = "sandgate"

// createTimeout bounds one create request (the default readiness budget is
// 60 s and a discovery 30 s).
const createTimeout = 3 * time.Minute

func (s *Server) lifecycleError(w http.ResponseWriter, r *http.Request, err error) {
	var de *lifecycle.DeleteError
	switch {
	case errors.Is(err, lifecycle.ErrNotFound):
		s.notFound(w, r)
	case errors.Is(err, lifecycle.ErrConflict):
		s.fail(w, r, http.StatusConflict, CodeSandboxStateConflict, err.Error())
	case errors.As(err, &de):
		s.fail(w, r, http.StatusInternalServerError, lifecycle.CodeDeletePending, de.Reason)
	default:
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
	}
}

func (s *Server) connectSandbox(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, u, ok := s.sandboxRead(w, r, true)
	if !ok {
		return
	}
	// E2B's ConnectSandbox: {"timeout": <seconds>}; JS 2.51 sends {}
	// without timeoutMs. 0 changes nothing; more than the maximum is 400.
	body, err := readBody(r, MaxLifetimeRequestSize)
	var timeout *time.Duration
	if err == nil {
		d, ok, derr := wire.Seconds(body, "timeout")
		switch {
		case derr != nil:
			err = derr
		case ok && d > ch.Lifecycle.MaxTimeoutValue():
			err = ch.Lifecycle.CheckTimeout(d)
		case ok:
			err = quota.CheckTimeout(cred.Limits, d)
			timeout = &d
		}
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	tok, info, err := ch.Lifecycle.Connect(ctx, cred.ID, cred.ProjectNamespace, id, u, timeout)
	if err != nil {
		s.lifetimeError(w, r, err)
		return
	}
	sb := SandboxBody{TemplateID: info.TemplateID, SandboxID: info.SandboxID, ClientID: clientID,
		EnvdVersion: info.EnvdVersion, EnvdAccessToken: tok, Domain: info.Domain}
	if info.TrafficTokenRequired {
		traffic, err := ch.Lifecycle.MintTraffic(cred.ID, info)
		if err != nil {
			s.lifetimeError(w, r, err)
			return
		}
		sb.TrafficAccessToken = &traffic
	}
	writeJSON(w, http.StatusOK, sb)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, u, ok := s.sandboxRead(w, r, true)
	if !ok {
		return
	}
	if u == nil {
		// The ownership check found no such sandbox (or the ID is no DNS
		// label): the answer the route's own read would give, without
		// reading again.
		s.notFound(w, r)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	info, err := ch.Lifecycle.Status(ctx, cred.ProjectNamespace, id, u)
	if err != nil {
		s.lifecycleError(w, r, err)
		return
	}
	if lifecycle.Gone(info.LifecycleState) {
		s.goneSandbox(w, r, info.LifecycleState)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// goneSandbox answers a sandbox in a lifecycle.Gone state (Deleting,
// CleanupFailed) on an E2B read route as E2B answers a sandbox that is no
// longer there: 404 sandbox_not_found (the SDKs raise their not-found
// error); the message names the state for the operator.
func (s *Server) goneSandbox(w http.ResponseWriter, r *http.Request, state string) {
	s.fail(w, r, http.StatusNotFound, CodeSandboxNotFound, "the sandbox is being deleted (lifecycle state "+state+")")
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, u, ok := s.sandboxRead(w, r, true)
	if !ok {
		return
	}
	if u == nil {
		// The ownership check found no such sandbox (or the ID is no DNS
		// label): the answer the route's own read would give, without
		// reading again.
		s.notFound(w, r)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	if err := ch.Lifecycle.Delete(ctx, cred.ProjectNamespace, id, u); err != nil {
		s.lifecycleError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
