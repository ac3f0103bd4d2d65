package nodeconnect

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/api"
)

// testClient sends the tests' HTTP requests, each on a connection of its
// own. A kept-alive connection of a configuration that caddy.Load replaced
// is closed by the old server as it shuts down, and a request that races
// that close reads EOF or a reset; these tests are about the node
// connections and the configuration, not about keep-alive across reloads.
// (New connections right after a reload are waitReloaded's concern.)
var testClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// The enrolled test node and the API token.
const (
	nodeID     = "0a000000-0000-4000-8000-00000000000a"
	installID  = "11111111-2222-4333-8444-555555555555"
	nodeSecret = "node-credential-DO-NOT-LOG-4b1d"
	apiToken   = "node-api-token-DO-NOT-LOG-77c3"
	hmacSecret = "nodeconnect-test-hmac-secret-0123456789abcdef"
)

var (
	fingerprint = strings.Repeat("f", 64)
	specDigest  = strings.Repeat("5a", 32)
)

// timeout bounds every wait of the tests; a safety net, not an assertion.
const timeout = 20 * time.Second

func hexSum(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// files are the key, credential and node credential files of a test, and
// the loopback port its server listens on.
type files struct {
	dir, key, creds, nodes string
	port                   string
}

func newFiles(t *testing.T) files {
	t.Helper()
	dir := t.TempDir()
	f := files{dir: dir, key: filepath.Join(dir, "hmac.key"), creds: filepath.Join(dir, "credentials.yaml"),
		nodes: filepath.Join(dir, "nodes.yaml"), port: freePort(t)}
	write(t, f.key, hmacSecret)
	write(t, f.creds, "credentials:\n  - id: cred-a\n    enabled: true\n    projectNamespace: p\n    clusterId: c\n")
	write(t, f.nodes, nodesFile(true))
	return f
}

// nodesFile enrols the test node, enabled or not.
func nodesFile(enabled bool) string {
	return fmt.Sprintf(`nodes:
  - node_id: %q
    enabled: %v
    credential_sha256: %q
    installation_id: %q
    provider: docker
    backend_fingerprint: %q
    deployment_generation: 1
    specification_digest: %q
`, nodeID, enabled, hexSum(nodeSecret), installID, fingerprint, specDigest)
}

// freePort returns a loopback TCP port that was free a moment ago (a
// server on ":0" would get a new port at every reload).
func freePort(t *testing.T) string {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func write(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// hello is the test node's hello.
func hello() proto.Hello {
	return proto.Hello{NodeID: nodeID, InstallationID: installID, Provider: proto.ProviderDocker,
		BackendFingerprint: fingerprint, DeploymentGeneration: 1, SpecificationDigest: specDigest, MaxActive: 8,
		Health: proto.Health{ProviderReady: true, Host: proto.HostMeasurements{CPUCount: 2, MemoryTotalBytes: 1 << 30}}}
}

// apiGet GETs an API path with the token and decodes the JSON answer.
func apiGet(t *testing.T, base, path string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, data)
		}
	}
	return resp.StatusCode
}

// apiOperation POSTs an info operation through the API.
func apiOperation(t *testing.T, base string) (int, api.OperationResult) {
	t.Helper()
	body := `{"operation":"info","deployment_generation":1,"timeout_ms":5000,
		"reference":{"tenant_id":"t1","environment_id":"e1","allocation_id":"a1"}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+api.Prefix+"/"+nodeID+"/operations", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res api.OperationResult
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, &res); err != nil {
			t.Fatalf("operation: %v in %s", err, data)
		}
	}
	return resp.StatusCode, res
}

// dialNode connects the simulated test node to base.
func dialNode(t *testing.T, base string, interval time.Duration) *sim.Node {
	t.Helper()
	n, err := sim.Dial(t.Context(), sim.Config{URL: base, Credential: nodeSecret, Hello: hello(), HeartbeatInterval: interval})
	if err != nil {
		t.Fatalf("node dial: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// waitReloaded waits until the running configuration's listener is the
// only socket listening on its port, polling the kernel's TCP tables
// (/proc/net/tcp and tcp6) every 5 ms for up to 10 s. caddy.Load returns once the
// replaced configuration's servers have begun to shut down, not when
// they have finished (Caddy's caddyhttp.App.Stop says so), and each
// configuration listens on a socket of its own (SO_REUSEPORT): until the
// old socket closes, a new connection can still be answered by the old
// configuration, or be reset when that socket closes with it queued.
func waitReloaded(t *testing.T) {
	t.Helper()
	waitOneListener(t, baseURL(t))
}

// waitOneListener is waitReloaded for the gateway at base
// ("http://127.0.0.1:<port>"), in this process or another (the kernel's
// table is the network namespace's).
func waitOneListener(t *testing.T, base string) {
	t.Helper()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("waitOneListener needs a 127.0.0.1 listener: %s %v", host, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf(":%04X", p) // any local address: a site may listen on [::] or 0.0.0.0
	deadline := time.Now().Add(10 * time.Second)
	for {
		listening := 0
		for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			data, err := os.ReadFile(table)
			if err != nil {
				t.Fatalf("reading the kernel's TCP table: %v", err)
			}
			for _, line := range strings.Split(string(data), "\n") {
				if f := strings.Fields(line); len(f) > 3 && strings.HasSuffix(f[1], suffix) && f[3] == "0A" { // 0A: LISTEN
					listening++
				}
			}
		}
		if listening == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sockets listen on port %d 10 s after the reload, want 1", listening, p)
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel's socket table
	}
}
