package nodeagent_test

// nodeagent enrol against the real gateway: releases published with
// `caddy sandgate-release`, a one-time enrolment token from Caddy's admin
// API, the enrolment over Core's machine API, the node connecting with
// the credential it received and reporting its generation ready, a
// create and a command through the internal node API; a reused token is
// refused before anything is written.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/internal/dockertest"
	"github.com/sandgate/sandgate/nodeagent/state"
	"github.com/sandgate/sandgate/nodecore/api"
)

// enrolGateway is the built gateway with releases published into its
// store, a pool "default" binding them, and its admin endpoint for
// enrolment tokens and deployments.
type enrolGateway struct {
	*world
	host, image string
	adminPort   int
	// core is the gateway's node connect origin (the machine API).
	core string
}

// newEnrolGateway publishes one release per name (the test image with a
// provider spec setting SPEC_RELEASE), binds generation i+1 to the i-th
// and starts the gateway with pool default targeting generation target.
func newEnrolGateway(t *testing.T, target int, releases ...string) *enrolGateway {
	t.Helper()
	root := repoRoot(t)
	gw := gatewayBinary(t, root)
	host := dockertest.Host(t)
	cli := dockertest.Client(t, host)
	img := dockertest.Image(t, cli)
	agent := sharedAgent(t)
	dir := t.TempDir()

	// The releases, published into the gateway's store.
	store := filepath.Join(dir, "releases")
	var bindings strings.Builder
	for i, name := range releases {
		rel := filepath.Join(dir, name)
		os.Mkdir(rel, 0o755)
		saveImage(t, host, img, filepath.Join(rel, "image.tar"))
		write(t, filepath.Join(rel, "provider.json"), fmt.Sprintf(`{"provider":"docker","image_ref":%q,"command":["sleep","3600"],"env":{"SPEC_RELEASE":%q}}`, img, name))
		write(t, filepath.Join(rel, "seccomp.json"), denyMkdir)
		for _, args := range [][]string{
			{"sandgate-release", "manifest", "--source", name, "--image", "image.tar", "--provider-spec", "provider.json", "--seccomp", "seccomp.json", rel},
			{"sandgate-release", "publish", "--store", store, rel},
		} {
			if out, err := exec.Command(gw, args...).CombinedOutput(); err != nil {
				t.Fatalf("caddy %v: %v\n%s", args, err, out)
			}
		}
		fmt.Fprintf(&bindings, "\t\t\t\tgeneration %d release %s\n", i+1, name)
	}

	// The gateway: node connect with the machine API, the internal API,
	// the admin endpoint for enrolment tokens.
	connectPort, apiPort, adminPort := freePort(t), freePort(t), freePort(t)
	apiToken := randomHex(t, 24)
	key := write(t, filepath.Join(dir, "token.key"), randomHex(t, 32))
	creds := write(t, filepath.Join(dir, "credentials.yaml"), "credentials: []\n")
	caddyfile := write(t, filepath.Join(dir, "Caddyfile"), fmt.Sprintf(`{
	admin 127.0.0.1:%d
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key e2e HS256 %s
		credentials file %s
		nodes {
			state_dir %s
			releases %s
			pool default {
%s				target %d
			}
			heartbeat_interval 500ms
		}
	}
}

http://127.0.0.1:%d {
	bind 127.0.0.1
	sandbox_node_connect
}

http://127.0.0.1:%d {
	bind 127.0.0.1
	sandbox_node_api {
		token_sha256 %s
	}
}
`, adminPort, key, creds, filepath.Join(dir, "core-state"), store, bindings.String(), target, connectPort, apiPort, sha(apiToken)))
	w := &world{t: t, dir: dir, agent: agent, apiToken: apiToken, apiURL: fmt.Sprintf("http://127.0.0.1:%d%s", apiPort, api.Prefix)}
	w.gateway = start(t, filepath.Join(dir, "caddy.log"), gw, "run", "--config", caddyfile, "--adapter", "caddyfile")
	w.until("the gateway's API answers", func() bool {
		resp, _, err := w.do(http.MethodGet, "", nil)
		return err == nil && resp.StatusCode == http.StatusOK
	})
	g := &enrolGateway{world: w, host: host, image: img, adminPort: adminPort, core: fmt.Sprintf("http://127.0.0.1:%d", connectPort)}
	// The admin routes answer 503 until the sandgate app has started.
	w.until("the gateway's admin routes answer", func() bool {
		status, _ := g.admin(http.MethodGet, "/sandgate/pools", "")
		return status == http.StatusOK
	})
	w.listensAlone(connectPort, apiPort)
	return g
}

