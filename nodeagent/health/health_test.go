package health

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/proto"
)

func TestReport(t *testing.T) {
	var probeErr error
	r := &Reporter{
		Probe: func(ctx context.Context) error {
			if probeErr == context.DeadlineExceeded {
				<-ctx.Done() // the probe hangs: the report's bound ends it
				return ctx.Err()
			}
			return probeErr
		},
		Diagnose: func(err error) string {
			if errors.Is(err, context.DeadlineExceeded) {
				return proto.DiagDockerTimeout
			}
			return "not_a_known_code"
		},
		ProbeTimeout: 50 * time.Millisecond,
		Active:       func() int { return 7 },
		DiskPath:     t.TempDir(),
	}
	h := r.Report(context.Background())
	if !h.ProviderReady || h.Diagnostic != "" || h.ActiveOperations != 7 || h.ObservedAt.IsZero() || h.ObservedAt.Location() != time.UTC {
		t.Fatalf("ready report = %+v", h)
	}
	m := h.Host
	if m.CPUCount < 1 || m.CPUPercent < 0 || m.CPUPercent > 100 || m.MemoryTotalBytes == 0 || m.MemoryUsedBytes > m.MemoryTotalBytes ||
		m.DiskTotalBytes == 0 || m.DiskUsedBytes > m.DiskTotalBytes {
		t.Fatalf("host = %+v", m)
	}
	hb := &proto.Heartbeat{ConnectionID: "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60", OwnerEpoch: 1, Health: h}
	if _, err := proto.Encode(hb); err != nil {
		t.Fatalf("the report does not encode: %v", err)
	}

	probeErr = errors.New("boom: /var/run/docker.sock")
	if h := r.Report(context.Background()); h.ProviderReady || h.Diagnostic != proto.DiagProviderUnavailable {
		t.Fatalf("an unknown code must be reported as provider_unavailable: %+v", h)
	}
	probeErr = context.DeadlineExceeded
	if h := r.Report(context.Background()); h.ProviderReady || h.Diagnostic != proto.DiagDockerTimeout {
		t.Fatalf("hung probe: %+v", h)
	}

	r.DiskPath = "/nonexistent/path"
	probeErr = nil
	if h := r.Report(context.Background()); !h.ProviderReady || h.Host.DiskTotalBytes != 0 {
		t.Fatalf("unreadable disk path: %+v", h)
	}
}
