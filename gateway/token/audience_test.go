package token

import (
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestTrafficTokenRoundTrip: a traffic token carries aud "traffic" and no
// port, and verifies to that Target.
func TestTrafficTokenRoundTrip(t *testing.T) {
	sk, k := keyPair(t, "k", "HS256")
	tt := Target{CredentialID: "cred-1", SandboxID: "sbx-1", Audience: AudienceTraffic}
	raw := mint(t, sk, tt, time.Hour, t0)
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(raw, claims); err != nil {
		t.Fatal(err)
	}
	if _, has := claims["port"]; has || claims["aud"] != "traffic" {
		t.Fatalf("claims = %v, want aud traffic and no port", claims)
	}
	got, err := newVerifier(t, 0, t0, k).Verify(raw)
	if err != nil || got != tt {
		t.Fatalf("Verify = %+v, %v; want %+v", got, err, tt)
	}
}

// TestAudienceClaimRules: a port-less token without the traffic audience,
// an aud that is not a string and a port-less token of another audience
// are ErrClaims; an envd token with an unknown aud string verifies with it.
func TestAudienceClaimRules(t *testing.T) {
	sk, k := keyPair(t, "k", "HS256")
	v := newVerifier(t, 0, t0, k)
	sign := func(c jwt.MapClaims) string {
		c["exp"] = t0.Add(time.Hour).Unix()
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
		tok.Header["kid"] = "k"
		s, err := tok.SignedString(sk.material)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for name, c := range map[string]jwt.MapClaims{
		"no port, no aud":    {"credential_id": "c", "sandbox_id": "s"},
		"no port, other aud": {"credential_id": "c", "sandbox_id": "s", "aud": "envd"},
		"aud array":          {"credential_id": "c", "sandbox_id": "s", "port": 49983, "aud": []string{"traffic"}},
		"traffic, port 0":    {"credential_id": "c", "sandbox_id": "s", "port": 0, "aud": "traffic"},
	} {
		if _, err := v.Verify(sign(c)); !errors.Is(err, ErrClaims) {
			t.Errorf("%s: Verify = %v, want ErrClaims", name, err)
		}
	}
	got, err := v.Verify(sign(jwt.MapClaims{"credential_id": "c", "sandbox_id": "s", "port": 49983, "aud": "other"}))
	if err != nil || got.Audience != "other" || got.Port != 49983 {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
	if _, err := sk.Mint(Target{CredentialID: "c", SandboxID: "s"}, time.Hour, t0); !errors.Is(err, ErrClaims) {
		t.Fatalf("Mint without port or traffic audience = %v, want ErrClaims", err)
	}
}
