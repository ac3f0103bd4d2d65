package token

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sandgate/sandgate/internal/strictjson"
)

const (
	// MaxTokenLength is the longest raw token Verify will parse, in bytes
	// (8 KiB); longer input fails with ErrMalformed before any decoding.
	MaxTokenLength = 8 << 10

	// MaxLeeway is the largest clock-skew allowance NewVerifier accepts
	// (5 minutes).
	MaxLeeway = 5 * time.Minute

	// MaxIDLength bounds credential_id and sandbox_id, in bytes (253, the
	// DNS-name limit also used for credential IDs).
	MaxIDLength = 253
)

// Claim names of the token claims set (see the package documentation).
const (
	// ClaimCredentialID names the required JSON string claim holding the
	// resource credential ID (Target.CredentialID).
	ClaimCredentialID = "credential_id"
	// ClaimSandboxID names the required JSON string claim holding the
	// sandbox ID (Target.SandboxID).
	ClaimSandboxID = "sandbox_id"
	// ClaimPort names the required JSON number claim holding the logical
	// in-sandbox port (Target.Port, 1..65535; 49983 for envd).
	ClaimPort = "port"
	// ClaimAudience names the optional JSON string claim "aud" (RFC 7519
	// section 4.1.3) holding Target.Audience.
	ClaimAudience = "aud"
)

// AudienceTraffic is the audience of a traffic access token: the token
// corectl hands out as trafficAccessToken for a sandbox created with
// network.allowPublicTraffic false, which the SDK user sends as the
// e2b-traffic-access-token header to reach the sandbox's ports. It
// carries no port (it opens every port of its sandbox) and is never an
// X-Access-Token: the data plane refuses a token with this audience.
const AudienceTraffic = "traffic"

// Target is what a verified token authorises: the resource credential to
// route by (CredentialID, from the "credential_id" claim), the sandbox
// (SandboxID, "sandbox_id") and the logical in-sandbox port (Port, "port",
// 1..65535, normally 49983 for envd).
type Target struct {
	// CredentialID is the resource credential ID (1..MaxIDLength bytes).
	CredentialID string
	// SandboxID is the sandbox ID (1..MaxIDLength bytes).
	SandboxID string
	// Port is the logical in-sandbox port, 1..65535; 0 (no "port" claim)
	// only when Audience is AudienceTraffic.
	Port int
	// Audience is the "aud" claim when it is a JSON string; empty when
	// absent. An "aud" that is not a string is ErrClaims.
	Audience string
}

// validate applies the claim rules of the package documentation.
func (t Target) validate() error {
	switch {
	case t.CredentialID == "":
		return fmt.Errorf("%s is empty", ClaimCredentialID)
	case len(t.CredentialID) > MaxIDLength:
		return fmt.Errorf("%s is longer than %d bytes", ClaimCredentialID, MaxIDLength)
	case t.SandboxID == "":
		return fmt.Errorf("%s is empty", ClaimSandboxID)
	case len(t.SandboxID) > MaxIDLength:
		return fmt.Errorf("%s is longer than %d bytes", ClaimSandboxID, MaxIDLength)
	case t.Audience == AudienceTraffic && t.Port == 0:
	case t.Port < 1 || t.Port > 65535:
		return fmt.Errorf("%s is outside 1..65535", ClaimPort)
	}
	return nil
}

// Verifier checks tokens against a fixed set of keys. It is safe for
// concurrent use; build it with NewVerifier.
//
// Each Verifier keeps a bounded cache of the tokens it verified (see
// CacheTTL, CacheEntries, MaxCachedTokenLength): the same token, byte for
// byte, is answered from the cache until its exp (plus the leeway) or for
// at most CacheTTL, whichever ends first. A new Verifier (a configuration
// reload builds one) starts with an empty cache, so a removed key stops
// verifying at once.
type Verifier struct {
	keys   map[string]*verifierKey
	single *verifierKey // set iff exactly one key: selected when "kid" is absent
	leeway time.Duration
	parser *jwt.Parser // exp required, leeway, the clock; the key function pins the algorithm
	cache  verifiedCache

	// now is the clock used for exp/nbf and the cache; tests replace it.
	now func() time.Time
}

type verifierKey struct {
	key Key
}

