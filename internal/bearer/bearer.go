// Package bearer reads the credential of an HTTP "Authorization: Bearer"
// header (RFC 6750 §2.1), as sandbox nodes send their node credential and
// callers of the internal node API send their API token.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
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

// MatchesDigest reports whether r carries a bearer credential (as
// FromRequest reads it) whose SHA-256 equals one of digests. Every digest
// is compared, in constant time, so the answer's timing says nothing about
// which one matched or how close a wrong credential came. No digests: false.
func MatchesDigest(r *http.Request, digests [][sha256.Size]byte) bool {
	tok, ok := FromRequest(r)
	if !ok {
		return false
	}
	d := sha256.Sum256([]byte(tok))
	match := 0
	for i := range digests {
		match |= subtle.ConstantTimeCompare(d[:], digests[i][:])
	}
	return match == 1
}
