// Package bearer reads the credential of an HTTP "Authorization: Bearer"
// header (RFC 6750 §2.1), as sandbox nodes send their node credential and
// callers of the internal node API send their API token.
package bearer

import (
	"net/http"
	"strings"
)

// FromRequest returns the credential of r's Authorization header. It
// requires exactly one Authorization header of the form
// "Bearer <credential>": the scheme is case-insensitive, the credential
// non-empty and without spaces or tabs. ok is false otherwise. The
// credential is secret: callers must not log it.
func FromRequest(r *http.Request) (credential string, ok bool) {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return "", false
	}
	scheme, cred, found := strings.Cut(vals[0], " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || cred == "" || strings.ContainsAny(cred, " \t") {
		return "", false
	}
	return cred, true
}
