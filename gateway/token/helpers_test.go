package token

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// t0 is the fixed "now" of most tests.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// sentinels is every error Verify may return; each Verify error must match
// exactly one.
var sentinels = []error{ErrMalformed, ErrUnknownKey, ErrAlgorithm, ErrSignature, ErrExpired, ErrNotYetValid, ErrClaims}

var target = Target{CredentialID: "cred-1", SandboxID: "sbx-1", Port: 49983}

// RSA key generation is slow; share one 2048-bit key per test binary.
var sharedRSA = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

func rsaKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := sharedRSA()
	if err != nil {
		t.Fatalf("generate RSA key: %v", err)
	}
	return k
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pemBytes(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func mustPKCS8(t testing.TB, k any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func mustPKIX(t testing.TB, k any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func curveFor(alg string) elliptic.Curve {
	switch alg {
	case "ES256":
		return elliptic.P256()
	case "ES384":
		return elliptic.P384()
	default:
		return elliptic.P521()
	}
}

// keyFiles generates fresh key material for alg into dir and returns the
// path of the private/secret file and of the public file (equal for HMAC).
func keyFiles(t testing.TB, dir, alg string) (privPath, pubPath string) {
	t.Helper()
	name := strings.ToLower(alg)
	switch alg[:2] {
	case "HS":
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			t.Fatal(err)
		}
		p := writeFile(t, dir, name+".secret", []byte(hex.EncodeToString(secret)+"\n"))
		return p, p
	case "Ed":
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return writeFile(t, dir, name+".key", pemBytes("PRIVATE KEY", mustPKCS8(t, priv))),
			writeFile(t, dir, name+".pub", pemBytes("PUBLIC KEY", mustPKIX(t, pub)))
	case "RS", "PS":
		k := rsaKey(t)
		return writeFile(t, dir, name+".key", pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k))),
			writeFile(t, dir, name+".pub", pemBytes("PUBLIC KEY", mustPKIX(t, &k.PublicKey)))
	case "ES":
		k, err := ecdsa.GenerateKey(curveFor(alg), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return writeFile(t, dir, name+".key", pemBytes("EC PRIVATE KEY", der)),
			writeFile(t, dir, name+".pub", pemBytes("PUBLIC KEY", mustPKIX(t, &k.PublicKey)))
	}
	t.Fatalf("no key generator for %s", alg)
	return "", ""
}

// keyPair generates and loads a signing key and its verification key (the
// latter loaded from the public-key file).
func keyPair(t testing.TB, id, alg string) (SigningKey, Key) {
	t.Helper()
	priv, pub := keyFiles(t, t.TempDir(), alg)
	sk, err := LoadSigningKey(id, alg, priv)
	if err != nil {
		t.Fatalf("LoadSigningKey(%s): %v", alg, err)
	}
	k, err := LoadKey(id, alg, pub)
	if err != nil {
		t.Fatalf("LoadKey(%s): %v", alg, err)
	}
	return sk, k
}

// newVerifier builds a Verifier whose clock is fixed at now.
func newVerifier(t testing.TB, leeway time.Duration, now time.Time, keys ...Key) *Verifier {
	t.Helper()
	v, err := NewVerifier(keys, leeway)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	v.now = func() time.Time { return now }
	return v
}

func mint(t testing.TB, k SigningKey, tg Target, ttl time.Duration, now time.Time) string {
	t.Helper()
	s, err := k.Mint(tg, ttl, now)
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	return s
}

// validClaims is a claims set Verify accepts at t0.
func validClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"credential_id": target.CredentialID,
		"sandbox_id":    target.SandboxID,
		"port":          target.Port,
		"iat":           t0.Unix(),
		"exp":           t0.Add(time.Hour).Unix(),
	}
}

// sign signs claims with method and raw key material through golang-jwt,
// setting kid unless kid is "".
func sign(t testing.TB, method jwt.SigningMethod, material any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(material)
	if err != nil {
		t.Fatalf("sign %s: %v", method.Alg(), err)
	}
	return s
}

// rawJWS assembles header.claims.signature from arbitrary JSON values, for
// shapes golang-jwt refuses to produce.
func rawJWS(t testing.TB, header, claims any, sig []byte) string {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	c, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(h) + "." + enc.EncodeToString(c) + "." + enc.EncodeToString(sig)
}

// assertOnly fails unless err matches want and no other Verify sentinel, and
// unless the message is free of the token's segments.
func assertOnly(t testing.TB, err, want error, raw string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Verify succeeded, want %v", want)
	}
	for _, s := range sentinels {
		if got := errors.Is(err, s); got != (s == want) {
			t.Errorf("errors.Is(%q, %v) = %v, want %v", err, s, got, s == want)
		}
	}
	for _, seg := range strings.Split(raw, ".") {
		if len(seg) >= 8 && strings.Contains(err.Error(), seg) {
			t.Errorf("error %q contains a token segment", err)
		}
	}
}
