package token

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestRoundTrip(t *testing.T) {
	for _, alg := range []string{"HS256", "HS384", "HS512", "EdDSA", "RS256", "RS512", "PS256", "PS384", "ES256", "ES384", "ES512"} {
		t.Run(alg, func(t *testing.T) {
			sk, k := keyPair(t, "kid-"+alg, alg)
			raw := mint(t, sk, target, time.Hour, t0)
			v := newVerifier(t, 0, t0.Add(30*time.Minute), k)
			got, err := v.Verify(raw)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got != target {
				t.Fatalf("Verify = %+v, want %+v", got, target)
			}
			// The header carries the pinned alg and the kid.
			tok, _, err := jwt.NewParser().ParseUnverified(raw, jwt.MapClaims{})
			if err != nil {
				t.Fatal(err)
			}
			if tok.Header["alg"] != alg || tok.Header["kid"] != "kid-"+alg {
				t.Fatalf("header = %v", tok.Header)
			}
			// Public() of the signing key verifies as well.
			v2 := newVerifier(t, 0, t0, sk.Public())
			if got, err := v2.Verify(raw); err != nil || got != target {
				t.Fatalf("Verify with Public() = %+v, %v", got, err)
			}
		})
	}
}

// TestMintClaims checks the exact claims Mint writes.
func TestMintClaims(t *testing.T) {
	sk, _ := keyPair(t, "k", "HS256")
	now := t0.Add(1500 * time.Millisecond)
	raw := mint(t, sk, target, 90*time.Second, now)
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser(jwt.WithJSONNumber()).ParseUnverified(raw, claims); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"credential_id": target.CredentialID,
		"sandbox_id":    target.SandboxID,
		"port":          "49983",
		"iat":           "1893553446", // t0+1.5s truncated to seconds
		"exp":           "1893553536", // t0+1.5s+90s truncated
	}
	if len(claims) != len(want) {
		t.Fatalf("claims = %v, want keys %v", claims, want)
	}
	for k, w := range want {
		var got string
		switch c := claims[k].(type) {
		case string:
			got = c
		case json.Number:
			got = c.String()
		}
		if got != w {
			t.Errorf("claim %s = %v, want %s", k, claims[k], w)
		}
	}
	if now.Unix() != 1893553446 {
		t.Fatalf("test constant drift: %d", now.Unix())
	}
}

