package docker

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// errNoState is the cause of a renew on a provider without a state
// directory (one made only for probes and imports): outcome unknown.
var errNoState = errors.New("docker: no state directory for renewals")

// errUndeclared is returned by the methods of undeclared operations, which
// provider.Execute never calls; it answers unconfirmed.
var errUndeclared = errors.New("docker: operation not declared")

// Create creates and starts compute generation 1 of the sandbox from the
// bootstrap, labelled with the exact reference and generation. An existing
// sandbox of the exact reference answers exists with its info receipt; a
// container with the sandbox's name and other labels answers ownership; an
// image that is not on the node answers invalid (the node never pulls), and
// so does an image whose configuration exceeds MaxImageConfigBytes or a
// container configuration over MaxCreateConfigBytes (nothing created).
// When Docker confirmed the container but starting it failed, the answer
// is unconfirmed with the info receipt of the stopped container.
func (p *Provider) Create(ctx context.Context, c provider.Call, b proto.Bootstrap) (proto.Info, error) {
	switch _, err := p.computes(ctx, c); {
	case err == nil:
		return proto.Info{}, p.exists(ctx, c)
	case provider.CodeOf(err) != proto.ErrNotFound:
		return proto.Info{}, err
	}
	image, entrypoint, env, nanoCPUs, memory := b.Image, b.Entrypoint, b.Env, b.CPUMillis*1_000_000, b.MemoryBytes
	user := ""
	if g := p.cfg.Generation; g != nil {
		var err error
		if image, entrypoint, env, nanoCPUs, memory, err = g.bindCreate(b); err != nil {
			return proto.Info{}, err
		}
		user = g.User
	}
	created := p.cfg.Now().UTC()
	cfg := &container.Config{
		Image:      image,
		Entrypoint: entrypoint,
		Env:        envList(env),
		User:       user,
		Labels:     p.labels(c, 1, created),
	}
	host := &container.HostConfig{
		NetworkMode: container.NetworkMode(p.network()),
		Resources:   container.Resources{NanoCPUs: nanoCPUs, Memory: memory},
		SecurityOpt: p.cfg.Generation.securityOpt(),
	}
	if err := p.checkCreateSize(ctx, cfg, host); err != nil {
		return proto.Info{}, err
	}
	resp, err := p.cli.ContainerCreate(ctx, cfg, host, nil, nil, containerName(c.Reference, 1))
	switch {
	case cerrdefs.IsConflict(err):
		// The name was taken between the list and the create.
		return proto.Info{}, p.exists(ctx, c)
	case cerrdefs.IsNotFound(err):
		return proto.Info{}, provider.Fail(proto.ErrInvalid, err)
	case err != nil:
		return proto.Info{}, err
	}
	if err := p.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		fail := &provider.Error{Code: proto.ErrUnconfirmed, Cause: errIncomplete("start the created container", err)}
		if ins, labelled, ierr := p.computeContainer(ctx, c, 1); ierr == nil {
			info := p.infoOf(c, ins, labelled)
			fail.Receipt = &info
		}
		return proto.Info{}, fail
	}
	ins, labelled, err := p.computeContainer(ctx, c, 1)
	if err != nil {
		// Started, but the read-back failed: report what Docker confirmed.
		return proto.Info{Reference: c.Reference, DeploymentGeneration: c.DeploymentGeneration,
			State: proto.StateRunning, Image: b.Image, CreatedAt: created, RenewedAt: created}, nil
	}
	return p.infoOf(c, ins, labelled), nil
}

// exists answers a create whose sandbox already exists: exists with the
// info receipt of the exact reference, ownership when the container is not
// ours, or exists alone when the receipt cannot be read.
func (p *Provider) exists(ctx context.Context, c provider.Call) error {
	info, err := p.info(ctx, c)
	switch code := provider.CodeOf(err); {
	case err == nil:
		return &provider.Error{Code: proto.ErrExists, Receipt: &info}
	case code == proto.ErrOwnership:
		return err
	}
	return provider.Fail(proto.ErrExists, err)
}

// GetInfo returns the sandbox's info from its current compute container.
func (p *Provider) GetInfo(ctx context.Context, c provider.Call) (proto.Info, error) {
	return p.info(ctx, c)
}

// Renew records the renewal time in the node's state directory (Docker
// labels are immutable) and returns the info with it. The node expires
// nothing on its own: Core owns the lifecycle.
func (p *Provider) Renew(ctx context.Context, c provider.Call) (proto.Info, error) {
	info, err := p.info(ctx, c)
	if err != nil {
		return proto.Info{}, err
	}
	now := p.cfg.Now().UTC()
	if p.cfg.State == nil {
		return proto.Info{}, errNoState
	}
	if err := p.cfg.State.Store(renewalRecord(c.Reference), []byte(now.Format(time.RFC3339Nano)+"\n")); err != nil {
		return proto.Info{}, err
	}
	if now.After(info.CreatedAt) {
		info.RenewedAt = now
	}
	return info, nil
}

// Kill force-removes every compute container of the sandbox and its
// renewal record.
func (p *Provider) Kill(ctx context.Context, c provider.Call) error {
	cs, err := p.computes(ctx, c)
	if err != nil {
		return err
	}
	for _, cc := range cs {
		if err := p.remove(ctx, cc.id); err != nil {
			return err
		}
	}
	if p.cfg.State == nil {
		return nil
	}
	return p.cfg.State.Remove(renewalRecord(c.Reference))
}

