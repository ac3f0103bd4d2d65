package nodeagent_test

// nodeagent enrol against the real gateway: releases published with
// `caddy sandgate-release`, a one-time enrolment token from Caddy's admin
// API, the enrolment over Core's machine API, the node connecting with
// the credential it received and reporting its generation ready, a
// create and a command through the internal node API; a reused token is
// refused before anything is written.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/node/api"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/internal/dockertest"
	"github.com/sandgate/sandgate/nodeagent/state"
)

func TestEnrolThroughTheGateway(t *testing.T) {
	root := repoRoot(t)
	gw := gatewayBinary(t, root)
	host := dockertest.Host(t)
	cli := dockertest.Client(t, host)
	img := dockertest.Image(t, cli)
	agent := sharedAgent(t)
	dir := t.TempDir()

	// The release, published into the gateway's store.
	rel := filepath.Join(dir, "rel-1")
	os.Mkdir(rel, 0o755)
	saveImage(t, host, img, filepath.Join(rel, "image.tar"))
	write(t, filepath.Join(rel, "provider.json"), fmt.Sprintf(`{"provider":"docker","image_ref":%q,"command":["sleep","3600"]}`, img))
	write(t, filepath.Join(rel, "seccomp.json"), denyMkdir)
	store := filepath.Join(dir, "releases")
	for _, args := range [][]string{
		{"sandgate-release", "manifest", "--source", "rel-1", "--image", "image.tar", "--provider-spec", "provider.json", "--seccomp", "seccomp.json", rel},
		{"sandgate-release", "publish", "--store", store, rel},
	} {
		if out, err := exec.Command(gw, args...).CombinedOutput(); err != nil {
			t.Fatalf("caddy %v: %v\n%s", args, err, out)
		}
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
	persist_config off
	sandgate {
		token_key e2e HS256 %s
		credentials file %s
		nodes {
			state_dir %s
			releases %s
			pool default {
				generation 1 release rel-1
				target 1
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
`, adminPort, key, creds, filepath.Join(dir, "core-state"), store, connectPort, apiPort, sha(apiToken)))
	w := &world{t: t, dir: dir, agent: agent, apiToken: apiToken, apiURL: fmt.Sprintf("http://127.0.0.1:%d%s", apiPort, api.Prefix)}
	w.gateway = start(t, filepath.Join(dir, "caddy.log"), gw, "run", "--config", caddyfile, "--adapter", "caddyfile")
	w.until("the gateway's API answers", func() bool {
		resp, _, err := w.do(http.MethodGet, "", nil)
		return err == nil && resp.StatusCode == http.StatusOK
	})
	newToken := func() string {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/sandgate/enrolment-tokens", adminPort), "application/json",
			bytes.NewReader([]byte(`{"pool":"default","ttl":"1h"}`)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			EnrolmentToken string `json:"enrolment_token"`
		}
		if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&out) != nil || out.EnrolmentToken == "" {
			t.Fatalf("enrolment token: HTTP %d", resp.StatusCode)
		}
		return out.EnrolmentToken
	}
	core := fmt.Sprintf("http://127.0.0.1:%d", connectPort)
	enrol := func(token, stateDir, credFile string) (int, string) {
		tf := write(t, filepath.Join(t.TempDir(), "token"), token+"\n")
		out, err := exec.Command(agent, "enrol", "--core", core, "--token-file", tf, "--state-dir", stateDir,
			"--credential-file", credFile, "--docker-endpoint", host).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}

	token := newToken()
	stateDir, credFile := filepath.Join(dir, "node-state"), filepath.Join(dir, "node.credential")
	if code, out := enrol(token, stateDir, credFile); code != 0 {
		t.Fatalf("enrol: exit %d\n%s\n%s", code, out, w.gateway.output())
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
}
