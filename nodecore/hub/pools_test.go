package hub

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/pool"
)

// nodeP is a generation-managing node of pool "gpu".
const (
	nodeP   = "0f000000-0000-4000-8000-00000000000f"
	secretP = "secret-of-node-P-8e2b5c1d9a7f3e4b"
)

var (
	spec3Digest = strings.Repeat("7c", 32)
	spec9Digest = strings.Repeat("9d", 32)
)

// withGPUNode adds node P (pool gpu, generation-managing) to the
// credential file.
func (e *env) withGPUNode() {
	e.t.Helper()
	rec := nodeRecord(nodeP, secretP, true, true) + "    pool: gpu\n"
	writeFile(e.t, e.credPath, defaultNodes()+rec)
	waittest.Until(e.t, timeout, "node P to be enrolled", func() bool { _, ok := e.hub.Node(nodeP); return ok })
	secrets[nodeP] = secretP
	e.t.Cleanup(func() { delete(secrets, nodeP) })
}

func servingOf(d *proto.Deployment) int64 {
	if d == nil || d.ServingGeneration == nil {
		return 0
	}
	return *d.ServingGeneration
}

// TestPoolDeployments: each generation-managing node is told its own
// pool's deployment in welcome and every heartbeat_ack; a deployment Set
// at run time reaches the node at its next heartbeat_ack without a
// reconnect; a node whose pool has no deployment is closed with 4006.
func TestPoolDeployments(t *testing.T) {
	reg, err := pool.Open("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Configure(map[string]pool.Spec{
		"default": {Bindings: []pool.Binding{{Generation: 1, SpecificationDigest: specDigest}, {Generation: 2, SpecificationDigest: spec2Digest}}, Target: 2, Serving: 1},
		"gpu":     {Bindings: []pool.Binding{{Generation: 3, SpecificationDigest: spec3Digest}}, Target: 3},
	}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Deployment = nil; c.Pools = reg })
	e.withGPUNode()
	g := e.join(nodeG)
	p := e.join(nodeP)
	if d := g.welcome.Deployment; d == nil || d.Generation != 2 || d.SpecificationDigest != spec2Digest || servingOf(d) != 1 {
		t.Fatalf("default pool welcome: %+v", d)
	}
	if d := p.welcome.Deployment; d == nil || d.Generation != 3 || d.SpecificationDigest != spec3Digest || servingOf(d) != 0 {
		t.Fatalf("gpu pool welcome: %+v", d)
	}
	// A node without generation management is told nothing.
	if a := e.join(nodeA); a.welcome.Deployment != nil {
		t.Fatalf("a node without generation management got %+v", a.welcome.Deployment)
	}

	serving := int64(3)
	if _, err := reg.Set("gpu", 9, &serving, &pool.Binding{Generation: 9, SpecificationDigest: spec9Digest, Source: "rel-9"}); err != nil {
		t.Fatal(err)
	}
	if d := p.beat(health(false, "")).Deployment; d == nil || d.Generation != 9 || d.SpecificationDigest != spec9Digest || servingOf(d) != 3 {
		t.Fatalf("gpu pool after Set: %+v", d)
	}
	if d := g.beat(health(false, "")).Deployment; d == nil || d.Generation != 2 {
		t.Fatalf("default pool changed by a gpu Set: %+v", d)
	}
	if p.welcome.ConnectionID != e.status(nodeP).ConnectionID {
		t.Fatal("the node reconnected")
	}

	// A pool the configuration no longer defines has no deployment: its
	// generation-managing nodes are closed at their next heartbeat, and a
	// new connection is refused after hello.
	if _, err := reg.Configure(map[string]pool.Spec{"default": {Bindings: []pool.Binding{{Generation: 2, SpecificationDigest: spec2Digest}}, Target: 2, Serving: 1}}); err != nil {
		t.Fatal(err)
	}
	p.send(p.heartbeat(health(false, "")))
	p.expectClose(CloseNoDeployment)
	waittest.Until(t, timeout, "P to disconnect", func() bool { return e.status(nodeP).State == StateDisconnected })
	p = e.connect(nodeP)
	p.send(p.hello())
	p.expectClose(CloseNoDeployment)
}
