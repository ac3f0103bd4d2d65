// Package nodeagent_test holds nodeagent's end-to-end tests: the nodeagent
// binary against the built gateway (bin/caddy with Core's
// sandbox_node_connect handler and the internal node API) and a real
// Docker engine. Core sends create → command → kill through the internal
// API; Docker stopping and coming back shows in the node's health; a
// wrong credential ends the agent with the permanent-rejection status.
package nodeagent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/node/operation"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/internal/dockertest"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// wait bounds every wait on a process: a safety net, not a measurement.
const wait = 90 * time.Second

const (
	generation = 1
	specDigest = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(wd) // this package is <root>/nodeagent
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("cannot find the repository root from %s", wd)
	}
	return root
}

// gatewayBinary returns the built gateway ($SANDGATE_GATEWAY, default
// bin/caddy), failing unless it has Core's node modules.
func gatewayBinary(t *testing.T, root string) string {
	t.Helper()
	bin := os.Getenv("SANDGATE_GATEWAY")
	if bin == "" {
		bin = filepath.Join(root, "bin", "caddy")
	}
	out, err := exec.Command(bin, "list-modules").Output()
	if err != nil {
		t.Fatalf("the gateway %s does not run (%v): build it with `make build`", bin, err)
	}
	for _, m := range []string{"http.handlers.sandbox_node_connect", "http.handlers.sandbox_node_api"} {
		if !strings.Contains(string(out), m) {
			t.Fatalf("the gateway %s has no %s module: rebuild it with `make build`", bin, m)
		}
	}
	return bin
}

// buildAgent builds the nodeagent binary into a temporary directory.
func buildAgent(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nodeagent")
	cmd := exec.Command("go", "build", "-o", bin, "./nodeagent/cmd/nodeagent")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nodeagent: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func write(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// process is a child process whose output goes to a file.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func start(t *testing.T, logPath string, name string, args ...string) *process {
	t.Helper()
	return startEnv(t, logPath, nil, name, args...)
}

// startEnv starts a process with extra environment variables.
func startEnv(t *testing.T, logPath string, env []string, name string, args ...string) *process {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: exec.Command(name, args...), log: logPath, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(wait):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *process) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// exitCode waits for the process to end and returns its exit status.
func (p *process) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(wait):
		t.Fatalf("the process did not exit within %v; output:\n%s", wait, p.output())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("wait: %v", p.err)
	}
	return 0
}

// world is a running gateway with one enrolled node and the node's files.
type world struct {
	t          *testing.T
	dir        string
	agent      string
	apiURL     string
	apiToken   string
	nodeID     string
	credential string
	nodeConfig string
	gateway    *process
}

// newWorld enrols a node whose Docker engine is dockerHost and starts the
// gateway on loopback.
func newWorld(t *testing.T, dockerHost string) *world {
	t.Helper()
	root := repoRoot(t)
	gw := gatewayBinary(t, root)
	w := &world{t: t, dir: t.TempDir(), agent: buildAgent(t, root), nodeID: uuid.NewString(),
		credential: randomHex(t, 24), apiToken: randomHex(t, 24)}
	connectPort, apiPort := freePort(t), freePort(t)
	w.apiURL = fmt.Sprintf("http://127.0.0.1:%d%s", apiPort, api.Prefix)

	// The node's configuration, then its identity for the enrolment.
	cred := write(t, filepath.Join(w.dir, "node.credential"), w.credential+"\n")
	w.nodeConfig = write(t, filepath.Join(w.dir, "nodeagent.toml"), fmt.Sprintf(`core_origin = "http://127.0.0.1:%d"
node_id = %q
installation_id = %q
credential_file = %q
state_dir = %q
docker_endpoint = %q
disk_path = %q
deployment_generation = %d
specification_digest = %q

[timers]
heartbeat = "500ms"
backoff_min = "50ms"
backoff_max = "500ms"
`, connectPort, w.nodeID, uuid.NewString(), cred, filepath.Join(w.dir, "state"), dockerHost, w.dir, generation, specDigest))
	out, err := exec.Command(w.agent, "--config", w.nodeConfig, "--print-identity").Output()
	if err != nil {
		t.Fatalf("nodeagent --print-identity: %v", err)
	}
	var record map[string]any
	if err := json.Unmarshal(out, &record); err != nil {
		t.Fatalf("identity %q: %v", out, err)
	}
	record["enabled"] = true
	record["credential_sha256"] = sha(w.credential)
	nodes, _ := json.Marshal(map[string]any{"nodes": []any{record}})
	nodesFile := write(t, filepath.Join(w.dir, "nodes.json"), string(nodes))

	// The gateway: Core's node connect handler and the internal API, both
	// on loopback; the data plane's required settings with dummy values.
	key := write(t, filepath.Join(w.dir, "token.key"), randomHex(t, 32))
	creds := write(t, filepath.Join(w.dir, "credentials.yaml"), "credentials: []\n")
	caddyfile := write(t, filepath.Join(w.dir, "Caddyfile"), fmt.Sprintf(`{
	admin off
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key e2e HS256 %s
		credentials file %s
		nodes {
			credentials file %s
			owner_epoch 3
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
`, key, creds, nodesFile, connectPort, apiPort, sha(w.apiToken)))
	w.gateway = start(t, filepath.Join(w.dir, "caddy.log"), gw, "run", "--config", caddyfile, "--adapter", "caddyfile")
	w.until("the gateway's API answers", func() bool {
		resp, _, err := w.do(http.MethodGet, "", nil)
		return err == nil && resp.StatusCode == http.StatusOK
	})
	w.listensAlone(connectPort, apiPort)
	return w
}

