package token

import (
	"errors"
	"testing"
	"time"
)

// TestKeyRotationSlot rotates the signing key the way the shipped
// Caddyfile's rotation slot and docs/runbook.md do it, for the shared
// HS256 secret and for an Ed25519 pair (the gateway holding only the
// public half). In each step both gateway generations of a rolling update
// are live, and so is every signer corectl may be running; every token in
// flight must verify at every live gateway:
//
//  1. the gateway gains the new key in the slot (kid "next");
//  2. the gateway lists the new key first and keeps the old one in the
//     slot while corectl switches to signing with the new key;
//  3. once the old tokens' lifetime has passed, the slot drops the old key.
//
// Step 3 refuses a token of the old key: that is why it waits.
func TestKeyRotationSlot(t *testing.T) {
	for _, alg := range []string{"HS256", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			oldPriv, oldPub := keyFiles(t, t.TempDir(), alg)
			newPriv, newPub := keyFiles(t, t.TempDir(), alg)
			load := func(kid, pub string) Key {
				k, err := LoadKey(kid, alg, pub)
				if err != nil {
					t.Fatal(err)
				}
				return k
			}
			signer := func(kid, priv string) SigningKey {
				k, err := LoadSigningKey(kid, alg, priv)
				if err != nil {
					t.Fatal(err)
				}
				return k
			}
			now := time.Unix(1_800_000_000, 0)
			gateway := func(keys ...Key) *Verifier { return newVerifier(t, 0, now, keys...) }
			g0 := gateway(load("primary", oldPub), load("unused-slot", oldPub))
			g1 := gateway(load("primary", oldPub), load("next", newPub))
			g2 := gateway(load("next", newPub), load("primary", oldPub))
			g3 := gateway(load("next", newPub), load("unused-slot", newPub))
			cOld, cNew := signer("primary", oldPriv), signer("next", newPriv)
			tg := Target{CredentialID: "a", SandboxID: "sb1", Port: 49983}

			steps := []struct {
				name     string
				gateways []*Verifier
				signers  []SigningKey
			}{
				{"the slot gains the new key", []*Verifier{g0, g1}, []SigningKey{cOld}},
				{"corectl switches to the new key", []*Verifier{g1, g2}, []SigningKey{cOld, cNew}},
				{"the slot drops the old key", []*Verifier{g2, g3}, []SigningKey{cNew}},
			}
			for _, s := range steps {
				for gi, g := range s.gateways {
					for _, sk := range s.signers {
						raw := mint(t, sk, tg, time.Minute, now)
						if got, err := g.Verify(raw); err != nil || got != tg {
							t.Errorf("%s: gateway %d, token of kid %s: %+v %v", s.name, gi, sk.ID, got, err)
						}
					}
				}
			}
			if _, err := g3.Verify(mint(t, cOld, tg, time.Minute, now)); !errors.Is(err, ErrUnknownKey) {
				t.Errorf("after the rotation a token of the old key: %v, want ErrUnknownKey", err)
			}
		})
	}
}
