package agent_test

// Tests of the agent with the real Docker provider on the engine that
// hack/docker/start.sh runs (DOCKER_HOST), and one on a dockerd the test
// starts, stops and restarts itself.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/agent"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/internal/dockertest"
	"github.com/sandgate/sandgate/nodeagent/internal/fakecore"
	"github.com/sandgate/sandgate/nodeagent/provider"
	"github.com/sandgate/sandgate/nodeagent/state"
)

// observed wraps the real Docker provider and reports every operation the
// agent hands to it.
type observed struct {
	*docker.Provider
	mu      sync.Mutex
	calls   []proto.Operation
	started chan proto.Operation
}

func (o *observed) record(op proto.Operation) {
	o.mu.Lock()
	o.calls = append(o.calls, op)
	o.mu.Unlock()
	o.started <- op
}

func (o *observed) Calls() []proto.Operation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]proto.Operation(nil), o.calls...)
}

func (o *observed) Create(ctx context.Context, c provider.Call, b proto.Bootstrap) (proto.Info, error) {
	o.record(proto.OpCreate)
	return o.Provider.Create(ctx, c, b)
}

func (o *observed) RunCommand(ctx context.Context, c provider.Call, cmd proto.Command) (proto.CommandResult, error) {
	o.record(proto.OpCommand)
	return o.Provider.RunCommand(ctx, c, cmd)
}

func (o *observed) GetInfo(ctx context.Context, c provider.Call) (proto.Info, error) {
	o.record(proto.OpInfo)
	return o.Provider.GetInfo(ctx, c)
}

func (o *observed) Renew(ctx context.Context, c provider.Call) (proto.Info, error) {
	o.record(proto.OpRenew)
	return o.Provider.Renew(ctx, c)
}

func (o *observed) Kill(ctx context.Context, c provider.Call) error {
	o.record(proto.OpKill)
	return o.Provider.Kill(ctx, c)
}

func (o *observed) Observe(ctx context.Context, c provider.Call, ob proto.Observation) (proto.Sample, error) {
	o.record(proto.OpObserve)
	return o.Provider.Observe(ctx, c, ob)
}

func (o *observed) Initial(ctx context.Context, c provider.Call) (proto.Compute, error) {
	o.record(proto.OpInitial)
	return o.Provider.Initial(ctx, c)
}

func (o *observed) NewCompute(ctx context.Context, c provider.Call, g int64, s *proto.Snapshot) (proto.Compute, error) {
	o.record(proto.OpNewCompute)
	return o.Provider.NewCompute(ctx, c, g, s)
}

func (o *observed) GetCompute(ctx context.Context, c provider.Call, r proto.ComputeRef) (proto.State, error) {
	o.record(proto.OpCompute)
	return o.Provider.GetCompute(ctx, c, r)
}

func (o *observed) KillCompute(ctx context.Context, c provider.Call, r proto.ComputeRef) error {
	o.record(proto.OpKillCompute)
	return o.Provider.KillCompute(ctx, c, r)
}

func (o *observed) ResumeCompute(ctx context.Context, c provider.Call, r proto.ComputeRef) (proto.State, error) {
	o.record(proto.OpResumeCompute)
	return o.Provider.ResumeCompute(ctx, c, r)
}

func (o *observed) RunCommandCompute(ctx context.Context, c provider.Call, r proto.ComputeRef, cmd proto.Command) (proto.CommandResult, error) {
	o.record(proto.OpCommandCompute)
	return o.Provider.RunCommandCompute(ctx, c, r, cmd)
}

