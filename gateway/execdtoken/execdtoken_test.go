package execdtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// TestDerive pins the derivation: corectl and the gateway must compute the
// same token, so the vector here is the contract between them.
func TestDerive(t *testing.T) {
	secret := []byte(strings.Repeat("k", 32))
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sandgate execd access token v1\x00sbx-1"))
	want := hex.EncodeToString(m.Sum(nil))
	if got := Derive(secret, "sbx-1"); got != want || len(got) != 64 {
		t.Fatalf("Derive = %q, want %q", got, want)
	}
	// The fixed vector another implementation (corectl's) must reproduce.
	if want != "3ad745d60eead599d6da23fedf3d36faacd60ccb6eda25cf26de45ec865acf21" {
		t.Fatalf("the vector changed: %s", want)
	}
	if Derive(secret, "sbx-2") == want || Derive([]byte(strings.Repeat("j", 32)), "sbx-1") == want {
		t.Fatal("another sandbox or another secret gives the same token")
	}
}

func TestCheck(t *testing.T) {
	if err := Check(make([]byte, 31)); !errors.Is(err, ErrShortSecret) {
		t.Fatalf("31 bytes: %v", err)
	}
	if err := Check(make([]byte, 32)); err != nil {
		t.Fatalf("32 bytes: %v", err)
	}
}
