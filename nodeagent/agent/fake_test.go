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
	started chan nodeproto.Operation
}

func newFake(unsupported map[nodeproto.Operation]string) *fakeProvider {
	d, err := provider.Declare(unsupported)
	if err != nil {
		panic(err)
	}
	return &fakeProvider{decl: d, started: make(chan nodeproto.Operation, 64)}
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

func (f *fakeProvider) do(ctx context.Context, op nodeproto.Operation) error {
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

func (f *fakeProvider) Kind() nodeproto.Provider { return nodeproto.ProviderDocker }

func (f *fakeProvider) Declaration() provider.Declaration { return f.decl }

func (f *fakeProvider) Probe(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probeErr
}

func (f *fakeProvider) Diagnose(err error) string {
	if errors.Is(err, errDockerDown) {
		return nodeproto.DiagDockerUnreachable
	}
	return "some_code_core_does_not_know"
}

var errDockerDown = errors.New("fake: docker is down")

func (f *fakeProvider) info(ctx context.Context, op nodeproto.Operation, c provider.Call) (nodeproto.Info, error) {
	if err := f.do(ctx, op); err != nil {
		return nodeproto.Info{}, err
	}
	return nodeproto.Info{Reference: c.Reference, DeploymentGeneration: c.DeploymentGeneration, State: nodeproto.StateRunning,
		Image: "img", CreatedAt: fixed, RenewedAt: fixed}, nil
}

func (f *fakeProvider) Create(ctx context.Context, c provider.Call, _ nodeproto.Bootstrap) (nodeproto.Info, error) {
	return f.info(ctx, nodeproto.OpCreate, c)
}

func (f *fakeProvider) GetInfo(ctx context.Context, c provider.Call) (nodeproto.Info, error) {
	return f.info(ctx, nodeproto.OpInfo, c)
}

func (f *fakeProvider) Renew(ctx context.Context, c provider.Call) (nodeproto.Info, error) {
	return f.info(ctx, nodeproto.OpRenew, c)
}

func (f *fakeProvider) Kill(ctx context.Context, _ provider.Call) error {
	return f.do(ctx, nodeproto.OpKill)
}

func (f *fakeProvider) RunCommand(ctx context.Context, _ provider.Call, _ nodeproto.Command) (nodeproto.CommandResult, error) {
	return nodeproto.CommandResult{Stdout: []byte("ok"), Stderr: []byte{}}, f.do(ctx, nodeproto.OpCommand)
}

func (f *fakeProvider) Observe(ctx context.Context, _ provider.Call, _ nodeproto.Observation) (nodeproto.Sample, error) {
	return nodeproto.Sample{ObservedAt: fixed}, f.do(ctx, nodeproto.OpObserve)
}

func (f *fakeProvider) Initial(ctx context.Context, _ provider.Call) (nodeproto.Compute, error) {
	return nodeproto.Compute{Generation: 1, State: nodeproto.StateRunning}, f.do(ctx, nodeproto.OpInitial)
}

func (f *fakeProvider) NewCompute(ctx context.Context, _ provider.Call, gen int64, _ *nodeproto.Snapshot) (nodeproto.Compute, error) {
	return nodeproto.Compute{Generation: gen, State: nodeproto.StateRunning}, f.do(ctx, nodeproto.OpNewCompute)
}

func (f *fakeProvider) GetCompute(ctx context.Context, _ provider.Call, r nodeproto.ComputeRef) (nodeproto.State, error) {
	return nodeproto.State{State: nodeproto.StateRunning, Compute: r.Generation}, f.do(ctx, nodeproto.OpCompute)
}

func (f *fakeProvider) KillCompute(ctx context.Context, _ provider.Call, _ nodeproto.ComputeRef) error {
	return f.do(ctx, nodeproto.OpKillCompute)
}

func (f *fakeProvider) ResumeCompute(ctx context.Context, _ provider.Call, r nodeproto.ComputeRef) (nodeproto.State, error) {
	return nodeproto.State{State: nodeproto.StateRunning, Compute: r.Generation}, f.do(ctx, nodeproto.OpResumeCompute)
}

func (f *fakeProvider) RunCommandCompute(ctx context.Context, _ provider.Call, _ nodeproto.ComputeRef, _ nodeproto.Command) (nodeproto.CommandResult, error) {
	return nodeproto.CommandResult{Stdout: []byte{}, Stderr: []byte{}}, f.do(ctx, nodeproto.OpCommandCompute)
}

func (f *fakeProvider) Suspend(ctx context.Context, _ provider.Call, _ nodeproto.Suspend) (nodeproto.State, error) {
	return nodeproto.State{State: nodeproto.StateSuspended, Compute: 1}, f.do(ctx, nodeproto.OpSuspend)
}

func (f *fakeProvider) Resume(ctx context.Context, _ provider.Call, _ nodeproto.Resume) (nodeproto.State, error) {
	return nodeproto.State{State: nodeproto.StateRunning, Compute: 2}, f.do(ctx, nodeproto.OpResume)
}

func (f *fakeProvider) DeleteSnapshot(ctx context.Context, _ provider.Call, _ nodeproto.Snapshot) error {
	return f.do(ctx, nodeproto.OpDeleteSnapshot)
}
