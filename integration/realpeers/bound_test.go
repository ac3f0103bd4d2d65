package realpeers_test

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/harness"
)

// boundResult is what scenario.py's "bound" scenario prints.
type boundResult struct {
	Held    int        `json:"held"`
	Over    sdkAttempt `json:"over"`
	Running sdkAttempt `json:"running"`
	After   sdkAttempt `json:"after"`
	Kill    sdkAttempt `json:"kill"`
}

// TestRequestBoundWithThePythonSDK: the E2B Python SDK 2.24.0 against a
// gateway with max_requests_per_credential 2, the real execd behind the
// real Ingress: its two background commands hold their streams, so a
// third command is refused with GATEWAY_BUSY, which the SDK raises as a
// TimeoutException naming the bound, and is_running() raises a
// SandboxException; once
// the handles disconnect, commands run again (integration's
// TestRequestsPerCredentialBounded is the JS SDKs' twin).
func TestRequestBoundWithThePythonSDK(t *testing.T) {
	requireTier(t)
	python := pythonInterpreter(t)
	w.startExecd(t, "head")
	caddyfile := strings.Replace(w.caddyfile, "\t\ttoken_target\n", "\t\ttoken_target\n\t\tmax_requests_per_credential 2\n", 1)
	g, err := harness.Start(harness.Config{RepoRoot: w.root, Caddyfile: caddyfile, CredentialsFile: w.gateway.CredFile,
		KeyFile: w.gateway.KeyFile, KeyID: "primary"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	var r boundResult
	runPythonScenario(t, g, python, "bound", &r, "SCENARIO_DIR=/home/user/bound", "HELD=2")
	if r.Held != 2 {
		t.Fatalf("held %d commands, want 2", r.Held)
	}
	if r.Over.OK || r.Over.Error == nil || r.Over.Error.Name != "TimeoutException" || !strings.Contains(r.Over.Error.Message, "max_requests_per_credential") {
		t.Errorf("the third command: %+v, want a TimeoutException naming max_requests_per_credential", r.Over.Error)
	}
	if r.Running.OK || r.Running.Error == nil || r.Running.Error.Name != "SandboxException" {
		t.Errorf("is_running() at the bound: %s %+v, want a SandboxException", r.Running.Value, r.Running.Error)
	}
	if !r.After.OK || string(r.After.Value) != `"after\n"` {
		t.Errorf("a command after the handles disconnected: %+v", r.After)
	}
	if !r.Kill.OK {
		t.Errorf("kill: %+v", r.Kill.Error)
	}
}
