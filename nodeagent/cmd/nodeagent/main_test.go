package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/internal/dockertest"
	"github.com/sandgate/sandgate/nodeagent/internal/fakecore"
)

const digest = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

// files writes a credential file and a configuration file for origin and
// returns the --config argument.
func files(t *testing.T, origin, credential, endpoint string) []string {
	t.Helper()
	dir := t.TempDir()
	cred := filepath.Join(dir, "credential")
	if err := os.WriteFile(cred, []byte(credential+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nodeagent.toml")
	body := fmt.Sprintf(`core_origin = %q
node_id = %q
credential_file = %q
state_dir = %q
docker_endpoint = %q
disk_path = %q
deployment_generation = 2
specification_digest = %q

[timers]
backoff_min = "1ms"
backoff_max = "2ms"
`, origin, uuid.NewString(), cred, filepath.Join(dir, "state"), endpoint, dir, digest)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--config", conf}
}

func TestRejectedCredentialExitsWithItsOwnCode(t *testing.T) {
	host := dockertest.Host(t)
	core := fakecore.New(t, "the-right-credential", false)
	var stderr bytes.Buffer
	code := run(context.Background(), files(t, core.Origin.String(), "a-wrong-credential", host), &bytes.Buffer{}, &stderr)
	if code != exitRejected {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitRejected, stderr.String())
	}
	if n := core.Attempts(); n != 1 {
		t.Fatalf("%d connect attempts, want 1: no retry loop after 401", n)
	}
	if !strings.Contains(stderr.String(), "rejected the node credential (HTTP 401)") {
		t.Fatalf("stderr does not explain the rejection:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "a-wrong-credential") {
		t.Fatal("the credential appears in the output")
	}
}

func TestSignalStopsWithZero(t *testing.T) {
	host := dockertest.Host(t)
	core := fakecore.New(t, "cred", false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var stderr bytes.Buffer
	go func() { done <- run(ctx, files(t, core.Origin.String(), "cred", host), &bytes.Buffer{}, &stderr) }()
	conn := core.Accept()
	h := conn.Hello()
	if h.DeploymentGeneration != 2 || h.SpecificationDigest != digest || !h.Health.ProviderReady {
		t.Errorf("hello = %+v", h)
	}
	conn.Welcome(1)
	// A round trip proves the welcome was processed: the connection is
	// then drained on cancellation and closed with 1001.
	r := conn.NewRequest(proto.OpInfo, 2, 10000, proto.Reference{TenantID: "t1", EnvironmentID: "e1", AllocationID: "a1"})
	conn.Send(r)
	if resp := conn.Response(); resp.ID != r.ID {
		t.Fatalf("response %+v to request %s", resp, r.ID)
	}
	cancel()
	if code := conn.Closed(); code != websocket.CloseGoingAway {
		t.Fatalf("close code %d after cancellation, want %d (going away)", code, websocket.CloseGoingAway)
	}
	if code := <-done; code != exitOK {
		t.Fatalf("exit status %d after cancellation; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"draining"`) {
		t.Errorf("no draining log line:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "cred\n") || strings.Contains(stderr.String(), "Bearer") {
		t.Fatalf("the credential appears in the log:\n%s", stderr.String())
	}
}

func TestHelpAndConfigErrors(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &out); code != exitOK {
		t.Fatalf("--help: status %d", code)
	}
	for _, flag := range []string{"-core-origin", "-node-id", "-credential-file", "-state-dir", "-docker-endpoint",
		"-heartbeat", "-idle-timeout", "-backoff-min", "-backoff-max", "-shutdown-grace", "-print-identity", "Exit status",
		"nodeagent enrol --help"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("--help does not explain %s", flag)
		}
	}

	// A generation-managing node started before it was enrolled: the
	// error says to enrol, not only which setting is missing.
	dir := t.TempDir()
	gm := filepath.Join(dir, "nodeagent.toml")
	if err := os.WriteFile(gm, []byte("generation_management = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(context.Background(), []string{"--config", gm, "--state-dir", filepath.Join(dir, "state")}, &out, &out); code != exitConfig ||
		!strings.Contains(out.String(), "core_origin") || !strings.Contains(out.String(), "run `nodeagent enrol` first") {
		t.Errorf("unenrolled generation-managing node: status %d, output %s", code, out.String())
	}

	// An enrol cut off between the credential and the identity (step 4
	// writes them in that order): the error says so and what to do, and
	// enrol itself refuses with the same cause, writing nothing.
	cred := filepath.Join(dir, "node.credential")
	if err := os.WriteFile(cred, []byte("secret-credential\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(context.Background(), []string{"--config", gm, "--state-dir", filepath.Join(dir, "state"), "--credential-file", cred}, &out, &out); code != exitConfig ||
		!strings.Contains(out.String(), "was cut off after it wrote the credential") || !strings.Contains(out.String(), "remove the credential file") ||
		strings.Contains(out.String(), "secret-credential") {
		t.Errorf("half-enrolled generation-managing node: status %d, output %s", code, out.String())
	}
	tok := filepath.Join(dir, "enrol.token")
	if err := os.WriteFile(tok, []byte("enrolment-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := runEnrol(context.Background(), []string{"--core", "http://127.0.0.1:1", "--token-file", tok, "--state-dir", filepath.Join(dir, "state"),
		"--credential-file", cred}, &out, &out); code != exitEnrolRefused ||
		!strings.Contains(out.String(), "was cut off after it wrote the credential") || strings.Contains(out.String(), "enrolment-token") {
		t.Errorf("enrol over a half-enrolled host: status %d, output %s", code, out.String())
	}
	if b, err := os.ReadFile(cred); err != nil || string(b) != "secret-credential\n" {
		t.Errorf("the credential file after the refused enrol: %q, %v", b, err)
	}

	// enrol's own help: the credential file is where enrol writes, with a
	// default (not a required setting), and its exit statuses.
	out.Reset()
	if code := runEnrol(context.Background(), []string{"--help"}, &out, &out); code != exitOK {
		t.Fatalf("enrol --help: status %d", code)
	}
	for _, want := range []string{"-token-file", "where the node credential is written", "default /etc/sandgate/node.credential",
		"4 refused (nothing written)", "5 enrolled but preparing the runtime failed", "6 the enrolment's answer was lost",
		"1 failure while writing the node's files"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("enrol --help does not say %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if code := run(context.Background(), []string{"--config", "/nonexistent/nodeagent.toml"}, &out, &out); code != exitConfig {
		t.Fatalf("missing config file: status %d", code)
	}
	args := files(t, "ftp://core.example", "cred", "unix:///x.sock")
	out.Reset()
	if code := run(context.Background(), args, &out, &out); code != exitConfig || !strings.Contains(out.String(), "core_origin") {
		t.Fatalf("bad origin: status %d, output %s", code, out.String())
	}
}

func TestPrintIdentity(t *testing.T) {
	host := dockertest.Host(t)
	args := append(files(t, "http://127.0.0.1:1", "cred", host), "--print-identity", "--installation-id", "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("status %d: %s", code, stderr.String())
	}
	var id identity
	if err := json.Unmarshal(stdout.Bytes(), &id); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	if id.InstallationID != "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60" || id.Provider != "docker" || !proto.IsDigest(id.BackendFingerprint) ||
		id.DeploymentGeneration != 2 || id.SpecificationDigest != digest || !proto.IsUUID(id.NodeID) {
		t.Fatalf("identity = %+v", id)
	}
}

// TestLogsAreJSON checks the log format: one JSON object a line with the
// keys of the gateway's and corectl's logs (ts in Unix seconds, level in
// lower case, msg) and the record's attributes; records below the level
// are left out.
func TestLogsAreJSON(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf, slog.LevelInfo)
	before := float64(time.Now().UnixNano()) / 1e9
	log.Debug("not shown")
	log.Info("preparer job ended", "kind", "repair", "generation", int64(1), "ok", false)
	log.Warn("draining", "pending", 2)
	log.Error("gave up")
	after := float64(time.Now().UnixNano()) / 1e9
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `"msg":"preparer job ended","kind":"repair","generation":1,"ok":false`) {
		t.Errorf("the attributes do not follow msg in order: %s", lines[0])
	}
	for i, want := range []struct{ level, msg string }{{"info", "preparer job ended"}, {"warn", "draining"}, {"error", "gave up"}} {
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, lines[i])
		}
		ts, ok := rec["ts"].(float64)
		if !ok || ts < before || ts > after || rec["level"] != want.level || rec["msg"] != want.msg {
			t.Errorf("line %d = %v, want ts in [%f, %f], level %q, msg %q", i, rec, before, after, want.level, want.msg)
		}
		if _, ok := rec["time"]; ok {
			t.Errorf("line %d has slog's time key beside ts: %s", i, lines[i])
		}
	}
}
