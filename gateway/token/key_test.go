package token

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadKeyFormats loads every supported PEM layout and checks the result
// verifies a token minted with the matching private key.
func TestLoadKeyFormats(t *testing.T) {
	dir := t.TempDir()
	rk := rsaKey(t)
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(ek)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecParams := pemBytes("EC PARAMETERS", []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07})

	signers := map[string]string{
		"RS256": writeFile(t, dir, "rsa-pkcs1.key", pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rk))),
		"ES256": writeFile(t, dir, "ec-sec1.key", pemBytes("EC PRIVATE KEY", ecDER)),
		"EdDSA": writeFile(t, dir, "ed.key", pemBytes("PRIVATE KEY", mustPKCS8(t, edPriv))),
	}
	cases := []struct {
		name, alg string
		data      []byte
	}{
		{"RSA PKIX public", "RS256", pemBytes("PUBLIC KEY", mustPKIX(t, &rk.PublicKey))},
		{"RSA PKCS1 public", "RS256", pemBytes("RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&rk.PublicKey))},
		{"RSA PKCS1 private", "RS256", pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rk))},
		{"RSA PKCS8 private", "RS256", pemBytes("PRIVATE KEY", mustPKCS8(t, rk))},
		{"EC PKIX public", "ES256", pemBytes("PUBLIC KEY", mustPKIX(t, &ek.PublicKey))},
		{"EC SEC1 private", "ES256", pemBytes("EC PRIVATE KEY", ecDER)},
		{"EC SEC1 private with EC PARAMETERS", "ES256", append(ecParams, pemBytes("EC PRIVATE KEY", ecDER)...)},
		{"EC PKCS8 private", "ES256", pemBytes("PRIVATE KEY", mustPKCS8(t, ek))},
		{"Ed25519 PKIX public", "EdDSA", pemBytes("PUBLIC KEY", mustPKIX(t, edPub))},
		{"Ed25519 PKCS8 private", "EdDSA", pemBytes("PRIVATE KEY", mustPKCS8(t, edPriv))},
		{"text around the PEM block", "EdDSA", append([]byte("comment line\n"), pemBytes("PUBLIC KEY", mustPKIX(t, edPub))...)},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, err := LoadKey("k", tc.alg, writeFile(t, dir, fmt.Sprintf("case%d.pem", i), tc.data))
			if err != nil {
				t.Fatalf("LoadKey: %v", err)
			}
			sk, err := LoadSigningKey("k", tc.alg, signers[tc.alg])
			if err != nil {
				t.Fatalf("LoadSigningKey: %v", err)
			}
			v := newVerifier(t, 0, t0, k)
			if got, err := v.Verify(mint(t, sk, target, time.Hour, t0)); err != nil || got != target {
				t.Fatalf("Verify = %+v, %v", got, err)
			}
		})
	}
}

// TestHMACSecretTrim checks that exactly one trailing "\n" or "\r\n" is
// removed from an HMAC secret file.
func TestHMACSecretTrim(t *testing.T) {
	dir := t.TempDir()
	secret := strings.Repeat("s3cr3t-", 6) // 42 bytes
	plain := writeFile(t, dir, "plain", []byte(secret))
	sk, err := LoadSigningKey("k", "HS256", plain)
	if err != nil {
		t.Fatal(err)
	}
	raw := mint(t, sk, target, time.Hour, t0)
	for _, tc := range []struct {
		name, content string
		want          error
	}{
		{"LF", secret + "\n", nil},
		{"CRLF", secret + "\r\n", nil},
		{"two LFs keep one", secret + "\n\n", ErrSignature},
		{"leading space kept", " " + secret, ErrSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := LoadKey("k", "HS256", writeFile(t, dir, tc.name, []byte(tc.content)))
			if err != nil {
				t.Fatal(err)
			}
			_, err = newVerifier(t, 0, t0, k).Verify(raw)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			assertOnly(t, err, tc.want, raw)
		})
	}
}

