package sandgate

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sandgate/sandgate/"

// deps returns the import paths `go list -deps` prints for the packages
// (what their non-test builds link).
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %v: %v\n%s", pkgs, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %v: %v", pkgs, err)
	}
	return strings.Fields(string(out))
}

// under reports the paths among list that are the module's wing or lie
// below it.
func under(list []string, wing string) []string {
	var hit []string
	for _, p := range list {
		if p == module+wing || strings.HasPrefix(p, module+wing+"/") {
			hit = append(hit, p)
		}
	}
	return hit
}

// TestNodeagentLinksNoCore: the node binary speaks only the protocol wing
// (node/); Core's management of nodes (nodecore/) stays out of it
// (docs/architecture.md "Wings").
func TestNodeagentLinksNoCore(t *testing.T) {
	list := deps(t, "./nodeagent/cmd/nodeagent")
	if len(under(list, "node")) == 0 {
		t.Fatal("nodeagent links nothing of node/: the dependency listing is not what this test expects")
	}
	if hit := under(list, "nodecore"); len(hit) > 0 {
		t.Errorf("nodeagent links Core's node wing: %v", hit)
	}
}

// TestDataPlaneLinksNoNodeWing: the gateway's data plane (the plain
// package and its Caddy handler) links neither node wing.
func TestDataPlaneLinksNoNodeWing(t *testing.T) {
	list := deps(t, "./gateway/dataplane", "./caddymodules/e2bdataplane")
	if len(under(list, "gateway/dataplane")) == 0 {
		t.Fatal("the listing does not name gateway/dataplane: the dependency listing is not what this test expects")
	}
	for _, wing := range []string{"node", "nodecore"} {
		if hit := under(list, wing); len(hit) > 0 {
			t.Errorf("the data plane links %s/: %v", wing, hit)
		}
	}
}
