package nodeconnect

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	_ "github.com/caddyserver/caddy/v2/modules/filestorage" // the "file_system" storage of the test configs
	"github.com/gorilla/websocket"

	_ "github.com/sandgate/sandgate/caddymodules/credentialsource" // the resource credential file of the test configs
	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
)

type obj = map[string]any

// config is a JSON config: the sandgate app with a nodes block, and one
// server on 127.0.0.1:f.port with a route /extra answering body, then the
// node handlers, then a 404. The heartbeat interval of 1 ms lets the tests
// send heartbeats back to back (TestCaddyRevokedCredential polls with
// them).
func config(f files, body string) obj {
	return obj{
		"admin":   obj{"disabled": true, "config": obj{"persist": false}},
		"storage": obj{"module": "file_system", "root": filepath.Join(f.dir, "storage")},
		"apps": obj{
			"sandgate": obj{
				"token_keys":  []any{obj{"kid": "k1", "algorithm": "HS256", "file": f.key}},
				"credentials": obj{"source": "file", "path": f.creds},
				"nodes": obj{
					"credentials":        obj{"source": "file", "path": f.nodes},
					"owner_epoch":        5,
					"hello_timeout":      "5s",
					"idle_timeout":       "10s",
					"heartbeat_interval": "1ms",
				},
			},
			"http": obj{"servers": obj{"nodes": obj{
				"listen":          []any{"127.0.0.1:" + f.port},
				"automatic_https": obj{"disable": true},
				"routes": []any{
					obj{"match": []any{obj{"path": []any{"/extra"}}},
						"handle": []any{obj{"handler": "static_response", "body": body}}},
					obj{"handle": []any{
						obj{"handler": "sandbox_node_connect"},
						obj{"handler": "sandbox_node_api", "token_sha256": []any{hexSum(apiToken)}},
						obj{"handler": "static_response", "status_code": 404, "body": "fallthrough"},
					}},
				},
			}}},
		},
	}
}

