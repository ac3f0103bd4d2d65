package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/scrapetest"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/api"
)

// shutdownCaddyfile is the harness gateway with a node connection service,
// the probes and the metrics on the same site, a shutdown delay (the
// server keeps serving while /readyz already fails) and a grace period
// for the requests in flight.
const shutdownCaddyfile = `{
	admin {{ADMIN}}
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	shutdown_delay 2s
	grace_period 20s
	metrics
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{FIXED_ENTRY}}
		nodes {
			credentials file {{NODES}}
			shutdown_grace 10s
		}
	}
}

http://{{ADDR}} {
	sandgate_health
	metrics /metrics
	sandbox_node_connect
	sandbox_node_api {
		token_sha256 {{API_TOKEN_SHA256}}
	}
	e2b_dataplane {
		home_dir /home/user
		user root 0 0 /root
	}
}
`

// TestGracefulShutdown runs the built gateway with a node connected and an
// SDK command streaming (counted in sandgate_dataplane_streams_in_flight),
// then sends SIGTERM: /readyz answers 503 at once
// while /healthz and the stream go on (shutdown_delay), the stream
// finishes with all its output within the grace period, the node is
// closed with 1001 (going away, reconnect elsewhere), and the process
// exits 0. Before that, /readyz and the node-hub metrics are checked.
func TestGracefulShutdown(t *testing.T) {
	id := sim.NewIdentity()
	apiToken := "node-api-token-for-the-shutdown-test"
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.yaml")
	if err := os.WriteFile(nodes, []byte(sim.CredentialsFile([]sim.Identity{id})), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(apiToken))
	cf := strings.NewReplacer("{{NODES}}", nodes, "{{API_TOKEN_SHA256}}", hex.EncodeToString(sum[:])).Replace(shutdownCaddyfile)
	e := startEnv(t, func(c *harness.Config) { c.Caddyfile = cf })
	get := func(path string) (int, string) {
		resp, err := testClient.Get(e.Gateway + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	node, err := sim.Dial(context.Background(), sim.Config{URL: e.Gateway, Credential: id.Credential, Hello: id.Hello(), HeartbeatInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if st, body := get("/readyz"); st != 200 || !strings.Contains(body, "[+]nodes ok") || !strings.Contains(body, "[+]shutdown ok") {
		t.Fatalf("/readyz = %d %s", st, body)
	}
	req, _ := http.NewRequest("POST", e.Gateway+api.Prefix+"/"+id.NodeID+"/operations",
		strings.NewReader(`{"operation":"info","deployment_generation":1,"timeout_ms":5000,"reference":{"tenant_id":"t","environment_id":"e","allocation_id":"a"}}`))
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var op api.OperationResult
	_ = json.NewDecoder(resp.Body).Decode(&op)
	resp.Body.Close()
	if op.Outcome != "success" {
		t.Fatalf("operation: %d %+v", resp.StatusCode, op)
	}
	m, err := scrapetest.Get(nil, e.Gateway+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sandgate_node_online", nil, 1},
		{"sandgate_node_connections", []string{"state", "live"}, 1},
		{"sandgate_node_generation_ready", []string{"pool", "default", "generation", "1"}, 1},
		{"sandgate_node_dispatch_total", []string{"operation", "info", "outcome", "success"}, 1},
		{"sandgate_node_dispatch_duration_seconds_count", []string{"operation", "info"}, 1},
	} {
		if got := m.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}

	// An SDK command that streams for about three seconds.
	goFile := filepath.Join(e.Dir, "go-shutdown")
	type sdkRun struct {
		res json.RawMessage
		err error
	}
	ran := make(chan sdkRun, 1)
	go func() {
		res, err := e.sdk(sdkPackages[len(sdkPackages)-1], "stream", sbxOK, "GO_FILE="+goFile)
		ran <- sdkRun{res, err}
	}()
	deadline := time.Now().Add(waitLimit)
	for {
		if _, err := os.Stat(goFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the SDK's command never started streaming")
		}
		time.Sleep(20 * time.Millisecond) // polling a file the SDK script creates
	}
	// The stream is in flight (it waits for the file the SDK created), and
	// the build and Caddy's HTTP metrics (the metrics global option) are
	// exported beside the data plane's.
	m, err = scrapetest.Get(nil, e.Gateway+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sandgate_dataplane_streams_in_flight", []string{"kind", "command"}, 1},
		{"sandgate_dataplane_streams_in_flight", []string{"kind", "transfer"}, 0},
		{"sandgate_build_info", []string{"program", "gateway"}, 1},
	} {
		if got, ok := m.Sum(c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %g (found %v), want %g", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := m.Sum("caddy_http_request_duration_seconds_count", "code", "200", "method", "POST"); !ok {
		t.Errorf("no caddy_http_request_duration_seconds_count for the POSTs answered 200:\n%s", m)
	}

	if err := e.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ok, why := waitUntil(time.Now().Add(10*time.Second), func(context.Context) (bool, string) {
		st, body := get("/readyz")
		return st == 503 && strings.Contains(body, "[-]shutdown failed"), body
	})
	if !ok {
		t.Fatalf("/readyz did not fail after SIGTERM: %s", why)
	}
	if st, body := get("/healthz"); st != 200 {
		t.Fatalf("/healthz during the shutdown delay = %d %s", st, body)
	}

	r := <-ran
	if r.err != nil {
		t.Fatalf("the stream across the shutdown: %v", r.err)
	}
	var res struct {
		Result attempt `json:"result"`
	}
	if err := json.Unmarshal(r.res, &res); err != nil {
		t.Fatal(err)
	}
	wantCommand(t, "stream across the shutdown", res.Result, commandResult{Stdout: "first\ntick1\ntick2\ntick3\n"})

	select {
	case <-node.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the node connection was not closed")
	}
	var ce *websocket.CloseError
	if !errors.As(node.Err(), &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("the node connection ended with %v, want close 1001", node.Err())
	}
	exitErr, exited := e.WaitExit(40 * time.Second)
	if !exited {
		t.Fatal("the gateway did not exit")
	}
	if exitErr != nil {
		t.Fatalf("the gateway exited with %v\n%s", exitErr, e.log.String())
	}
}