func TestLoadKeyRejects(t *testing.T) {
	dir := t.TempDir()
	rk := rsaKey(t)
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaPriv := pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rk))
	rsaPub := pemBytes("PUBLIC KEY", mustPKIX(t, &rk.PublicKey))
	garbageDER := bytes.Repeat([]byte{0x30, 0x82, 0x13, 0x37}, 16)
	encrypted := pem.EncodeToMemory(&pem.Block{
		Type:    "RSA PRIVATE KEY",
		Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00000000000000000000000000000000"},
		Bytes:   garbageDER,
	})
	shortSecret := strings.Repeat("x", MinHMACSecretLength-1)

	cases := []struct {
		name, alg string
		data      []byte // nil: no file is written
		reason    string // substring of the error
		notExist  bool
	}{
		{name: "missing file", alg: "RS256", reason: "no such file", notExist: true},
		{name: "not PEM", alg: "RS256", data: []byte("hello, I am not a key\n"), reason: "no PEM key block"},
		{name: "empty file", alg: "ES256", data: []byte{}, reason: "no PEM key block"},
		{name: "RSA key for ES256", alg: "ES256", data: rsaPub, reason: "ES256 needs an ECDSA P-256 key"},
		{name: "RSA private key for EdDSA", alg: "EdDSA", data: rsaPriv, reason: "EdDSA needs an Ed25519 key"},
		{name: "P-384 key for ES256", alg: "ES256", data: pemBytes("PUBLIC KEY", mustPKIX(t, &p384.PublicKey)), reason: "needs curve P-256"},
		{name: "Ed25519 key for RS256", alg: "RS256", data: pemBytes("PUBLIC KEY", mustPKIX(t, edPub)), reason: "RS256 needs an RSA key"},
		{name: "RSA 1024-bit", alg: "RS256", data: pemBytes("RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&small.PublicKey)), reason: "1024 bits"},
		{name: "short HMAC secret", alg: "HS256", data: []byte(shortSecret + "\n"), reason: "shorter than the minimum of 32"},
		{name: "PEM used as HMAC secret", alg: "HS256", data: rsaPub, reason: "looks like a PEM key"},
		{name: "unknown alg", alg: "HS257", data: []byte(strings.Repeat("x", 40)), reason: "unknown algorithm"},
		{name: "alg none", alg: "none", data: []byte(strings.Repeat("x", 40)), reason: `"none" is never accepted`},
		{name: "alg NONE", alg: "NONE", data: []byte(strings.Repeat("x", 40)), reason: `"none" is never accepted`},
		{name: "empty alg", alg: "", data: []byte(strings.Repeat("x", 40)), reason: "unknown algorithm"},
		{name: "oversized", alg: "RS256", data: bytes.Repeat([]byte("A"), MaxKeyFileSize+1), reason: "larger than 65536 bytes"},
		{name: "two key blocks", alg: "RS256", data: append(append([]byte{}, rsaPub...), rsaPub...), reason: "more than one PEM key block"},
		{name: "corrupt DER", alg: "RS256", data: pemBytes("PUBLIC KEY", garbageDER), reason: "not a valid PKIX public key"},
		{name: "corrupt private DER", alg: "RS256", data: pemBytes("PRIVATE KEY", garbageDER), reason: "not a valid PKCS #8 private key"},
		{name: "certificate block", alg: "RS256", data: pemBytes("CERTIFICATE", garbageDER), reason: `unsupported PEM block type "CERTIFICATE"`},
		{name: "encrypted PEM", alg: "RS256", data: encrypted, reason: "encrypted PEM keys are not supported"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("case%d", i))
			if tc.data != nil {
				writeFile(t, dir, filepath.Base(path), tc.data)
			}
			k, err := LoadKey("k", tc.alg, path)
			checkKeyErr(t, err, path, tc.reason, tc.data)
			if tc.notExist && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("errors.Is(%v, fs.ErrNotExist) = false", err)
			}
			if k != (Key{}) {
				t.Errorf("LoadKey returned a non-zero key with an error")
			}
			sk, err := LoadSigningKey("k", tc.alg, path)
			checkKeyErr(t, err, path, tc.reason, tc.data)
			if sk.material != nil {
				t.Errorf("LoadSigningKey returned material with an error")
			}
		})
	}

	t.Run("directory", func(t *testing.T) {
		_, err := LoadKey("k", "RS256", dir)
		checkKeyErr(t, err, dir, "is a directory", nil)
	})
	t.Run("empty key ID", func(t *testing.T) {
		p := writeFile(t, dir, "ok.pem", rsaPub)
		_, err := LoadKey("", "RS256", p)
		checkKeyErr(t, err, p, "key ID is empty", nil)
	})
	t.Run("public key for signing", func(t *testing.T) {
		p := writeFile(t, dir, "pub.pem", rsaPub)
		_, err := LoadSigningKey("k", "RS256", p)
		checkKeyErr(t, err, p, "a private key is needed to sign", rsaPub)
	})
}

// checkKeyErr asserts a LoadKey error wraps ErrInvalidKey, names path and
// reason, and contains none of the file's key bytes.
func checkKeyErr(t *testing.T, err error, path, reason string, data []byte) {
	t.Helper()
	if !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("error = %v, want ErrInvalidKey", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, path) {
		t.Errorf("error %q does not name the path %q", msg, path)
	}
	if !strings.Contains(msg, reason) {
		t.Errorf("error %q does not give the reason %q", msg, reason)
	}
	if len(data) >= 16 {
		// No run of 16 bytes of the file (raw, base64 or hex) may appear.
		for _, enc := range []string{string(data), base64.StdEncoding.EncodeToString(data), hex.EncodeToString(data)} {
			for i := 0; i+16 <= len(enc); i += 8 {
				if chunk := enc[i : i+16]; strings.Contains(msg, chunk) && !strings.Contains(path, chunk) && !strings.HasPrefix(chunk, "-----") {
					t.Fatalf("error %q contains key file bytes %q", msg, chunk)
				}
			}
		}
	}
}

// TestKeyFormattingHidesMaterial checks that no fmt verb prints a secret.
func TestKeyFormattingHidesMaterial(t *testing.T) {
	secret := strings.Repeat("topsecretvalue", 3)
	p := writeFile(t, t.TempDir(), "s", []byte(secret))
	k, err := LoadKey("k", "HS256", p)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := LoadSigningKey("k", "HS256", p)
	if err != nil {
		t.Fatal(err)
	}
	hexSecret := hex.EncodeToString([]byte(secret))
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%d", "%q"} {
		for _, val := range []any{k, sk, &k, &sk, []Key{k}} {
			out := fmt.Sprintf(verb, val)
			if strings.Contains(out, "topsecret") || strings.Contains(strings.ToLower(out), hexSecret[:16]) || strings.Contains(out, "116 111 112") {
				t.Errorf("Sprintf(%s, %T) = %q leaks the secret", verb, val, out)
			}
		}
	}
	if got := k.String(); got != `token.Key{ID:"k", Algorithm:"HS256"}` {
		t.Errorf("String() = %q", got)
	}
}