// admin sends a request to the gateway's admin endpoint and returns the
// status and body.
func (g *enrolGateway) admin(method, path, body string) (int, []byte) {
	g.t.Helper()
	req, _ := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", g.adminPort, path), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// newToken issues a one-time enrolment token for pool default.
func (g *enrolGateway) newToken() string {
	g.t.Helper()
	status, b := g.admin(http.MethodPost, "/sandgate/enrolment-tokens", `{"pool":"default","ttl":"1h"}`)
	var out struct {
		EnrolmentToken string `json:"enrolment_token"`
	}
	if status != http.StatusCreated || json.Unmarshal(b, &out) != nil || out.EnrolmentToken == "" {
		g.t.Fatalf("enrolment token: HTTP %d", status)
	}
	return out.EnrolmentToken
}

// enrol runs nodeagent enrol against core and returns its exit status
// and output.
func (g *enrolGateway) enrol(core, token, stateDir, credFile string) (int, string) {
	g.t.Helper()
	tf := write(g.t, filepath.Join(g.t.TempDir(), "token"), token+"\n")
	out, err := exec.Command(g.agent, "enrol", "--core", core, "--token-file", tf, "--state-dir", stateDir,
		"--credential-file", credFile, "--docker-endpoint", g.host).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		g.t.Fatal(err)
	}
	return 0, string(out)
}

func TestEnrolThroughTheGateway(t *testing.T) {
	g := newEnrolGateway(t, 1, "rel-1")
	w, host, img, dir := g.world, g.host, g.image, g.dir
	cli := dockertest.Client(t, host)
	agent := g.agent
	newToken := g.newToken
	enrol := func(token, stateDir, credFile string) (int, string) {
		return g.enrol(g.core, token, stateDir, credFile)
	}

	token := newToken()
	stateDir, credFile := filepath.Join(dir, "node-state"), filepath.Join(dir, "node.credential")
	code, enrolOut := enrol(token, stateDir, credFile)
	if code != 0 {
		t.Fatalf("enrol: exit %d\n%s\n%s", code, enrolOut, w.gateway.output())
	}
	st, _ := state.Open(stateDir)
	id, err := st.Identity()
	if err != nil || id.DeploymentGeneration != 1 || id.Pool != "default" {
		t.Fatalf("identity %+v, %v", id, err)
	}
	w.nodeID = id.NodeID
	dockertest.RemoveLabelled(t, cli, docker.LabelNodeID, id.NodeID)

	// The token is spent: a second host is refused, and nothing is written.
	other := t.TempDir()
	if code, out := enrol(token, filepath.Join(other, "state"), filepath.Join(other, "cred")); code != 4 {
		t.Fatalf("a reused token: exit %d\n%s", code, out)
	}
	nothingWritten(t, filepath.Join(other, "state"), filepath.Join(other, "cred"))

	// The node runs from what enrol stored.
	w.nodeConfig = write(t, filepath.Join(dir, "nodeagent.toml"), fmt.Sprintf(`generation_management = true
state_dir = %q
credential_file = %q
docker_endpoint = %q
disk_path = %q

[timers]
heartbeat = "500ms"
`, stateDir, credFile, host, dir))
	node := start(t, filepath.Join(dir, "nodeagent.log"), agent, "--config", w.nodeConfig)
	w.until("generation 1 is ready on the node", func() bool {
		select {
		case <-node.done:
			t.Fatalf("nodeagent exited:\n%s", node.output())
		default:
		}
		s, err := w.status()
		if err != nil || !s.Online {
			return false
		}
		for _, g := range s.Generations {
			if g.Generation == 1 && g.State == proto.GenerationReady {
				return true
			}
		}
		return false
	})
	ref := proto.Reference{TenantID: "tenant-enrol", EnvironmentID: "env", AllocationID: "alloc-" + randomHex(t, 4)}
	res := w.operation(api.OperationRequest{Operation: proto.OpCreate, DeploymentGeneration: 1, TimeoutMS: 60000, Reference: ref,
		Bootstrap: &proto.Bootstrap{Image: img}})
	if res.Outcome != "success" || res.Response.Info.State != proto.StateRunning {
		t.Fatalf("create: %+v", res)
	}
	res = w.operation(api.OperationRequest{Operation: proto.OpCommand, DeploymentGeneration: 1, TimeoutMS: 60000, Reference: ref,
		Command: &proto.Command{Argv: []string{"mkdir", "/tmp/x"}, TimeoutMS: 10000, MaxOutputBytes: 1024}})
	if res.Outcome != "success" || res.Response.Command.ExitCode == 0 {
		t.Fatalf("mkdir under the release's seccomp profile: %+v", res)
	}
	res = w.operation(api.OperationRequest{Operation: proto.OpKill, DeploymentGeneration: 1, TimeoutMS: 60000, Reference: ref})
	if res.Outcome != "success" {
		t.Fatalf("kill: %+v", res)
	}

	// Neither the enrolment token nor the node credential is in a log, an
	// output, Caddy's running configuration, an admin answer or any file
	// but the credential file.
	cred, err := os.ReadFile(credFile)
	if err != nil {
		t.Fatal(err)
	}
	_, config := g.admin(http.MethodGet, "/config/", "")
	_, enrolled := g.admin(http.MethodGet, "/sandgate/enrolled-nodes", "")
	places := map[string]string{"the gateway's log": w.gateway.output(), "the node's log": node.output(),
		"nodeagent enrol's output": enrolOut, "GET /config/": string(config), "GET /sandgate/enrolled-nodes": string(enrolled)}
	for _, root := range []string{dir, stateDir} {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && p != credFile && !strings.HasSuffix(p, ".tar") {
				b, _ := os.ReadFile(p)
				places[p] = string(b)
			}
			return nil
		})
	}
	for where, text := range places {
		for what, secret := range map[string]string{"enrolment token": token, "node credential": strings.TrimSpace(string(cred))} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s appears in %s", what, where)
			}
		}
	}
}