func TestVerifyAccepts(t *testing.T) {
	hs, hsKey := keyPair(t, "hs", "HS256")
	_, edKey := keyPair(t, "ed", "EdDSA")
	hsMat := hs.material

	cases := []struct {
		name   string
		raw    func(t *testing.T) string
		leeway time.Duration
		now    time.Time
		keys   []Key
	}{
		{
			name: "legacy endpointBinding claim ignored",
			raw: func(t *testing.T) string {
				c := validClaims()
				c["endpointBinding"] = map[string]any{"clusterId": "evil-cluster", "host": "10.0.0.1:1"}
				c["aud"] = "whatever"
				return sign(t, jwt.SigningMethodHS256, hsMat, "hs", c)
			},
			now:  t0,
			keys: []Key{hsKey, edKey},
		},
		{
			name:   "expired within leeway",
			raw:    func(t *testing.T) string { return mint(t, hs, target, time.Hour, t0) },
			leeway: time.Minute,
			now:    t0.Add(time.Hour + 59*time.Second),
			keys:   []Key{hsKey},
		},
		{
			name: "nbf within leeway",
			raw: func(t *testing.T) string {
				c := validClaims()
				c["nbf"] = t0.Add(30 * time.Second).Unix()
				return sign(t, jwt.SigningMethodHS256, hsMat, "hs", c)
			},
			leeway: time.Minute,
			now:    t0,
			keys:   []Key{hsKey},
		},
		{
			name: "nbf in the past",
			raw: func(t *testing.T) string {
				c := validClaims()
				c["nbf"] = t0.Add(-time.Second).Unix()
				return sign(t, jwt.SigningMethodHS256, hsMat, "hs", c)
			},
			now:  t0,
			keys: []Key{hsKey},
		},
		{
			name: "missing kid with a single key",
			raw: func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, hsMat, "", validClaims())
			},
			now:  t0,
			keys: []Key{hsKey},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newVerifier(t, tc.leeway, tc.now, tc.keys...)
			got, err := v.Verify(tc.raw(t))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			got.Audience = "" // the legacy case's "aud" is read, not checked
			if got != target {
				t.Fatalf("Verify = %+v, want %+v", got, target)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	hs, hsKey := keyPair(t, "hs", "HS256")
	ed, edKey := keyPair(t, "ed", "EdDSA")
	rs, rsKey := keyPair(t, "rs", "RS256")
	hsMat, edMat := hs.material, ed.material
	rsPub := &rsaKey(t).PublicKey
	edPub := edMat.(ed25519.PrivateKey).Public().(ed25519.PublicKey)
	rsPubPEM := pemBytes("PUBLIC KEY", mustPKIX(t, rsPub))
	edPubPEM := pemBytes("PUBLIC KEY", mustPKIX(t, edPub))

	multi := newVerifier(t, 0, t0, hsKey, edKey, rsKey)
	single := newVerifier(t, 0, t0, hsKey)

	without := func(name string) jwt.MapClaims {
		c := validClaims()
		delete(c, name)
		return c
	}
	with := func(name string, v any) jwt.MapClaims {
		c := validClaims()
		c[name] = v
		return c
	}
	expStr := strconv.FormatInt(t0.Add(time.Hour).Unix(), 10)
	// hsRaw signs the header and claims exactly as written (HS256 with hs).
	hsRaw := func(header, claims string) func(*testing.T) string {
		return func(*testing.T) string {
			enc := base64.RawURLEncoding
			in := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
			m := hmac.New(sha256.New, hsMat.([]byte))
			m.Write([]byte(in))
			return in + "." + enc.EncodeToString(m.Sum(nil))
		}
	}
	hsSign := func(c jwt.MapClaims) func(*testing.T) string {
		return func(t *testing.T) string { return sign(t, jwt.SigningMethodHS256, hsMat, "hs", c) }
	}

	cases := []struct {
		name string
		v    *Verifier
		raw  func(t *testing.T) string
		want error
	}{
		// Algorithm attacks.
		{"alg none with kid", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "hs", validClaims())
		}, ErrAlgorithm},
		{"alg none without kid, single key", single, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", validClaims())
		}, ErrAlgorithm},
		{"alg NONE spelled differently", single, func(t *testing.T) string {
			return rawJWS(t, map[string]any{"alg": "NONE", "kid": "hs"}, validClaims(), nil)
		}, ErrAlgorithm},
		{"alg header missing", single, func(t *testing.T) string {
			return rawJWS(t, map[string]any{"kid": "hs"}, validClaims(), []byte("sig"))
		}, ErrAlgorithm},
		{"HS256 signed with RSA public key PEM against RS256 key", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, rsPubPEM, "rs", validClaims())
		}, ErrAlgorithm},
		{"HS256 signed with RSA public key DER against RS256 key", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, mustPKIX(t, rsPub), "rs", validClaims())
		}, ErrAlgorithm},
		{"HS256 signed with Ed25519 public key PEM against EdDSA key", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, edPubPEM, "ed", validClaims())
		}, ErrAlgorithm},
		{"HS256 signed with raw Ed25519 public key against EdDSA key", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, []byte(edPub), "ed", validClaims())
		}, ErrAlgorithm},
		{"RS256 token presented under the HS256 kid", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodRS256, rs.material, "hs", validClaims())
		}, ErrAlgorithm},
		{"PS256 signed by the RS256 key", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodPS256, rs.material, "rs", validClaims())
		}, ErrAlgorithm},

		// Time.
		{"expired", multi, func(t *testing.T) string {
			return mint(t, hs, target, time.Hour, t0.Add(-2*time.Hour))
		}, ErrExpired},
		{"expired exactly now", multi, func(t *testing.T) string {
			return mint(t, hs, target, time.Hour, t0.Add(-time.Hour))
		}, ErrExpired},
		{"not yet valid (nbf)", multi, hsSign(with("nbf", t0.Add(time.Hour).Unix())), ErrNotYetValid},

		// Key selection.
		{"unknown kid", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, hsMat, "nope", validClaims())
		}, ErrUnknownKey},
		{"unknown kid with a single key", single, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, hsMat, "nope", validClaims())
		}, ErrUnknownKey},
		{"missing kid with several keys", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, hsMat, "", validClaims())
		}, ErrUnknownKey},
		{"kid not a string", single, func(t *testing.T) string {
			return rawJWS(t, map[string]any{"alg": "HS256", "kid": 7}, validClaims(), []byte("sig"))
		}, ErrMalformed},
		{"crit header", single, func(t *testing.T) string {
			tok := jwt.NewWithClaims(jwt.SigningMethodHS256, validClaims())
			tok.Header["crit"] = []string{"exp"}
			s, err := tok.SignedString(hsMat)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, ErrMalformed},

		// Signatures.
		{"tampered sandbox_id", multi, func(t *testing.T) string {
			raw := mint(t, hs, target, time.Hour, t0)
			parts := strings.Split(raw, ".")
			payload, err := base64.RawURLEncoding.DecodeString(parts[1])
			if err != nil {
				t.Fatal(err)
			}
			var c map[string]any
			if err := json.Unmarshal(payload, &c); err != nil {
				t.Fatal(err)
			}
			c["sandbox_id"] = "someone-elses-sandbox"
			payload, _ = json.Marshal(c)
			parts[1] = base64.RawURLEncoding.EncodeToString(payload)
			return strings.Join(parts, ".")
		}, ErrSignature},
		{"tampered EdDSA payload", multi, func(t *testing.T) string {
			raw := mint(t, ed, target, time.Hour, t0)
			parts := strings.Split(raw, ".")
			tg := target
			tg.SandboxID = "other"
			other := mint(t, ed, tg, time.Hour, t0)
			parts[1] = strings.Split(other, ".")[1]
			return strings.Join(parts, ".")
		}, ErrSignature},
		{"wrong HMAC secret, same kid", multi, func(t *testing.T) string {
			other := make([]byte, 32)
			if _, err := rand.Read(other); err != nil {
				t.Fatal(err)
			}
			return sign(t, jwt.SigningMethodHS256, other, "hs", validClaims())
		}, ErrSignature},
		{"wrong Ed25519 key, same kid", multi, func(t *testing.T) string {
			_, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			return sign(t, jwt.SigningMethodEdDSA, priv, "ed", validClaims())
		}, ErrSignature},
		{"signature stripped", multi, func(t *testing.T) string {
			raw := mint(t, hs, target, time.Hour, t0)
			return raw[:strings.LastIndex(raw, ".")+1]
		}, ErrSignature},

		// Claims (correctly signed, so only the claim checks can refuse).
		{"missing credential_id", multi, hsSign(without("credential_id")), ErrClaims},
		{"missing sandbox_id", multi, hsSign(without("sandbox_id")), ErrClaims},
		{"missing port", multi, hsSign(without("port")), ErrClaims},
		{"missing exp", multi, hsSign(without("exp")), ErrClaims},
		{"port as string", multi, hsSign(with("port", "49983")), ErrClaims},
		{"port fractional", multi, hsSign(with("port", 49983.5)), ErrClaims},
		{"port zero", multi, hsSign(with("port", 0)), ErrClaims},
		{"port too large", multi, hsSign(with("port", 65536)), ErrClaims},
		{"credential_id a number", multi, hsSign(with("credential_id", 12)), ErrClaims},
		{"sandbox_id empty", multi, hsSign(with("sandbox_id", "")), ErrClaims},
		{"credential_id too long", multi, hsSign(with("credential_id", strings.Repeat("c", 254))), ErrClaims},
		{"exp as string", multi, hsSign(with("exp", "tomorrow")), ErrClaims},
		{"exp null", multi, hsSign(with("exp", nil)), ErrClaims},
		{"nbf as string", multi, hsSign(with("nbf", "soon")), ErrClaims},

		// Shape.
		{"oversized", multi, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, hsMat, "hs", with("padding", strings.Repeat("x", MaxTokenLength)))
		}, ErrMalformed},
		{"garbage", multi, func(*testing.T) string { return "garbage" }, ErrMalformed},
		{"empty", multi, func(*testing.T) string { return "" }, ErrMalformed},
		{"two segments", multi, func(*testing.T) string { return "eyJhbGciOiJIUzI1NiJ9.e30" }, ErrMalformed},
		{"four segments", multi, func(t *testing.T) string { return mint(t, hs, target, time.Hour, t0) + ".x" }, ErrMalformed},
		{"header not base64", multi, func(*testing.T) string { return "!!!.e30.c2ln" }, ErrMalformed},
		{"header not JSON", multi, func(*testing.T) string {
			return base64.RawURLEncoding.EncodeToString([]byte("hello")) + ".e30.c2ln"
		}, ErrMalformed},
		{"claims not an object", single, func(t *testing.T) string {
			return rawJWS(t, map[string]any{"alg": "HS256"}, []int{1}, []byte("sig"))
		}, ErrMalformed},
		// A repeated member: encoding/json (golang-jwt's decoder) keeps the
		// last one, which another reader of the same token may not.
		{"repeated sandbox_id claim", single, hsRaw(`{"alg":"HS256","kid":"hs"}`,
			`{"credential_id":"cred-1","sandbox_id":"other","sandbox_id":"`+target.SandboxID+`","port":49983,"exp":`+expStr+`}`), ErrClaims},
		{"repeated exp claim", single, hsRaw(`{"alg":"HS256","kid":"hs"}`,
			`{"credential_id":"`+target.CredentialID+`","sandbox_id":"`+target.SandboxID+`","port":49983,"exp":1,"exp":`+expStr+`}`), ErrClaims},
		{"repeated member in a nested claim", single, hsRaw(`{"alg":"HS256","kid":"hs"}`,
			`{"credential_id":"`+target.CredentialID+`","sandbox_id":"`+target.SandboxID+`","port":49983,"exp":`+expStr+`,"x":{"a":1,"a":2}}`), ErrClaims},
		{"repeated kid header", single, hsRaw(`{"alg":"HS256","kid":"other","kid":"hs"}`,
			`{"credential_id":"`+target.CredentialID+`","sandbox_id":"`+target.SandboxID+`","port":49983,"exp":`+expStr+`}`), ErrMalformed},
		{"signature not base64", multi, func(t *testing.T) string {
			raw := mint(t, hs, target, time.Hour, t0)
			return raw[:strings.LastIndex(raw, ".")+1] + "***"
		}, ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.raw(t)
			got, err := tc.v.Verify(raw)
			assertOnly(t, err, tc.want, raw)
			if got != (Target{}) {
				t.Errorf("Verify returned %+v with an error", got)
			}
		})
	}
}

