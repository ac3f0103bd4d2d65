// Package rolling is the rolling upgrade of a node pool, end to end: the
// built gateway (bin/caddy) and three nodeagent processes (bin/nodeagent)
// with generation management, on the real Docker engine, with create,
// command and kill traffic through the internal node API running the whole
// time. The releases are published with `caddy sandgate-release`, and each
// node enrols with `nodeagent enrol` and a one-time token from the admin
// API, as a new host would. The pool is rolled from generation 1 to generation 2: the target
// moves to 2 while 1 keeps serving, every node prepares 2 (downloading the
// release from the gateway's release store), and once all three report it
// ready the serving generation flips to 2. The test asserts that no
// operation sent to a ready generation failed, that sandboxes created on
// generation 1 keep answering commands on it during and after the roll, that
// new sandboxes run generation 2's release after the flip, and that the
// nodes are allowed to reclaim generation 1 once nothing is placed on it.
package rolling

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/admin"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// testClient is the tests' HTTP client: http.DefaultClient's transport
// with a bound on every request, its response body read included, so a
// peer that hangs fails the request instead of holding the test until the
// package's -timeout. No request here is meant to take that long.
var testClient = &http.Client{Timeout: 2 * time.Minute}

// wait bounds every wait: a safety net against a hang, not a measurement.
const wait = 3 * time.Minute

const (
	testImage  = "sandgate-test/busybox:1" // hack/docker/start.sh imports it
	nodes      = 3
	apiToken   = "rolling-api-token-DO-NOT-LOG-5f1e"
	hmacSecret = "rolling-test-hmac-secret-0123456789abcdef"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func binary(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(repoRoot(t), "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make build` first (make test does)", bin)
	}
	return bin
}

