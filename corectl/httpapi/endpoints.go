package httpapi

import (
	"errors"
	"net/http"

	"github.com/sandgate/sandgate/corectl/lifecycle"
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
	ch, cred, id, ok := s.sandboxScope(w, r, true)
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
	ep, err := ch.Lifecycle.Endpoint(ctx, cred.ProjectNamespace, id, port)
	if err != nil {
		s.lifecycleError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ep)
}