// TestVerifyConcurrent exercises one Verifier from many goroutines (run
// with -race to check for data races).
func TestVerifyConcurrent(t *testing.T) {
	hs, hsKey := keyPair(t, "hs", "HS256")
	ed, edKey := keyPair(t, "ed", "EdDSA")
	v := newVerifier(t, 0, t0, hsKey, edKey)
	good := []string{mint(t, hs, target, time.Hour, t0), mint(t, ed, target, time.Hour, t0)}
	bad := mint(t, hs, target, time.Hour, t0.Add(-2*time.Hour))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if _, err := v.Verify(good[i%2]); err != nil {
					errs <- err
					return
				}
				if _, err := v.Verify(bad); err == nil {
					errs <- ErrExpired
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestNewVerifierRejects(t *testing.T) {
	_, hsKey := keyPair(t, "hs", "HS256")
	_, rsKey := keyPair(t, "rs", "RS256")
	_, edKey := keyPair(t, "ed", "EdDSA")

	retagged := rsKey
	retagged.Algorithm = "HS256" // public key material under an HMAC alg
	retaggedEC := edKey
	retaggedEC.Algorithm = "ES256"
	noneKey := hsKey
	noneKey.Algorithm = "none"
	noID := hsKey
	noID.ID = ""

	cases := []struct {
		name   string
		keys   []Key
		leeway time.Duration
		want   error
	}{
		{"no keys", nil, 0, ErrInvalidConfig},
		{"duplicate kid", []Key{hsKey, hsKey}, 0, ErrInvalidConfig},
		{"negative leeway", []Key{hsKey}, -time.Second, ErrInvalidConfig},
		{"leeway above 5m", []Key{hsKey}, MaxLeeway + time.Second, ErrInvalidConfig},
		{"zero Key", []Key{{ID: "x", Algorithm: "HS256"}}, 0, ErrInvalidKey},
		{"RSA public key relabelled HS256", []Key{retagged}, 0, ErrInvalidKey},
		{"Ed25519 key relabelled ES256", []Key{retaggedEC}, 0, ErrInvalidKey},
		{"alg none", []Key{noneKey}, 0, ErrInvalidKey},
		{"empty kid", []Key{noID}, 0, ErrInvalidKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.keys, tc.leeway)
			if !errors.Is(err, tc.want) || v != nil {
				t.Fatalf("NewVerifier = %v, %v; want %v", v, err, tc.want)
			}
		})
	}
	if v, err := NewVerifier([]Key{hsKey, rsKey, edKey}, MaxLeeway); err != nil || v == nil {
		t.Fatalf("NewVerifier(valid, MaxLeeway) = %v, %v", v, err)
	}
}

