package cluster

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// SandboxTemplate is the pod a sandbox of one E2B template ID runs: the
// BatchSandbox's spec.template.spec, from configuration (the templateID of
// a create request names it; an unknown ID is refused).
//
//	sandboxTemplates:
//	  - id: base                      # the E2B templateID
//	    container: sandbox            # the container execd runs in (default: the first)
//	    pod:                          # a Kubernetes PodSpec
//	      containers:
//	        - name: sandbox
//	          image: registry.example/sandbox-base:1.4
//	          resources:
//	            limits: {cpu: "2", memory: 2Gi, ephemeral-storage: 10Gi}
//
// The sandbox container must state CPU and memory limits: they are what
// GET /sandboxes/{id} reports as cpuCount (whole cores, rounded up) and
// memoryMB (MiB, at least 128, E2B's minimum); ephemeral-storage, when
// given, is diskSizeMB (else 0). A create's envVars are appended to that
// container's env.
type SandboxTemplate struct {
	// ID is the E2B template ID (a DNS-1123 subdomain); unique.
	ID string `json:"id"`
	// Container names the sandbox container of Pod (default: the first
	// container).
	Container string `json:"container,omitempty"`
	// Pod is the pod specification; corectl adds nothing to it but the
	// create's envVars and, with the cluster's ExecdTokenSecretFile, the
	// sandbox's EXECD_ACCESS_TOKEN (Cluster.SetExecdToken).
	Pod corev1.PodSpec `json:"pod"`
}

// Sizes are a sandbox's resources as E2B reports them (SandboxDetail's
// cpuCount, memoryMB, diskSizeMB).
type Sizes struct {
	// CPUCount is the CPU limit in whole cores, rounded up.
	CPUCount int32
	// MemoryMB is the memory limit in MiB.
	MemoryMB int32
	// DiskSizeMB is the ephemeral-storage limit in MiB (0 when none).
	DiskSizeMB int32
}

// MinMemoryMB is E2B's MemoryMB minimum.
const MinMemoryMB = 128

// ErrNoSandboxContainer: a pod has no container of the configured name.
var ErrNoSandboxContainer = errors.New("cluster: no sandbox container")

// SandboxContainer returns the index of the sandbox container named name
// ("" = the first) in spec. The error wraps ErrNoSandboxContainer.
func SandboxContainer(spec *corev1.PodSpec, name string) (int, error) {
	if len(spec.Containers) == 0 {
		return -1, fmt.Errorf("%w: the pod has no containers", ErrNoSandboxContainer)
	}
	if name == "" {
		return 0, nil
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: no container named %q", ErrNoSandboxContainer, name)
}

// SizesOf reads the Sizes of a container's limits. The error names a
// missing or out-of-range limit.
func SizesOf(c *corev1.Container) (Sizes, error) {
	cpu, ok := c.Resources.Limits[corev1.ResourceCPU]
	if !ok || cpu.Sign() <= 0 {
		return Sizes{}, errors.New("the sandbox container needs a cpu limit")
	}
	mem, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return Sizes{}, errors.New("the sandbox container needs a memory limit")
	}
	const mib = 1 << 20
	s := Sizes{}
	cores := (cpu.MilliValue() + 999) / 1000
	memMB := mem.Value() / mib
	if cores > 1<<20 || memMB > 1<<30 {
		return Sizes{}, errors.New("the sandbox container's limits are out of range")
	}
	s.CPUCount, s.MemoryMB = int32(cores), int32(memMB)
	if s.MemoryMB < MinMemoryMB {
		return Sizes{}, fmt.Errorf("the sandbox container's memory limit must be at least %dMi (E2B's memoryMB minimum)", MinMemoryMB)
	}
	if disk, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
		d := disk.Value() / mib
		if d < 0 || d > 1<<30 {
			return Sizes{}, errors.New("the sandbox container's ephemeral-storage limit is out of range")
		}
		s.DiskSizeMB = int32(d)
	}
	return s, nil
}

// validate checks one template: the ID, a sandbox container with an image
// and the limits SizesOf needs, and container names that are DNS labels.
func (t *SandboxTemplate) validate() error {
	if errs := validation.IsDNS1123Subdomain(t.ID); len(errs) > 0 {
		return fmt.Errorf("id: %s", strings.Join(errs, "; "))
	}
	for i, c := range t.Pod.Containers {
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			return fmt.Errorf("pod.containers[%d].name: %s", i, strings.Join(errs, "; "))
		}
	}
	i, err := SandboxContainer(&t.Pod, t.Container)
	if err != nil {
		return err
	}
	c := &t.Pod.Containers[i]
	if c.Image == "" {
		return fmt.Errorf("the sandbox container %q needs an image", c.Name)
	}
	if _, err := SizesOf(c); err != nil {
		return err
	}
	return nil
}

// SandboxTemplate returns the template with the given ID; false when none
// is configured.
func (cfg *Config) SandboxTemplate(id string) (*SandboxTemplate, bool) {
	for i := range cfg.SandboxTemplates {
		if cfg.SandboxTemplates[i].ID == id {
			return &cfg.SandboxTemplates[i], true
		}
	}
	return nil, false
}
