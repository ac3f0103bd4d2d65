package token

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBreakTokenOddities: correctly HMAC-signed tokens with odd headers and
// claims are refused with the right sentinel, and the message never echoes
// the token.
func TestBreakTokenOddities(t *testing.T) {
	p, _ := keyFiles(t, t.TempDir(), "HS256")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte(strings.TrimSuffix(string(b), "\n")) // the file's bytes are the secret
	k, err := LoadKey("k1", "HS256", p)
	if err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, 5*time.Second, t0, k)
	enc := base64.RawURLEncoding
	signed := func(header map[string]any, claims string) string {
		h, _ := json.Marshal(header)
		in := enc.EncodeToString(h) + "." + enc.EncodeToString([]byte(claims))
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(in))
		return in + "." + enc.EncodeToString(m.Sum(nil))
	}
	exp := t0.Add(time.Hour).Unix()
	claims := func(port string) string {
		return `{"credential_id":"cred-1","sandbox_id":"sbx-1","port":` + port + `,"exp":` + jsonInt(exp) + `}`
	}
	ok := map[string]any{"alg": "HS256", "kid": "k1"}
	if tg, err := v.Verify(signed(ok, claims("49983"))); err != nil || tg.Port != 49983 {
		t.Fatalf("valid token: %+v %v", tg, err)
	}
	for name, c := range map[string]struct {
		raw  string
		want error
	}{
		"alg lower case":     {signed(map[string]any{"alg": "hs256", "kid": "k1"}, claims("49983")), ErrAlgorithm},
		"alg none":           {signed(map[string]any{"alg": "none", "kid": "k1"}, claims("49983")), ErrAlgorithm},
		"kid path":           {signed(map[string]any{"alg": "HS256", "kid": "../k1"}, claims("49983")), ErrUnknownKey},
		"kid huge":           {signed(map[string]any{"alg": "HS256", "kid": strings.Repeat("k", 4000)}, claims("49983")), ErrUnknownKey},
		"kid number":         {signed(map[string]any{"alg": "HS256", "kid": 1}, claims("49983")), ErrMalformed},
		"port 49983.0":       {signed(ok, claims("49983.0")), ErrClaims},
		"port 4.9983e4":      {signed(ok, claims("4.9983e4")), ErrClaims},
		"port huge":          {signed(ok, claims("1"+strings.Repeat("0", 400))), ErrClaims},
		"port other service": {signed(ok, claims("49999")), nil},
		"exp string":         {signed(ok, `{"credential_id":"c","sandbox_id":"s","port":49983,"exp":"`+jsonInt(exp)+`"}`), ErrClaims},
		"duplicate sandbox":  {signed(ok, `{"credential_id":"c","sandbox_id":"s","sandbox_id":"","port":49983,"exp":`+jsonInt(exp)+`}`), ErrClaims},
	} {
		tg, err := v.Verify(c.raw)
		if c.want == nil {
			// A token for another logical port verifies; the data plane
			// refuses it as TARGET_MISMATCH (dataplane tests).
			if err != nil || tg.Port != 49999 {
				t.Errorf("%s: %+v %v", name, tg, err)
			}
			continue
		}
		t.Run(name, func(t *testing.T) { assertOnly(t, err, c.want, c.raw) })
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }
