package docker

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/internal/dockertest"
	"github.com/sandgate/sandgate/nodeagent/provider"
	"github.com/sandgate/sandgate/nodeagent/state"
)

// env is one test's provider on the real engine, with its own node ID
// (so clean-up removes only its containers) and state directory.
type env struct {
	p     *Provider
	cli   *client.Client
	image string
	gen   int64
}

func newEnv(t *testing.T) *env {
	t.Helper()
	host := dockertest.Host(t)
	cli := dockertest.Client(t, host)
	img := dockertest.Image(t, cli)
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	node := uuid.NewString()
	dockertest.RemoveLabelled(t, cli, LabelNodeID, node)
	p, err := New(Config{Endpoint: host, NodeID: node, State: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &env{p: p, cli: cli, image: img, gen: 7}
}

// call returns a fresh exact reference in generation e.gen.
func (e *env) call() provider.Call {
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	return provider.Call{
		Reference:            proto.Reference{TenantID: "tenant-" + id, EnvironmentID: "env.1", AllocationID: "alloc_" + id},
		DeploymentGeneration: e.gen,
	}
}

// sleeper is a bootstrap whose container keeps running.
func (e *env) sleeper() proto.Bootstrap {
	return proto.Bootstrap{Image: e.image, Entrypoint: []string{"sleep", "3600"}, Env: map[string]string{"SANDBOX": "yes"}}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func wantCode(t *testing.T, what string, err error, code proto.ErrorCode) {
	t.Helper()
	if got := provider.CodeOf(err); err == nil || got != code {
		t.Fatalf("%s: error %v (code %q), want code %q", what, err, provider.CodeOf(err), code)
	}
}

func (e *env) create(t *testing.T, c provider.Call, b proto.Bootstrap) proto.Info {
	t.Helper()
	info, err := e.p.Create(ctx(t), c, b)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return info
}

func validInfo(t *testing.T, info proto.Info) {
	t.Helper()
	resp := &proto.Response{ID: uuid.NewString(), ConnectionID: uuid.NewString(), Info: &info}
	if _, err := proto.Encode(resp); err != nil {
		t.Fatalf("the info result does not encode: %v", err)
	}
}

// stop stops a compute container with the Docker API directly, as an
// outside event would.
func (e *env) stop(t *testing.T, c provider.Call, gen int64) {
	t.Helper()
	zero := 0
	if err := e.cli.ContainerStop(ctx(t), containerName(c.Reference, gen), container.StopOptions{Timeout: &zero}); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func TestCreateInfoRenewKill(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	info := e.create(t, c, e.sleeper())
	validInfo(t, info)
	if info.Reference != c.Reference || info.DeploymentGeneration != e.gen || info.State != proto.StateRunning ||
		info.Image != e.image || !info.RenewedAt.Equal(info.CreatedAt) {
		t.Fatalf("create info = %+v", info)
	}

	ins, err := e.cli.ContainerInspect(ctx(t), containerName(c.Reference, 1))
	if err != nil {
		t.Fatal(err)
	}
	labels := ins.Config.Labels
	if labels[LabelTenantID] != c.Reference.TenantID || labels[LabelEnvironmentID] != c.Reference.EnvironmentID ||
		labels[LabelAllocationID] != c.Reference.AllocationID || labels[LabelDeploymentGeneration] != "7" ||
		labels[LabelComputeGeneration] != "1" || labels[LabelNodeID] != e.p.cfg.NodeID {
		t.Fatalf("labels = %v", labels)
	}
	if !ins.State.Running || ins.HostConfig.RestartPolicy.Name != "" && ins.HostConfig.RestartPolicy.Name != container.RestartPolicyDisabled {
		t.Fatalf("container state %+v, restart policy %q", ins.State, ins.HostConfig.RestartPolicy.Name)
	}

	got, err := e.p.GetInfo(ctx(t), c)
	if err != nil || got != info {
		t.Fatalf("info = %+v, %v; want %+v", got, err, info)
	}

	renewed, err := e.p.Renew(ctx(t), c)
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if !renewed.RenewedAt.After(info.CreatedAt) || !renewed.CreatedAt.Equal(info.CreatedAt) {
		t.Fatalf("renew info = %+v", renewed)
	}
	validInfo(t, renewed)
	if again, err := e.p.GetInfo(ctx(t), c); err != nil || !again.RenewedAt.Equal(renewed.RenewedAt) {
		t.Fatalf("info after renew = %+v, %v", again, err)
	}

	if err := e.p.Kill(ctx(t), c); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if _, err := e.cli.ContainerInspect(ctx(t), containerName(c.Reference, 1)); err == nil {
		t.Fatal("the container survived kill")
	}
	_, err = e.p.GetInfo(ctx(t), c)
	wantCode(t, "info after kill", err, proto.ErrNotFound)
	wantCode(t, "kill after kill", e.p.Kill(ctx(t), c), proto.ErrNotFound)
}

func TestCreateExistsAnswersWithReceipt(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	first := e.create(t, c, e.sleeper())
	_, err := e.p.Create(ctx(t), c, e.sleeper())
	wantCode(t, "second create", err, proto.ErrExists)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Receipt == nil || *pe.Receipt != first {
		t.Fatalf("exists receipt = %+v, want %+v", pe, first)
	}
}

func TestCreateMissingImageIsInvalid(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	_, err := e.p.Create(ctx(t), c, proto.Bootstrap{Image: "sandgate-test/absent:0"})
	wantCode(t, "create from a missing image", err, proto.ErrInvalid)
	_, err = e.p.GetInfo(ctx(t), c)
	wantCode(t, "info after the refused create", err, proto.ErrNotFound)
}

func TestCreateStartFailureKeepsReceipt(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	_, err := e.p.Create(ctx(t), c, proto.Bootstrap{Image: e.image, Entrypoint: []string{"/no/such/program"}})
	wantCode(t, "create with a failing entrypoint", err, proto.ErrUnconfirmed)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Receipt == nil || pe.Receipt.Reference != c.Reference || pe.Receipt.State != proto.StateStopped {
		t.Fatalf("receipt = %+v", pe)
	}
	validInfo(t, *pe.Receipt)
	// The confirmed container is Core's to kill; the node removed nothing.
	if err := e.p.Kill(ctx(t), c); err != nil {
		t.Fatalf("kill: %v", err)
	}
}

func TestAbsentReferenceIsNotFound(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	cmd := proto.Command{Argv: []string{"true"}, TimeoutMS: 1000, MaxOutputBytes: 10}
	cr := proto.ComputeRef{Generation: 1}
	for name, op := range everyOperation(e.p, c, e.sleeper(), cmd, cr) {
		if name == "create" {
			continue
		}
		wantCode(t, name, op(ctx(t)), proto.ErrNotFound)
	}
}

// everyOperation returns each supported operation but create's success
// path as a function of the context, by operation name.
func everyOperation(p *Provider, c provider.Call, b proto.Bootstrap, cmd proto.Command, cr proto.ComputeRef) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"create":  func(ctx context.Context) error { _, err := p.Create(ctx, c, b); return err },
		"info":    func(ctx context.Context) error { _, err := p.GetInfo(ctx, c); return err },
		"renew":   func(ctx context.Context) error { _, err := p.Renew(ctx, c); return err },
		"kill":    func(ctx context.Context) error { return p.Kill(ctx, c) },
		"command": func(ctx context.Context) error { _, err := p.RunCommand(ctx, c, cmd); return err },
		"observe": func(ctx context.Context) error {
			_, err := p.Observe(ctx, c, proto.Observation{Kind: "resources"})
			return err
		},
		"initial":         func(ctx context.Context) error { _, err := p.Initial(ctx, c); return err },
		"new_compute":     func(ctx context.Context) error { _, err := p.NewCompute(ctx, c, 2, nil); return err },
		"compute":         func(ctx context.Context) error { _, err := p.GetCompute(ctx, c, cr); return err },
		"kill_compute":    func(ctx context.Context) error { return p.KillCompute(ctx, c, cr) },
		"resume_compute":  func(ctx context.Context) error { _, err := p.ResumeCompute(ctx, c, cr); return err },
		"command_compute": func(ctx context.Context) error { _, err := p.RunCommandCompute(ctx, c, cr, cmd); return err },
	}
}

func TestForeignContainerIsOwnership(t *testing.T) {
	cases := map[string]func(e *env, c provider.Call) map[string]string{
		"another node": func(e *env, c provider.Call) map[string]string {
			l := e.p.labels(c, 1, time.Now())
			l[LabelNodeID] = uuid.NewString()
			return l
		},
		"another deployment generation": func(e *env, c provider.Call) map[string]string {
			l := e.p.labels(c, 1, time.Now())
			l[LabelDeploymentGeneration] = "8"
			return l
		},
		"another allocation": func(e *env, c provider.Call) map[string]string {
			l := e.p.labels(c, 1, time.Now())
			l[LabelAllocationID] = "someone-else"
			return l
		},
		"no labels": func(e *env, c provider.Call) map[string]string {
			return map[string]string{LabelNodeID: e.p.cfg.NodeID} // for clean-up only
		},
	}
	for name, labels := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			c := e.call()
			// A container squatting the sandbox's name with other labels.
			l := labels(e, c)
			if name != "no labels" {
				dockertest.RemoveLabelled(t, e.cli, LabelNodeID, l[LabelNodeID])
			}
			resp, err := e.cli.ContainerCreate(ctx(t), &container.Config{Image: e.image, Entrypoint: []string{"sleep", "3600"}, Labels: l},
				nil, nil, nil, containerName(c.Reference, 1))
			if err != nil {
				t.Fatal(err)
			}
			if err := e.cli.ContainerStart(ctx(t), resp.ID, container.StartOptions{}); err != nil {
				t.Fatal(err)
			}
			cmd := proto.Command{Argv: []string{"true"}, TimeoutMS: 1000, MaxOutputBytes: 10}
			for op, run := range everyOperation(e.p, c, e.sleeper(), cmd, proto.ComputeRef{Generation: 1}) {
				wantCode(t, op, run(ctx(t)), proto.ErrOwnership)
			}
			if _, err := e.cli.ContainerInspect(ctx(t), resp.ID); err != nil {
				t.Fatalf("the foreign container was touched: %v", err)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	e.create(t, c, e.sleeper())

	res, err := e.p.RunCommand(ctx(t), c, proto.Command{
		Argv:           []string{"sh", "-c", `echo "out $SANDBOX $EXTRA $(pwd)"; echo err >&2; exit 3`},
		Env:            map[string]string{"EXTRA": "x y"},
		Cwd:            "/tmp",
		TimeoutMS:      10000,
		MaxOutputBytes: 1 << 10,
	})
	if err != nil {
		t.Fatalf("command: %v", err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "out yes x y /tmp\n" || string(res.Stderr) != "err\n" ||
		res.StdoutTruncated || res.StderrTruncated || res.DurationMS < 0 {
		t.Fatalf("result = %+v (stdout %q, stderr %q)", res, res.Stdout, res.Stderr)
	}

	res, err = e.p.RunCommand(ctx(t), c, proto.Command{Argv: []string{"true"}, TimeoutMS: 10000, MaxOutputBytes: 1})
	if err != nil || res.ExitCode != 0 || res.Stdout == nil || res.Stderr == nil || len(res.Stdout)+len(res.Stderr) != 0 {
		t.Fatalf("true: %+v, %v", res, err)
	}

	// Output beyond max_output_bytes is cut and flagged; the process is
	// drained to its end.
	res, err = e.p.RunCommand(ctx(t), c, proto.Command{
		Argv:      []string{"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo 0123456789; i=$((i+1)); done; echo done >&2"},
		TimeoutMS: 20000, MaxOutputBytes: 100,
	})
	if err != nil || res.ExitCode != 0 || len(res.Stdout) != 100 || !res.StdoutTruncated ||
		!bytes.Equal(res.Stdout[:11], []byte("0123456789\n")) || string(res.Stderr) != "done\n" || res.StderrTruncated {
		t.Fatalf("truncated: %+v, %v", res, err)
	}
}

func TestCommandThatCannotStart(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	e.create(t, c, e.sleeper())
	res, err := e.p.RunCommand(ctx(t), c, proto.Command{Argv: []string{"/no/such/program"}, TimeoutMS: 10000, MaxOutputBytes: 4096})
	if err != nil {
		t.Fatalf("command: %v", err)
	}
	if res.ExitCode != 126 && res.ExitCode != 127 {
		t.Fatalf("exit code %d (stdout %q, stderr %q), want 126 or 127", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func TestCommandTimeoutIsUnconfirmed(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	e.create(t, c, e.sleeper())
	_, err := e.p.RunCommand(ctx(t), c, proto.Command{Argv: []string{"sleep", "30"}, TimeoutMS: 300, MaxOutputBytes: 10})
	wantCode(t, "command past its timeout", err, proto.ErrCommandUnconfirmed)
}

func TestCommandOnStoppedSandbox(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	e.create(t, c, e.sleeper())
	e.stop(t, c, 1)
	_, err := e.p.RunCommand(ctx(t), c, proto.Command{Argv: []string{"true"}, TimeoutMS: 1000, MaxOutputBytes: 10})
	wantCode(t, "command on a stopped sandbox", err, proto.ErrRuntimeNotRunning)
	info, err := e.p.GetInfo(ctx(t), c)
	if err != nil || info.State != proto.StateStopped {
		t.Fatalf("info of the stopped sandbox = %+v, %v", info, err)
	}
}

func TestObserve(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	e.create(t, c, e.sleeper())
	s, err := e.p.Observe(ctx(t), c, proto.Observation{Kind: proto.ObservationResources})
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	if s.PIDs < 1 || s.MemoryUsedBytes == 0 || s.MemoryLimitBytes == 0 || s.ObservedAt.IsZero() || s.CPUPercent < 0 {
		t.Fatalf("sample = %+v", s)
	}
	if _, err := proto.Encode(&proto.Response{ID: uuid.NewString(), ConnectionID: uuid.NewString(), Sample: &s}); err != nil {
		t.Fatalf("the sample does not encode: %v", err)
	}

	e.stop(t, c, 1)
	_, err = e.p.Observe(ctx(t), c, proto.Observation{Kind: proto.ObservationResources})
	wantCode(t, "observe of a stopped sandbox", err, proto.ErrRuntimeNotRunning)
}

func TestComputes(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	e.create(t, c, e.sleeper())

	if got, err := e.p.Initial(ctx(t), c); err != nil || got != (proto.Compute{Generation: 1, State: proto.StateRunning}) {
		t.Fatalf("initial = %+v, %v", got, err)
	}
	if got, err := e.p.NewCompute(ctx(t), c, 2, nil); err != nil || got != (proto.Compute{Generation: 2, State: proto.StateRunning}) {
		t.Fatalf("new_compute 2 = %+v, %v", got, err)
	}
	_, err := e.p.NewCompute(ctx(t), c, 2, nil)
	wantCode(t, "new_compute 2 again", err, proto.ErrExists)
	_, err = e.p.NewCompute(ctx(t), c, 3, &proto.Snapshot{ID: "snap-1"})
	wantCode(t, "new_compute from a snapshot", err, proto.ErrNotFound)

	// The new compute carries the sandbox's environment and labels.
	res, err := e.p.RunCommandCompute(ctx(t), c, proto.ComputeRef{Generation: 2},
		proto.Command{Argv: []string{"sh", "-c", "echo $SANDBOX"}, TimeoutMS: 10000, MaxOutputBytes: 100})
	if err != nil || string(res.Stdout) != "yes\n" {
		t.Fatalf("command_compute 2 = %+v, %v", res, err)
	}
	// info, command and observe use the current (highest) compute.
	info, err := e.p.GetInfo(ctx(t), c)
	if err != nil || info.State != proto.StateRunning {
		t.Fatalf("info = %+v, %v", info, err)
	}

	e.stop(t, c, 1)
	if got, err := e.p.GetCompute(ctx(t), c, proto.ComputeRef{Generation: 1}); err != nil || got != (proto.State{State: proto.StateStopped, Compute: 1}) {
		t.Fatalf("compute 1 = %+v, %v", got, err)
	}
	_, err = e.p.RunCommandCompute(ctx(t), c, proto.ComputeRef{Generation: 1}, proto.Command{Argv: []string{"true"}, TimeoutMS: 1000, MaxOutputBytes: 1})
	wantCode(t, "command_compute on a stopped compute", err, proto.ErrRuntimeNotRunning)
	if got, err := e.p.ResumeCompute(ctx(t), c, proto.ComputeRef{Generation: 1}); err != nil || got != (proto.State{State: proto.StateRunning, Compute: 1}) {
		t.Fatalf("resume_compute 1 = %+v, %v", got, err)
	}
	if got, err := e.p.GetCompute(ctx(t), c, proto.ComputeRef{Generation: 1}); err != nil || got.State != proto.StateRunning {
		t.Fatalf("compute 1 after resume = %+v, %v", got, err)
	}

	if err := e.p.KillCompute(ctx(t), c, proto.ComputeRef{Generation: 2}); err != nil {
		t.Fatalf("kill_compute 2: %v", err)
	}
	_, err = e.p.GetCompute(ctx(t), c, proto.ComputeRef{Generation: 2})
	wantCode(t, "compute 2 after kill_compute", err, proto.ErrNotFound)
	wantCode(t, "kill_compute 2 again", e.p.KillCompute(ctx(t), c, proto.ComputeRef{Generation: 2}), proto.ErrNotFound)

	if err := e.p.Kill(ctx(t), c); err != nil {
		t.Fatalf("kill: %v", err)
	}
	_, err = e.p.Initial(ctx(t), c)
	wantCode(t, "initial after kill", err, proto.ErrNotFound)
}

func TestDeclaration(t *testing.T) {
	p, err := New(Config{Endpoint: "unix:///nonexistent.sock", NodeID: uuid.NewString(), State: mustState(t)})
	if err != nil {
		t.Fatal(err)
	}
	d := p.Declaration()
	for _, op := range proto.Operations {
		u, unsupported := d.Unsupported(op)
		want := op == proto.OpSuspend || op == proto.OpResume || op == proto.OpDeleteSnapshot
		if unsupported != want || d.Supported(op) == want {
			t.Errorf("%s: unsupported = %v, want %v", op, unsupported, want)
		}
		if unsupported {
			resp := &proto.Response{ID: uuid.NewString(), ConnectionID: uuid.NewString(), ErrorCode: proto.ErrUnsupported, Unsupported: &u}
			if _, err := proto.Encode(resp); err != nil || u.Operation != op {
				t.Errorf("%s: evidence %+v does not encode: %v", op, u, err)
			}
		}
	}
}

func mustState(t *testing.T) *state.Dir {
	t.Helper()
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