func freePort(t *testing.T) string {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func write(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func sha(s string) string { d := sha256.Sum256([]byte(s)); return hex.EncodeToString(d[:]) }

// world is the gateway, its release store and the three nodes.
type world struct {
	t        *testing.T
	dir      string
	caddy    string
	agent    string
	docker   *client.Client
	host     string
	base     string // the gateway's node listener
	api      string // the internal node API (the nodes block's api listener, as shipped)
	admin    string
	gwLog    gatewayproc.Output
	digests  map[int64]string
	nodeIDs  []string
	agents   []*exec.Cmd
	agentLog []*gatewayproc.Output
}

// publish makes release source from the test image's docker save tarball
// with a provider spec that sets SPEC_RELEASE=<source>, and publishes it
// with `bin/caddy sandgate-release`; it returns the specification digest.
func (w *world) publish(source string, tarball []byte) string {
	t := w.t
	dir := filepath.Join(w.dir, "src-"+source)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "image.tar"), tarball, 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "provider.json"),
		fmt.Sprintf(`{"provider":"docker","image_ref":%q,"command":["sleep","3600"],"env":{"SPEC_RELEASE":%q}}`, testImage, source))
	for _, args := range [][]string{
		{"sandgate-release", "manifest", "--source", source, "--image", "image.tar", "--provider-spec", "provider.json", dir},
		{"sandgate-release", "publish", "--store", filepath.Join(w.dir, "releases"), dir},
	} {
		if out, err := exec.Command(w.caddy, args...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	return sha(string(raw))
}

func newWorld(t *testing.T) *world {
	t.Helper()
	cli, host := harness.DockerClient(t)
	w := &world{t: t, dir: t.TempDir(), caddy: binary(t, "caddy"), agent: binary(t, "nodeagent"), docker: cli, host: host,
		digests: map[int64]string{}}
	rc, err := cli.ImageSave(context.Background(), []string{testImage})
	if err != nil {
		t.Fatalf("docker save %s: %v (hack/docker/start.sh imports it)", testImage, err)
	}
	tarball, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	w.digests[1] = w.publish("rel-1", tarball)
	w.digests[2] = w.publish("rel-2", tarball)
	return w
}

// removeContainers removes the containers of this test's nodes (and only
// those: other tests share the engine).
func (w *world) removeContainers() {
	for _, id := range w.nodeIDs {
		harness.RemoveNodeContainers(w.docker, id)
	}
}

// start runs the gateway, enrols three nodes with `nodeagent enrol` and
// one-time tokens from the admin API, and runs them.
func (w *world) start() {
	t := w.t
	key := write(t, filepath.Join(w.dir, "hmac.key"), hmacSecret)
	credsFile := write(t, filepath.Join(w.dir, "credentials.yaml"), "credentials:\n  - id: cred-a\n    enabled: true\n    projectNamespace: p\n    clusterId: c\n")
	// The gateway binds its three ports itself: they are picked for each
	// start attempt, again when one was taken before the gateway listened
	// (it exits saying "address already in use", or another Caddy shares
	// the port: SO_REUSEPORT).
	var gw *gatewayproc.Process
	for attempt := 1; ; attempt++ {
		port, apiPort, adminPort := freePort(t), freePort(t), freePort(t)
		w.base, w.api, w.admin = "http://127.0.0.1:"+port, "http://127.0.0.1:"+apiPort, "http://127.0.0.1:"+adminPort
		// No node file: every node enrols.
		caddyfile := fmt.Sprintf(`{
	debug
	admin 127.0.0.1:%s
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key k1 HS256 %s
		credentials file %s
		nodes {
			state_dir %s
			releases %s
			pool default {
				generation 1 release rel-1
				target 1
			}
			heartbeat_interval 500ms
			idle_timeout 10s
			online_window 5s
			api 127.0.0.1:%s {
				token_sha256 %s
			}
		}
	}
}

http://127.0.0.1:%s {
	sandbox_node_connect
}
`, adminPort, key, credsFile, filepath.Join(w.dir, "core-state"), filepath.Join(w.dir, "releases"), apiPort, sha(apiToken), port)
		bind := &harness.BindWatch{}
		var err error
		if gw, err = gatewayproc.Start(w.caddy, w.dir, caddyfile, io.MultiWriter(&w.gwLog, bind)); err != nil {
			t.Fatal(err)
		}
		for _, addr := range []string{port, apiPort, adminPort} {
			if err = gw.WaitListening("127.0.0.1:" + addr); err != nil {
				break
			}
		}
		if err == nil {
			break
		}
		gw.Stop()
		if !bind.Lost(err) || attempt == 5 {
			t.Fatalf("%v\n%s", err, tail(w.gwLog.String(), 8000))
		}
		t.Logf("gateway start attempt %d: %v; again with new ports", attempt, err)
	}
	t.Cleanup(func() {
		gw.Stop()
		if t.Failed() {
			t.Logf("gateway log:\n%s", tail(w.gwLog.String(), 8000))
		}
		if strings.Contains(w.gwLog.String(), apiToken) {
			t.Error("the gateway log contains the API token")
		}
	})
	w.until("the sandgate app to start", func() bool {
		status, _ := w.call(http.MethodGet, w.admin+admin.PoolsPath, "", nil)
		return status == http.StatusOK
	})
	t.Cleanup(w.removeContainers)
	for i := range nodes {
		dir := filepath.Join(w.dir, fmt.Sprintf("node%d", i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		status, b := w.call(http.MethodPost, w.admin+admin.TokensPath, "", map[string]string{"pool": "default", "ttl": "10m"})
		var tok admin.TokenResponse
		if status != http.StatusCreated || json.Unmarshal(b, &tok) != nil {
			t.Fatalf("enrolment token: %d %s", status, b)
		}
		tokenFile := write(t, filepath.Join(dir, "token"), tok.EnrolmentToken+"\n")
		stateDir, credFile := filepath.Join(dir, "state"), filepath.Join(dir, "credential")
		out, err := exec.Command(w.agent, "enrol", "--core", w.base, "--token-file", tokenFile, "--state-dir", stateDir,
			"--credential-file", credFile, "--docker-endpoint", w.host).CombinedOutput()
		if err != nil {
			t.Fatalf("nodeagent enrol: %v\n%s", err, out)
		}
		if strings.Contains(string(w.gwLog.String()), tok.EnrolmentToken) || strings.Contains(string(out), tok.EnrolmentToken) {
			t.Error("the enrolment token was logged")
		}
		var ident struct {
			NodeID string `json:"node_id"`
		}
		b, err = os.ReadFile(filepath.Join(stateDir, "node", "identity.json"))
		if err != nil || json.Unmarshal(b, &ident) != nil || ident.NodeID == "" {
			t.Fatalf("the enrolled identity: %v %s", err, b)
		}
		w.nodeIDs = append(w.nodeIDs, ident.NodeID)
		config := write(t, filepath.Join(dir, "nodeagent.toml"), fmt.Sprintf(`generation_management = true
state_dir = %q
credential_file = %q
docker_endpoint = %q
disk_path = %q
max_active = 8
log_level = "debug"

[timers]
heartbeat = "500ms"
idle = "10s"
backoff_min = "100ms"
backoff_max = "500ms"
`, stateDir, credFile, w.host, dir))
		var log gatewayproc.Output
		cmd := exec.Command(w.agent, "--config", config)
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.agents = append(w.agents, cmd)
		w.agentLog = append(w.agentLog, &log)
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("node %d log:\n%s", i, tail(log.String(), 6000))
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func (w *world) until(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond) // polling the gateway's state
	}
}

// call sends one JSON request; the API token goes to the internal API.
func (w *world) call(method, url, token string, body any) (int, []byte) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (w *world) status(id string) (hub.NodeStatus, bool) {
	var s hub.NodeStatus
	status, b := w.call(http.MethodGet, w.api+api.Prefix+"/"+id, apiToken, nil)
	if status != http.StatusOK || json.Unmarshal(b, &s) != nil {
		return s, false
	}
	return s, true
}

// ready reports whether node id is online and reports gen ready.
func (w *world) ready(id string, gen int64) bool {
	s, ok := w.status(id)
	if !ok || !s.Online {
		return false
	}
	for _, g := range s.Generations {
		if g.Generation == gen && g.State == proto.GenerationReady && g.SpecificationDigest == w.digests[gen] {
			return true
		}
	}
	return false
}

// retentionAnswered reports whether the gateway's log shows a retention
// answer for node id with gen in its kept or dropped list.
func (w *world) retentionAnswered(id, list string, gen int64) bool {
	for _, line := range strings.Split(w.gwLog.String(), "\n") {
		if !strings.Contains(line, `"msg":"node retention answered"`) || !strings.Contains(line, id) {
			continue
		}
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		gens, _ := e[list].([]any)
		for _, g := range gens {
			if n, ok := g.(float64); ok && int64(n) == gen {
				return true
			}
		}
	}
	return false
}

func (w *world) setDeployment(body map[string]any) {
	w.t.Helper()
	status, b := w.call(http.MethodPut, w.admin+admin.PoolsPath+"/default/deployment", "", body)
	if status != http.StatusOK {
		w.t.Fatalf("PUT deployment %v: %d %s", body, status, b)
	}
}

// operation sends one operation through the internal API. sent reports
// whether the hub dispatched it (200); a refusal before sending is not.
func (w *world) operation(node string, req api.OperationRequest) (res api.OperationResult, sent bool, status int) {
	code, b := w.call(http.MethodPost, w.api+api.Prefix+"/"+node+"/operations", apiToken, req)
	if code != http.StatusOK {
		return res, false, code
	}
	if err := json.Unmarshal(b, &res); err != nil {
		w.t.Errorf("operation answer %s: %v", b, err)
	}
	return res, true, code
}

// counters of the traffic.
type counters struct {
	sent, failed, refused atomic.Int64
	created               [3]atomic.Int64 // by generation (index 1, 2)
	mu                    sync.Mutex
	failures              []string
}

func (c *counters) fail(format string, args ...any) {
	c.failed.Add(1)
	c.mu.Lock()
	if len(c.failures) < 20 {
		c.failures = append(c.failures, fmt.Sprintf(format, args...))
	}
	c.mu.Unlock()
}

// sandbox is one allocation the traffic created.
type sandbox struct {
	node string
	gen  int64
	ref  proto.Reference
}

func command(gen int64, r proto.Reference, script string) api.OperationRequest {
	return api.OperationRequest{Operation: proto.OpCommand, DeploymentGeneration: gen, TimeoutMS: 60000, Reference: r,
		Command: &proto.Command{Argv: []string{"sh", "-c", script}, TimeoutMS: 30000, MaxOutputBytes: 4096}}
}

// cycle is one allocation's life on node: create on the generation the
// pool serves (only once the node reports it ready), a command that
// must print the generation's release, and a kill. Refusals before
// sending (not ready, offline) are counted apart; every operation that
// was sent must succeed.
func (w *world) cycle(c *counters, node string, serving func() int64, keep bool) *sandbox {
	gen := serving()
	if !w.ready(node, gen) {
		return nil
	}
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	r := proto.Reference{TenantID: "t-roll", EnvironmentID: "e", AllocationID: "a-" + id}
	res, sent, status := w.operation(node, api.OperationRequest{Operation: proto.OpCreate, DeploymentGeneration: gen,
		TimeoutMS: 60000, Reference: r, Bootstrap: &proto.Bootstrap{Image: testImage}})
	if !sent {
		c.refused.Add(1)
		if status != http.StatusConflict && status != http.StatusServiceUnavailable {
			c.fail("create on %s/%d refused with %d", node, gen, status)
		}
		return nil
	}
	c.sent.Add(1)
	if res.Outcome != "success" {
		c.fail("create on %s/%d: %s %s %s", node, gen, res.Outcome, res.ErrorCode, res.Reason)
		return nil
	}
	c.created[gen].Add(1)
	sb := &sandbox{node: node, gen: gen, ref: r}
	if !w.check(c, sb) {
		return nil
	}
	if keep {
		return sb
	}
	w.kill(c, sb)
	return nil
}

// check runs a command in sb that must print its generation's release.
func (w *world) check(c *counters, sb *sandbox) bool {
	res, sent, _ := w.operation(sb.node, command(sb.gen, sb.ref, `echo "$SPEC_RELEASE"`))
	if !sent {
		c.refused.Add(1)
		return false
	}
	c.sent.Add(1)
	want := fmt.Sprintf("rel-%d\n", sb.gen)
	if res.Outcome != "success" || res.Response == nil || res.Response.Command == nil || string(res.Response.Command.Stdout) != want {
		c.fail("command on %s/%d: %s %s %+v", sb.node, sb.gen, res.Outcome, res.ErrorCode, res.Response)
		return false
	}
	return true
}

func (w *world) kill(c *counters, sb *sandbox) {
	res, sent, _ := w.operation(sb.node, api.OperationRequest{Operation: proto.OpKill, DeploymentGeneration: sb.gen,
		TimeoutMS: 60000, Reference: sb.ref})
	if !sent {
		c.refused.Add(1)
		return
	}
	c.sent.Add(1)
	if res.Outcome != "success" {
		c.fail("kill on %s/%d: %s %s", sb.node, sb.gen, res.Outcome, res.ErrorCode)
	}
}

func TestRollingUpgradeUnderTraffic(t *testing.T) {
	w := newWorld(t)
	w.start()
	for _, id := range w.nodeIDs {
		w.until("node "+id+" to serve generation 1", func() bool { return w.ready(id, 1) })
	}

	var servingGen atomic.Int64
	servingGen.Store(1)
	serving := servingGen.Load
	c := &counters{}

	// Long-lived sandboxes on generation 1, one per node: they must keep
	// working through the roll.
	var old []*sandbox
	for _, id := range w.nodeIDs {
		sb := w.cycle(c, id, serving, true)
		if sb == nil {
			t.Fatalf("a sandbox on generation 1 of %s: %v", id, c.failures)
		}
		old = append(old, sb)
	}

	// Traffic: one worker per node, cycles back to back until stopped.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, id := range w.nodeIDs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				w.cycle(c, id, serving, false)
			}
		}()
	}
	waitCreated := func(gen int64, n int64) {
		w.until(fmt.Sprintf("%d sandboxes created on generation %d", n, gen), func() bool { return c.created[gen].Load() >= n })
	}
	waitCreated(1, 6)

	// Roll: target 2, generation 1 keeps serving; every node prepares 2.
	w.setDeployment(map[string]any{"generation": 2, "release": "rel-2", "serving_generation": 1})
	for _, id := range w.nodeIDs {
		w.until("node "+id+" to report generation 2 ready", func() bool { return w.ready(id, 2) })
	}
	before := c.created[1].Load()
	w.until("traffic on generation 1 while 2 was prepared", func() bool { return c.created[1].Load() > before })

	// Flip: new sandboxes go to generation 2.
	w.setDeployment(map[string]any{"generation": 2, "serving_generation": 2})
	servingGen.Store(2)
	waitCreated(2, 6)
	// Generation 1 is neither target nor serving now, so every node asks
	// to drop it; Core keeps it because the old sandboxes are placed on
	// it (the node itself holds no reference to an idle sandbox), and they
	// keep answering.
	for _, id := range w.nodeIDs {
		w.until("Core to keep generation 1 of node "+id, func() bool { return w.retentionAnswered(id, "kept", 1) })
	}
	for _, sb := range old {
		if !w.check(c, sb) {
			t.Fatalf("a sandbox on generation 1 stopped answering after the flip: %v", c.failures)
		}
	}
	close(stop)
	wg.Wait()

	// The old sandboxes end; nothing is placed on generation 1 any more,
	// so Core lets the nodes reclaim it and each node writes its dropped
	// marker.
	for _, sb := range old {
		w.kill(c, sb)
	}
	for i, id := range w.nodeIDs {
		w.until("Core to let node "+id+" drop generation 1", func() bool { return w.retentionAnswered(id, "dropped", 1) })
		marker := filepath.Join(w.dir, fmt.Sprintf("node%d", i), "state", "node", "generations", "1.dropped")
		w.until("node "+id+" to reclaim generation 1", func() bool { _, err := os.Stat(marker); return err == nil })
	}
	for _, id := range w.nodeIDs {
		s, _ := w.status(id)
		for _, g := range s.Generations {
			if g.Placements != 0 {
				t.Errorf("node %s generation %d still has %d placements", id, g.Generation, g.Placements)
			}
		}
	}

	t.Logf("operations sent: %d, refused before sending: %d, created on generation 1: %d, on generation 2: %d",
		c.sent.Load(), c.refused.Load(), c.created[1].Load(), c.created[2].Load())
	if n := c.failed.Load(); n != 0 {
		t.Fatalf("%d operations sent to a ready generation failed: %v", n, c.failures)
	}
}
