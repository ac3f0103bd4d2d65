package caddymodules

import (
	_ "github.com/caddyserver/caddy/v2/modules/logging"

	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/token"
)

// hmacSecret is the recognisable HMAC secret written to the key file; it
// must never appear in an error.
const hmacSecret = "sandgate-test-hmac-secret-DO-NOT-LEAK-4b7e1f0c9a"

// fixtures are real key and credential files in a temporary directory.
type fixtures struct {
	dir         string
	hmacKey     string // HS256 secret (hmacSecret)
	edPrivate   string // EdDSA private key, PEM (PKCS #8)
	edPublic    string // EdDSA public key, PEM (PKIX)
	credentials string // YAML: cred-a (enabled, cluster-a), cred-off (disabled)
}

func newFixtures(t *testing.T) fixtures {
	t.Helper()
	dir := t.TempDir()
	f := fixtures{
		dir:         dir,
		hmacKey:     filepath.Join(dir, "hmac.key"),
		edPrivate:   filepath.Join(dir, "ed25519.pem"),
		edPublic:    filepath.Join(dir, "ed25519.pub.pem"),
		credentials: filepath.Join(dir, "credentials.yaml"),
	}
	writeFile(t, f.hmacKey, hmacSecret+"\n")
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
	writeFile(t, f.edPrivate, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER})))
	writeFile(t, f.edPublic, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})))
	writeFile(t, f.credentials, `credentials:
  - id: cred-a
    enabled: true
    resourceSpecId: spec-small
    resourceGroupId: group-1
    projectNamespace: team-a
    clusterId: cluster-a
  - id: cred-off
    enabled: false
    projectNamespace: team-a
    clusterId: cluster-a
`)
	return f
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mint signs a token for the envd service of sandbox with the key file.
func mint(t *testing.T, kid, alg, keyFile, credentialID, sandbox string) string {
	t.Helper()
	k, err := token.LoadSigningKey(kid, alg, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := k.Mint(token.Target{CredentialID: credentialID, SandboxID: sandbox, Port: 49983}, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// obj is a JSON object under construction.
type obj = map[string]any

// baseConfig is a complete, valid JSON config: the sandgate app with an
// HMAC and an EdDSA key, the credentials file and two clusters, and an HTTP
// server on 127.0.0.1 (an ephemeral port) with the e2b_dataplane handler.
// Admin is off, nothing is persisted and storage is under f.dir.
func baseConfig(f fixtures, fixedEntry string) obj {
	return obj{
		"admin":   obj{"disabled": true, "config": obj{"persist": false}},
		"storage": obj{"module": "file_system", "root": filepath.Join(f.dir, "storage")},
		"apps": obj{
			"sandgate": obj{
				"token_keys": []any{
					obj{"kid": "hmac", "algorithm": "HS256", "file": f.hmacKey},
					obj{"kid": "ed", "algorithm": "EdDSA", "file": f.edPublic},
				},
				"token_leeway": "2s",
				"credentials":  obj{"source": "file", "path": f.credentials},
				"clusters": obj{
					"cluster-a": obj{"fixed_entry": fixedEntry, "execd_access_token": "{env.SANDGATE_TEST_EXECD_TOKEN}"},
					"cluster-b": obj{"fixed_entry": "https://entry.b.example:8443"},
				},
			},
			"http": obj{
				"servers": obj{
					"dp": obj{
						"listen":          []any{"127.0.0.1:0"},
						"automatic_https": obj{"disable": true},
						"routes": []any{obj{"handle": []any{obj{
							"handler":            "e2b_dataplane",
							"home_dir":           "/home/user",
							"users":              obj{"root": obj{"uid": 0, "gid": 0, "home": "/root"}, "user": obj{"uid": 1000, "gid": 1000}},
							"default_user":       "user",
							"keepalive_interval": "30s",
							"max_message_size":   1 << 20,
							"transport":          obj{"protocol": "http", "dial_timeout": "2s"},
						}}}},
					},
				},
			},
		},
	}
}

// sub returns the object at the given keys of o.
func sub(o obj, keys ...string) obj {
	for _, k := range keys {
		o = o[k].(obj)
	}
	return o
}

// handlerOf returns the e2b_dataplane handler object of a baseConfig.
func handlerOf(cfg obj) obj {
	routes := sub(cfg, "apps", "http", "servers", "dp")["routes"].([]any)
	return routes[0].(obj)["handle"].([]any)[0].(obj)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
