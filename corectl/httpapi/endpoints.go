package httpapi

import (
	"errors"
	"net/http"

	"github.com/sandgate/sandgate/corectl/browser"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
)

// Stable error codes of the endpoint routes.
const (
	// CodePortReserved: the port asked for is not a business port (44772
	// and 49983, spec §4.4).
	CodePortReserved = "port_reserved"
)

// getEndpoint answers GET /sandboxes/{sandboxID}/endpoints?port=N: the
// projection of one business port (lifecycle.Endpoint), after the
// ownership check. A missing or malformed port is 400 bad_request, a
// reserved one 400 port_reserved; a sandbox that does not exist, is not
// the caller's or is going away is 404 sandbox_not_found.
func (s *Server) getEndpoint(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, u, ok := s.sandboxRead(w, r, true)
	if !ok {
		return
	}
	port, err := lifecycle.ValidatePort(r.URL.Query().Get("port"))
	switch {
	case errors.Is(err, lifecycle.ErrPortReserved):
		s.fail(w, r, http.StatusBadRequest, CodePortReserved, err.Error())
		return
	case err != nil:
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	ep, err := ch.Lifecycle.Endpoint(ctx, cred.ProjectNamespace, id, u, port)
	if err != nil {
		s.lifecycleError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

// Stable error codes of the Native Browser route, besides browser's.
const (
	// CodePortUnsupported: the Native route serves port 6080 only.
	CodePortUnsupported = "port_unsupported"
)

// nativeEndpoint answers GET
// /api/v1/sandbox/instances/{sandboxID}/endpoint?port=6080 (spec §4.4,
// the Native Browser): after the ownership check (the sandbox's creating
// credential or a project-wide one; anyone else gets the answer for a
// sandbox that does not exist), the binder binds the carrier and the
// answer is browser.Binding. Refusals: 400 bad_request or
// port_unsupported (a port other than 6080), 404 sandbox_not_found, 409
// the binder's refusal codes (native_restricted, native_sandbox_replaced,
// native_generation_changed, native_sandbox_changed, native_pod_replaced,
// native_conflict), 503 native_pod_unavailable or unavailable.
func (s *Server) nativeEndpoint(w http.ResponseWriter, r *http.Request) {
	ch, cred, id, ok := s.sandboxScope(w, r, false)
	if !ok {
		return
	}
	port, err := lifecycle.ValidatePort(r.URL.Query().Get("port"))
	switch {
	case err != nil && !errors.Is(err, lifecycle.ErrPortReserved):
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	case err != nil || port != browser.Port:
		s.fail(w, r, http.StatusBadRequest, CodePortUnsupported, "the Native Browser serves port 6080 only; other ports are reached through GET /sandboxes/{sandboxID}/endpoints")
		return
	}
	if sandbox.ValidateID(id) != nil {
		s.notFound(w, r)
		return
	}
	if ch.Browser == nil {
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "the cluster has no Native Browser binder")
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	b, err := ch.Browser.Bind(ctx, cred.ProjectNamespace, id)
	if err != nil {
		var be *browser.Error
		switch {
		case !errors.As(err, &be):
			s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		case be.Code == browser.CodeNotFound:
			s.notFound(w, r)
		case be.Code == browser.CodePodUnavailable || be.Code == browser.CodeUnavailable:
			s.fail(w, r, http.StatusServiceUnavailable, be.Code, be.Reason)
		default:
			s.fail(w, r, http.StatusConflict, be.Code, be.Reason)
		}
		return
	}
	writeJSON(w, http.StatusOK, b)
}
