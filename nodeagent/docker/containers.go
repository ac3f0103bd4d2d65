package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// Container labels. Every sandbox container carries all of them; a
// container with our name and any other value is not ours (ownership).
const (
	LabelNodeID               = "io.sandgate.node_id"
	LabelTenantID             = "io.sandgate.tenant_id"
	LabelEnvironmentID        = "io.sandgate.environment_id"
	LabelAllocationID         = "io.sandgate.allocation_id"
	LabelDeploymentGeneration = "io.sandgate.deployment_generation"
	LabelComputeGeneration    = "io.sandgate.compute_generation"
	// LabelSandboxCreatedAt is when the sandbox (its first compute) was
	// created, RFC 3339 with nanoseconds, UTC; later computes copy it.
	LabelSandboxCreatedAt = "io.sandgate.sandbox_created_at"
)

// namePrefix is "sandgate-" and 32 hex digits of the SHA-256 of the exact
// reference, followed by "-": every compute container of the reference is
// named namePrefix + its compute generation. The digest keeps names short
// and free of characters Docker refuses; the labels carry the reference
// itself.
func namePrefix(ref proto.Reference) string {
	sum := sha256.Sum256([]byte(ref.TenantID + "\n" + ref.EnvironmentID + "\n" + ref.AllocationID + "\n"))
	return "sandgate-" + hex.EncodeToString(sum[:16]) + "-"
}

func containerName(ref proto.Reference, compute int64) string {
	return namePrefix(ref) + strconv.FormatInt(compute, 10)
}

// renewalRecord is the state record of the reference's last renew.
func renewalRecord(ref proto.Reference) string {
	return "renewals/" + strings.TrimSuffix(namePrefix(ref), "-")
}

// labels returns the labels of compute generation compute of c's sandbox.
func (p *Provider) labels(c provider.Call, compute int64, created time.Time) map[string]string {
	return map[string]string{
		LabelNodeID:               p.cfg.NodeID,
		LabelTenantID:             c.Reference.TenantID,
		LabelEnvironmentID:        c.Reference.EnvironmentID,
		LabelAllocationID:         c.Reference.AllocationID,
		LabelDeploymentGeneration: strconv.FormatInt(c.DeploymentGeneration, 10),
		LabelComputeGeneration:    strconv.FormatInt(compute, 10),
		LabelSandboxCreatedAt:     created.UTC().Format(time.RFC3339Nano),
	}
}

// errOwnership is the cause of an ownership failure (for the node's log).
var errOwnership = errors.New("docker: a container with the sandbox's name is not labelled with the exact reference, deployment generation and node")

// owned checks the labels of the container named containerName(c.Reference,
// compute) and returns its sandbox creation time.
func (p *Provider) owned(c provider.Call, compute int64, labels map[string]string) (time.Time, error) {
	want := p.labels(c, compute, time.Time{})
	for k, v := range want {
		if k == LabelSandboxCreatedAt {
			continue
		}
		if labels[k] != v {
			return time.Time{}, provider.Fail(proto.ErrOwnership, errOwnership)
		}
	}
	created, err := time.Parse(time.RFC3339Nano, labels[LabelSandboxCreatedAt])
	if err != nil {
		return time.Time{}, provider.Fail(proto.ErrOwnership, errOwnership)
	}
	return created, nil
}

// compute is one compute container of a sandbox.
type compute struct {
	generation int64
	id         string
	running    bool
	created    time.Time // the sandbox's creation time
}

// dockerErr classifies an error of a Docker call that changes nothing when
// it fails: NotFound becomes not_found; anything else keeps the outcome
// unknown.
func dockerErr(err error) error {
	if cerrdefs.IsNotFound(err) {
		return provider.Fail(proto.ErrNotFound, err)
	}
	return err
}