// dockerNode is an agent with the real Docker provider at host.
func dockerNode(t *testing.T, core *fakecore.Core, host string, edit func(*agent.Config)) (*node, *observed, string) {
	t.Helper()
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodeID := uuid.NewString()
	p, err := docker.New(docker.Config{Endpoint: host, NodeID: nodeID, State: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	o := &observed{Provider: p, started: make(chan proto.Operation, 64)}
	n := startNode(t, core, o, func(c *agent.Config) {
		c.NodeID = nodeID
		c.State = st
		c.Fingerprint = p.Fingerprint
		if edit != nil {
			edit(c)
		}
	})
	return n, o, nodeID
}

func TestEveryOperationBudgetRunsOutInTheQueueOnDocker(t *testing.T) {
	host := dockertest.Host(t)
	cli := dockertest.Client(t, host)
	image := dockertest.Image(t, cli)
	core := fakecore.New(t, credential, false)
	_, o, nodeID := dockerNode(t, core, host, func(c *agent.Config) { c.MaxActive = 1 })
	dockertest.RemoveLabelled(t, cli, docker.LabelNodeID, nodeID)
	conn := core.Accept()
	conn.Open(1)

	sandbox := proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: "a-" + uuid.NewString()[:8]}
	create := conn.NewRequest(proto.OpCreate, generation, 60000, sandbox)
	create.Bootstrap = &proto.Bootstrap{Image: image, Entrypoint: []string{"sleep", "3600"}}
	conn.Send(create)
	<-o.started
	if resp := conn.Response(); resp.ErrorCode != "" || resp.Info == nil || resp.Info.State != proto.StateRunning {
		t.Fatalf("create: %+v", resp)
	}

	// The only worker runs a command that waits until the test releases it.
	blocker := conn.NewRequest(proto.OpCommand, generation, 60000, sandbox)
	blocker.Command = &proto.Command{Argv: []string{"sh", "-c", "while [ ! -e /tmp/release ]; do sleep 0.05; done; echo released"},
		TimeoutMS: 60000, MaxOutputBytes: 100}
	conn.Send(blocker)
	<-o.started

	// Every operation, queued behind it with a budget of 50 ms.
	other := proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: "b-" + uuid.NewString()[:8]}
	cmd := &proto.Command{Argv: []string{"touch", "/tmp/ran"}, TimeoutMS: 1000, MaxOutputBytes: 10}
	queued := map[string]proto.Operation{}
	for _, op := range proto.Operations {
		target := sandbox
		if op == proto.OpCreate {
			target = other
		}
		r := conn.NewRequest(op, generation, 50, target)
		switch op {
		case proto.OpCreate:
			r.Bootstrap = &proto.Bootstrap{Image: image, Entrypoint: []string{"sleep", "3600"}}
		case proto.OpCommand:
			r.Command = cmd
		case proto.OpObserve:
			r.Observation = &proto.Observation{Kind: proto.ObservationResources}
		case proto.OpNewCompute:
			g := int64(2)
			r.Generation = &g
		case proto.OpCompute, proto.OpKillCompute, proto.OpResumeCompute:
			r.Compute = &proto.ComputeRef{Generation: 1}
		case proto.OpCommandCompute:
			r.Compute, r.Command = &proto.ComputeRef{Generation: 1}, cmd
		case proto.OpSuspend:
			r.Suspend = &proto.Suspend{Snapshot: proto.Snapshot{ID: "s1"}}
		case proto.OpResume:
			r.Resume = &proto.Resume{Snapshot: proto.Snapshot{ID: "s1"}}
		case proto.OpDeleteSnapshot:
			r.Snapshot = &proto.Snapshot{ID: "s1"}
		}
		queued[r.ID] = op
		conn.Send(r)
	}
	for range proto.Operations {
		resp := conn.Response()
		op, ok := queued[resp.ID]
		if !ok {
			t.Fatalf("unexpected response %+v", resp)
		}
		delete(queued, resp.ID)
		want := proto.ErrUnconfirmed
		if !o.Declaration().Supported(op) {
			want = proto.ErrUnsupported // answered at once, never queued
		}
		if resp.ErrorCode != want {
			t.Errorf("%s: error_code %q, want %q", op, resp.ErrorCode, want)
		}
	}

	// Release the blocker; nothing queued ran.
	releaseBlocker(t, cli, nodeID, sandbox)
	if resp := conn.Response(); resp.ID != blocker.ID || resp.ErrorCode != "" || string(resp.Command.Stdout) != "released\n" {
		t.Fatalf("blocker: %+v", resp)
	}
	if calls := o.Calls(); len(calls) != 2 {
		t.Fatalf("operations that reached Docker: %v, want only the create and the blocker", calls)
	}
	// No effect on the engine: the other sandbox was not created, the first
	// one still runs with one compute and no /tmp/ran.
	r := conn.NewRequest(proto.OpInfo, generation, 60000, other)
	conn.Send(r)
	if resp := conn.Response(); resp.ErrorCode != proto.ErrNotFound {
		t.Fatalf("info of the expired create's sandbox: %+v", resp)
	}
	check := conn.NewRequest(proto.OpCommand, generation, 60000, sandbox)
	check.Command = &proto.Command{Argv: []string{"sh", "-c", "test ! -e /tmp/ran"}, TimeoutMS: 10000, MaxOutputBytes: 10}
	conn.Send(check)
	if resp := conn.Response(); resp.ErrorCode != "" || resp.Command.ExitCode != 0 {
		t.Fatalf("an expired command ran: %+v", resp)
	}
	c2 := conn.NewRequest(proto.OpCompute, generation, 60000, sandbox)
	c2.Compute = &proto.ComputeRef{Generation: 2}
	conn.Send(c2)
	if resp := conn.Response(); resp.ErrorCode != proto.ErrNotFound {
		t.Fatalf("the expired new_compute made compute 2: %+v", resp)
	}
}

