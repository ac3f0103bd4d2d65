package proto

import (
	"syscall"
	"testing"
	"time"
)

func BenchmarkDecodeHeartbeat(b *testing.B) {
	data := mustEncode(b, exHeartbeat())
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	cpu := processCPU(b)
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

func BenchmarkDecodeRequest(b *testing.B) {
	data := mustEncode(b, exRequest(OpCommandCompute))
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	cpu := processCPU(b)
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

func BenchmarkEncodeHeartbeat(b *testing.B) {
	f := exHeartbeat()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeHeartbeatAck(b *testing.B) {
	f := &HeartbeatAck{ConnectionID: exConnection, OwnerEpoch: 7}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	cpu := processCPU(b)
	for b.Loop() {
		var err error
		if buf, err = AppendEncode(buf[:0], f); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
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
