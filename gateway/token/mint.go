package token

import (
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Mint signs a token authorising t, valid from now for ttl.
//
// The header carries "alg" = k.Algorithm, "kid" = k.ID and "typ" = "JWT";
// the claims are credential_id, sandbox_id, port (absent when t.Port is 0,
// which only a traffic token may be), aud when t.Audience is set, iat = now and
// exp = now+ttl, both NumericDates truncated to whole seconds
// (RFC 7519 section 2). ttl must be at least one second.
//
// Errors: ErrClaims (wrapped) if t would not pass Verify (empty or
// >MaxIDLength-byte IDs, port outside 1..65535 other than a traffic
// token's 0) or ttl < 1s; ErrInvalidKey
// (wrapped) if k is a zero SigningKey or its material does not fit its
// Algorithm. Error texts never contain key material.
func (k SigningKey) Mint(t Target, ttl time.Duration, now time.Time) (string, error) {
	if err := t.validate(); err != nil {
		return "", fmt.Errorf("%w: %s", ErrClaims, err.Error())
	}
	if ttl < time.Second {
		return "", fmt.Errorf("%w: ttl %s is shorter than 1s", ErrClaims, ttl)
	}
	alg, err := checkSignMaterial(k)
	if err != nil {
		return "", fmt.Errorf("%w: signing key %q: %s", ErrInvalidKey, k.ID, err.Error())
	}
	claims := jwt.MapClaims{
		ClaimCredentialID: t.CredentialID,
		ClaimSandboxID:    t.SandboxID,
		ClaimPort:         t.Port,
		"iat":             jwt.NewNumericDate(now),
		"exp":             jwt.NewNumericDate(now.Add(ttl)),
	}
	if t.Audience != "" {
		claims[ClaimAudience] = t.Audience
	}
	if t.Port == 0 {
		delete(claims, ClaimPort)
	}
	tok := jwt.NewWithClaims(alg.method, claims)
	tok.Header["kid"] = k.ID
	s, err := tok.SignedString(k.material)
	if err != nil {
		return "", fmt.Errorf("%w: signing with key %q failed", ErrInvalidKey, k.ID)
	}
	return s, nil
}
