package agent_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// fakeProvider is a provider whose operations succeed with fixed results,
// optionally each waiting for the test to release it, and which records
// every call (to prove which requests reached the provider).
type fakeProvider struct {
	decl provider.Declaration

	mu       sync.Mutex
	calls    []string // request IDs are not visible here: operation names
	probeErr error
	// gate, when set, holds every operation until a value is received or
	// the operation's context ends.
	gate chan struct{}
	// started receives the operation name when an operation starts.
	started chan proto.Operation
}

func newFake(unsupported map[proto.Operation]string) *fakeProvider {
	d, err := provider.Declare(unsupported)
	if err != nil {
		panic(err)
	}
	return &fakeProvider{decl: d, started: make(chan proto.Operation, 64)}
}

func (f *fakeProvider) setProbe(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probeErr = err
}

func (f *fakeProvider) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeProvider) do(ctx context.Context, op proto.Operation) error {
	f.mu.Lock()
	f.calls = append(f.calls, string(op))
	gate := f.gate
	f.mu.Unlock()
	f.started <- op
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

var fixed = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (f *fakeProvider) Kind() proto.Provider { return proto.ProviderDocker }

func (f *fakeProvider) Declaration() provider.Declaration { return f.decl }

func (f *fakeProvider) Probe(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probeErr
}

func (f *fakeProvider) Diagnose(err error) string {
	if errors.Is(err, errDockerDown) {
		return proto.DiagDockerUnreachable
	}
	return "some_code_core_does_not_know"
}

var errDockerDown = errors.New("fake: docker is down")

func (f *fakeProvider) info(ctx context.Context, op proto.Operation, c provider.Call) (proto.Info, error) {
	if err := f.do(ctx, op); err != nil {
		return proto.Info{}, err
	}
	return proto.Info{Reference: c.Reference, DeploymentGeneration: c.DeploymentGeneration, State: proto.StateRunning,
		Image: "img", CreatedAt: fixed, RenewedAt: fixed}, nil
}

func (f *fakeProvider) Create(ctx context.Context, c provider.Call, _ proto.Bootstrap) (proto.Info, error) {
	return f.info(ctx, proto.OpCreate, c)
}

func (f *fakeProvider) GetInfo(ctx context.Context, c provider.Call) (proto.Info, error) {
	return f.info(ctx, proto.OpInfo, c)
}

func (f *fakeProvider) Renew(ctx context.Context, c provider.Call) (proto.Info, error) {
	return f.info(ctx, proto.OpRenew, c)
}

func (f *fakeProvider) Kill(ctx context.Context, _ provider.Call) error {
	return f.do(ctx, proto.OpKill)
}

func (f *fakeProvider) RunCommand(ctx context.Context, _ provider.Call, _ proto.Command) (proto.CommandResult, error) {
	return proto.CommandResult{Stdout: []byte("ok"), Stderr: []byte{}}, f.do(ctx, proto.OpCommand)
}

func (f *fakeProvider) Observe(ctx context.Context, _ provider.Call, _ proto.Observation) (proto.Sample, error) {
	return proto.Sample{ObservedAt: fixed}, f.do(ctx, proto.OpObserve)
}

func (f *fakeProvider) Initial(ctx context.Context, _ provider.Call) (proto.Compute, error) {
	return proto.Compute{Generation: 1, State: proto.StateRunning}, f.do(ctx, proto.OpInitial)
}

func (f *fakeProvider) NewCompute(ctx context.Context, _ provider.Call, gen int64, _ *proto.Snapshot) (proto.Compute, error) {
	return proto.Compute{Generation: gen, State: proto.StateRunning}, f.do(ctx, proto.OpNewCompute)
}

func (f *fakeProvider) GetCompute(ctx context.Context, _ provider.Call, r proto.ComputeRef) (proto.State, error) {
	return proto.State{State: proto.StateRunning, Compute: r.Generation}, f.do(ctx, proto.OpCompute)
}

func (f *fakeProvider) KillCompute(ctx context.Context, _ provider.Call, _ proto.ComputeRef) error {
	return f.do(ctx, proto.OpKillCompute)
}

func (f *fakeProvider) ResumeCompute(ctx context.Context, _ provider.Call, r proto.ComputeRef) (proto.State, error) {
	return proto.State{State: proto.StateRunning, Compute: r.Generation}, f.do(ctx, proto.OpResumeCompute)
}

func (f *fakeProvider) RunCommandCompute(ctx context.Context, _ provider.Call, _ proto.ComputeRef, _ proto.Command) (proto.CommandResult, error) {
	return proto.CommandResult{Stdout: []byte{}, Stderr: []byte{}}, f.do(ctx, proto.OpCommandCompute)
}

func (f *fakeProvider) Suspend(ctx context.Context, _ provider.Call, _ proto.Suspend) (proto.State, error) {
	return proto.State{State: proto.StateSuspended, Compute: 1}, f.do(ctx, proto.OpSuspend)
}

func (f *fakeProvider) Resume(ctx context.Context, _ provider.Call, _ proto.Resume) (proto.State, error) {
	return proto.State{State: proto.StateRunning, Compute: 2}, f.do(ctx, proto.OpResume)
}

func (f *fakeProvider) DeleteSnapshot(ctx context.Context, _ provider.Call, _ proto.Snapshot) error {
	return f.do(ctx, proto.OpDeleteSnapshot)
}
