// Package helper is the native helper of a generation-managing node (spec
// node-protocol.md "Local retention and helper lifecycle"): every provider
// operation and every readiness probe of a deployment generation runs in
// a short-lived helper process — `nodeagent helper`, the node's own
// executable — bound to that generation's final provider configuration
// and holding the generation's lease.
//
// The node (Launcher) takes the shared flock on the lease without
// blocking, verifies the identity record while holding it, requires that
// the final configuration is published and that no preparation plan,
// reclamation journal or dropped marker exists, and starts the helper
// with the locked descriptor as file descriptor 3. It closes its own copy
// only after the helper's Wait returns and never unlocks explicitly, so
// neither a cancelled caller nor the node exiting releases the reference
// of a helper that still runs. The helper (Main) sets close-on-exec on
// descriptor 3 before anything else, verifies it, and only then calls
// Docker.
//
// The request goes to the helper's stdin and the response comes back on
// its stdout as the very frames of the node protocol (package node/proto,
// decoded strictly on both sides). A probe answers one small JSON object.
// Nothing is parsed from stderr.
package helper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/lease"
)

// Command is the subcommand of the nodeagent executable that runs a
// helper.
const Command = "helper"

// LeaseFD is the file descriptor the helper inherits the lease on.
const LeaseFD = 3

// Errors of the Launcher. A request that meets one of them is not run
// (the node answers unconfirmed).
var (
	// ErrNotServable: the generation's configuration is not published, or
	// a preparation plan, reclamation journal or dropped marker exists.
	ErrNotServable = errors.New("helper: the generation has no usable provider")
	// ErrNoAnswer: the helper ended without a valid answer (it crashed,
	// was killed, or wrote something that is not the answer).
	ErrNoAnswer = errors.New("helper: no valid answer from the helper")
)

// Launcher starts helpers on the node's side.
type Launcher struct {
	// Executable is the nodeagent executable (os.Executable()).
	Executable string
	// StateDir is the node's state directory.
	StateDir string
	// Generations is the node's generations directory.
	Generations *genstate.Dir
	// NodeID is the node's UUID (container labels).
	NodeID string
	// DockerEndpoint and DockerNetwork are the node's Docker settings.
	DockerEndpoint, DockerNetwork string
	// Stderr receives the helpers' stderr (their own log); nil discards
	// it. The node never parses it.
	Stderr io.Writer
	// Log is the node's log; nil discards.
	Log *slog.Logger
}

// Probe is a probe's answer (the helper's stdout in probe mode).
type Probe struct {
	// Ready is true when the generation's provider can take work.
	Ready bool `json:"ready"`
	// Diagnostic is the fixed diagnostic code when not ready.
	Diagnostic string `json:"diagnostic,omitempty"`
}

// probeSchema: ready is required.
var probeSchema = strictjson.Schema{Required: map[string][]string{"": {"ready"}}}

// maxProbeAnswer bounds a probe's answer, in bytes.
const maxProbeAnswer = 4 << 10

// open takes the shared lease of b and checks the generation can serve.
func (l *Launcher) open(b genstate.Binding) (*lease.Lease, error) {
	ls, err := lease.Acquire(l.Generations.Path(), b.Want(), lease.Shared)
	if err != nil {
		return nil, err
	}
	for _, r := range []genstate.Record{genstate.RecordPlan, genstate.RecordJournal, genstate.RecordDropped} {
		ok, err := l.Generations.Exists(b.Generation, r)
		if err != nil || ok {
			ls.Close()
			return nil, fmt.Errorf("%w: %s present", ErrNotServable, r)
		}
	}
	c, err := l.Generations.ReadConfig(b.Generation)
	if err != nil || c.Binding != b {
		ls.Close()
		return nil, fmt.Errorf("%w: configuration: %v", ErrNotServable, err)
	}
	return ls, nil
}

