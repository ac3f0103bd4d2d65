package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Metric is E2B's SandboxMetric: one sample of a sandbox's usage.
type Metric struct {
	// Timestamp is the sample time (RFC 3339; E2B: deprecated).
	Timestamp string `json:"timestamp"`
	// TimestampUnix is the sample time in Unix seconds.
	TimestampUnix int64 `json:"timestampUnix"`
	// CPUCount is the sandbox's CPU limit in whole cores.
	CPUCount int32 `json:"cpuCount"`
	// CPUUsedPct is the CPU used, in percent of CPUCount.
	CPUUsedPct float64 `json:"cpuUsedPct"`
	// MemUsed is the memory working set in bytes.
	MemUsed int64 `json:"memUsed"`
	// MemTotal is the memory limit in bytes.
	MemTotal int64 `json:"memTotal"`
	// MemCache is always 0: the resource metrics API does not report the
	// page cache.
	MemCache int64 `json:"memCache"`
	// DiskUsed is always 0: the resource metrics API does not report
	// disk use.
	DiskUsed int64 `json:"diskUsed"`
	// DiskTotal is the ephemeral-storage limit in bytes (0 when none).
	DiskTotal int64 `json:"diskTotal"`
}

// PodMetricsGVK is the resource metrics API's PodMetrics (metrics-server).
var PodMetricsGVK = schema.GroupVersionKind{Group: "metrics.k8s.io", Version: "v1beta1", Kind: "PodMetrics"}

// Usage returns what the cluster can tell about sandbox ns/id's use: one
// sample per current pod from the resource metrics API (metrics.k8s.io
// PodMetrics, the sandbox container's usage against its limits). It is an
// empty list, never an error, when the cluster serves no resource metrics
// or has no sample yet (E2B's SDKs read an empty list as "no metrics").
// read is as for Status: the caller's own uncached read of the
// BatchSandbox in this call, or nil. Errors: ErrNotFound (absent,
// expired, or Gone: being deleted), ErrUnavailable.
func (o *Orchestrator) Usage(ctx context.Context, ns, id string, read *unstructured.Unstructured) ([]Metric, error) {
	u, err := o.readLive(ctx, ns, id, read)
	if err != nil {
		return nil, err
	}
	if goneObject(u) {
		return nil, fmt.Errorf("%w: %s/%s is being deleted", ErrNotFound, ns, id)
	}
	out := []Metric{}
	sb := &sandbox.Sandbox{ID: id, Namespace: ns, UID: u.GetUID()}
	pods, err := sb.Pods(ctx, o.Client)
	if err != nil {
		return out, nil
	}
	sz := o.SizesOf(u)
	for i := range pods {
		if m, ok := o.podUsage(ctx, &pods[i], sz, u); ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// podUsage reads one pod's PodMetrics; false when there is none (no
// metrics API, no sample, or a sample it cannot read).
func (o *Orchestrator) podUsage(ctx context.Context, p *corev1.Pod, sz cluster.Sizes, u *unstructured.Unstructured) (Metric, bool) {
	pm := &unstructured.Unstructured{}
	pm.SetGroupVersionKind(PodMetricsGVK)
	if err := o.Client.Get(ctx, client.ObjectKeyFromObject(p), pm); err != nil {
		// No metrics API (a NoKindMatch error), no sample yet (404), or
		// any other failure: metrics are best effort and never fail the
		// route.
		return Metric{}, false
	}
	ts, _, _ := unstructured.NestedString(pm.Object, "timestamp")
	at, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return Metric{}, false
	}
	containers, _, _ := unstructured.NestedSlice(pm.Object, "containers")
	name := o.sandboxContainer(u, p)
	for _, c := range containers {
		cm, ok := c.(map[string]any)
		if !ok || cm["name"] != name {
			continue
		}
		cpuS, _, _ := unstructured.NestedString(cm, "usage", "cpu")
		memS, _, _ := unstructured.NestedString(cm, "usage", "memory")
		cpu, err1 := resource.ParseQuantity(cpuS)
		mem, err2 := resource.ParseQuantity(memS)
		if err1 != nil || err2 != nil {
			return Metric{}, false
		}
		m := Metric{Timestamp: at.UTC().Format(time.RFC3339), TimestampUnix: at.Unix(), CPUCount: sz.CPUCount,
			MemUsed: mem.Value(), MemTotal: int64(sz.MemoryMB) << 20, DiskTotal: int64(sz.DiskSizeMB) << 20}
		if sz.CPUCount > 0 {
			m.CPUUsedPct = float64(cpu.MilliValue()) / float64(sz.CPUCount) / 10
		}
		return m, true
	}
	return Metric{}, false
}