// listensAlone fails the test unless the gateway alone listens on each of
// ports: they were picked before it bound them, and another Caddy that
// picked one too (SO_REUSEPORT) would take some of the test's
// connections without either failing to bind.
func (w *world) listensAlone(ports ...int) {
	w.t.Helper()
	for _, p := range ports {
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		if alone, err := freeport.ListeningAlone(w.gateway.cmd.Process.Pid, addr); !alone || err != nil {
			w.t.Fatalf("%s: the gateway does not listen there alone (%v)", addr, err)
		}
	}
}

// until polls cond until it holds, failing after wait.
func (w *world) until(what string, cond func() bool) {
	w.t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wait)
	for !cond() {
		select {
		case <-w.gateway.done:
			w.t.Fatalf("the gateway exited while waiting until %s:\n%s", what, w.gateway.output())
		case <-deadline:
			w.t.Fatalf("waited %v until %s", wait, what)
		case <-tick.C:
		}
	}
}

func (w *world) do(method, path string, body any) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, w.apiURL+path, rd)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+w.apiToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// status reads the node's status from the internal API.
func (w *world) status() (hub.NodeStatus, error) {
	var st hub.NodeStatus
	resp, b, err := w.do(http.MethodGet, "/"+w.nodeID, nil)
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return st, json.Unmarshal(b, &st)
}

// operation sends one provider operation through the internal API.
func (w *world) operation(op api.OperationRequest) api.OperationResult {
	w.t.Helper()
	resp, b, err := w.do(http.MethodPost, "/"+w.nodeID+"/operations", op)
	if err != nil || resp.StatusCode != http.StatusOK {
		w.t.Fatalf("%s: %v HTTP %v: %s", op.Operation, err, resp, b)
	}
	var res api.OperationResult
	if err := json.Unmarshal(b, &res); err != nil {
		w.t.Fatalf("%s result %s: %v", op.Operation, b, err)
	}
	return res
}

// startAgent runs the nodeagent binary with the world's configuration.
func (w *world) startAgent(extra ...string) *process {
	return start(w.t, filepath.Join(w.t.TempDir(), "nodeagent.log"), w.agent, append([]string{"--config", w.nodeConfig}, extra...)...)
}

func (w *world) untilHealth(what string, ok func(h *proto.Health) bool, agent *process) hub.NodeStatus {
	w.t.Helper()
	var st hub.NodeStatus
	w.until(what, func() bool {
		select {
		case <-agent.done:
			w.t.Fatalf("nodeagent exited while waiting until %s:\n%s", what, agent.output())
		default:
		}
		var err error
		st, err = w.status()
		return err == nil && st.Online && st.Health != nil && ok(st.Health)
	})
	return st
}