func nodesOf(cfg obj) obj { return cfg["apps"].(obj)["sandgate"].(obj)["nodes"].(obj) }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// load runs cfg in this process and returns the server's base URL; Caddy
// is stopped when the test ends.
func load(t *testing.T, cfg obj) string {
	t.Helper()
	if err := caddy.Load(mustJSON(t, cfg), true); err != nil {
		t.Fatalf("caddy.Load: %v", err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	waitReloaded(t)
	return baseURL(t)
}

// baseURL is the running server's address.
func baseURL(t *testing.T) string {
	t.Helper()
	a, err := caddy.ActiveContext().App("http")
	if err != nil {
		t.Fatal(err)
	}
	lns := a.(*caddyhttp.App).Servers["nodes"].Listeners()
	if len(lns) != 1 {
		t.Fatalf("%d listeners", len(lns))
	}
	return "http://" + lns[0].Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := testClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCaddyConnectAndAPI runs the handlers in Caddy: a node connects and
// is listed online with its health; an operation goes through the API;
// a rejected credential is 401 with WWW-Authenticate and a second
// connection 409, both before the upgrade; other paths pass through to the
// next handler.
func TestCaddyConnectAndAPI(t *testing.T) {
	f := newFiles(t)
	base := load(t, config(f, "v1"))
	n := dialNode(t, base, -1)
	if w := n.Welcome(); w.OwnerEpoch != 5 || w.Deployment != nil {
		t.Fatalf("welcome = %+v", w)
	}
	var st hub.NodeStatus
	if status := apiGet(t, base, api.Prefix+"/"+nodeID, &st); status != http.StatusOK || !st.Online || st.ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("API status %d: %+v", status, st)
	}
	if status, res := apiOperation(t, base); status != http.StatusOK || res.Outcome != "success" || res.Sequence != 1 {
		t.Fatalf("operation: %d %+v", status, res)
	}

	_, err := sim.Dial(t.Context(), sim.Config{URL: base, Credential: "wrong", Hello: hello()})
	var de *sim.DialError
	if !errors.As(err, &de) || de.Status != http.StatusUnauthorized {
		t.Fatalf("wrong credential: %v", err)
	}
	req, _ := http.NewRequest(http.MethodGet, base+hub.ConnectPath+"?node_id="+nodeID, nil)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("no credential: %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	_, err = sim.Dial(t.Context(), sim.Config{URL: base, Credential: nodeSecret, Hello: hello()})
	if !errors.As(err, &de) || de.Status != http.StatusConflict {
		t.Fatalf("second connection: %v", err)
	}

	if status, body := get(t, base+"/extra"); status != 200 || body != "v1" {
		t.Fatalf("/extra: %d %q", status, body)
	}
	if status, body := get(t, base+"/elsewhere"); status != 404 || body != "fallthrough" {
		t.Fatalf("/elsewhere: %d %q; want the next handler", status, body)
	}
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
}

// TestCaddyReloadKeepsConnection: a reload with a changed unrelated route
// (and changed node timers) keeps the node's connection: the new route
// is served, heartbeats are still acknowledged on the same connection, and
// operations continue with the next sequence number.
func TestCaddyReloadKeepsConnection(t *testing.T) {
	f := newFiles(t)
	cfg := config(f, "v1")
	base := load(t, cfg)
	n := dialNode(t, base, -1)
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if status, res := apiOperation(t, base); status != http.StatusOK || res.Sequence != 1 {
		t.Fatalf("operation before the reload: %d %+v", status, res)
	}

	cfg2 := config(f, "v2")
	nodesOf(cfg2)["idle_timeout"] = "12s"
	if err := caddy.Load(mustJSON(t, cfg2), true); err != nil {
		t.Fatalf("reload: %v", err)
	}
	waitReloaded(t)
	if got := baseURL(t); got != base {
		t.Fatalf("the reload moved the listener from %s to %s", base, got)
	}
	if status, body := get(t, base+"/extra"); body != "v2" {
		t.Fatalf("after the reload /extra = %d %q, want v2", status, body)
	}
	for range 3 {
		if err := n.Heartbeat(t.Context()); err != nil {
			t.Fatalf("heartbeat after the reload: %v", err)
		}
	}
	if n.Err() != nil {
		t.Fatalf("connection ended: %v", n.Err())
	}
	if ack := n.LastAck(); ack.ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("ack for connection %s, welcomed as %s", ack.ConnectionID, n.Welcome().ConnectionID)
	}
	if status, res := apiOperation(t, base); status != http.StatusOK || res.Outcome != "success" || res.Sequence != 2 ||
		res.ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("operation after the reload: %d %+v", status, res)
	}
}

// TestCaddyReloadEpoch: a reload that raises the owner epoch makes the
// next heartbeat close the connection with 4005 and the node reconnects
// under the new epoch; a reload that lowers it is refused and the running
// config (and connection) stays.
func TestCaddyReloadEpoch(t *testing.T) {
	f := newFiles(t)
	base := load(t, config(f, "v1"))
	n := dialNode(t, base, -1)

	lower := config(f, "v1")
	nodesOf(lower)["owner_epoch"] = 4
	if err := caddy.Load(mustJSON(t, lower), true); err == nil || !strings.Contains(err.Error(), "may not decrease") {
		t.Fatalf("reload with a lower epoch: %v", err)
	}
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatalf("heartbeat after the refused reload: %v", err)
	}

	higher := config(f, "v1")
	nodesOf(higher)["owner_epoch"] = 6
	if err := caddy.Load(mustJSON(t, higher), true); err != nil {
		t.Fatalf("reload with a higher epoch: %v", err)
	}
	waitReloaded(t)
	err := n.Heartbeat(t.Context())
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != hub.CloseEpochSuperseded {
		t.Fatalf("heartbeat under the old epoch: %v, want close 4005", err)
	}
	var again *sim.Node
	waittest.Until(t, timeout, "the node to reconnect", func() bool {
		var err error
		again, err = sim.Dial(t.Context(), sim.Config{URL: base, Credential: nodeSecret, Hello: hello(), HeartbeatInterval: -1})
		return err == nil
	})
	defer again.Close()
	if again.Welcome().OwnerEpoch != 6 {
		t.Fatalf("welcome epoch %d, want 6", again.Welcome().OwnerEpoch)
	}
}

// TestCaddyRevokedCredential: disabling the node in the credential file
// closes its connection at the next heartbeat (4003).
func TestCaddyRevokedCredential(t *testing.T) {
	f := newFiles(t)
	base := load(t, config(f, "v1"))
	n := dialNode(t, base, -1)
	write(t, f.nodes, nodesFile(false))
	waittest.Until(t, timeout, "the revocation to close the connection", func() bool {
		err := n.Heartbeat(t.Context())
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			if ce.Code != hub.CloseCredentialRejected {
				t.Fatalf("close %d, want 4003", ce.Code)
			}
			return true
		}
		return false
	})
}

