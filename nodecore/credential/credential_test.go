package credential

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
)

const (
	nodeA   = "7c0e5f0a-4c1e-4e55-9a7e-2f1f6d1b9a01"
	nodeB   = "1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5"
	instA   = "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60"
	secretA = "node-a-credential-DO-NOT-LOG-7f3a9c"
	secretB = "node-b-credential-DO-NOT-LOG-1b2c3d"
	fp      = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	spec    = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func hexSum(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// recordYAML is one YAML list element for node id with the digest of
// secret.
func recordYAML(id, secret string, enabled bool) string {
	return fmt.Sprintf(`  - node_id: %s
    enabled: %v
    credential_sha256: %s
    installation_id: %s
    provider: docker
    backend_fingerprint: %s
    deployment_generation: 3
    specification_digest: %s
`, id, enabled, hexSum(secret), instA, fp, spec)
}

func twoNodes() string {
	return "nodes:\n" + recordYAML(nodeA, secretA, true) + recordYAML(nodeB, secretB, false)
}

func open(t *testing.T, content string, logger *zap.Logger) (*File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nodes.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path, logger)
	if err != nil {
		t.Fatalf("OpenFile: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f, path
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestAuthenticate: the right credential gives the enrolled identity; a
// wrong one, an unknown node and a disabled node are refused with their
// sentinel, and no error text contains a secret or a digest.
func TestAuthenticate(t *testing.T) {
	f, _ := open(t, twoNodes(), nil)
	n, err := f.Authenticate(nodeA, Sum(secretA))
	want := Node{NodeID: nodeA, Enabled: true, InstallationID: instA, Provider: "docker",
		BackendFingerprint: fp, DeploymentGeneration: 3, SpecificationDigest: spec, Pool: "default"}
	if err != nil || n != want {
		t.Fatalf("Authenticate(A, right) = %+v, %v; want %+v", n, err, want)
	}
	for _, tc := range []struct {
		name, id, secret string
		want             error
	}{
		{"wrong credential", nodeA, secretB, ErrMismatch},
		{"empty credential", nodeA, "", ErrMismatch},
		{"unknown node", "00000000-0000-4000-8000-000000000000", secretA, ErrUnknownNode},
		{"disabled node", nodeB, secretB, ErrDisabled},
		{"disabled node, wrong credential", nodeB, secretA, ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := f.Authenticate(tc.id, Sum(tc.secret))
			if !errors.Is(err, tc.want) || n != (Node{}) {
				t.Fatalf("Authenticate = %+v, %v; want %v", n, err, tc.want)
			}
			for _, s := range []error{ErrMismatch, ErrUnknownNode, ErrDisabled} {
				if s != tc.want && errors.Is(err, s) {
					t.Errorf("error also matches %v", s)
				}
			}
			for _, secret := range []string{secretA, secretB, hexSum(secretA), hexSum(secretB)} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains a secret or digest", err)
				}
			}
		})
	}
	nodes := f.Nodes()
	if len(nodes) != 2 || nodes[0].NodeID != nodeB || nodes[1].NodeID != nodeA || nodes[0].Enabled {
		t.Errorf("Nodes() = %+v, want B (disabled) then A, sorted by ID", nodes)
	}
}

// TestNextCredential: a record's next_credential_sha256 authenticates the
// node as credential_sha256 does, in both formats; once the file holds
// only the new digest the old credential is refused (docs/runbook.md
// "Node credentials", the rotation slot); a disabled record with a next
// digest is refused for both.
func TestNextCredential(t *testing.T) {
	const next = "node-a-next-credential-DO-NOT-LOG-2e4d"
	withNext := func(enabled bool) string {
		return "nodes:\n" + recordYAML(nodeA, secretA, enabled) + "    next_credential_sha256: " + hexSum(next) + "\n"
	}
	f, path := open(t, withNext(true), nil)
	ok := func(secret string) error { _, err := f.Authenticate(nodeA, Sum(secret)); return err }
	for _, secret := range []string{secretA, next} {
		if err := ok(secret); err != nil {
			t.Errorf("during the rotation a credential is refused: %v", err)
		}
	}
	if err := ok(secretB); !errors.Is(err, ErrMismatch) {
		t.Errorf("another credential: %v, want ErrMismatch", err)
	}
	j := fmt.Sprintf(`{"nodes": [{"node_id": %q, "enabled": true, "credential_sha256": %q, "next_credential_sha256": %q,
		"installation_id": %q, "provider": "docker", "backend_fingerprint": %q,
		"deployment_generation": 3, "specification_digest": %q}]}`, nodeA, hexSum(secretA), hexSum(next), instA, fp, spec)
	fj, _ := open(t, j, nil)
	if _, err := fj.Authenticate(nodeA, Sum(next)); err != nil {
		t.Errorf("JSON: the next credential is refused: %v", err)
	}

	writeAtomic(t, path, withNext(false))
	waittest.Until(t, time.Second, "the node to be disabled", func() bool { return errors.Is(ok(next), ErrDisabled) })
	if err := ok(secretA); !errors.Is(err, ErrDisabled) {
		t.Errorf("disabled, the current credential: %v, want ErrDisabled", err)
	}

	writeAtomic(t, path, "nodes:\n"+recordYAML(nodeA, next, true))
	waittest.Until(t, time.Second, "the rotation's end", func() bool { return ok(next) == nil })
	if err := ok(secretA); !errors.Is(err, ErrMismatch) {
		t.Errorf("after the rotation, the old credential: %v, want ErrMismatch", err)
	}
}

// TestFileFormats: JSON works like YAML and generation_management is read.
func TestFileFormats(t *testing.T) {
	j := fmt.Sprintf(`{"nodes": [{"node_id": %q, "enabled": true, "credential_sha256": %q,
		"installation_id": %q, "provider": "microsandbox", "backend_fingerprint": %q,
		"deployment_generation": 9, "specification_digest": %q, "generation_management": true, "pool": "gpu-1"}]}`,
		nodeA, hexSum(secretA), instA, fp, spec)
	f, _ := open(t, j, nil)
	n, err := f.Authenticate(nodeA, Sum(secretA))
	if err != nil || !n.GenerationManagement || n.Provider != "microsandbox" || n.DeploymentGeneration != 9 || n.Pool != "gpu-1" {
		t.Fatalf("Authenticate = %+v, %v", n, err)
	}
}

// TestOpenFileRejects: one malformed file per rule, each refused with
// ErrInvalid and a reason that names the member, never a value.
func TestOpenFileRejects(t *testing.T) {
	good := recordYAML(nodeA, secretA, true)
	replace := func(old, new string) string { return "nodes:\n" + strings.Replace(good, old, new, 1) }
	cases := []struct{ name, content, reason string }{
		{"unknown member", "nodes:\n" + good + "    region: eu\n", `unknown member "region"`},
		{"case variant member", replace("node_id:", "Node_ID:"), `unknown member "Node_ID"`},
		{"duplicate member", "nodes:\n" + good + "    provider: docker\n", "already set"},
		{"null member", replace("provider: docker", "provider: null"), "member provider is null"},
		{"missing member", replace("    provider: docker\n", ""), "missing member provider"},
		{"missing enabled", replace("    enabled: true\n", ""), "missing member enabled"},
		{"node_id not a UUID", replace(nodeA, "node-a"), "node_id must be a lowercase UUID"},
		{"node_id upper case", replace(nodeA, strings.ToUpper(nodeA)), "node_id must be a lowercase UUID"},
		{"installation_id not a UUID", replace(instA, "x"), "installation_id must be a lowercase UUID"},
		{"unknown provider", replace("provider: docker", "provider: podman"), "provider must be docker or microsandbox"},
		{"bad fingerprint", replace(fp, "AB"), "backend_fingerprint must be 64 lowercase hexadecimal digits"},
		{"zero generation", replace("deployment_generation: 3", "deployment_generation: 0"), "deployment_generation must be positive"},
		{"fractional generation", replace("deployment_generation: 3", "deployment_generation: 1.5"), "member deployment_generation is a JSON number"},
		{"string generation", replace("deployment_generation: 3", `deployment_generation: "3"`), "member deployment_generation is a JSON string"},
		{"bad spec digest", replace(spec, strings.ToUpper(spec)), "specification_digest must be 64 lowercase hexadecimal digits"},
		{"bad credential digest", replace(hexSum(secretA), "not-a-digest"), "credential_sha256: node credential: invalid node credential data: a SHA-256 digest is 64 lowercase hexadecimal digits"},
		{"bad pool", "nodes:\n" + good + "    pool: GPU\n", "pool must be 1..63 characters"},
		{"empty pool", "nodes:\n" + good + "    pool: \"\"\n", "pool must be"},
		{"bad next credential digest", "nodes:\n" + good + "    next_credential_sha256: " + strings.ToUpper(hexSum(secretB)) + "\n", "next_credential_sha256: node credential: invalid node credential data: a SHA-256 digest is 64 lowercase hexadecimal digits"},
		{"empty next credential digest", "nodes:\n" + good + "    next_credential_sha256: \"\"\n", "next_credential_sha256 must be 64 lowercase hexadecimal digits, present only during a rotation"},
		{"null next credential digest", "nodes:\n" + good + "    next_credential_sha256: null\n", "member next_credential_sha256 is null"},
		{"enabled as string", replace("enabled: true", `enabled: "yes"`), "member enabled is a JSON string"},
		{"repeated node", "nodes:\n" + good + good, "nodes[1] repeats the node_id of nodes[0]"},
		{"unknown top-level", "nodes: []\nversion: 2\n", `unknown top-level member "version"`},
		{"no nodes", "{}", `missing top-level member "nodes"`},
		{"nodes not a list", "nodes: {}\n", "nodes must be a list"},
		{"element not an object", "nodes: [1]\n", "nodes[0]: node credential: invalid node credential data: not a JSON object"},
		{"not YAML", "nodes: [\n", "not valid JSON or YAML"},
		{"oversize", "nodes: []\n" + strings.Repeat("#", MaxFileSize), "larger than 33554432 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nodes.yaml")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := OpenFile(path, nil)
			if f != nil {
				_ = f.Close()
				t.Fatal("OpenFile succeeded")
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error = %v; want ErrInvalid with the path and %q", err, tc.reason)
			}
			if strings.Contains(err.Error(), hexSum(secretA)) {
				t.Errorf("error %q contains the digest", err)
			}
			if strings.Contains(err.Error(), "1.5") || strings.Contains(err.Error(), "yes") {
				t.Errorf("error %q quotes a value", err)
			}
		})
	}
}

