package deploy

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/token"
)

// TestTokenKeyPairFromSettings: with the base's kid and algorithm
// (sandgate-settings), an Ed25519 pair as `openssl genpkey -algorithm
// ed25519` and `openssl pkey -pubout` write it is what corectl signs with
// (its Secret corectl-token-signing-key) and what the gateway verifies with
// (Secret sandgate-token-key), and the gateway's public file cannot sign.
func TestTokenKeyPairFromSettings(t *testing.T) {
	settings := render(t, "portal").configMap(t, "sandgate-settings")
	kid, alg := settings["SANDGATE_TOKEN_KID"], settings["SANDGATE_TOKEN_ALGORITHM"]
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	privFile, pubFile := filepath.Join(dir, "token-signing.key"), filepath.Join(dir, "token-verify.pub")
	if err := os.WriteFile(privFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := token.LoadSigningKey(kid, alg, privFile)
	if err != nil {
		t.Fatalf("corectl's signing key (%s %s): %v", kid, alg, err)
	}
	verify, err := token.LoadKey(kid, alg, pubFile)
	if err != nil {
		t.Fatalf("the gateway's key (%s %s): %v", kid, alg, err)
	}
	v, err := token.NewVerifier([]token.Key{verify}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tg := token.Target{CredentialID: "a", SandboxID: "sb1", Port: 49983}
	raw, err := signer.Mint(tg, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v.Verify(raw); err != nil || got != tg {
		t.Fatalf("the gateway verifies corectl's token: %+v %v", got, err)
	}
	if _, err := token.LoadSigningKey(kid, alg, pubFile); err == nil {
		t.Error("the gateway's public key file loads as a signing key")
	}
}
