package nodeagent_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmptyCredentialFileIsRefused: an explicitly empty credential_file
// in the configuration is a bad configuration (exit status 2, the message
// naming credential_file) for the agent and for `nodeagent enrol` alike;
// enrol does not fall back to the default path, and writes nothing.
func TestEmptyCredentialFileIsRefused(t *testing.T) {
	agent := sharedAgent(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	runAgent := func(args ...string) (int, string) {
		t.Helper()
		out, err := exec.Command(agent, args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}

	conf := write(t, filepath.Join(dir, "agent.toml"), `core_origin = "http://127.0.0.1:1"
node_id = "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60"
credential_file = ""
state_dir = "`+state+`"
docker_endpoint = "unix:///nonexistent/docker.sock"
deployment_generation = 2
specification_digest = "`+strings.Repeat("c", 64)+`"
`)
	code, out := runAgent("--config", conf)
	if code != 2 || !strings.Contains(out, "credential_file") {
		t.Errorf("the agent with credential_file = \"\": exit status %d, want 2 naming credential_file; output:\n%s", code, out)
	}

	enrolConf := write(t, filepath.Join(dir, "enrol.toml"), `credential_file = ""
state_dir = "`+state+`"
docker_endpoint = "unix:///nonexistent/docker.sock"
`)
	token := write(t, filepath.Join(dir, "token"), "enrolment-token\n")
	code, out = runAgent("enrol", "--core", "http://127.0.0.1:1", "--token-file", token, "--config", enrolConf)
	if code != 2 || !strings.Contains(out, "credential_file") {
		t.Errorf("enrol with credential_file = \"\": exit status %d, want 2 naming credential_file; output:\n%s", code, out)
	}
	if strings.Contains(out, "enrolment-token") {
		t.Errorf("enrol printed its token:\n%s", out)
	}
	if _, err := os.Lstat(state); !os.IsNotExist(err) {
		t.Errorf("the state directory exists after the refused runs (%v)", err)
	}

	// The flag given empty is refused the same way.
	code, out = runAgent("enrol", "--core", "http://127.0.0.1:1", "--token-file", token, "--state-dir", state, "--credential-file", "")
	if code != 2 || !strings.Contains(out, "credential_file") {
		t.Errorf("enrol --credential-file \"\": exit status %d, want 2 naming credential_file; output:\n%s", code, out)
	}
}
