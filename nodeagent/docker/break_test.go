package docker

import (
	"testing"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// TestBreakOutputBombIsCutAndDrained: several MiB of binary output (NULs
// included) on both streams against max_output_bytes 1 gives exactly one
// byte of each, both flagged, the real exit code, and a result the codec
// accepts.
func TestBreakOutputBombIsCutAndDrained(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	e.create(t, c, e.sleeper())
	res, err := e.p.RunCommand(ctx(t), c, proto.Command{
		Argv:      []string{"sh", "-c", "head -c 4000000 /dev/zero; head -c 4000000 /dev/zero >&2; exit 5"},
		TimeoutMS: 60000, MaxOutputBytes: 1,
	})
	if err != nil {
		t.Fatalf("command: %v", err)
	}
	if res.ExitCode != 5 || len(res.Stdout) != 1 || len(res.Stderr) != 1 || !res.StdoutTruncated || !res.StderrTruncated {
		t.Fatalf("result = %+v", res)
	}
	resp := &proto.Response{ID: "00000000-0000-4000-8000-000000000001", ConnectionID: "00000000-0000-4000-8000-000000000002", Command: &res}
	if _, err := proto.Encode(resp); err != nil {
		t.Fatalf("the result does not encode: %v", err)
	}
}

// TestBreakOneMillisecondBudgetIsNeverASuccessWithoutAnExit: a command
// with timeout_ms 1 either fails with an unknown outcome (unconfirmed
// before the exec started, command_unconfirmed after) or, if Docker was
// that fast, is a real result; never another code.
func TestBreakOneMillisecondBudgetIsNeverASuccessWithoutAnExit(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	e.create(t, c, e.sleeper())
	for range 5 {
		res, err := e.p.RunCommand(ctx(t), c, proto.Command{Argv: []string{"sleep", "1"}, TimeoutMS: 1, MaxOutputBytes: 1})
		if err == nil {
			t.Fatalf("sleep 1 under a 1 ms timeout succeeded: %+v", res)
		}
		if code := provider.CodeOf(err); code != proto.ErrUnconfirmed && code != proto.ErrCommandUnconfirmed {
			t.Fatalf("1 ms timeout: code %q (%v)", code, err)
		}
	}
	// Kill and a command racing on the same reference: each answers a
	// definite code or an unknown outcome, and the sandbox is gone after.
	type outcome struct {
		res proto.CommandResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.p.RunCommand(ctx(t), c, proto.Command{Argv: []string{"sleep", "5"}, TimeoutMS: 20000, MaxOutputBytes: 1})
		done <- outcome{res, err}
	}()
	if err := e.p.Kill(ctx(t), c); err != nil {
		t.Fatalf("kill: %v", err)
	}
	o := <-done
	err := o.err
	switch code := provider.CodeOf(err); {
	case err == nil && o.res.ExitCode == 0:
		t.Fatal("sleep 5 in a sandbox killed meanwhile exited 0")
	case err == nil: // killed: a real, non-zero exit code, as docker exec shows it
	case code == proto.ErrNotFound, code == proto.ErrRuntimeNotRunning, code == proto.ErrUnconfirmed, code == proto.ErrCommandUnconfirmed:
	default:
		t.Fatalf("command racing a kill: code %q (%v)", code, err)
	}
	_, err = e.p.GetInfo(ctx(t), c)
	wantCode(t, "info after kill", err, proto.ErrNotFound)
}
