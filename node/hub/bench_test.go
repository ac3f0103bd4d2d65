package hub

import (
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/sim"
)

// BenchmarkDispatch measures one provider operation through the hub and
// a real WebSocket on loopback to a simulated node that answers at once
// (both ends in this process). The node heartbeats every second, as a
// live node does, so it stays online however long the benchmark runs
// (the test timers' online window and idle timeout are 5 s).
func BenchmarkDispatch(b *testing.B) {
	e := newEnv(b)
	n, err := sim.Dial(b.Context(), sim.Config{URL: e.srv.URL, Credential: secretA, HeartbeatInterval: time.Second,
		Hello: proto.Hello{NodeID: nodeA, InstallationID: inst, Provider: proto.ProviderDocker,
			BackendFingerprint: fingerprint, DeploymentGeneration: 1, SpecificationDigest: specDigest, MaxActive: 8,
			Health: health(true, "")}})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	req := infoReq()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := e.hub.Dispatch(b.Context(), nodeA, req)
		if err != nil || res.Outcome != proto.OutcomeSuccess {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