// NewVerifier returns a Verifier that accepts tokens signed by any of keys.
//
// keys must be non-empty with unique, non-empty IDs, and each key's material
// must fit its Algorithm (keys from LoadKey or SigningKey.Public do). leeway
// is the clock-skew allowance applied to exp and nbf, 0..MaxLeeway. Errors
// wrap ErrInvalidConfig (bad set or leeway) or ErrInvalidKey (a key that does
// not fit its Algorithm) and name key IDs, never key material.
func NewVerifier(keys []Key, leeway time.Duration) (*Verifier, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrInvalidConfig)
	}
	if leeway < 0 || leeway > MaxLeeway {
		return nil, fmt.Errorf("%w: leeway %s is outside 0..%s", ErrInvalidConfig, leeway, MaxLeeway)
	}
	v := &Verifier{
		keys:   make(map[string]*verifierKey, len(keys)),
		leeway: leeway,
		now:    time.Now,
	}
	v.parser = jwt.NewParser(
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(func() time.Time { return v.now() }),
		jwt.WithJSONNumber(),
	)
	for i, k := range keys {
		if _, err := checkVerifyMaterial(k); err != nil {
			return nil, fmt.Errorf("%w: keys[%d] (kid %q): %s", ErrInvalidKey, i, k.ID, err.Error())
		}
		if _, dup := v.keys[k.ID]; dup {
			return nil, fmt.Errorf("%w: duplicate key ID %q", ErrInvalidConfig, k.ID)
		}
		kc := k
		if s, ok := k.material.([]byte); ok {
			kc.material = append([]byte(nil), s...)
		}
		v.keys[k.ID] = &verifierKey{key: kc}
	}
	if len(v.keys) == 1 {
		for _, vk := range v.keys {
			v.single = vk
		}
	}
	return v, nil
}

// Verify checks raw (the X-Access-Token value, at most MaxTokenLength bytes)
// and returns the Target it authorises.
//
// Steps: length check; the cache (a token verified before, byte for byte,
// whose entry has not ended, returns its Target); then one parse by
// golang-jwt: header and claims decoded; key selection by "kid" (a
// missing kid selects the only key when exactly one is configured); the
// header "alg" must equal the selected key's Algorithm; signature
// verification with that key; exp (required) and nbf (optional) checked
// against the clock with the configured leeway; the header and claims
// re-read with strictjson.Check, so a repeated member (which golang-jwt's
// encoding/json resolves to the last) is refused; then credential_id,
// sandbox_id and port are read, and the Target is cached. The returned
// error matches exactly one of ErrMalformed, ErrUnknownKey, ErrAlgorithm,
// ErrSignature, ErrExpired, ErrNotYetValid and ErrClaims, and never
// contains the token. Failures are not cached.
func (v *Verifier) Verify(raw string) (Target, error) {
	if raw == "" {
		return Target{}, fmt.Errorf("%w: empty token", ErrMalformed)
	}
	if len(raw) > MaxTokenLength {
		return Target{}, fmt.Errorf("%w: token longer than %d bytes", ErrMalformed, MaxTokenLength)
	}
	now := v.now()
	if t, ok := v.cache.get(raw, now); ok {
		return t, nil
	}

	// The key function runs after the header and claims decoded: it
	// selects the key and pins the algorithm. keyErr is its refusal,
	// returned as is; reached says the decoding succeeded.
	var (
		vk      *verifierKey
		keyErr  error
		reached bool
	)
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		reached = true
		if _, ok := t.Header["crit"]; ok {
			keyErr = fmt.Errorf("%w: crit header is not supported", ErrMalformed)
			return nil, keyErr
		}
		k, err := v.selectKey(t.Header)
		if err != nil {
			keyErr = err
			return nil, err
		}
		vk = k
		if alg, _ := t.Header["alg"].(string); alg != k.key.Algorithm || t.Method == nil || t.Method.Alg() != k.key.Algorithm {
			keyErr = fmt.Errorf("%w: key %q is pinned to %s", ErrAlgorithm, k.key.ID, k.key.Algorithm)
			return nil, keyErr
		}
		return k.key.material, nil
	})
	switch {
	case err == nil:
	case !reached:
		if errors.Is(err, jwt.ErrTokenUnverifiable) {
			return Target{}, fmt.Errorf("%w: missing or unsupported alg header", ErrAlgorithm)
		}
		return Target{}, fmt.Errorf("%w: not a compact JWS with JSON header and claims", ErrMalformed)
	case keyErr != nil:
		return Target{}, keyErr
	default:
		return Target{}, v.mapError(vk, err)
	}

	// golang-jwt decodes the header and claims with encoding/json, which
	// keeps the last of a repeated member; a token whose meaning depends
	// on which reader looks is refused.
	if err := uniqueMembers(raw); err != nil {
		return Target{}, err
	}

	// The sandgate claims.
	t, err := targetFromClaims(claims)
	if err != nil {
		return Target{}, fmt.Errorf("%w: %s", ErrClaims, err.Error())
	}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		until := exp.Add(v.leeway)
		if c := now.Add(CacheTTL); c.Before(until) {
			until = c
		}
		v.cache.put(raw, t, until, now)
	}
	return t, nil
}

