package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// Observe samples the resource use of the sandbox's current compute
// container with one non-streaming Docker stats read (Docker takes two
// samples about a second apart, so the CPU share is over that second). A
// container that is not running answers runtime_not_running; a stats read
// that fails or holds no sample answers observation_unavailable.
func (p *Provider) Observe(ctx context.Context, c provider.Call, _ proto.Observation) (proto.Sample, error) {
	cs, err := p.computes(ctx, c)
	if err != nil {
		return proto.Sample{}, err
	}
	cur := cs[len(cs)-1]
	if !cur.running {
		return proto.Sample{}, provider.Fail(proto.ErrRuntimeNotRunning, nil)
	}
	rd, err := p.cli.ContainerStats(ctx, cur.id, false)
	if err != nil {
		return proto.Sample{}, provider.Fail(proto.ErrObservationUnavailable, err)
	}
	defer rd.Body.Close()
	st, err := decodeStats(rd.Body)
	if err != nil {
		return proto.Sample{}, provider.Fail(proto.ErrObservationUnavailable, err)
	}
	if st.Read.IsZero() || st.Read.Year() < 2000 {
		// Docker answers a container that stopped meanwhile with an empty
		// sample.
		return proto.Sample{}, provider.Fail(proto.ErrRuntimeNotRunning, errors.New("docker: empty stats sample"))
	}
	return sampleOf(&st), nil
}

// sampleOf converts a Docker stats sample: CPU use as a percentage of one
// CPU (so up to 100 × CPUs), memory in use without the page cache, the
// memory limit, and the number of processes.
func sampleOf(st *container.StatsResponse) proto.Sample {
	s := proto.Sample{ObservedAt: st.Read.UTC(), PIDs: st.PidsStats.Current, MemoryLimitBytes: st.MemoryStats.Limit}
	cpuDelta := float64(st.CPUStats.CPUUsage.TotalUsage) - float64(st.PreCPUStats.CPUUsage.TotalUsage)
	sysDelta := float64(st.CPUStats.SystemUsage) - float64(st.PreCPUStats.SystemUsage)
	cpus := float64(st.CPUStats.OnlineCPUs)
	if cpus == 0 {
		cpus = float64(len(st.CPUStats.CPUUsage.PercpuUsage))
	}
	if cpuDelta > 0 && sysDelta > 0 && cpus > 0 {
		s.CPUPercent = cpuDelta / sysDelta * cpus * 100
	}
	// The page cache is reclaimable: cgroup v1 reports it as total_inactive_file
	// (or cache), v2 as inactive_file.
	used := st.MemoryStats.Usage
	for _, k := range []string{"total_inactive_file", "inactive_file", "cache"} {
		if v, ok := st.MemoryStats.Stats[k]; ok {
			if v < used {
				used -= v
			}
			break
		}
	}
	s.MemoryUsedBytes = used
	return s
}

// maxStatsAnswer bounds a one-shot Docker stats answer (bytes). Docker
// writes it, a few KiB per sample (one entry per network interface and
// block device of the container); 1 MiB leaves room for hundreds of them.
const maxStatsAnswer = 1 << 20

// decodeStats reads one Docker stats answer of at most maxStatsAnswer
// bytes, read before it is decoded. A longer answer, or one that is not a
// stats object, is an error.
func decodeStats(r io.Reader) (container.StatsResponse, error) {
	var st container.StatsResponse
	body, err := io.ReadAll(io.LimitReader(r, maxStatsAnswer+1))
	if err != nil {
		return st, err
	}
	if len(body) > maxStatsAnswer {
		return st, fmt.Errorf("docker: stats answer over %d bytes", maxStatsAnswer)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, err
	}
	return st, nil
}