// started is a running helper.
type started struct {
	out    chan []byte   // the helper's stdout, once it is closed
	exited chan struct{} // closed after Wait returned and the lease closed
}

// start starts a helper for b with args, feeding stdin, under a lease it
// holds from now until the helper's Wait returns; onExit runs then.
func (l *Launcher) start(b genstate.Binding, stdin []byte, limit int64, onExit func(), args ...string) (*started, error) {
	ls, err := l.open(b)
	if err != nil {
		return nil, err
	}
	argv := append([]string{Command,
		"--state-dir", l.StateDir,
		"--installation-id", b.InstallationID,
		"--generation", strconv.FormatInt(b.Generation, 10),
		"--specification-digest", b.SpecificationDigest,
		"--node-id", l.NodeID,
		"--docker-endpoint", l.DockerEndpoint,
		"--docker-network", l.DockerNetwork,
	}, args...)
	cmd := exec.Command(l.Executable, argv...)
	cmd.ExtraFiles = []*os.File{ls.File()}
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stderr = l.Stderr
	// Its own process group: a signal to the node's group (a terminal's
	// Ctrl-C) does not reach a helper that must finish its call.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		ls.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		ls.Close()
		return nil, fmt.Errorf("helper: start: %w", err)
	}
	s := &started{out: make(chan []byte, 1), exited: make(chan struct{})}
	go func() {
		b, err := io.ReadAll(io.LimitReader(stdout, limit+1))
		if err != nil || int64(len(b)) > limit {
			b = nil
		}
		io.Copy(io.Discard, stdout)
		s.out <- b
		cmd.Wait()
		// Only now: the helper no longer runs, so the node's copy of the
		// locked description may go.
		ls.Close()
		if onExit != nil {
			onExit()
		}
		close(s.exited)
	}()
	return s, nil
}

// Run runs request req on generation b in a helper and returns its
// response. The helper gets deadline as its budget. When ctx ends before
// the helper answers, Run returns ctx's error at once, but the helper
// keeps its lease until it exits; onExit (optional) runs after its Wait
// returned, in every case, and is how the caller counts the helper as
// alive. Errors: the lease package's (ErrBusy while a reclaimer or repair
// holds the lease), ErrNotServable, ErrNoAnswer, ctx's.
func (l *Launcher) Run(ctx context.Context, b genstate.Binding, req *proto.Request, deadline time.Time, onExit func()) (*proto.Response, error) {
	frame, err := proto.Encode(req)
	if err != nil {
		if onExit != nil {
			onExit()
		}
		return nil, err
	}
	s, err := l.start(b, frame, proto.MaxRequestFrame, onExit, "--deadline", strconv.FormatInt(deadline.UnixNano(), 10))
	if err != nil {
		if onExit != nil {
			onExit()
		}
		return nil, err
	}
	select {
	case out := <-s.out:
		f, err := proto.Decode(out)
		resp, ok := f.(*proto.Response)
		if err != nil || !ok || resp.ID != req.ID || resp.ConnectionID != req.ConnectionID {
			return nil, ErrNoAnswer
		}
		return resp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Probe runs the readiness probe of generation b in a helper, bounded by
// ctx, and returns its answer. Errors as Run's.
func (l *Launcher) Probe(ctx context.Context, b genstate.Binding, onExit func()) (Probe, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	s, err := l.start(b, nil, maxProbeAnswer, onExit, "--probe", "--deadline", strconv.FormatInt(deadline.UnixNano(), 10))
	if err != nil {
		if onExit != nil {
			onExit()
		}
		return Probe{}, err
	}
	select {
	case out := <-s.out:
		var p Probe
		if out == nil || strictjson.Decode(out, &p, probeSchema) != nil || (!p.Ready && p.Diagnostic == "") {
			return Probe{}, ErrNoAnswer
		}
		return p, nil
	case <-ctx.Done():
		return Probe{}, ctx.Err()
	}
}
