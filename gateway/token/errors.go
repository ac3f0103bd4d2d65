package token

import "errors"

// Sentinel errors returned (wrapped, test with errors.Is) by Verifier.Verify.
// Each error returned by Verify matches exactly one of them. The wrapping
// error adds a short reason but never the token or any key material.
var (
	// ErrMalformed: the token is empty, longer than MaxTokenLength, not three
	// base64url segments, its header or claims segment is not a JSON object,
	// its "kid" header is not a string, or it carries a "crit" header
	// (RFC 7515 sections 3.1, 4.1.4, 4.1.11).
	ErrMalformed = errors.New("token: malformed")

	// ErrUnknownKey: the "kid" header names no configured key, or "kid" is
	// missing while more than one key is configured.
	ErrUnknownKey = errors.New("token: unknown signing key")

	// ErrAlgorithm: the "alg" header is missing, unknown, "none", or differs
	// from the Algorithm pinned on the selected key (defeats alg=none and
	// HMAC-with-public-key confusion, RFC 8725 section 3.1).
	ErrAlgorithm = errors.New("token: algorithm not allowed for key")

	// ErrSignature: the signature does not verify with the selected key.
	ErrSignature = errors.New("token: invalid signature")

	// ErrExpired: "exp" is at or before now minus the Verifier's leeway
	// (RFC 7519 section 4.1.4).
	ErrExpired = errors.New("token: expired")

	// ErrNotYetValid: "nbf" is after now plus the Verifier's leeway
	// (RFC 7519 section 4.1.5).
	ErrNotYetValid = errors.New("token: not yet valid")

	// ErrClaims: a required claim (credential_id, sandbox_id, port, exp) is
	// missing or ill-typed, a present "nbf" is not a NumericDate, or a value
	// is out of range (empty or >253-byte IDs, port outside 1..65535). Mint
	// also returns it for a Target or ttl that Verify would refuse.
	ErrClaims = errors.New("token: invalid claims")
)

// Configuration errors returned (wrapped) by LoadKey, LoadSigningKey,
// NewVerifier and SigningKey.Mint. They never occur from Verify.
var (
	// ErrInvalidKey: a key file or key value cannot be used: unreadable or
	// missing file (also matches fs.ErrNotExist etc.), larger than
	// MaxKeyFileSize, not PEM, key type not matching the algorithm, HMAC
	// secret shorter than MinHMACSecretLength, RSA modulus shorter than
	// MinRSABits, unknown algorithm or "none", empty key ID, or a public key
	// given where a private key is needed.
	ErrInvalidKey = errors.New("token: invalid key")

	// ErrInvalidConfig: NewVerifier was given no keys, duplicate key IDs, or
	// a leeway outside 0..MaxLeeway.
	ErrInvalidConfig = errors.New("token: invalid verifier configuration")
)
