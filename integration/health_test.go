package integration

import (
	"testing"

	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
)

// TestIsRunning: both SDKs' sbx.isRunning() (envd's GET /health, answered
// from execd's /ping through the fixed entry) tells the truth: true for a
// ready sandbox, false for one that is not ready and for one its cluster
// no longer knows (deleted), and it raises for a token the gateway refuses.
func TestIsRunning(t *testing.T) {
	const (
		sbxNotReady = "sbxnotready"
		sbxDeleted  = "sbxdeleted"
	)
	e := startEnv(t, func(c *harness.Config) {
		c.Grants[sbxNotReady] = harness.Grant{CredentialID: credOK}
		c.Grants[sbxDeleted] = harness.Grant{CredentialID: credOK}
	})
	e.Ingress.SetSandbox(sbxNotReady, fixedentry.Sandbox{Ready: false, Endpoint: "127.0.0.1", Namespace: "default"})
	pingsBefore := 0
	for _, r := range e.Ingress.Requests() {
		if r.Path == "/"+sbxOK+"/44772/ping" {
			pingsBefore++
		}
	}
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			for _, c := range []struct {
				id      string
				running bool
				errName string
			}{
				{sbxOK, true, ""},
				{sbxNotReady, false, ""},
				{sbxDeleted, false, ""},
				{sbxBadToken, false, "AuthenticationError"},
			} {
				var res struct{ Running attempt }
				e.runSDK(t, pkg, "isRunning", c.id, &res)
				if c.errName != "" {
					wantError(t, c.id+" isRunning()", res.Running, c.errName, "TOKEN_INVALID: ")
					continue
				}
				if !res.Running.OK || string(res.Running.Value) != boolJSON(c.running) {
					t.Errorf("%s isRunning() = %s (error %+v), want %v", c.id, res.Running.Value, res.Running.Error, c.running)
				}
			}
		})
	}
	pings := 0
	for _, r := range e.Ingress.Requests() {
		if r.Path == "/"+sbxOK+"/44772/ping" {
			pings++
		}
	}
	if pings-pingsBefore != len(sdkPackages) {
		t.Errorf("execd's /ping was reached %d times through the fixed entry, want once per SDK", pings-pingsBefore)
	}
}

func boolJSON(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
