package realpeers_test

import (
	"path/filepath"
	"testing"
)

// TestTwoComputeClusters runs the JS SDK's "peers" session once with a
// credential of each compute cluster, through the one corectl and the one
// gateway that serve both: each sandbox is made by its own cluster's
// controller, gets a Pod IP of its own cluster's kwok, and its traffic
// (corectl's readiness ping and the SDK's calls) goes through its own
// cluster's Ingress and never through the other's.
func TestTwoComputeClusters(t *testing.T) {
	requireTier(t)
	w.startExecd(t, "head")
	pkg := jsPackages[0]
	ids := map[*compute]string{}
	for _, run := range []struct {
		c   *compute
		key string
	}{{w.b, apiKeyB}, {w.a, apiKey}} {
		t.Run(run.c.id, func(t *testing.T) {
			seen := run.c.watchSandboxes(t)
			dir := "/home/user/two-" + run.c.id
			var r peersResult
			runScenario(t, w.gateway, "node", []string{"sdk.mjs", "peers"}, filepath.Join(w.root, "integration/js"), &r,
				"E2B_PACKAGE="+pkg, "SCENARIO_DIR="+dir, "E2B_API_KEY="+run.key)
			run.c.checkSession(t, r, dir, seen)
			ids[run.c] = r.SandboxID
		})
	}
	for c, id := range ids {
		other := w.a
		if c == w.a {
			other = w.b
		}
		if ping, data := other.ingressSaw(t, id, ""); ping || data {
			t.Errorf("%s's sandbox %s reached %s's Ingress (ping %v, data %v)", c.id, id, other.id, ping, data)
		}
	}
}
