package docker

import (
	"context"
	"errors"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// maxCombinedOutput bounds stdout plus stderr of one command result so
// that the response frame, with its output in base64, stays under
// proto.MaxRequestFrame; output beyond it is cut and flagged truncated.
const maxCombinedOutput = 50 << 20

// execPoll is how often the exit code is read again when the output ended
// before Docker recorded the exit.
const execPoll = 10 * time.Millisecond

// RunCommand runs the command in the sandbox's current compute container.
func (p *Provider) RunCommand(ctx context.Context, c provider.Call, cmd proto.Command) (proto.CommandResult, error) {
	cs, err := p.computes(ctx, c)
	if err != nil {
		return proto.CommandResult{}, err
	}
	cur := cs[len(cs)-1]
	return p.exec(ctx, cur.id, cur.running, cmd)
}

// RunCommandCompute runs the command in one compute container.
func (p *Provider) RunCommandCompute(ctx context.Context, c provider.Call, ref proto.ComputeRef, cmd proto.Command) (proto.CommandResult, error) {
	ins, _, err := p.computeContainer(ctx, c, ref.Generation)
	if err != nil {
		return proto.CommandResult{}, err
	}
	return p.exec(ctx, ins.ID, instanceState(ins.State) == proto.StateRunning, cmd)
}

// errCommandUnknown is the cause of command_unconfirmed answers.
var errCommandUnknown = errors.New("docker: the command's outcome is unknown")

// exec runs cmd in container id with Docker exec, bounded by the
// command's timeout and the request's budget (ctx). Before the exec starts
// a failure is definite (runtime_not_running for a stopped container,
// not_found for a vanished one) or unknown (unconfirmed); once it may have
// started, any failure, including the deadline passing before the exit
// code is known, answers command_unconfirmed: Docker cannot kill an exec,
// so the process may still be running.
func (p *Provider) exec(ctx context.Context, id string, running bool, cmd proto.Command) (proto.CommandResult, error) {
	if !running {
		return proto.CommandResult{}, provider.Fail(proto.ErrRuntimeNotRunning, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(cmd.TimeoutMS)*time.Millisecond)
	defer cancel()

	created, err := p.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd:          cmd.Argv,
		Env:          envList(cmd.Env),
		WorkingDir:   cmd.Cwd,
		AttachStdout: true,
		AttachStderr: true,
	})
	switch {
	case cerrdefs.IsConflict(err):
		return proto.CommandResult{}, provider.Fail(proto.ErrRuntimeNotRunning, err)
	case err != nil:
		return proto.CommandResult{}, dockerErr(err)
	}

	start := time.Now()
	hj, err := p.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return proto.CommandResult{}, provider.Fail(proto.ErrCommandUnconfirmed, errors.Join(errCommandUnknown, err))
	}
	defer hj.Close()
	// The hijacked connection ignores ctx: close it when ctx ends.
	stop := context.AfterFunc(ctx, hj.Close)
	defer stop()

	stdout, stderr := &boundedBuffer{max: cmd.MaxOutputBytes}, &boundedBuffer{max: cmd.MaxOutputBytes}
	if _, err := stdcopy.StdCopy(stdout, stderr, hj.Reader); err != nil || ctx.Err() != nil {
		return proto.CommandResult{}, provider.Fail(proto.ErrCommandUnconfirmed, errors.Join(errCommandUnknown, err, ctx.Err()))
	}
	exit, err := p.exitCode(ctx, created.ID)
	if err != nil {
		return proto.CommandResult{}, provider.Fail(proto.ErrCommandUnconfirmed, errors.Join(errCommandUnknown, err))
	}
	res := proto.CommandResult{
		ExitCode:        exit,
		Stdout:          stdout.buf,
		Stderr:          stderr.buf,
		StdoutTruncated: stdout.truncated,
		StderrTruncated: stderr.truncated,
		DurationMS:      time.Since(start).Milliseconds(),
	}
	capCombined(&res, maxCombinedOutput)
	if res.Stdout == nil {
		res.Stdout = []byte{}
	}
	if res.Stderr == nil {
		res.Stderr = []byte{}
	}
	return res, nil
}

// exitCode reads the exec's exit code, polling while Docker still reports
// it running (its output can end just before the exit is recorded).
func (p *Provider) exitCode(ctx context.Context, execID string) (int, error) {
	t := time.NewTicker(execPoll)
	defer t.Stop()
	for {
		ins, err := p.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, err
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

// boundedBuffer keeps the first max bytes written to it and records
// whether more arrived; it never fails a write, so the process's output is
// always drained.
type boundedBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

// Write keeps what fits and reports the whole of b written.
func (b *boundedBuffer) Write(p []byte) (int, error) {
	room := b.max - len(b.buf)
	if len(p) > room {
		b.truncated = true
		b.buf = append(b.buf, p[:max(room, 0)]...)
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// capCombined cuts the larger of stdout and stderr until together they
// hold at most limit bytes, flagging what it cut.
func capCombined(r *proto.CommandResult, limit int) {
	for len(r.Stdout)+len(r.Stderr) > limit {
		over := len(r.Stdout) + len(r.Stderr) - limit
		if len(r.Stdout) >= len(r.Stderr) {
			r.Stdout, r.StdoutTruncated = r.Stdout[:len(r.Stdout)-min(over, len(r.Stdout))], true
		} else {
			r.Stderr, r.StderrTruncated = r.Stderr[:len(r.Stderr)-min(over, len(r.Stderr))], true
		}
	}
}