// TestEnrolWhileTheOperatorFlipsTheDeployment: the operator makes
// generation 2 the serving generation at the worst moment — after the new
// node previewed and verified generation 1's runtime, just before it
// enrols (a proxy in front of the gateway flips the deployment through the
// admin API when it sees the enrolment). The node must not be registered
// with a runtime it did not verify, nor leave an enrolled node behind
// whose credential nobody holds: nodeagent enrol refuses with nothing
// written, Core lists no enrolled node, the token stays usable, and the
// next run with the same token enrols the node with generation 2.
func TestEnrolWhileTheOperatorFlipsTheDeployment(t *testing.T) {
	g := newEnrolGateway(t, 1, "rel-1", "rel-2")
	target, _ := url.Parse(g.core)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var flips atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == machine.EnrolPath && flips.Add(1) == 1 {
			if status, b := g.admin(http.MethodPut, "/sandgate/pools/default/deployment", `{"generation": 2, "serving_generation": 2}`); status != http.StatusOK {
				t.Errorf("flip: HTTP %d %s", status, b)
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()

	token := g.newToken()
	stateDir, credFile := filepath.Join(g.dir, "node-state"), filepath.Join(g.dir, "node.credential")
	code, out := g.enrol(srv.URL, token, stateDir, credFile)
	if code != 4 || flips.Load() != 1 {
		t.Fatalf("enrol across a deployment flip: exit %d, %d enrolments seen\n%s", code, flips.Load(), out)
	}
	nothingWritten(t, stateDir, credFile)
	status, b := g.admin(http.MethodGet, "/sandgate/enrolled-nodes", "")
	var nodes struct {
		Nodes []json.RawMessage `json:"nodes"`
	}
	if status != http.StatusOK || json.Unmarshal(b, &nodes) != nil || len(nodes.Nodes) != 0 {
		t.Fatalf("Core registered a node the enrolment refused: HTTP %d %s", status, b)
	}

	// The same token enrols the node with what Core serves now.
	if code, out := g.enrol(g.core, token, stateDir, credFile); code != 0 {
		t.Fatalf("enrol again with the same token: exit %d\n%s\n%s", code, out, g.gateway.output())
	}
	st, _ := state.Open(stateDir)
	id, err := st.Identity()
	if err != nil || id.DeploymentGeneration != 2 {
		t.Fatalf("identity %+v, %v", id, err)
	}
}