// TestReloadRevokes: disabling, replacing the digest of, or removing a node
// in the file is applied within a second; a broken rewrite keeps the last
// good version and logs the path but no contents.
func TestReloadRevokes(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	f, path := open(t, twoNodes(), zap.New(core))
	ok := func(id, secret string) error { _, err := f.Authenticate(id, Sum(secret)); return err }

	// Each wait also requires the version counted: a reload serves the new
	// nodes first and counts the version last, so v below is the rotated
	// version's number only once it is counted.
	v := f.Version()
	writeAtomic(t, path, "nodes:\n"+recordYAML(nodeA, secretA, false))
	waittest.Until(t, time.Second, "node A to be disabled", func() bool { return f.Version() > v && errors.Is(ok(nodeA, secretA), ErrDisabled) })

	v = f.Version()
	writeAtomic(t, path, "nodes:\n"+recordYAML(nodeA, "rotated-credential", true))
	waittest.Until(t, time.Second, "the rotated digest", func() bool {
		return f.Version() > v && errors.Is(ok(nodeA, secretA), ErrMismatch) && ok(nodeA, "rotated-credential") == nil
	})

	v = f.Version()
	writeAtomic(t, path, "nodes:\n  - node_id: "+nodeA+"\n    credential_sha256: "+hexSum(secretA)+"\n    colour: blue\n")
	// The warning is the failed reload's last step, after LastError is
	// set: waiting for LastError alone could check the warnings below
	// before there were any.
	waittest.Until(t, time.Second, "the broken reload to be reported and logged", func() bool {
		return f.LastError() != nil && logs.FilterLevelExact(zapcore.WarnLevel).Len() > 0
	})
	if f.Version() != v || ok(nodeA, "rotated-credential") != nil {
		t.Fatalf("a broken reload replaced the last good version")
	}
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		if e.ContextMap()["path"] != path {
			t.Errorf("warning %q lacks the path", e.Message)
		}
		if s := fmt.Sprint(e.Message, e.ContextMap()); strings.Contains(s, hexSum(secretA)) || strings.Contains(s, "blue") {
			t.Errorf("warning %q contains file contents", s)
		}
	}

	writeAtomic(t, path, "nodes: []\n")
	// The version is counted last, after LastError is cleared (the new
	// nodes are served before that).
	waittest.Until(t, time.Second, "node A to be removed", func() bool {
		return f.Version() > v && errors.Is(ok(nodeA, "rotated-credential"), ErrUnknownNode)
	})
	if f.LastError() != nil {
		t.Fatalf("LastError() = %v after a good reload", f.LastError())
	}
}