// releaseBlocker creates /tmp/release in the sandbox's container with the
// Docker API directly.
func releaseBlocker(t *testing.T, cli *client.Client, nodeID string, ref proto.Reference) {
	t.Helper()
	list, err := cli.ContainerList(ctx(t), container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", docker.LabelNodeID+"="+nodeID), filters.Arg("label", docker.LabelAllocationID+"="+ref.AllocationID))})
	if err != nil || len(list) != 1 {
		t.Fatalf("find the sandbox container: %v (%d found)", err, len(list))
	}
	ex, err := cli.ContainerExecCreate(ctx(t), list[0].ID, container.ExecOptions{Cmd: []string{"touch", "/tmp/release"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerExecStart(ctx(t), ex.ID, container.ExecStartOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), fakecore.Wait)
	t.Cleanup(cancel)
	return c
}

func TestDockerDownIsNotReadyAndBackIsReady(t *testing.T) {
	d := dockertest.NewDaemon(t)
	d.Start(fakecore.Wait)
	core := fakecore.New(t, credential, false)
	_, o, _ := dockerNode(t, core, d.Host, func(c *agent.Config) { c.Timers.Heartbeat = 50 * time.Millisecond })
	conn := core.Accept()
	h := conn.Hello()
	fp, err := o.Fingerprint(ctx(t))
	if err != nil || h.BackendFingerprint != fp {
		t.Fatalf("hello fingerprint %q, engine's %q (%v)", h.BackendFingerprint, fp, err)
	}
	if !h.Health.ProviderReady {
		t.Fatalf("first health with dockerd up: %+v", h.Health)
	}
	conn.Welcome(1)

	d.Stop()
	hb := conn.Heartbeat()
	for ; hb.Health.ProviderReady; hb = conn.Heartbeat() {
	}
	if hb.Health.Diagnostic != proto.DiagDockerUnreachable {
		t.Fatalf("diagnostic with dockerd stopped = %q, want %q", hb.Health.Diagnostic, proto.DiagDockerUnreachable)
	}
	// Operations fail with an unknown outcome meanwhile, never a definite one.
	r := conn.NewRequest(proto.OpInfo, generation, 5000, ref)
	conn.Send(r)
	if resp := conn.Response(); resp.ErrorCode != proto.ErrUnconfirmed {
		t.Fatalf("info with dockerd stopped: %+v", resp)
	}

	d.Start(fakecore.Wait)
	for hb = conn.Heartbeat(); !hb.Health.ProviderReady; hb = conn.Heartbeat() {
	}
	if hb.Health.Diagnostic != "" {
		t.Fatalf("ready with diagnostic %q", hb.Health.Diagnostic)
	}
}
