package token

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// fuzzKeys builds deterministic HS256 ("hs") and EdDSA ("ed") keys so that
// the fuzz corpus stays valid across runs.
func fuzzKeys(tb testing.TB) (hs, ed SigningKey, secret []byte, edPub ed25519.PublicKey) {
	tb.Helper()
	dir := tb.TempDir()
	secret = []byte("fuzz-secret-0123456789-abcdefghijklmnop")
	var err error
	hs, err = LoadSigningKey("hs", "HS256", writeFile(tb, dir, "hs", secret))
	if err != nil {
		tb.Fatal(err)
	}
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	ed, err = LoadSigningKey("ed", "EdDSA", writeFile(tb, dir, "ed", pemBytes("PRIVATE KEY", mustPKCS8(tb, priv))))
	if err != nil {
		tb.Fatal(err)
	}
	return hs, ed, secret, priv.Public().(ed25519.PublicKey)
}

// FuzzVerify asserts that Verify never panics, that every error matches
// exactly one sentinel, and that a success is only ever returned for a
// token whose signature an independent check (crypto/hmac, crypto/ed25519)
// confirms and whose claims decode to the returned Target.
func FuzzVerify(f *testing.F) {
	hs, ed, secret, edPub := fuzzKeys(f)
	v, err := NewVerifier([]Key{hs.Public(), ed.Public()}, 0)
	if err != nil {
		f.Fatal(err)
	}
	v.now = func() time.Time { return t0 }

	good := mint(f, hs, target, time.Hour, t0)
	f.Add(good)
	f.Add(mint(f, ed, Target{CredentialID: "c/2", SandboxID: "s 2", Port: 80}, time.Hour, t0))
	f.Add(mint(f, hs, target, time.Hour, t0.Add(-2*time.Hour)))
	c := validClaims()
	c["endpointBinding"] = "legacy"
	f.Add(sign(f, jwt.SigningMethodHS256, secret, "hs", c))
	f.Add(sign(f, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "hs", validClaims()))
	f.Add(sign(f, jwt.SigningMethodHS256, []byte(edPub), "ed", validClaims()))
	f.Add(good[:len(good)-2])
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Add("")
	f.Add("a.b.c")
	f.Add("garbage")
	f.Add(strings.Repeat("A", MaxTokenLength+1))

	f.Fuzz(func(t *testing.T, raw string) {
		got, err := v.Verify(raw)
		if err != nil {
			n := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("error %q matches %d sentinels", err, n)
			}
			if got != (Target{}) {
				t.Fatalf("non-zero Target %+v with error", got)
			}
			return
		}
		checkIndependently(t, raw, got, secret, edPub)
	})
}

// checkIndependently re-verifies an accepted token without golang-jwt.
func checkIndependently(t *testing.T, raw string, got Target, secret []byte, edPub ed25519.PublicKey) {
	t.Helper()
	if len(raw) > MaxTokenLength {
		t.Fatalf("accepted a %d-byte token", len(raw))
	}
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("accepted a token with %d segments", len(parts))
	}
	enc := base64.RawURLEncoding
	hdrJSON, err1 := enc.DecodeString(parts[0])
	claimsJSON, err2 := enc.DecodeString(parts[1])
	sig, err3 := enc.DecodeString(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatalf("accepted undecodable token: %v", err)
	}
	var hdr map[string]any
	if err := json.Unmarshal(hdrJSON, &hdr); err != nil {
		t.Fatalf("accepted token with bad header: %v", err)
	}
	input := []byte(parts[0] + "." + parts[1])
	switch {
	case hdr["alg"] == "HS256" && hdr["kid"] == "hs":
		m := hmac.New(sha256.New, secret)
		m.Write(input)
		if !hmac.Equal(m.Sum(nil), sig) {
			t.Fatalf("accepted HS256 token with a bad signature")
		}
	case hdr["alg"] == "EdDSA" && hdr["kid"] == "ed":
		if !ed25519.Verify(edPub, input, sig) {
			t.Fatalf("accepted EdDSA token with a bad signature")
		}
	default:
		t.Fatalf("accepted token with header alg=%v kid=%v", hdr["alg"], hdr["kid"])
	}
	dec := json.NewDecoder(bytes.NewReader(claimsJSON))
	dec.UseNumber()
	var claims map[string]any
	if err := dec.Decode(&claims); err != nil {
		t.Fatalf("accepted token with bad claims: %v", err)
	}
	port, _ := claims["port"].(json.Number)
	exp, _ := claims["exp"].(json.Number)
	expF, err := exp.Float64()
	if err != nil || expF <= float64(t0.Unix()) {
		t.Fatalf("accepted token with exp %v", claims["exp"])
	}
	want := Target{}
	want.CredentialID, _ = claims["credential_id"].(string)
	want.SandboxID, _ = claims["sandbox_id"].(string)
	if p, err := port.Int64(); err == nil {
		want.Port = int(p)
	}
	if got != want || want.validate() != nil {
		t.Fatalf("Verify = %+v, claims say %+v", got, want)
	}
}

// benchmarkVerify measures Verify of one valid token: "uncached" empties
// the verifier's cache before each call (a full verification, one parse),
// "cached" answers from the cache after the first call.
func benchmarkVerify(b *testing.B, k SigningKey) {
	for _, cached := range []bool{false, true} {
		name := "uncached"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			v, err := NewVerifier([]Key{k.Public()}, 0)
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			raw := mint(b, k, target, time.Hour, now)
			b.ReportAllocs()
			for b.Loop() {
				if !cached {
					v.cache = verifiedCache{}
				}
				if _, err := v.Verify(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyHS256 measures Verify of a valid HS256 token.
func BenchmarkVerifyHS256(b *testing.B) {
	hs, _, _, _ := fuzzKeys(b)
	benchmarkVerify(b, hs)
}

// BenchmarkVerifyEdDSA measures Verify of a valid EdDSA token.
func BenchmarkVerifyEdDSA(b *testing.B) {
	_, ed, _, _ := fuzzKeys(b)
	benchmarkVerify(b, ed)
}