// TestParseDigest covers the digest check.
func TestParseDigest(t *testing.T) {
	if d, err := ParseDigest(hexSum(secretA)); err != nil || d != Sum(secretA) {
		t.Fatalf("ParseDigest(valid) = %x, %v", d, err)
	}
	for _, s := range []string{"", "ab", strings.ToUpper(hexSum("x")), hexSum("x") + "0", strings.Repeat("g", 64)} {
		if _, err := ParseDigest(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseDigest(%q) error = %v, want ErrInvalid", s, err)
		}
	}
}

// FuzzParse: the parser never panics, and what it accepts is valid.
func FuzzParse(f *testing.F) {
	f.Add([]byte(twoNodes()))
	f.Add([]byte("nodes: []\n"))
	f.Add([]byte("nodes:\n" + recordYAML(nodeA, secretA, true) + "    next_credential_sha256: " + hexSum(secretB) + "\n"))
	f.Add([]byte(`{"nodes": [null]}`))
	f.Add([]byte("\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || m != nil {
				t.Fatalf("parse error %v (map %v)", err, m)
			}
			return
		}
		for id, r := range m {
			if id != r.NodeID || !proto.IsUUID(id) || r.DeploymentGeneration <= 0 {
				t.Fatalf("accepted invalid record %+v", r.Node)
			}
		}
	})
}

