package rotation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// nodeTestImage is the image hack/docker/start.sh imports into the test
// engine.
const nodeTestImage = "sandgate-test/busybox:1"

// rotNode is one sandbox node of TestNodeCredentialRotationUnderTraffic:
// a bin/nodeagent process with its credential file, and its record in the
// gateway's node credential file.
type rotNode struct {
	id       string
	cred     string // the credential it starts with
	credFile string
	config   string
	record   map[string]any
	log      string
	cmd      *exec.Cmd
	done     chan struct{}
	ref      proto.Reference // its sandbox, which the traffic asks about
}

// nodeOp is one operation the traffic sent through the internal node API.
type nodeOp struct {
	node         string
	start, end   time.Time
	status       int
	outcome      string
	connectionID string
	err          string
}

// TestNodeCredentialRotationUnderTraffic follows docs/runbook.md "Node
// credentials" with the built programs: bin/caddy serving Core's node
// connect endpoint and the internal node API, with the node credential file
// as the Secret gateway-nodes would mount it, and three bin/nodeagent
// processes on the real Docker engine, each with a sandbox of its own that
// internal API callers ask about (info) the whole time. One node's
// credential is rotated in the runbook's three steps: (1) its record gets
// the new digest as next_credential_sha256, (2) its credential file gets
// the new credential, (3) its record's credential_sha256 becomes the new
// digest and next_credential_sha256 goes. Asserted: no operation to any
// node is refused or ends other than success; the rotated node keeps its
// connection through steps 1 and 2 and reconnects with the new credential
// after step 3, and operations sent while it was away waited for it and
// were answered on the new connection; the other nodes keep their
// connections and every operation to them is answered on those; the old
// credential is refused at connect at the end; no credential, digest or
// API token appears in the gateway's or a node's log.
func TestNodeCredentialRotationUnderTraffic(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := func(name string) string {
		p := filepath.Join(root, "bin", name)
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("bin/%s is missing (%v): run make build", name, err)
		}
		return p
	}
	caddy, agent := bin("caddy"), bin("nodeagent")
	cli, host := harness.DockerClient(t)
	if _, err := cli.ImageInspect(context.Background(), nodeTestImage); err != nil {
		t.Fatalf("the test image %s is missing (%v): hack/docker/start.sh imports it", nodeTestImage, err)
	}

	dir := t.TempDir()
	// The gateway binds its node connect and node API ports itself, and
	// the nodes' configuration names the first: both are picked here and
	// again when one was taken before the gateway listened (below).
	var connectPort, apiPort, apiURL string
	pickPorts := func() {
		var err error
		if connectPort, err = freeport.Port(); err != nil {
			t.Fatal(err)
		}
		if apiPort, err = freeport.Port(); err != nil {
			t.Fatal(err)
		}
		apiURL = "http://127.0.0.1:" + apiPort + api.Prefix
	}
	pickPorts()
	apiToken := randomToken(t)
	const heartbeat = "500ms"

	// The nodes: configuration, credential file, enrolment record.
	nodes := make([]*rotNode, 3)
	for i := range nodes {
		n := &rotNode{id: uuid.NewString(), cred: randomToken(t), done: make(chan struct{})}
		ndir := filepath.Join(dir, fmt.Sprintf("node-%d", i))
		if err := os.MkdirAll(ndir, 0o700); err != nil {
			t.Fatal(err)
		}
		n.credFile = filepath.Join(ndir, "node.credential")
		writeFile(t, n.credFile, n.cred+"\n")
		n.config = filepath.Join(ndir, "nodeagent.toml")
		writeFile(t, n.config, fmt.Sprintf(`core_origin = "http://127.0.0.1:%s"
node_id = %q
installation_id = %q
credential_file = %q
state_dir = %q
docker_endpoint = %q
disk_path = %q
deployment_generation = 1
specification_digest = %q

[timers]
heartbeat = %q
`, connectPort, n.id, uuid.NewString(), n.credFile, filepath.Join(ndir, "state"), host, ndir, strings.Repeat("5a", 32), heartbeat))
		out, err := exec.Command(agent, "--config", n.config, "--print-identity").Output()
		if err != nil {
			t.Fatalf("nodeagent --print-identity: %v", err)
		}
		if err := json.Unmarshal(out, &n.record); err != nil {
			t.Fatalf("identity %q: %v", out, err)
		}
		n.record["enabled"] = true
		n.record["credential_sha256"] = sha256Hex(n.cred)
		n.log = filepath.Join(ndir, "nodeagent.log")
		n.ref = proto.Reference{TenantID: "tenant-rotation", EnvironmentID: "env-rotation", AllocationID: "alloc-" + n.id[:8]}
		nodes[i] = n
		id := n.id
		t.Cleanup(func() { harness.RemoveNodeContainers(cli, id) })
	}
	var recordsMu sync.Mutex
	nodesFile := filepath.Join(dir, "nodes.json")
	writeNodes := func() {
		recordsMu.Lock()
		defer recordsMu.Unlock()
		var list []map[string]any
		for _, n := range nodes {
			list = append(list, n.record)
		}
		b, err := json.Marshal(map[string]any{"nodes": list})
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, nodesFile, string(b)) // a rename, as the kubelet swaps a Secret's files
	}
	writeNodes()

	// The gateway.
	key := filepath.Join(dir, "k1.key")
	writeFile(t, key, randomToken(t))
	creds := filepath.Join(dir, "credentials.yaml")
	writeFile(t, creds, "credentials: []\n")
	gwLog := &gatewayproc.Output{}
	var gw *gatewayproc.Process
	for attempt := 1; ; attempt++ {
		bind := &harness.BindWatch{}
		var err error
		gw, err = gatewayproc.Start(caddy, filepath.Join(dir), fmt.Sprintf(`{
	admin off
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key k1 HS256 %s
		credentials file %s
		nodes {
			credentials file %s
			state_dir %s
			heartbeat_interval %s
		}
	}
}

http://127.0.0.1:%s {
	sandbox_node_connect
}

http://127.0.0.1:%s {
	sandbox_node_api {
		token_sha256 %s
	}
}
`, key, creds, nodesFile, filepath.Join(dir, "state"), heartbeat, connectPort, apiPort, sha256Hex(apiToken)), io.MultiWriter(gwLog, bind))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{connectPort, apiPort} {
			if err = gw.WaitListening("127.0.0.1:" + p); err != nil {
				break
			}
		}
		if err == nil {
			break
		}
		gw.Stop()
		if !bind.Lost(err) || attempt == 5 {
			t.Fatalf("%v\n%s", err, gwLog)
		}
		// A port was taken before the gateway listened: new ports, and the
		// nodes' core_origin (their configuration's first line) follows.
		t.Logf("gateway start attempt %d: %v; again with new ports", attempt, err)
		pickPorts()
		for _, n := range nodes {
			b, err := os.ReadFile(n.config)
			if err != nil {
				t.Fatal(err)
			}
			_, rest, _ := strings.Cut(string(b), "\n")
			writeFile(t, n.config, fmt.Sprintf("core_origin = \"http://127.0.0.1:%s\"\n", connectPort)+rest)
		}
	}
	t.Cleanup(gw.Stop)

	apiClient := &http.Client{Timeout: wait}
	call := func(ctx context.Context, method, path string, body any, out any) (int, error) {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return 0, err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, apiURL+path, rd)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := apiClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return resp.StatusCode, err
		}
		if out != nil && resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, out); err != nil {
				return resp.StatusCode, fmt.Errorf("%w: %s", err, b)
			}
		}
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
		}
		return resp.StatusCode, nil
	}
	status := func(n *rotNode) hub.NodeStatus {
		t.Helper()
		var st hub.NodeStatus
		if _, err := call(context.Background(), http.MethodGet, "/"+n.id, nil, &st); err != nil {
			t.Fatalf("node %s status: %v", n.id, err)
		}
		return st
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(wait)
		for !cond() {
			select {
			case <-deadline:
				t.Fatalf("waited %v until %s\ngateway log:\n%s", wait, what, gwLog)
			case <-tick.C:
			}
		}
	}

	// The node agents.
	for _, n := range nodes {
		f, err := os.Create(n.log)
		if err != nil {
			t.Fatal(err)
		}
		n.cmd = exec.Command(agent, "--config", n.config)
		n.cmd.Stdout, n.cmd.Stderr = f, f
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = n.cmd.Wait(); f.Close(); close(n.done) }()
		t.Cleanup(func() {
			_ = n.cmd.Process.Signal(os.Interrupt)
			select {
			case <-n.done:
			case <-time.After(wait):
				_ = n.cmd.Process.Kill()
				<-n.done
			}
		})
	}
	for _, n := range nodes {
		until("node "+n.id+" is online and its provider ready", func() bool {
			select {
			case <-n.done:
				b, _ := os.ReadFile(n.log)
				t.Fatalf("nodeagent %s exited:\n%s", n.id, b)
			default:
			}
			st := status(n)
			return st.Online && st.Health != nil && st.Health.ProviderReady
		})
		var res api.OperationResult
		if _, err := call(context.Background(), http.MethodPost, "/"+n.id+"/operations", api.OperationRequest{
			Operation: proto.OpCreate, DeploymentGeneration: 1, TimeoutMS: 60000, Reference: n.ref,
			Bootstrap: &proto.Bootstrap{Image: nodeTestImage, Entrypoint: []string{"sleep", "3600"}},
		}, &res); err != nil || res.Outcome != "success" {
			t.Fatalf("create on node %s: %+v, %v", n.id, res, err)
		}
	}

	// The traffic: two callers per node asking about its sandbox, back to
	// back, for the whole rotation.
	var mu sync.Mutex
	var ops []nodeOp
	answered := map[string]int{}
	changed := make(chan struct{})
	ctx, stop := context.WithCancel(context.Background())
	var callers sync.WaitGroup
	for _, n := range nodes {
		for range 2 {
			callers.Add(1)
			go func() {
				defer callers.Done()
				for ctx.Err() == nil {
					op := nodeOp{node: n.id, start: time.Now()}
					var res api.OperationResult
					code, err := call(ctx, http.MethodPost, "/"+n.id+"/operations", api.OperationRequest{
						Operation: proto.OpInfo, DeploymentGeneration: 1, TimeoutMS: 10000, Reference: n.ref}, &res)
					op.end = time.Now()
					if ctx.Err() != nil {
						return
					}
					op.status, op.outcome, op.connectionID = code, res.Outcome, res.ConnectionID
					if err != nil {
						op.err = err.Error()
					} else if res.Outcome != "success" {
						op.err = fmt.Sprintf("outcome %s, error_code %s, reason %s", res.Outcome, res.ErrorCode, res.Reason)
					}
					mu.Lock()
					ops = append(ops, op)
					if op.err == "" {
						answered[n.id]++
					}
					close(changed)
					changed = make(chan struct{})
					mu.Unlock()
				}
			}()
		}
	}
	defer func() { stop(); callers.Wait() }()
	// eachAnswered waits until every node has answered k more operations.
	eachAnswered := func(k int) {
		t.Helper()
		mu.Lock()
		want := map[string]int{}
		for _, n := range nodes {
			want[n.id] = answered[n.id] + k
		}
		mu.Unlock()
		deadline := time.After(wait)
		for {
			mu.Lock()
			ok, ch := true, changed
			for id, w := range want {
				ok = ok && answered[id] >= w
			}
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("the nodes did not answer %d more operations each within %v", k, wait)
			}
		}
	}
	// reloads counts the gateway's reloads of the node credential file.
	reloads := func() int { return strings.Count(gwLog.String(), "node credential file reloaded") }
	// heartbeats waits until n's connection has had k more heartbeats
	// acknowledged (its last_heartbeat_at moved k times).
	heartbeats := func(n *rotNode, k int) {
		t.Helper()
		last := status(n).LastHeartbeatAt
		seen := 0
		until(fmt.Sprintf("node %s's next %d heartbeats", n.id, k), func() bool {
			st := status(n)
			if st.LastHeartbeatAt != nil && (last == nil || st.LastHeartbeatAt.After(*last)) {
				seen++
				last = st.LastHeartbeatAt
			}
			return seen >= k
		})
	}
	eachAnswered(20)

	rotated, others := nodes[0], nodes[1:]
	conns := map[string]string{}
	for _, n := range nodes {
		conns[n.id] = status(n).ConnectionID
	}
	oldCred, newCred := rotated.cred, randomToken(t)

	// Step 1: the new digest in the node's record, beside the old one.
	r := reloads()
	recordsMu.Lock()
	rotated.record["next_credential_sha256"] = sha256Hex(newCred)
	recordsMu.Unlock()
	writeNodes()
	until("the gateway reloads the node credential file (step 1)", func() bool { return reloads() > r })
	heartbeats(rotated, 2)
	eachAnswered(10)
	if c := status(rotated).ConnectionID; c != conns[rotated.id] {
		t.Fatalf("step 1 replaced the rotated node's connection (%s → %s)", conns[rotated.id], c)
	}

	// Step 2: the node's credential file holds the new credential; the
	// node sends it at its next connect.
	writeFile(t, rotated.credFile, newCred+"\n")
	heartbeats(rotated, 2)
	eachAnswered(10)
	if c := status(rotated).ConnectionID; c != conns[rotated.id] {
		t.Fatalf("step 2 replaced the rotated node's connection (%s → %s)", conns[rotated.id], c)
	}

	// Step 3: the new digest alone.
	r = reloads()
	recordsMu.Lock()
	rotated.record["credential_sha256"] = sha256Hex(newCred)
	delete(rotated.record, "next_credential_sha256")
	recordsMu.Unlock()
	writeNodes()
	until("the gateway reloads the node credential file (step 3)", func() bool { return reloads() > r })
	var after hub.NodeStatus
	until("the rotated node reconnects with its new credential", func() bool {
		select {
		case <-rotated.done:
			b, _ := os.ReadFile(rotated.log)
			t.Fatalf("the rotated node's nodeagent exited:\n%s", b)
		default:
		}
		after = status(rotated)
		return after.Online && after.ConnectionID != conns[rotated.id]
	})
	eachAnswered(20)
	stop()
	callers.Wait()

	// No operation refused, each answered on the connection it should be.
	mu.Lock()
	defer mu.Unlock()
	var refused []string
	waitedAcross := 0
	durations := map[bool][]time.Duration{} // rotated node or not
	for _, op := range ops {
		if op.err != "" {
			refused = append(refused, fmt.Sprintf("node %s at %s: %s", op.node, op.start.Format("15:04:05.000"), op.err))
			continue
		}
		durations[op.node == rotated.id] = append(durations[op.node == rotated.id], op.end.Sub(op.start))
		switch {
		case op.node != rotated.id && op.connectionID != conns[op.node]:
			t.Errorf("an operation to node %s (not rotated) was answered on connection %s, not its first %s", op.node, op.connectionID, conns[op.node])
		case op.node == rotated.id && op.connectionID != conns[rotated.id] && op.connectionID != after.ConnectionID:
			t.Errorf("an operation to the rotated node was answered on connection %s, neither its old nor its new one", op.connectionID)
		case op.node == rotated.id && op.connectionID == after.ConnectionID && after.ConnectedAt != nil && op.start.Before(*after.ConnectedAt):
			waitedAcross++
		}
	}
	if len(refused) > 0 {
		t.Errorf("%d of %d operations refused or not successful during the rotation; the first:\n%s", len(refused), len(ops),
			strings.Join(refused[:min(len(refused), 10)], "\n"))
	}
	if waitedAcross == 0 {
		t.Errorf("no operation to the rotated node was sent before its new connection and answered on it: the reconnect wait was not exercised")
	}
	for _, n := range others {
		if c := status(n).ConnectionID; c != conns[n.id] {
			t.Errorf("node %s (not rotated) changed connection during the rotation: %s → %s", n.id, conns[n.id], c)
		}
	}
	quantiles := func(d []time.Duration) string {
		if len(d) == 0 {
			return "none"
		}
		slices.Sort(d)
		return fmt.Sprintf("%d operations, p50 %v, p99 %v, max %v", len(d), d[len(d)/2], d[len(d)*99/100], d[len(d)-1])
	}
	t.Logf("the other nodes: %s; the rotated node: %s; %d of its operations waited for its new connection",
		quantiles(durations[false]), quantiles(durations[true]), waitedAcross)

	// The old credential is refused at connect; the nodes still run.
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	u := "ws://127.0.0.1:" + connectPort + hub.ConnectPath + "?node_id=" + rotated.id
	ws, resp, err := d.Dial(u, http.Header{"Authorization": {"Bearer " + oldCred}})
	if ws != nil {
		ws.Close()
	}
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Errorf("the old credential at connect after the rotation: HTTP %d, %v; want 401", code, err)
	}
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	for _, n := range nodes {
		select {
		case <-n.done:
			t.Errorf("nodeagent %s exited during the rotation", n.id)
		default:
		}
	}

	// No secret in any log.
	secrets := []string{apiToken, oldCred, newCred, sha256Hex(oldCred), sha256Hex(newCred)}
	for _, n := range others {
		secrets = append(secrets, n.cred, sha256Hex(n.cred))
	}
	logs := map[string]string{"the gateway's log": gwLog.String()}
	for i, n := range nodes {
		b, err := os.ReadFile(n.log)
		if err != nil {
			t.Fatal(err)
		}
		logs[fmt.Sprintf("node %d's log", i)] = string(b)
	}
	for name, text := range logs {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s contains a credential, a credential digest or the API token", name)
			}
		}
	}
	if !strings.Contains(gwLog.String(), "node credential replaced; retiring the connection") {
		t.Errorf("the gateway did not log the retirement of the rotated node's connection")
	}
}
