package apikey

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway/credential"
)

func file(entries ...string) []byte {
	return []byte("keys:\n" + strings.Join(entries, "\n") + "\n")
}

func TestParseAndLookup(t *testing.T) {
	k, err := Parse(file(
		"  - {name: a, sha256: "+Digest("secret-a")+", credentialId: cred-a}",
		"  - {name: admin, sha256: "+Digest("secret-admin")+", templateAdmin: true}",
	))
	if err != nil {
		t.Fatal(err)
	}
	e, err := k.Lookup("secret-a")
	if err != nil || e.Name != "a" || e.CredentialID != "cred-a" {
		t.Fatalf("Lookup = %+v, %v", e, err)
	}
	if _, err := k.Lookup(""); !errors.Is(err, ErrMissing) {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := k.Lookup("secret-b"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown key: %v", err)
	}
	ctx := context.Background()
	s := credential.Static{"cred-a": {ID: "cred-a", Enabled: true, ClusterID: "c1", ProjectNamespace: "ns"}}
	p, err := Authenticate(ctx, k, s, "secret-a", true)
	if err != nil || p.Credential.ProjectNamespace != "ns" {
		t.Fatalf("Authenticate = %+v, %v", p, err)
	}
	if _, err := Authenticate(ctx, k, s, "secret-admin", true); !errors.Is(err, ErrNoCredential) {
		t.Fatalf("admin key on a sandbox route: %v", err)
	}
	if p, err := Authenticate(ctx, k, s, "secret-admin", false); err != nil || !p.Key.TemplateAdmin {
		t.Fatalf("admin key on a template route: %+v, %v", p, err)
	}
	s["cred-a"] = credential.Credential{ID: "cred-a", Enabled: false}
	if _, err := Authenticate(ctx, k, s, "secret-a", true); !errors.Is(err, credential.ErrDisabled) {
		t.Fatalf("disabled credential: %v", err)
	}
}

func TestParseRefusesBadFiles(t *testing.T) {
	d := Digest("x")
	for _, tc := range []struct{ name, data string }{
		{"unknown field", "keys:\n  - {name: a, sha256: " + d + ", credentialId: c, extra: 1}\n"},
		{"unknown top-level", "keys: []\nother: 1\n"},
		{"YAML boolean for a string", "keys:\n  - {name: a, sha256: " + d + ", credentialId: off}\n"},
		{"digest not hex", "keys:\n  - {name: a, sha256: xyz, credentialId: c}\n"},
		{"digest upper case", "keys:\n  - {name: a, sha256: " + strings.ToUpper(d) + ", credentialId: c}\n"},
		{"no credential, not admin", "keys:\n  - {name: a, sha256: " + d + "}\n"},
		{"repeated name", "keys:\n  - {name: a, sha256: " + d + ", credentialId: c}\n  - {name: a, sha256: " + Digest("y") + ", credentialId: c}\n"},
		{"repeated digest", "keys:\n  - {name: a, sha256: " + d + ", credentialId: c}\n  - {name: b, sha256: " + d + ", credentialId: c}\n"},
		{"duplicate key", "keys: []\nkeys: []\n"},
		{"not YAML", "keys: [\n"},
	} {
		_, err := Parse([]byte(tc.data))
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
		if err != nil && strings.Contains(err.Error(), d) {
			t.Errorf("%s: error leaks a digest: %v", tc.name, err)
		}
	}
}