func TestEndToEndCreateCommandKillThroughCore(t *testing.T) {
	host := dockertest.Host(t)
	cli := dockertest.Client(t, host)
	image := dockertest.Image(t, cli)
	w := newWorld(t, host)
	dockertest.RemoveLabelled(t, cli, docker.LabelNodeID, w.nodeID)
	agent := w.startAgent()

	st := w.untilHealth("the node is online and ready", func(h *proto.Health) bool { return h.ProviderReady }, agent)
	if st.OwnerEpoch != 3 || st.Hello == nil || st.Hello.Provider != proto.ProviderDocker || st.Hello.DeploymentGeneration != generation {
		t.Fatalf("node status = %+v", st)
	}

	ref := proto.Reference{TenantID: "tenant-e2e", EnvironmentID: "env-e2e", AllocationID: "alloc-" + randomHex(t, 4)}
	res := w.operation(api.OperationRequest{
		Operation: proto.OpCreate, DeploymentGeneration: generation, TimeoutMS: 60000, Reference: ref,
		Bootstrap: &proto.Bootstrap{Image: image, Entrypoint: []string{"sleep", "3600"}, Env: map[string]string{"GREETING": "hello"}},
	})
	if res.Outcome != "success" || res.Response == nil || res.Response.Info == nil || res.Response.Info.Reference != ref ||
		res.Response.Info.State != proto.StateRunning || res.OwnerEpoch != 3 {
		t.Fatalf("create: %+v", res)
	}

	res = w.operation(api.OperationRequest{
		Operation: proto.OpCommand, DeploymentGeneration: generation, TimeoutMS: 60000, Reference: ref,
		Command: &proto.Command{Argv: []string{"sh", "-c", `echo "$GREETING from $(hostname)" | tee /tmp/proof; exit 7`},
			TimeoutMS: 30000, MaxOutputBytes: 4096},
	})
	if res.Outcome != "success" || res.Response == nil || res.Response.Command == nil {
		t.Fatalf("command: %+v", res)
	}
	out := res.Response.Command
	if out.ExitCode != 7 || !strings.HasPrefix(string(out.Stdout), "hello from ") {
		t.Fatalf("command result: exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout, out.Stderr)
	}
	// The container really ran it: read the file back with Docker directly.
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, c := range list {
		if c.Labels[docker.LabelNodeID] == w.nodeID && c.Labels[docker.LabelAllocationID] == ref.AllocationID {
			id = c.ID
		}
	}
	if id == "" {
		t.Fatal("no container of the sandbox on the engine")
	}
	rc, _, err := cli.CopyFromContainer(context.Background(), id, "/tmp/proof") // a tar stream
	if err != nil {
		t.Fatalf("read /tmp/proof from the container: %v", err)
	}
	proof, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Contains(proof, out.Stdout) {
		t.Fatalf("/tmp/proof in the container does not hold the command's output %q", out.Stdout)
	}

	res = w.operation(api.OperationRequest{Operation: proto.OpKill, DeploymentGeneration: generation, TimeoutMS: 60000, Reference: ref})
	if res.Outcome != "success" || res.Response == nil || res.Response.ErrorCode != "" {
		t.Fatalf("kill: %+v", res)
	}
	if _, err := cli.ContainerInspect(context.Background(), id); err == nil {
		t.Fatal("the container survived kill")
	}
	res = w.operation(api.OperationRequest{Operation: proto.OpInfo, DeploymentGeneration: generation, TimeoutMS: 60000, Reference: ref})
	if res.Outcome != "failed" || res.ErrorCode != proto.ErrNotFound {
		t.Fatalf("info after kill: %+v", res)
	}
	// An operation the Docker provider declares unsupported: Core applies
	// the same registered declaration and refuses it before sending.
	res = w.operation(api.OperationRequest{Operation: proto.OpSuspend, DeploymentGeneration: generation, TimeoutMS: 60000,
		Reference: ref, Suspend: &proto.Suspend{Snapshot: proto.Snapshot{ID: "snap"}}})
	decl, _ := operation.For(proto.ProviderDocker)
	want, _ := decl.Unsupported(proto.OpSuspend)
	if res.Outcome != "unsupported" || res.Sent || res.Response != nil || res.Unsupported == nil || *res.Unsupported != want {
		t.Fatalf("suspend: %+v", res)
	}
}

func TestEndToEndDockerDownAndBack(t *testing.T) {
	d := dockertest.NewDaemon(t)
	d.Start(wait)
	w := newWorld(t, d.Host)
	agent := w.startAgent()
	w.untilHealth("the node is online and ready", func(h *proto.Health) bool { return h.ProviderReady }, agent)

	d.Stop()
	st := w.untilHealth("the node reports not ready", func(h *proto.Health) bool { return !h.ProviderReady }, agent)
	if st.Health.Diagnostic != proto.DiagDockerUnreachable {
		t.Fatalf("diagnostic %q, want %q", st.Health.Diagnostic, proto.DiagDockerUnreachable)
	}
	d.Start(wait)
	st = w.untilHealth("the node is ready again", func(h *proto.Health) bool { return h.ProviderReady }, agent)
	if st.Health.Diagnostic != "" {
		t.Fatalf("ready with diagnostic %q", st.Health.Diagnostic)
	}
}

func TestEndToEndWrongCredentialExitsWithoutRetrying(t *testing.T) {
	host := dockertest.Host(t)
	dockertest.Client(t, host)
	w := newWorld(t, host)
	cred := write(t, filepath.Join(w.dir, "wrong.credential"), "not-the-enrolled-credential\n")
	agent := w.startAgent("--credential-file", cred)
	if code := agent.exitCode(t); code != 3 {
		t.Fatalf("exit status %d, want 3; output:\n%s", code, agent.output())
	}
	if !strings.Contains(agent.output(), "HTTP 401") || strings.Contains(agent.output(), "not-the-enrolled-credential") {
		t.Fatalf("output:\n%s", agent.output())
	}
	if st, err := w.status(); err != nil || st.State != "disconnected" && st.State != "" {
		t.Fatalf("node status after the refusal: %+v, %v", st, err)
	}
}