// BenchmarkParse parses a node credential file of 10,000 records in each
// of the shapes a generator writes: one YAML flow mapping per line (what
// node/sim and hack/nodeload write), a YAML block list and JSON. It
// reports the time and the bytes allocated per record; a 50,000-node file
// costs five times one operation.
func BenchmarkParse(b *testing.B) {
	const records = 10000
	shapes := []struct {
		name   string
		record func(id, sum string) string
		head   string
		tail   string
		sep    string
	}{
		{"yaml-flow-lines", func(id, sum string) string {
			return fmt.Sprintf("  - {node_id: %q, enabled: true, credential_sha256: %q, installation_id: %q, provider: docker, backend_fingerprint: %q, deployment_generation: 1, specification_digest: %q}\n", id, sum, instA, fp, spec)
		}, "nodes:\n", "", ""},
		{"yaml-block", func(id, sum string) string {
			return fmt.Sprintf("  - node_id: %s\n    enabled: true\n    credential_sha256: %s\n    installation_id: %s\n    provider: docker\n    backend_fingerprint: %s\n    deployment_generation: 1\n    specification_digest: %s\n", id, sum, instA, fp, spec)
		}, "nodes:\n", "", ""},
		{"json", func(id, sum string) string {
			return fmt.Sprintf(`{"node_id":%q,"enabled":true,"credential_sha256":%q,"installation_id":%q,"provider":"docker","backend_fingerprint":%q,"deployment_generation":1,"specification_digest":%q}`, id, sum, instA, fp, spec)
		}, `{"nodes":[`, "]}", ","},
	}
	for _, s := range shapes {
		var doc strings.Builder
		doc.WriteString(s.head)
		for i := range records {
			if i > 0 {
				doc.WriteString(s.sep)
			}
			id := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
			doc.WriteString(s.record(id, hexSum(id)))
		}
		doc.WriteString(s.tail)
		data := []byte(doc.String())
		b.Run(s.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				m, err := parse(data)
				if err != nil || len(m) != records {
					b.Fatalf("parse: %d records, %v", len(m), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/record")
		})
	}
}
