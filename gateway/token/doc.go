// Package token verifies (and, for operators and tests, mints) the signed
// access tokens that E2B SDK clients present to the sandgate data-plane
// gateway in the X-Access-Token request header.
//
// A token is a compact JWS (RFC 7515) carrying a JWT claims set (RFC 7519).
// All JWT handling is done by github.com/golang-jwt/jwt/v5; this package only
// selects the key, pins the algorithm and maps the claims.
//
// # Claims
//
// The claims set must be a JSON object with these members:
//
//   - "credential_id" (JSON string, required, 1..253 bytes): the ID of the
//     resource credential the request is billed to; the gateway re-reads that
//     credential (package credential) to find the compute cluster.
//   - "sandbox_id" (JSON string, required, 1..253 bytes): the sandbox the
//     token is good for.
//   - "port" (JSON number, required but for a traffic token, integer 1..65535): the logical in-sandbox
//     service port, normally 49983 (envd).
//   - "aud" (JSON string, optional): "traffic" (AudienceTraffic) marks a
//     traffic access token, which may omit "port"; the data plane refuses
//     it as an X-Access-Token, and the host routing accepts nothing else
//     as e2b-traffic-access-token (docs/dataplane.md "Host routing").
//   - "exp" (NumericDate, required): expiry, seconds since the Unix epoch
//     (RFC 7519 section 4.1.4).
//   - "nbf" (NumericDate, optional): not-before; honoured when present
//     (RFC 7519 section 4.1.5).
//   - "iat" (NumericDate, optional): issued-at; informational only.
//
// Every other claim is ignored. In particular the legacy "endpointBinding"
// claim of older tokens plays no part in routing: the cluster always comes
// from the credential.
//
// # Header
//
// The JOSE header must carry "alg", which must equal the Algorithm of the key
// selected by "kid" (the algorithm is pinned per key, never taken from the
// token; "none" is never accepted). "kid" may be omitted only when the
// Verifier holds exactly one key. A "crit" header is refused because no
// critical extensions are supported (RFC 7515 section 4.1.11).
//
// # Errors
//
// Verifier.Verify returns errors that match (errors.Is) exactly one of
// ErrMalformed, ErrUnknownKey, ErrAlgorithm, ErrSignature, ErrExpired,
// ErrNotYetValid and ErrClaims. No error text or log line produced by this
// package contains a token, a token segment or key material.
package token