func TestMintRejects(t *testing.T) {
	hs, _ := keyPair(t, "hs", "HS256")
	rsPub, err := LoadSigningKey("x", "RS256", writeFile(t, t.TempDir(), "k", pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey(t)))))
	if err != nil {
		t.Fatal(err)
	}
	relabelled := rsPub
	relabelled.Algorithm = "ES256"

	cases := []struct {
		name string
		k    SigningKey
		tg   Target
		ttl  time.Duration
		want error
	}{
		{"empty credential", hs, Target{SandboxID: "s", Port: 1}, time.Hour, ErrClaims},
		{"empty sandbox", hs, Target{CredentialID: "c", Port: 1}, time.Hour, ErrClaims},
		{"port 0", hs, Target{CredentialID: "c", SandboxID: "s"}, time.Hour, ErrClaims},
		{"ttl zero", hs, target, 0, ErrClaims},
		{"ttl negative", hs, target, -time.Hour, ErrClaims},
		{"zero signing key", SigningKey{ID: "z", Algorithm: "HS256"}, target, time.Hour, ErrInvalidKey},
		{"relabelled key", relabelled, target, time.Hour, ErrInvalidKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.k.Mint(tc.tg, tc.ttl, t0)
			if !errors.Is(err, tc.want) || s != "" {
				t.Fatalf("Mint = %q, %v; want %v", s, err, tc.want)
			}
		})
	}
}
