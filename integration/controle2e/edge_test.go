package controle2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/gateway/keypair/keypairtest"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/node/sim"
)

// edgeCA makes a CA, writes its certificate to dir/ca.crt and a server
// certificate it signs for localhost and 127.0.0.1 into dir/edge-tls, laid
// out as the kubelet lays out the Secret sandgate-edge-tls (tls.crt and
// tls.key through "..data"). It returns the CA, the Secret's directory and
// the certificate.
func edgeCA(t *testing.T, dir string) (*keypairtest.CA, *keypairtest.SecretDir, keypairtest.Leaf) {
	t.Helper()
	ca, err := keypairtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(time.Now().Add(24 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	secret := &keypairtest.SecretDir{Dir: filepath.Join(dir, "edge-tls")}
	if err := os.Mkdir(secret.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := secret.UpdateLeaf(leaf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return ca, secret, leaf
}

// servedSerial is the serial number of the certificate a new TLS
// connection to addr gets, trusting pool.
func servedSerial(addr string, pool *x509.CertPool) (*big.Int, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: pool, ServerName: "localhost"}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// edgeCaddyfile is the gateway of TestSDKOverTLSThroughTheEdge: the
// component's tls.caddyfile (imported, as the base Caddyfile imports it)
// and the base's public listeners in their shape, each importing
// listener_tls; loopback only. {{ADDR}} is the harness's plain readiness
// site.
const edgeCaddyfile = `{
	admin {{ADMIN}}
	persist_config off
	auto_https off
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{FIXED_ENTRY}}
		nodes {
			credentials file {{NODES}}
		}
	}
}

import {{TLS_CADDYFILE}}

:{{DATAPLANE_PORT}} {
	bind 127.0.0.1
	import listener_tls

	e2b_dataplane {
		home_dir /home/user
		user root 0 0 /root
		user user 1000 1000 /home/user
	}
}

:{{NODE_CONNECT_PORT}} {
	bind 127.0.0.1
	import listener_tls

	sandbox_node_connect
}

http://{{ADDR}} {
	bind 127.0.0.1
	e2b_dataplane
}
`

// TestSDKOverTLSThroughTheEdge runs the built gateway with the TLS of
// deploy/components/tls-caddy: its tls.caddyfile as shipped, with only the
// certificate directory (the Secret's mount), corectl's address and the API
// site's port rewritten to this test's, and a certificate from a CA made
// here, laid out as the kubelet lays out the Secret. The Secret is then
// renewed the kubelet's way and the three listeners serve the renewed
// certificate without a restart; then both pinned JS SDKs, trusting that
// CA (NODE_EXTRA_CA_CERTS), create a sandbox through corectl's API at
// https://localhost:<port> (the component's site, forwarding to corectl's
// plain HTTP), run commands and
// write and read a file through the data plane at https://localhost:<port>,
// connect again and kill. A simulated node connects over wss to node
// connect's TLS listener. A client without the CA is refused the
// handshake, plain HTTP gets no answer of the API, and corectl's internal
// authorizer, which answers corectl's internal token directly, is 404
// through the TLS site with that token.
func TestSDKOverTLSThroughTheEdge(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	ca, secret, first := edgeCA(t, dir)
	pool := ca.Pool

	// corectl's API listener, bound now and held until corectl serves it:
	// its address goes into the gateway's configuration first.
	corectlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = corectlLn.Close() }) // for a test that ends before corectl owns it
	corectlAddr := corectlLn.Addr().String()

	id := sim.NewIdentity()
	nodes := filepath.Join(dir, "nodes.yaml")
	if err := os.WriteFile(nodes, []byte(sim.CredentialsFile([]sim.Identity{id})), 0o600); err != nil {
		t.Fatal(err)
	}

	// The gateway's three listeners are bound by the gateway process: their
	// ports are picked for each start attempt, the harness checks that the
	// gateway alone holds them (Listens), and startStackWith tries again
	// when one was taken before the gateway listened.
	var ports map[string]string
	internal := "internal-" + rand.Text()
	gwLog := &lockedBuffer{}
	startStackWith(t, "", "", func(c *harness.Config) {
		ports = map[string]string{}
		for _, name := range []string{"api", "dataplane", "node-connect"} {
			p, err := freeport.Port()
			if err != nil {
				t.Fatal(err)
			}
			ports[name] = p
		}
		tlsPath, err := harness.EdgeTLSCaddyfile(root, dir, secret.Dir, corectlAddr, ports["api"])
		if err != nil {
			t.Fatal(err)
		}
		c.Caddyfile = strings.NewReplacer("{{TLS_CADDYFILE}}", tlsPath, "{{DATAPLANE_PORT}}", ports["dataplane"],
			"{{NODE_CONNECT_PORT}}", ports["node-connect"], "{{NODES}}", nodes).Replace(edgeCaddyfile)
		c.Listens = []string{"127.0.0.1:" + ports["api"], "127.0.0.1:" + ports["dataplane"], "127.0.0.1:" + ports["node-connect"]}
		c.Stderr = gwLog
	}, func(o *daemon.Options) {
		o.Listen, o.Listener = "", corectlLn
		o.InternalToken = internal
	})
	api := "https://localhost:" + ports["api"]
	dataplane := "https://localhost:" + ports["dataplane"]

	// The Secret is renewed (the kubelet's update) before the SDKs run:
	// they and the node work against the renewed certificate, which the
	// gateway serves without a restart.
	renewed, err := ca.Issue(time.Now().Add(48 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{ports["api"], ports["dataplane"], ports["node-connect"]} {
		if got, err := servedSerial("127.0.0.1:"+port, pool); err != nil || got.Cmp(first.Serial) != 0 {
			t.Fatalf("before the renewal :%s serves serial %v (%v), want %v", port, got, err, first.Serial)
		}
	}
	if err := secret.UpdateLeaf(renewed); err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{ports["api"], ports["dataplane"], ports["node-connect"]} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := servedSerial("127.0.0.1:"+port, pool)
			if err != nil {
				t.Fatalf("a handshake with :%s during the renewal: %v", port, err)
			}
			if got.Cmp(renewed.Serial) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf(":%s still serves serial %v 30 s after the renewal", port, got)
			}
			time.Sleep(20 * time.Millisecond) // polling the served certificate
		}
	}

	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			var r lifecycleResult
			runSDK(t, root, pkg, "lifecycle", 2*time.Minute, &r, "E2B_API_URL="+api, "E2B_SANDBOX_URL="+dataplane,
				"E2B_API_KEY=key-e2e", "SCENARIO_DIR=/home/user/e2e", "NODE_EXTRA_CA_CERTS="+filepath.Join(dir, "ca.crt"))
			checkLifecycle(t, r)
		})
	}

	t.Run("node-connect-over-wss", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		node, err := sim.Dial(ctx, sim.Config{URL: "https://localhost:" + ports["node-connect"], Credential: id.Credential,
			Hello: id.Hello(), HeartbeatInterval: -1,
			Dialer: &websocket.Dialer{HandshakeTimeout: 10 * time.Second, TLSClientConfig: &tls.Config{RootCAs: pool}}})
		if err != nil {
			t.Fatalf("a node over wss: %v", err)
		}
		defer node.Close()
		if err := node.Heartbeat(ctx); err != nil {
			t.Fatalf("a heartbeat over wss: %v", err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		trusting := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		// Without the CA: the handshake fails (the certificate is
		// verified, not merely present).
		_, err := testClient.Get(api + "/health")
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("GET %s/health without the CA = %v, want an unknown-authority error", api, err)
		}
		// Plain HTTP on the TLS port: Caddy answers 400, never the API.
		if resp, err := testClient.Get("http://localhost:" + ports["api"] + "/health"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS") {
				t.Errorf("plain HTTP to the TLS API port = %d %q, want 400", resp.StatusCode, b)
			}
		}
		// corectl's internal authorizer: answered directly with the
		// internal token (it is served), 404 through the TLS site.
		ask := func(base string, c *http.Client) int {
			req, _ := http.NewRequest("GET", base+"/internal/v1/authorize?credential=cred-none&sandbox=x", nil)
			req.Header.Set("Authorization", "Bearer "+internal)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("GET %s/internal/v1/authorize: %v", base, err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := ask("http://"+corectlAddr, testClient); code == http.StatusNotFound || code == http.StatusUnauthorized {
			t.Fatalf("corectl's own /internal/v1/authorize with its token = %d: the route is not served, the check below proves nothing", code)
		}
		if code := ask(api, trusting); code != http.StatusNotFound {
			t.Errorf("/internal/v1/authorize through the TLS site = %d, want 404", code)
		}
		// The API itself answers through the site.
		resp, err := trusting.Get(api + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("GET /health through the TLS site = %d, want corectl's 204", resp.StatusCode)
		}
	})

	// The API site's access log has the SDKs' requests but neither the API
	// key nor a sandbox token.
	logged := gwLog.String()
	if !strings.Contains(logged, `"uri":"/sandboxes`) && !strings.Contains(logged, `"uri":"/v2/sandboxes`) {
		t.Errorf("the gateway logged no API request through the TLS site:\n%.3000s", logged)
	}
	for _, leak := range []string{"key-e2e", internal, "eyJ"} {
		if strings.Contains(logged, leak) {
			t.Errorf("the gateway's log holds %q", leak)
		}
	}
}

// lockedBuffer is an io.Writer for a process's output that the test reads
// while the process may still write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
