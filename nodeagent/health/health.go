// Package health builds the node's health reports (spec node-protocol.md
// "Connection"): provider readiness from a fresh probe on every report (a
// node without generation management), one fixed diagnostic code when not
// ready, the true number of active operations, and host measurements (CPU,
// memory, disk) read with gopsutil.
package health

import (
	"context"
	"runtime"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/mem"

	"github.com/sandgate/sandgate/node/proto"
)

// Reporter builds health reports. All fields are required except Now.
type Reporter struct {
	// Probe checks the provider; nil means ready.
	Probe func(ctx context.Context) error
	// Diagnose maps a Probe error to a fixed diagnostic code of node/proto's
	// table. Whatever it returns is passed through
	// proto.NormalizeDiagnostic, so an unknown code is reported as
	// provider_unavailable.
	Diagnose func(error) string
	// ProbeTimeout bounds each probe.
	ProbeTimeout time.Duration
	// Active returns the number of provider operations queued or running
	// on the node (0..32).
	Active func() int
	// DiskPath is a path on the filesystem that holds the provider's data
	// (for Docker, its data root); disk measurements are of that
	// filesystem, and a filesystem with no free bytes makes the provider
	// not ready with proto.DiagStorageFull.
	DiskPath string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Report probes the provider and measures the host. It never fails: a
// probe error becomes ProviderReady false with a diagnostic code, and a
// measurement that cannot be read is reported as zero (CPU count falls back
// to the Go runtime's count). The probe's error text and any host path stay
// on the node.
func (r *Reporter) Report(ctx context.Context) proto.Health {
	pctx, cancel := context.WithTimeout(ctx, r.ProbeTimeout)
	err := r.Probe(pctx)
	cancel()

	host, diskFull := r.host(ctx)
	h := proto.Health{ProviderReady: err == nil, Host: host}
	if err != nil {
		h.Diagnostic = proto.NormalizeDiagnostic(r.Diagnose(err))
	} else if diskFull {
		h.ProviderReady, h.Diagnostic = false, proto.DiagStorageFull
	}
	h.ActiveOperations = r.Active()
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	h.ObservedAt = now().UTC()
	return h
}

// host reads the host measurements and reports whether the provider's
// data filesystem has no free bytes left.
func (r *Reporter) host(ctx context.Context) (m proto.HostMeasurements, diskFull bool) {
	if n, err := cpu.CountsWithContext(ctx, true); err == nil && n >= 1 {
		m.CPUCount = n
	} else {
		m.CPUCount = runtime.NumCPU()
	}
	// Interval 0: the CPU use since the previous report.
	if p, err := cpu.PercentWithContext(ctx, 0, false); err == nil && len(p) == 1 {
		m.CPUPercent = min(max(p[0], 0), 100)
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err == nil {
		m.MemoryTotalBytes, m.MemoryUsedBytes = vm.Total, min(vm.Used, vm.Total)
	}
	if du, err := disk.UsageWithContext(ctx, r.DiskPath); err == nil {
		m.DiskTotalBytes, m.DiskUsedBytes = du.Total, min(du.Used, du.Total)
		diskFull = du.Total > 0 && du.Free == 0
	}
	return m, diskFull
}