// computes lists the compute containers of c's sandbox, lowest generation
// first, checking that each is exactly ours. No container → not_found; a
// container with our name and other labels → ownership.
func (p *Provider) computes(ctx context.Context, c provider.Call) ([]compute, error) {
	prefix := namePrefix(c.Reference)
	list, err := p.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("name", "^/"+prefix)),
	})
	if err != nil {
		return nil, err
	}
	var out []compute
	for _, s := range list {
		gen, ok := computeOf(s.Names, prefix)
		if !ok {
			continue // a longer name that only starts like ours
		}
		created, err := p.owned(c, gen, s.Labels)
		if err != nil {
			return nil, err
		}
		out = append(out, compute{generation: gen, id: s.ID, running: s.State == container.StateRunning, created: created})
	}
	if len(out) == 0 {
		return nil, provider.Fail(proto.ErrNotFound, nil)
	}
	slices.SortFunc(out, func(a, b compute) int { return int(min(max(a.generation-b.generation, -1), 1)) })
	return out, nil
}

// computeOf returns the compute generation of a container whose name is
// prefix followed by a positive decimal generation.
func computeOf(names []string, prefix string) (int64, bool) {
	for _, n := range names {
		rest, ok := strings.CutPrefix(strings.TrimPrefix(n, "/"), prefix)
		if !ok {
			continue
		}
		gen, err := strconv.ParseInt(rest, 10, 64)
		if err == nil && gen > 0 && strconv.FormatInt(gen, 10) == rest {
			return gen, true
		}
	}
	return 0, false
}

// computeContainer inspects compute generation gen of c's sandbox and
// checks that it is ours.
func (p *Provider) computeContainer(ctx context.Context, c provider.Call, gen int64) (container.InspectResponse, time.Time, error) {
	ins, err := p.cli.ContainerInspect(ctx, containerName(c.Reference, gen))
	if err != nil {
		return container.InspectResponse{}, time.Time{}, dockerErr(err)
	}
	if ins.ContainerJSONBase == nil || ins.Config == nil || ins.State == nil {
		return container.InspectResponse{}, time.Time{}, errors.New("docker: incomplete inspect response")
	}
	created, err := p.owned(c, gen, ins.Config.Labels)
	if err != nil {
		return container.InspectResponse{}, time.Time{}, err
	}
	return ins, created, nil
}

// instanceState maps a Docker container state onto the protocol's: running
// (including paused and restarting, which hold their processes) or
// stopped.
func instanceState(s *container.State) proto.InstanceState {
	if s != nil && (s.Running || s.Paused || s.Restarting) {
		return proto.StateRunning
	}
	return proto.StateStopped
}

// info builds the info result of c's sandbox from its current (highest)
// compute container.
func (p *Provider) info(ctx context.Context, c provider.Call) (proto.Info, error) {
	cs, err := p.computes(ctx, c)
	if err != nil {
		return proto.Info{}, err
	}
	cur := cs[len(cs)-1]
	ins, created, err := p.computeContainer(ctx, c, cur.generation)
	if err != nil {
		return proto.Info{}, err
	}
	return p.infoOf(c, ins, created), nil
}

// infoOf builds an info result from an inspected compute container of c's
// sandbox and the renewal record.
func (p *Provider) infoOf(c provider.Call, ins container.InspectResponse, created time.Time) proto.Info {
	renewed := created
	if p.cfg.State == nil {
		return proto.Info{Reference: c.Reference, DeploymentGeneration: c.DeploymentGeneration, State: instanceState(ins.State), Image: ins.Config.Image, CreatedAt: created, RenewedAt: created}
	}
	if b, err := p.cfg.State.Load(renewalRecord(c.Reference)); err == nil {
		if t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b))); err == nil && t.After(created) {
			renewed = t
		}
	}
	return proto.Info{
		Reference:            c.Reference,
		DeploymentGeneration: c.DeploymentGeneration,
		State:                instanceState(ins.State),
		Image:                ins.Config.Image,
		CreatedAt:            created,
		RenewedAt:            renewed,
	}
}

// errIncomplete is the cause of a failure after a mutation Docker
// confirmed, when a later step failed.
func errIncomplete(step string, err error) error {
	return fmt.Errorf("docker: %s: %w", step, err)
}
