package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	nodeID = "7c0e5f0a-4c1e-4e55-9a7e-2f1f6d1b9a01"
	digest = "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nodeagent.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const minimal = `core_origin = "https://core.example:8443/prefix"
node_id = "` + nodeID + `"
credential_file = "/etc/sandgate/node.credential"
deployment_generation = 4
specification_digest = "` + digest + `"
`

func TestShutdownGraceFromFileAndFlag(t *testing.T) {
	path := writeFile(t, minimal+"[timers]\nshutdown_grace = \"25s\"\n")
	c, err := Load([]string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(c.Timers.ShutdownGrace) != 25*time.Second {
		t.Errorf("file timers.shutdown_grace: %v, want 25s", time.Duration(c.Timers.ShutdownGrace))
	}
	c, err = Load([]string{"--config", path, "--shutdown-grace", "3s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(c.Timers.ShutdownGrace) != 3*time.Second {
		t.Errorf("--shutdown-grace did not override: %v, want 3s", time.Duration(c.Timers.ShutdownGrace))
	}
}

func TestFileDefaultsAndFlagOverrides(t *testing.T) {
	path := writeFile(t, minimal+`max_active = 6

[timers]
heartbeat = "5s"
`)
	c, err := Load([]string{"--config", path, "--max-active", "8", "--idle-timeout", "40s", "--docker-endpoint", "tcp://127.0.0.1:2375"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.CoreOrigin != "https://core.example:8443/prefix" || c.NodeID != nodeID || c.DeploymentGeneration != 4 ||
		c.SpecificationDigest != digest || c.CredentialFile != "/etc/sandgate/node.credential" {
		t.Errorf("file settings: %+v", c)
	}
	if c.MaxActive != 8 || time.Duration(c.Timers.Idle) != 40*time.Second || c.DockerEndpoint != "tcp://127.0.0.1:2375" {
		t.Errorf("flags did not override: max_active %d, idle %v, endpoint %s", c.MaxActive, time.Duration(c.Timers.Idle), c.DockerEndpoint)
	}
	if time.Duration(c.Timers.Heartbeat) != 5*time.Second {
		t.Errorf("file timer: %v", time.Duration(c.Timers.Heartbeat))
	}
	d := Defaults()
	if c.StateDir != d.StateDir || c.Timers.Write != d.Timers.Write || c.Timers.BackoffMax != d.Timers.BackoffMax || c.LogLevel != "info" {
		t.Errorf("defaults lost: %+v", c)
	}
	if time.Duration(c.Timers.ShutdownGrace) != 10*time.Second {
		t.Errorf("default shutdown_grace %v, want 10s", time.Duration(c.Timers.ShutdownGrace))
	}
	if time.Duration(d.Timers.Heartbeat) != 10*time.Second || time.Duration(d.Timers.Idle) != 35*time.Second {
		t.Errorf("spec defaults: %+v", d.Timers)
	}
}

func TestFlagsAlone(t *testing.T) {
	c, err := Load([]string{"--config", writeFile(t, ""), "--core-origin", "http://127.0.0.1:8080", "--node-id", nodeID,
		"--credential-file", "/c", "--deployment-generation", "1", "--specification-digest", digest}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.CoreOrigin != "http://127.0.0.1:8080" || c.DeploymentGeneration != 1 {
		t.Fatalf("%+v", c)
	}
}

func TestRefusals(t *testing.T) {
	cases := map[string]struct {
		file string
		args []string
		want string
	}{
		"unknown setting":       {minimal + "colour = \"red\"\n", nil, "unknown setting"},
		"ws origin":             {strings.Replace(minimal, "https://core.example:8443/prefix", "wss://core.example", 1), nil, "core_origin"},
		"origin with query":     {strings.Replace(minimal, "/prefix", "/?x=1", 1), nil, "core_origin"},
		"origin with user":      {strings.Replace(minimal, "https://", "https://u:p@", 1), nil, "core_origin"},
		"uppercase node id":     {strings.Replace(minimal, nodeID, strings.ToUpper(nodeID), 1), nil, "node_id"},
		"empty credential file": {strings.Replace(minimal, `credential_file = "/etc/sandgate/node.credential"`, `credential_file = ""`, 1), nil, "credential_file"},
		"generation 0":          {minimal, []string{"--deployment-generation", "0"}, "deployment_generation"},
		"short digest":          {strings.Replace(minimal, digest, digest[:10], 1), nil, "specification_digest"},
		"max active 33":         {minimal, []string{"--max-active", "33"}, "max_active"},
		"heartbeat over idle":   {minimal, []string{"--heartbeat", "40s"}, "timers.heartbeat"},
		"negative timer":        {minimal, []string{"--write-timeout", "-1s"}, "timers.write"},
		"backoff inverted":      {minimal, []string{"--backoff-min", "2m"}, "backoff_max"},
		"zero shutdown grace":   {minimal, []string{"--shutdown-grace", "0s"}, "timers.shutdown_grace must be positive"},
		"negative grace file":   {minimal + "[timers]\nshutdown_grace = \"-1s\"\n", nil, "timers.shutdown_grace must be positive"},
		"bad duration":          {minimal, []string{"--probe-timeout", "soon"}, "--probe-timeout"},
		"bad log level":         {minimal, []string{"--log-level", "loud"}, "log_level"},
		"stray argument":        {minimal, []string{"extra"}, "unexpected argument"},
		"bad installation":      {minimal, []string{"--installation-id", "x"}, "installation_id"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Load(append([]string{"--config", writeFile(t, tc.file)}, tc.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := Load([]string{"--help"}, io.Discard); !errors.Is(err, ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	// --version needs no configuration at all.
	if _, err := Load([]string{"--version"}, io.Discard); !errors.Is(err, ErrVersion) {
		t.Fatalf("--version: %v", err)
	}
}

func TestPrintIdentityNeedsNoOriginOrCredential(t *testing.T) {
	file := strings.NewReplacer(`core_origin = "https://core.example:8443/prefix"`, "",
		`credential_file = "/etc/sandgate/node.credential"`, "").Replace(minimal)
	c, err := Load([]string{"--config", writeFile(t, file), "--print-identity"}, io.Discard)
	if err != nil || !c.PrintIdentity {
		t.Fatalf("%+v, %v", c, err)
	}
}

func TestReadCredential(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got, err := ReadCredential(write("ok", "  s3cret-token_1\n", 0o600)); err != nil || got != "s3cret-token_1" {
		t.Fatalf("ok: %q, %v", got, err)
	}
	for name, tc := range map[string]struct {
		body string
		mode os.FileMode
	}{
		"group readable": {"zqsecret", 0o640},
		"world readable": {"zqsecret", 0o604},
		"empty":          {"\n\n", 0o600},
		"two words":      {"zqsecret zq", 0o600},
		"header break":   {"zqsecret\r\nX-Evil: 1", 0o600},
		"too large":      {strings.Repeat("a", maxCredential+1), 0o600},
	} {
		p := write(name, tc.body, tc.mode)
		_, err := ReadCredential(p)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "zqsecret") || strings.Contains(err.Error(), "Evil") {
			t.Errorf("%s: the error quotes the file: %v", name, err)
		}
	}
	if _, err := ReadCredential(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
	if _, err := ReadCredential(dir); err == nil {
		t.Error("directory accepted")
	}
}

// TestCredentialFileDefault: a configuration that names no credential file
// reads the one `nodeagent enrol` writes by default, so a
// generation-managing node's TOML can be just generation_management = true
// (nodeagent/README.md).
func TestCredentialFileDefault(t *testing.T) {
	c, err := Load([]string{"--config", writeFile(t, strings.Replace(minimal, `credential_file = "/etc/sandgate/node.credential"`, "", 1))}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.CredentialFile != DefaultCredentialFile {
		t.Fatalf("credential_file = %q, want the default %q", c.CredentialFile, DefaultCredentialFile)
	}
}

// TestEnrolmentCredentialFile: enrol takes the default credential file
// when the configuration leaves it out, and refuses an explicitly empty
// one, in the file or as the flag, as the agent does (TestRefusals).
func TestEnrolmentCredentialFile(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("enrolment-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--core", "https://core.example", "--token-file", token}
	e, err := LoadEnrolment(append(base, "--config", writeFile(t, "state_dir = \"/var/lib/n\"\n")), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if e.Config.CredentialFile != DefaultCredentialFile {
		t.Fatalf("credential_file = %q, want the default %q", e.Config.CredentialFile, DefaultCredentialFile)
	}
	for name, args := range map[string][]string{
		"file": {"--config", writeFile(t, "credential_file = \"\"\n")},
		"flag": {"--credential-file", ""},
	} {
		_, err := LoadEnrolment(append(base, args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "credential_file must not be empty") {
			t.Errorf("%s: error %v, want one naming credential_file", name, err)
		}
	}
}