// uniqueMembers checks the header and claims segments of raw, a token
// golang-jwt has already parsed, with strictjson.Check: one JSON value each,
// no member name repeated at any depth, valid UTF-8. A repeated header
// member is ErrMalformed, a repeated or otherwise non-strict claim
// ErrClaims. The error names the segment, never its content.
func uniqueMembers(raw string) error {
	header, rest, _ := strings.Cut(raw, ".")
	claims, _, _ := strings.Cut(rest, ".")
	for _, seg := range []struct {
		b64   string
		class error
		name  string
	}{{header, ErrMalformed, "header"}, {claims, ErrClaims, "claims"}} {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(seg.b64, "="))
		if err != nil {
			return fmt.Errorf("%w: the %s segment is not base64url", ErrMalformed, seg.name)
		}
		if err := strictjson.Check(b); err != nil {
			return fmt.Errorf("%w: the %s are not strict JSON (a member repeated, invalid UTF-8 or trailing data)", seg.class, seg.name)
		}
	}
	return nil
}

func (v *Verifier) selectKey(header map[string]any) (*verifierKey, error) {
	rawKid, present := header["kid"]
	if !present {
		if v.single != nil {
			return v.single, nil
		}
		return nil, fmt.Errorf("%w: token has no kid and %d keys are configured", ErrUnknownKey, len(v.keys))
	}
	kid, ok := rawKid.(string)
	if !ok {
		return nil, fmt.Errorf("%w: kid header is not a string", ErrMalformed)
	}
	vk, ok := v.keys[kid]
	if !ok {
		return nil, fmt.Errorf("%w: no key with the token's kid", ErrUnknownKey)
	}
	return vk, nil
}

// mapError turns a golang-jwt error into exactly one sentinel of this
// package. The jwt error itself is not wrapped, so no detail from the token
// leaks into the message.
func (v *Verifier) mapError(vk *verifierKey, err error) error {
	switch {
	case errors.Is(err, ErrAlgorithm):
		return fmt.Errorf("%w: key %q is pinned to %s", ErrAlgorithm, vk.key.ID, vk.key.Algorithm)
	case errors.Is(err, ErrUnknownKey):
		return fmt.Errorf("%w: no key with the token's kid", ErrUnknownKey)
	case errors.Is(err, jwt.ErrTokenMalformed):
		return fmt.Errorf("%w: undecodable token", ErrMalformed)
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return fmt.Errorf("%w: unsupported alg", ErrAlgorithm)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return fmt.Errorf("%w: signature does not verify with key %q", ErrSignature, vk.key.ID)
	case errors.Is(err, jwt.ErrInvalidType):
		return fmt.Errorf("%w: exp or nbf is not a NumericDate", ErrClaims)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return fmt.Errorf("%w: exp is missing", ErrClaims)
	case errors.Is(err, jwt.ErrTokenExpired):
		return fmt.Errorf("%w: exp is past (leeway %s)", ErrExpired, v.leeway)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return fmt.Errorf("%w: nbf is in the future (leeway %s)", ErrNotYetValid, v.leeway)
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return fmt.Errorf("%w: registered claims rejected", ErrClaims)
	default:
		return fmt.Errorf("%w: token rejected", ErrMalformed)
	}
}

// targetFromClaims reads and range-checks the three sandgate claims. The
// claims were decoded with json.Number, so "port" must be a JSON number
// holding an integer.
func targetFromClaims(c jwt.MapClaims) (Target, error) {
	var t Target
	var ok bool
	if t.CredentialID, ok = c[ClaimCredentialID].(string); !ok {
		return Target{}, fmt.Errorf("%s is missing or not a string", ClaimCredentialID)
	}
	if t.SandboxID, ok = c[ClaimSandboxID].(string); !ok {
		return Target{}, fmt.Errorf("%s is missing or not a string", ClaimSandboxID)
	}
	if aud, present := c[ClaimAudience]; present {
		if t.Audience, ok = aud.(string); !ok {
			return Target{}, fmt.Errorf("%s is not a string", ClaimAudience)
		}
	}
	n, ok := c[ClaimPort].(json.Number)
	switch {
	case !ok && c[ClaimPort] == nil && t.Audience == AudienceTraffic:
	case !ok:
		return Target{}, fmt.Errorf("%s is missing or not a number", ClaimPort)
	default:
		p, err := n.Int64()
		if err != nil || p < 1 || p > 65535 {
			return Target{}, fmt.Errorf("%s is not an integer in 1..65535", ClaimPort)
		}
		t.Port = int(p)
	}
	if err := t.validate(); err != nil {
		return Target{}, err
	}
	return t, nil
}
