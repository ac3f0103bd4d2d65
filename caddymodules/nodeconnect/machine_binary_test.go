package nodeconnect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/admin"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// builtCaddy returns bin/caddy (make build).
func builtCaddy(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", "caddy"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the gateway binary %s is missing; run `make build` first", bin)
	}
	return bin
}

// publishRelease writes a release directory for source and publishes it
// into store with `bin/caddy sandgate-release`; it returns the
// specification digest.
func publishRelease(t *testing.T, bin, store, source string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), source)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "image.tar"), "image bytes of "+source)
	write(t, filepath.Join(dir, "provider.json"), `{"provider": "docker", "image_ref": "sandgate-test/busybox:1"}`)
	for _, args := range [][]string{
		{"sandgate-release", "manifest", "--source", source, "--image", "image.tar", "--provider-spec", "provider.json", dir},
		{"sandgate-release", "publish", "--store", store, dir},
	} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	return release.Digest(raw)
}

func machineCaddyfile(f files, adminAddr, state, store string) string {
	return fmt.Sprintf(`{
	admin %s
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
			hello_timeout 5s
		}
	}
}

http://127.0.0.1:%s {
	sandbox_node_connect
}
`, adminAddr, f.key, f.creds, state, store, f.port)
}

// call sends one request and returns the status and body.
func call(t *testing.T, method, url, auth, contentType, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func servingGen(d *proto.Deployment) int64 {
	if d == nil || d.ServingGeneration == nil {
		return 0
	}
	return *d.ServingGeneration
}

// TestBinaryEnrolmentAndDeployment drives the built gateway as an
// operator and a new node would: releases published with `caddy
// sandgate-release`, an enrolment token from the admin API, the
// enrolment preview and the enrolment over the machine API, a
// generation-managing node connecting with the credential it got, a
// deployment change through the admin API reaching the node at its next
// heartbeat_ack, kept across `caddy reload` (POST /load) and across a
// restart of the process (state_dir), and the used token refused.
func TestBinaryEnrolmentAndDeployment(t *testing.T) {
	bin := builtCaddy(t)
	f := newFiles(t)
	state, store := filepath.Join(f.dir, "state"), filepath.Join(f.dir, "releases")
	d1 := publishRelease(t, bin, store, "rel-1")
	d2 := publishRelease(t, bin, store, "rel-2")
	adminAddr := "127.0.0.1:" + freePort(t)
	caddyfile := machineCaddyfile(f, adminAddr, state, store)
	var logs gatewayproc.Output
	start := func() *gatewayproc.Process {
		p, err := gatewayproc.Start(bin, f.dir, caddyfile, &logs)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitListening("127.0.0.1:" + f.port); err != nil {
			t.Fatalf("%v\n%s", err, logs.String())
		}
		if err := p.WaitListening(adminAddr); err != nil {
			t.Fatalf("%v\n%s", err, logs.String())
		}
		// Caddy starts its apps in no set order: the site may listen
		// before the sandgate app has started (the admin routes answer 503
		// until then).
		waittest.Until(t, timeout, "the sandgate app to start", func() bool {
			status, _ := call(t, http.MethodGet, "http://"+adminAddr+admin.PoolsPath, "", "", "")
			return status == http.StatusOK
		})
		return p
	}
	gw := start()
	var secrets []string
	defer func() {
		gw.Stop()
		out := logs.String()
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("the gateway log contains a token or credential")
			}
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", out)
		}
	}()
	base := "http://127.0.0.1:" + f.port
	adminURL := "http://" + adminAddr

	status, body := call(t, http.MethodPost, adminURL+admin.TokensPath, "", "application/json", `{"pool": "default", "ttl": "10m"}`)
	var tok admin.TokenResponse
	if status != http.StatusCreated || json.Unmarshal(body, &tok) != nil {
		t.Fatalf("token: %d %s", status, body)
	}
	secrets = append(secrets, tok.EnrolmentToken)

	status, body = call(t, http.MethodGet, base+machine.EnrolPath, tok.EnrolmentToken, "", "")
	pv, err := machine.DecodeEnrolPreview(bytes.NewReader(body))
	if status != http.StatusOK || err != nil || pv.Enrolled.DeploymentGeneration != 1 || pv.Enrolled.SpecificationDigest != d1 {
		t.Fatalf("preview: %d %v %s", status, err, body)
	}
	enrolBody := fmt.Sprintf(`{"enrolment_token": %q, "installation_id": %q, "provider": "docker",
		"backend_fingerprint": %q, "max_active": 4, "max_retained": 8}`, tok.EnrolmentToken, installID, fingerprint)
	status, body = call(t, http.MethodPost, base+machine.EnrolPath, "", "application/json", enrolBody)
	er, err := machine.DecodeEnrolResponse(bytes.NewReader(body))
	if status != http.StatusCreated || err != nil {
		t.Fatalf("enrol: %d %v %s", status, err, body)
	}
	secrets = append(secrets, er.Credential)

	hello := proto.Hello{NodeID: er.NodeID, InstallationID: installID, Provider: proto.ProviderDocker,
		BackendFingerprint: fingerprint, DeploymentGeneration: 1, SpecificationDigest: d1, MaxActive: 4, MaxRetained: 8,
		GenerationManagement: true, Health: proto.Health{ProviderReady: true, Host: proto.HostMeasurements{CPUCount: 2, MemoryTotalBytes: 1 << 30}},
		Generations: []proto.GenerationObservation{{Generation: 1, SpecificationDigest: d1, State: proto.GenerationReady}}}
	dial := func() *sim.Node {
		n, err := sim.Dial(t.Context(), sim.Config{URL: base, Credential: er.Credential, Hello: hello, HeartbeatInterval: -1})
		if err != nil {
			t.Fatalf("node dial: %v", err)
		}
		t.Cleanup(func() { _ = n.Close() })
		return n
	}
	n := dial()
	if d := n.Welcome().Deployment; d == nil || d.Generation != 1 || d.SpecificationDigest != d1 || d.ServingGeneration != nil {
		t.Fatalf("welcome: %+v", d)
	}

	// The operator rolls the pool to generation 2 while 1 keeps serving.
	status, body = call(t, http.MethodPut, adminURL+admin.PoolsPath+"/default/deployment", "", "application/json",
		`{"generation": 2, "release": "rel-2", "serving_generation": 1}`)
	if status != http.StatusOK {
		t.Fatalf("PUT deployment: %d %s", status, body)
	}
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := n.LastAck().Deployment; d == nil || d.Generation != 2 || d.SpecificationDigest != d2 || servingGen(d) != 1 {
		t.Fatalf("heartbeat_ack after the change: %+v", d)
	}

	// caddy reload with the same Caddyfile keeps the run-time deployment
	// and the connection.
	status, body = call(t, http.MethodPost, adminURL+"/load", "", "text/caddyfile", caddyfile)
	if status != http.StatusOK {
		t.Fatalf("POST /load: %d %s", status, body)
	}
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := n.LastAck().Deployment; d == nil || d.Generation != 2 || servingGen(d) != 1 || n.LastAck().ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("after the reload: %+v", n.LastAck())
	}

	// The node's configuration names both runtimes.
	status, body = call(t, http.MethodGet, base+machine.ConfigPath+"?node_id="+er.NodeID, er.Credential, "", "")
	c, err := machine.DecodeConfig(bytes.NewReader(body))
	if status != http.StatusOK || err != nil || len(c.Runtimes) != 2 || c.Runtimes[1].SpecificationDigest != d2 {
		t.Fatalf("config: %d %v %s", status, err, body)
	}

	// A restart of the gateway keeps the enrolled node and the deployment.
	_ = n.Close()
	gw.Stop()
	gw = start()
	n = dial()
	if d := n.Welcome().Deployment; d == nil || d.Generation != 2 || d.SpecificationDigest != d2 || servingGen(d) != 1 {
		t.Fatalf("welcome after a restart: %+v", d)
	}

	// The token was used once.
	status, body = call(t, http.MethodPost, base+machine.EnrolPath, "", "application/json", enrolBody)
	if status != http.StatusUnauthorized || machine.DecodeError(bytes.NewReader(body)).Error != machine.CodeEnrolmentRefused {
		t.Fatalf("reused token: %d %s", status, body)
	}

	// The operator disables the enrolled node: its next heartbeat closes
	// the connection with 4003, and it can no longer connect.
	status, body = call(t, http.MethodPost, adminURL+admin.EnrolledPath+"/"+er.NodeID+"/disable", "", "", "")
	if status != http.StatusOK {
		t.Fatalf("disable: %d %s", status, body)
	}
	_ = n.Heartbeat(t.Context())
	<-n.Done()
	if ce, ok := n.Err().(*websocket.CloseError); !ok || ce.Code != hub.CloseCredentialRejected {
		t.Fatalf("after disabling, the connection ended with %v, want close code 4003", n.Err())
	}
	if _, err := sim.Dial(t.Context(), sim.Config{URL: base, Credential: er.Credential, Hello: hello, HeartbeatInterval: -1}); err == nil {
		t.Fatal("a disabled node connected")
	} else if de, ok := err.(*sim.DialError); !ok || de.Status != http.StatusUnauthorized {
		t.Fatalf("a disabled node's connect: %v, want 401", err)
	}
}