// TestCaddyStopAndNodesRemoved: removing the nodes block (and the
// handlers) with a reload releases the hub: connections are closed with
// 1001. Stopping Caddy does the same.
func TestCaddyStopAndNodesRemoved(t *testing.T) {
	f := newFiles(t)
	base := load(t, config(f, "v1"))
	n := dialNode(t, base, -1)
	cfg := config(f, "v2")
	delete(cfg["apps"].(obj)["sandgate"].(obj), "nodes")
	routes := cfg["apps"].(obj)["http"].(obj)["servers"].(obj)["nodes"].(obj)["routes"].([]any)
	cfg["apps"].(obj)["http"].(obj)["servers"].(obj)["nodes"].(obj)["routes"] = routes[:1]
	if err := caddy.Load(mustJSON(t, cfg), true); err != nil {
		t.Fatal(err)
	}
	<-n.Done()
	var ce *websocket.CloseError
	if !errors.As(n.Err(), &ce) || ce.Code != hub.CloseGoingAway {
		t.Fatalf("connection ended with %v, want close 1001", n.Err())
	}

	base = load(t, config(f, "v1"))
	n = dialNode(t, base, -1)
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	<-n.Done()
	if !errors.As(n.Err(), &ce) || ce.Code != hub.CloseGoingAway {
		t.Fatalf("connection ended with %v, want close 1001", n.Err())
	}
}

// TestCaddyProvisionErrors: configurations the node modules refuse, each
// with an error naming the problem.
func TestCaddyProvisionErrors(t *testing.T) {
	f := newFiles(t)
	sg := func(cfg obj) obj { return cfg["apps"].(obj)["sandgate"].(obj) }
	handlers := func(cfg obj) []any {
		routes := cfg["apps"].(obj)["http"].(obj)["servers"].(obj)["nodes"].(obj)["routes"].([]any)
		return routes[1].(obj)["handle"].([]any)
	}
	for _, tc := range []struct {
		name   string
		mutate func(obj)
		want   string
	}{
		{"handler without a nodes block", func(c obj) { delete(sg(c), "nodes") }, "the sandgate app has no nodes block"},
		{"nodes without credentials", func(c obj) { delete(nodesOf(c), "credentials") }, "a node credential source (credentials file <path>), a state_dir or store kubernetes for enrolled nodes is required"},
		{"node credentials file missing", func(c obj) {
			nodesOf(c)["credentials"] = obj{"source": "file", "path": filepath.Join(f.dir, "missing.yaml")}
		}, "missing.yaml"},
		{"node credentials file invalid", func(c obj) {
			bad := filepath.Join(f.dir, "bad.yaml")
			write(t, bad, "nodes:\n  - node_id: x\n")
			nodesOf(c)["credentials"] = obj{"source": "file", "path": bad}
		}, "invalid node credential data"},
		{"node credentials of unknown source", func(c obj) { nodesOf(c)["credentials"] = obj{"source": "ldap"} },
			"sandgate.node_credentials.ldap"},
		{"negative owner epoch", func(c obj) { nodesOf(c)["owner_epoch"] = -1 }, "owner_epoch must be positive"},
		{"deployment with a bad digest", func(c obj) {
			nodesOf(c)["deployment"] = obj{"generation": 2, "specification_digest": "ABC"}
		}, "specification_digest must be 64 lowercase hexadecimal digits"},
		{"deployment without generation", func(c obj) {
			nodesOf(c)["deployment"] = obj{"specification_digest": specDigest}
		}, "deployment generation must be positive"},
		{"negative timer", func(c obj) { nodesOf(c)["hello_timeout"] = "-1s" }, "hello_timeout must not be negative"},
		{"API without token digests", func(c obj) { delete(handlers(c)[1].(obj), "token_sha256") }, "at least one token_sha256 is required"},
		{"API with a bad digest", func(c obj) { handlers(c)[1].(obj)["token_sha256"] = []any{apiToken} }, "token_sha256[0]: must be 64 lowercase hexadecimal digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(f, "v1")
			tc.mutate(cfg)
			var c caddy.Config
			if err := caddy.StrictUnmarshalJSON(mustJSON(t, cfg), &c); err != nil {
				t.Fatal(err)
			}
			err := caddy.Validate(&c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			for _, s := range []string{apiToken, nodeSecret, hmacSecret} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error contains a secret")
				}
			}
		})
	}
	var c caddy.Config
	if err := caddy.StrictUnmarshalJSON(mustJSON(t, config(f, "v1")), &c); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&c); err != nil {
		t.Fatalf("the base config does not provision: %v", err)
	}
}

// TestAppNodeHub: the app exposes its hub only with a nodes block.
func TestAppNodeHub(t *testing.T) {
	f := newFiles(t)
	load(t, config(f, "v1"))
	a, err := caddy.ActiveContext().App(sandgate.AppName)
	if err != nil {
		t.Fatal(err)
	}
	if a.(*sandgate.App).NodeHub() == nil {
		t.Fatal("no hub with a nodes block")
	}
}
