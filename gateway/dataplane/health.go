package dataplane

import "net/http"

// health serves envd's GET /health from execd's GET /ping through the
// fixed entry: 204 with Cache-Control: no-store when execd answers, as envd
// does (docs/wire-facts.md §E4.1). Both SDKs' isRunning() return false for 502 and
// true for any 2xx, and raise for anything else; a sandbox that its
// cluster's ingress does not know, that is not ready, or whose pod does
// not answer is not running (502), while a failure that says nothing about
// the sandbox (the credential source, the fixed entry) is not turned into
// "not running" (see healthStatus and docs/errors.md).
func (h *Handler) health(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	if err := h.deps.Execd.Ping(r.Context(), rq.target); err != nil {
		return fromExecd(err, "health")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}
