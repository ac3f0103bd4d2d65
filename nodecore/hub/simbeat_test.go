package hub

import (
	"testing"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/sim"
)

// TestSimSendHeartbeatIsAcknowledged: a simulated node without automatic
// heartbeats (the load tool schedules them itself) gets one
// heartbeat_ack from the hub per sim.Node.SendHeartbeat, which returns
// without waiting for it.
func TestSimSendHeartbeatIsAcknowledged(t *testing.T) {
	e := newEnv(t)
	n, err := sim.Dial(t.Context(), sim.Config{URL: e.srv.URL, Credential: secretA, HeartbeatInterval: -1,
		Hello: proto.Hello{NodeID: nodeA, InstallationID: inst, Provider: proto.ProviderDocker,
			BackendFingerprint: fingerprint, DeploymentGeneration: 1, SpecificationDigest: specDigest, MaxActive: 8,
			Health: health(true, "")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	for want := uint64(1); want <= 3; want++ {
		if err := n.SendHeartbeat(); err != nil {
			t.Fatalf("heartbeat %d: %v", want, err)
		}
		waittest.Until(t, timeout, "the heartbeat_ack", func() bool { return n.Acks() == want })
	}
	if ack := n.LastAck(); ack == nil || ack.ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("last ack %+v does not answer the connection %s", ack, n.Welcome().ConnectionID)
	}
}
