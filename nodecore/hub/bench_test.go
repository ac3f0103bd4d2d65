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
	cpu := processCPU(b)
	for b.Loop() {
		if err := n.Heartbeat(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
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

// BenchmarkWakeupsPerHeartbeat counts the wake-ups of the whole process
// per heartbeat on an otherwise idle connection: a simulated node sends a
// heartbeat and waits for its ack, then the process idles for longer than
// the ack's write deadline (Timers.Write, 20 ms here). It reports the
// process's voluntary context switches per heartbeat (wakeups/op,
// getrusage's ru_nvcsw: a thread that slept and was woken, every thread
// of both ends and the benchmark's own sleep), a count the machine's load
// hardly changes. A write deadline left in place after its write is a
// runtime timer that fires during the idle time, a wake-up for nothing;
// disarmed after the write (deadlineConn.disarm), it does not fire. The
// simulated node disarms its own deadlines the same way. -benchtime 200x
// takes about 6 s.
func BenchmarkWakeupsPerHeartbeat(b *testing.B) {
	const write = 20 * time.Millisecond
	e := newEnv(b, func(c *Config) {
		c.Timers.Heartbeat = time.Nanosecond
		c.Timers.Write = write
		c.Logger = zap.NewNop()
	})
	n := dialSimA(b, e, time.Hour)
	b.ResetTimer()
	before := switches(b)
	for b.Loop() {
		if err := n.Heartbeat(b.Context()); err != nil {
			b.Fatal(err)
		}
		time.Sleep(write + 10*time.Millisecond) // idle past the ack's write deadline
	}
	b.ReportMetric(float64(switches(b)-before)/float64(b.N), "wakeups/op")
}

// switches is this process's voluntary context switches so far.
func switches(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Nvcsw
}
