package sim_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// core is one gateway replica's hub behind an HTTP server on 127.0.0.1.
func core(t *testing.T, creds credential.Store, epoch int64) (*hub.Hub, string) {
	t.Helper()
	h := hub.New()
	if err := h.Configure(hub.Config{Credentials: creds, OwnerEpoch: epoch}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { _ = h.Close(); srv.Close() })
	return h, srv.URL
}

// TestAgentReconnectsAndKeepsTheHighestEpoch: the agent connects to the
// first replica; when that one closes, it tries the next, refuses its
// lower owner epoch as nodeagent does, and settles on the third; requests
// are recorded.
func TestAgentReconnectsAndKeepsTheHighestEpoch(t *testing.T) {
	id := sim.NewIdentity()
	path := filepath.Join(t.TempDir(), "nodes.yaml")
	if err := os.WriteFile(path, []byte(sim.CredentialsFile([]sim.Identity{id})), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := credential.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer creds.Close()
	h1, u1 := core(t, creds, 5)
	_, u2 := core(t, creds, 3)
	h3, u3 := core(t, creds, 9)

	a := sim.StartAgent(sim.AgentConfig{Node: sim.Config{Credential: id.Credential, Hello: id.Hello(), HeartbeatInterval: -1},
		URLs: []string{u1, u2, u3}, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond})
	defer a.Stop()
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !cond() {
			select {
			case <-a.Changed():
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	wait("the first welcome", func() bool { return len(a.Welcomes()) == 1 })
	_ = h1.Close()
	wait("the second welcome", func() bool { return len(a.Welcomes()) == 2 })
	w := a.Welcomes()
	if w[0].OwnerEpoch != 5 || w[1].OwnerEpoch != 9 {
		t.Fatalf("welcomes %+v", w)
	}
	if _, lower := a.Refused(); lower != 1 {
		t.Fatalf("%d welcomes refused for a lower epoch, want 1", lower)
	}
	res, err := h3.Dispatch(t.Context(), id.NodeID, proto.Request{DeploymentGeneration: 1, Operation: proto.OpInfo, TimeoutMS: 1000,
		Reference: proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: "a1"}})
	if err != nil || res.Outcome != proto.OutcomeSuccess {
		t.Fatalf("dispatch: %+v %v", res, err)
	}
	if r := a.Received(); len(r) != 1 || r[0].Request.ID != res.Request.ID {
		t.Fatalf("received %+v", r)
	}
}