// remove force-removes a container; one that is already gone is removed.
func (p *Provider) remove(ctx context.Context, id string) error {
	err := p.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// Initial returns compute generation 1 of the sandbox.
func (p *Provider) Initial(ctx context.Context, c provider.Call) (proto.Compute, error) {
	ins, _, err := p.computeContainer(ctx, c, 1)
	if err != nil {
		return proto.Compute{}, err
	}
	return proto.Compute{Generation: 1, State: instanceState(ins.State)}, nil
}

// NewCompute creates and starts compute generation gen of the sandbox with
// the configuration of its current compute. A snapshot answers not_found:
// this provider never writes snapshots. An existing generation answers
// exists; a failed start after a confirmed create answers unconfirmed;
// one more compute than the sandbox's container list can hold under
// MaxInspectBytes answers invalid (checkComputesSize).
func (p *Provider) NewCompute(ctx context.Context, c provider.Call, gen int64, snapshot *proto.Snapshot) (proto.Compute, error) {
	if snapshot != nil {
		return proto.Compute{}, provider.Fail(proto.ErrNotFound, errors.New("docker: no snapshots"))
	}
	if g := p.cfg.Generation; g != nil && g.SeccompMissing {
		return proto.Compute{}, provider.Fail(proto.ErrUnconfirmed, errNotStartable)
	}
	cs, err := p.computes(ctx, c)
	if err != nil {
		return proto.Compute{}, err
	}
	if slices.ContainsFunc(cs, func(cc compute) bool { return cc.generation == gen }) {
		return proto.Compute{}, provider.Fail(proto.ErrExists, nil)
	}
	base, created, err := p.computeContainer(ctx, c, cs[len(cs)-1].generation)
	if err != nil {
		return proto.Compute{}, err
	}
	if err := checkComputesSize(len(cs), base.Config.Labels); err != nil {
		return proto.Compute{}, err
	}
	cfg := &container.Config{
		Image:      base.Config.Image,
		Entrypoint: base.Config.Entrypoint,
		Cmd:        base.Config.Cmd,
		Env:        base.Config.Env,
		WorkingDir: base.Config.WorkingDir,
		User:       base.Config.User,
		Labels:     p.labels(c, gen, created),
	}
	host := &container.HostConfig{NetworkMode: container.NetworkMode(p.network()), SecurityOpt: p.cfg.Generation.securityOpt()}
	if base.HostConfig != nil {
		host.Resources = container.Resources{NanoCPUs: base.HostConfig.NanoCPUs, Memory: base.HostConfig.Memory}
	}
	resp, err := p.cli.ContainerCreate(ctx, cfg, host, nil, nil, containerName(c.Reference, gen))
	switch {
	case cerrdefs.IsConflict(err):
		return proto.Compute{}, provider.Fail(proto.ErrExists, err)
	case err != nil:
		return proto.Compute{}, err
	}
	if err := p.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return proto.Compute{}, errIncomplete("start the new compute container", err)
	}
	return proto.Compute{Generation: gen, State: proto.StateRunning}, nil
}

// GetCompute returns the state of one compute generation.
func (p *Provider) GetCompute(ctx context.Context, c provider.Call, ref proto.ComputeRef) (proto.State, error) {
	ins, _, err := p.computeContainer(ctx, c, ref.Generation)
	if err != nil {
		return proto.State{}, err
	}
	return proto.State{State: instanceState(ins.State), Compute: ref.Generation}, nil
}

// KillCompute force-removes one compute container.
func (p *Provider) KillCompute(ctx context.Context, c provider.Call, ref proto.ComputeRef) error {
	ins, _, err := p.computeContainer(ctx, c, ref.Generation)
	if err != nil {
		return err
	}
	return p.remove(ctx, ins.ID)
}

// ResumeCompute starts a stopped compute container; a running one is left
// alone and reported running.
func (p *Provider) ResumeCompute(ctx context.Context, c provider.Call, ref proto.ComputeRef) (proto.State, error) {
	ins, _, err := p.computeContainer(ctx, c, ref.Generation)
	if err != nil {
		return proto.State{}, err
	}
	if instanceState(ins.State) != proto.StateRunning {
		if err := p.cli.ContainerStart(ctx, ins.ID, container.StartOptions{}); err != nil {
			return proto.State{}, dockerErr(err)
		}
	}
	return proto.State{State: proto.StateRunning, Compute: ref.Generation}, nil
}

// Suspend is not declared (see unsupported).
func (p *Provider) Suspend(context.Context, provider.Call, proto.Suspend) (proto.State, error) {
	return proto.State{}, errUndeclared
}

// Resume is not declared (see unsupported).
func (p *Provider) Resume(context.Context, provider.Call, proto.Resume) (proto.State, error) {
	return proto.State{}, errUndeclared
}

// DeleteSnapshot is not declared (see unsupported).
func (p *Provider) DeleteSnapshot(context.Context, provider.Call, proto.Snapshot) error {
	return errUndeclared
}

// envList turns an environment map into Docker's sorted NAME=value list.
func envList(env map[string]string) []string {
	if len(env) == 0 {
		return nil
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
