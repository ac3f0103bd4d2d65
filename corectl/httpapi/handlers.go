package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/createnet"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/corectl/template"
	"github.com/sandgate/sandgate/corectl/wire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sandboxError writes the answer for an error returned before any write.
func (s *Server) sandboxError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, sandbox.ErrInvalidID):
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
	case errors.Is(err, sandbox.ErrNotFound):
		s.notFound(w, r)
	case errors.Is(err, sandbox.ErrDeleting):
		s.fail(w, r, http.StatusConflict, CodeSandboxDeleting, "the sandbox is being deleted")
	case errors.Is(err, sandbox.ErrNoAllocation):
		s.fail(w, r, http.StatusConflict, CodeAllocationUnknown, err.Error())
	case errors.Is(err, egress.ErrIndeterminate):
		s.fail(w, r, http.StatusConflict, CodeIndeterminate, err.Error())
	case errors.Is(err, ingressallow.ErrClusterMismatch):
		s.fail(w, r, http.StatusConflict, CodeCredentialMismatch, err.Error())
	default:
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
	}
}

// EgressFailure is the answer of a PUT /network that reached the write step
// and failed: the envelope plus how the rollback ended and the GET view
// afterwards.
type EgressFailure struct {
	ErrorBody
	// Outcome is LKGRestored, NewPolicyDeleted or StateUncertain.
	Outcome egress.Outcome `json:"outcome"`
	// Conflicts names conflicting policies for PolicyConflict.
	Conflicts []string `json:"conflicts,omitempty"`
	// Network is the GET view after the rollback (absent when it could
	// not be read).
	Network *egress.Status `json:"network,omitempty"`
}

