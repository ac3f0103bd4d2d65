package hub

import (
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/sim"
)

// BenchmarkDispatch measures one provider operation through the hub and
// a real WebSocket on loopback to a simulated node that answers at once
// (both ends in this process). The node heartbeats every second, as a
// live node does, so it stays online however long the benchmark runs
// (the test timers' online window and idle timeout are 5 s). The logger
// is a no-op, as a gateway logging at INFO is for the per-operation debug
// line, so the figure is the hub's work per operation, not the test
// logger's.
func BenchmarkDispatch(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Logger = zap.NewNop() })
	dialSimA(b, e, time.Second)
	req := infoReq()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU(b)
	for b.Loop() {
		res, err := e.hub.Dispatch(b.Context(), nodeA, req)
		if err != nil || res.Outcome != proto.OutcomeSuccess {
			b.Fatalf("%+v %v", res, err)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkHeartbeat measures one heartbeat through the hub: a simulated
// node sends it over a real WebSocket on loopback and waits for the
// heartbeat_ack (both ends in this process, so the allocations are the
// node's and the hub's together). The heartbeat budget is opened wide
// (a 1 ns interval) and the logger is a no-op, so the figure is the
// hub's work per heartbeat: re-authentication, presence, the ack.
func BenchmarkHeartbeat(b *testing.B) {
	e := newEnv(b, func(c *Config) {
		c.Timers.Heartbeat = time.Nanosecond
		c.Logger = zap.NewNop()
	})
	n := dialSimA(b, e, time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := n.Heartbeat(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// dialSimA connects node A of e as a simulated node heartbeating every
// interval, closed when the benchmark ends.
func dialSimA(b *testing.B, e *env, interval time.Duration) *sim.Node {
	b.Helper()
	n, err := sim.Dial(b.Context(), sim.Config{URL: e.srv.URL, Credential: secretA, HeartbeatInterval: interval,
		Hello: proto.Hello{NodeID: nodeA, InstallationID: inst, Provider: proto.ProviderDocker,
			BackendFingerprint: fingerprint, DeploymentGeneration: 1, SpecificationDigest: specDigest, MaxActive: 8,
			Health: health(true, "")}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Close() })
	return n
}

// processCPU is this process's user and system CPU time so far; a
// benchmark reports its growth per operation as cpu-ns/op, which counts
// every goroutine's work for the operation (the simulated node's too) and
// is less disturbed by other processes on a loaded machine than ns/op.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time since start per operation, cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
}