func egressStatus(code string) int {
	switch code {
	case egress.CodePolicyConflict, egress.CodeSelectorMismatch, egress.CodeCNIUnqualified, egress.CodeConcurrentUpdate:
		return http.StatusConflict
	case egress.CodeWriteFailed, egress.CodeReadFailed:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// putEgress is PUT /sandboxes/{sandboxID}/network, E2B's path, which
// takes two bodies told apart by one member (wire.IsNetworkUpdate): a body
// with defaultAction is sandgate's full-replacement allowlist (answered as
// putEgressPlatform answers it), any other JSON object E2B's
// SandboxNetworkUpdateConfig (answered 204, see updateNetwork).
func (s *Server) putEgress(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, ok := s.sandboxScope(w, r, false)
	if !ok {
		return
	}
	body, err := readBody(r, wire.MaxEgressPutSize)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	if wire.IsNetworkUpdate(body) {
		s.updateNetwork(w, r, ch, cred.ProjectNamespace, id, body)
		return
	}
	set, err := wire.DecodeEgressPut(body)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	s.writeEgressPut(w, r, ch, cred.ProjectNamespace, id, func(ctx context.Context) (*egress.Result, error) {
		return ch.Egress.Put(ctx, cred.ProjectNamespace, id, set)
	}, false)
}

// putEgressPlatform is PUT /api/v1/sandbox/instances/{sandboxID}/network:
// sandgate's own body only (wire.DecodeEgressPut), answered 200 with the
// GET view.
func (s *Server) putEgressPlatform(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, ok := s.sandboxScope(w, r, false)
	if !ok {
		return
	}
	set, ok := decodeBody(s, w, r, wire.MaxEgressPutSize, wire.DecodeEgressPut)
	if !ok {
		return
	}
	s.writeEgressPut(w, r, ch, cred.ProjectNamespace, id, func(ctx context.Context) (*egress.Result, error) {
		return ch.Egress.Put(ctx, cred.ProjectNamespace, id, set)
	}, false)
}

// writeEgressPut runs put (an egress engine write) and answers it: on
// Verified 200 with the GET view, or 204 without a body when noContent
// (E2B's answer); otherwise the EgressFailure of the failure code.
func (s *Server) writeEgressPut(w http.ResponseWriter, r *http.Request, ch *ClusterHandle, ns, id string, put func(context.Context) (*egress.Result, error), noContent bool) {
	ctx, cancel := requestContext(r)
	defer cancel()
	res, err := put(ctx)
	if err != nil {
		s.sandboxError(w, r, err)
		return
	}
	if res.Outcome == egress.OutcomeVerified && noContent {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	st, gerr := ch.Egress.Get(ctx, ns, id)
	if res.Outcome == egress.OutcomeVerified {
		if gerr != nil {
			s.sandboxError(w, r, gerr)
			return
		}
		writeJSON(w, http.StatusOK, st)
		return
	}
	status, code := egressStatus(res.Code), res.Code
	if res.Outcome == egress.OutcomeStateUncertain {
		status, code = http.StatusInternalServerError, CodeStateUncertain
	}
	body2 := EgressFailure{ErrorBody: ErrorBody{Code: status, Error: code, Message: code + ": " + res.Message},
		Outcome: res.Outcome, Conflicts: res.Conflicts}
	if gerr == nil {
		body2.Network = st
	}
	s.Log.Info("egress update failed", "sandbox", id, "namespace", ns, "code", res.Code, "outcome", res.Outcome)
	writeJSON(w, status, body2)
}

func (s *Server) getEgress(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, u, ok := s.sandboxRead(w, r, false)
	if !ok {
		return
	}
	ns := cred.ProjectNamespace
	ctx, cancel := requestContext(r)
	defer cancel()
	st, err := networkView(ctx, u, ns, id, ch.Egress.GetOf, ch.Egress.Get)
	if err != nil {
		s.sandboxError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) putIngress(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, ok := s.sandboxScope(w, r, false)
	if !ok {
		return
	}
	ns := cred.ProjectNamespace
	rules, ok := decodeBody(s, w, r, wire.MaxIngressPutSize, wire.DecodeIngressPut)
	if !ok {
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	al, err := ch.Ingress.SetDesired(ctx, ns, id, rules)
	if err != nil {
		s.sandboxError(w, r, err)
		return
	}
	done, gone := s.waitIngress(ctx, ch, client.ObjectKeyFromObject(al), al.Generation)
	st, err := ch.Ingress.Get(ctx, ns, id)
	if err != nil {
		s.sandboxError(w, r, err)
		return
	}
	switch {
	case gone:
		// The allowlist went while the PUT waited (a DELETE of the sandbox
		// removes it; the view above answered 409 or 404 when the sandbox
		// says so), so the PUT's version will never be applied.
		s.fail(w, r, http.StatusConflict, CodeSandboxStateConflict, "the sandbox's ingress allowlist was removed while the PUT waited for its rules to be applied")
	case !done:
		writeJSON(w, http.StatusAccepted, st)
	case st.VerificationState == v1alpha1.StateVerified:
		writeJSON(w, http.StatusOK, st)
	default:
		status := http.StatusConflict
		switch st.LastErrorCode {
		case ingressallow.CodeWriteFailed, ingressallow.CodeReadFailed:
			status = http.StatusServiceUnavailable
		}
		if st.VerificationState == v1alpha1.StateIndeterminate {
			status = http.StatusInternalServerError
		}
		writeJSON(w, status, IngressFailure{
			ErrorBody: ErrorBody{Code: status, Error: st.LastErrorCode, Message: st.LastErrorCode + ": " + st.LastErrorMessage},
			Ingress:   st,
		})
	}
}

// IngressFailure is the answer of a PUT /network/ingress whose cycle
// failed: the envelope plus the GET view (previous applied state and LKG
// kept).
type IngressFailure struct {
	ErrorBody
	// Ingress is the GET view after the cycle.
	Ingress *ingressallow.Status `json:"ingress"`
}

// waitIngress polls the allowlist until its status has finished version
// gen (observedGeneration ≥ gen, not Verifying, and not superseded), the
// allowlist is gone (gone: a DELETE of the sandbox removed it), or the
// wait bound or ctx ends; it reports whether it finished.
//
// A cycle superseded by another writer (state UnverifiedSpec, code
// ConcurrentUpdate: another version of the carrier, e.g. another
// replica's cycle or an admin's edit, came between the cycle's read and
// its write or read-back) put nothing of its own on the carrier and
// rolled nothing back; the reconciler retries it through its rate limiter
// (5 ms at first). So it is not the PUT's result: the wait goes on for
// the retry, and a PUT still superseded when the bound ends is answered
// 202 (not finished) rather than 409.
func (s *Server) waitIngress(ctx context.Context, ch *ClusterHandle, key client.ObjectKey, gen int64) (done, gone bool) {
	ctx, cancel := context.WithTimeout(ctx, s.ingressWait())
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		al := &v1alpha1.SandboxIngressAllowlist{}
		err := ch.Ingress.Client.Get(ctx, key, al)
		switch {
		case err == nil && finished(&al.Status, gen):
			return true, false
		case apierrors.IsNotFound(err):
			return true, true
		}
		select {
		case <-ctx.Done():
			return false, false
		case <-tick.C:
		}
	}
}

// finished reports whether status st records a result for desired
// version gen that a PUT answers with (waitIngress).
func finished(st *v1alpha1.SandboxIngressAllowlistStatus, gen int64) bool {
	superseded := st.VerificationState == v1alpha1.StateUnverifiedSpec && st.LastErrorCode == ingressallow.CodeConcurrentUpdate
	return st.ObservedGeneration >= gen && st.VerificationState != v1alpha1.StateVerifying && !superseded
}

func (s *Server) getIngress(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, u, ok := s.sandboxRead(w, r, false)
	if !ok {
		return
	}
	ns := cred.ProjectNamespace
	ctx, cancel := requestContext(r)
	defer cancel()
	st, err := networkView(ctx, u, ns, id, ch.Ingress.GetOf, ch.Ingress.Get)
	if err != nil {
		s.sandboxError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// templateAuth authenticates a template route; admin routes need a
// templateAdmin key.
func (s *Server) templateAuth(w http.ResponseWriter, r *http.Request, admin bool) bool {
	p, err := apikey.Authenticate(r.Context(), s.Keys, s.Credentials, r.Header.Get(APIKeyHeader), false)
	if !s.authError(w, r, err) {
		return false
	}
	if admin && !p.Key.TemplateAdmin {
		s.Metrics.Refused(metrics.RefusalNotTemplateAdmin)
		s.fail(w, r, http.StatusForbidden, CodeForbidden, "template defaults are changed by template administrators only")
		return false
	}
	return true
}

func (s *Server) templateError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, template.ErrInvalidID):
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
	case errors.Is(err, template.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, CodeTemplateNotFound, err.Error())
	default:
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
	}
}

func (s *Server) putTemplate(w http.ResponseWriter, r *http.Request) {
	if !s.templateAuth(w, r, true) {
		return
	}
	id := r.PathValue("templateId")
	if err := template.ValidateID(id); err != nil {
		s.templateError(w, r, err)
		return
	}
	n, ok := decodeBody(s, w, r, wire.MaxTemplateNetworkSize, wire.DecodeTemplateNetwork)
	if !ok {
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	v, err := s.Templates.Put(ctx, id, template.Network{Ingress: n.Ingress, Egress: n.Egress})
	if err != nil {
		s.templateError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	if !s.templateAuth(w, r, false) {
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	v, err := s.Templates.Get(ctx, r.PathValue("templateId"))
	if err != nil {
		s.templateError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// resolve answers the initial network of a sandbox created from the
// template with the request body as the create request's network object
// (empty or null: not passed). A template without defaults inherits
// nothing (empty allowlists).
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	if !s.templateAuth(w, r, false) {
		return
	}
	id := r.PathValue("templateId")
	if err := template.ValidateID(id); err != nil {
		s.templateError(w, r, err)
		return
	}
	body, err := readBody(r, wire.MaxTemplateNetworkSize)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	req, err := createnet.Decode(body)
	if err != nil {
		var ce *createnet.Error
		errors.As(err, &ce)
		s.fail(w, r, http.StatusBadRequest, ce.Code, ce.Message)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	tpl := template.Network{}
	v, err := s.Templates.Get(ctx, id)
	switch {
	case err == nil:
		tpl = v.Network
	case errors.Is(err, template.ErrNotFound):
	default:
		s.templateError(w, r, err)
		return
	}
	in, err := createnet.Resolve(tpl, req)
	if err != nil {
		var ce *createnet.Error
		errors.As(err, &ce)
		s.fail(w, r, http.StatusBadRequest, ce.Code, ce.Message)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

// networkView is a network engine's GET view of sandbox ns/id: from u, the
// ownership check's read of its BatchSandbox, when there is one; else get
// answers (no such sandbox, an invalid ID).
func networkView[S any](ctx context.Context, u *unstructured.Unstructured, ns, id string,
	getOf func(context.Context, client.Object) (S, error), get func(context.Context, string, string) (S, error)) (S, error) {
	if u != nil {
		return getOf(ctx, u)
	}
	return get(ctx, ns, id)
}
