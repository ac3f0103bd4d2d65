package helper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/internal/crashpoint"
	"github.com/sandgate/sandgate/nodeagent/lease"
	"github.com/sandgate/sandgate/nodeagent/provider"
	"github.com/sandgate/sandgate/nodeagent/state"
)

// Crash points of the helper (package crashpoint).
// Each is followed by "." and the operation (or "probe"), e.g.
// helper.after-lease.command.
const (
	// CrashAfterLease: the helper verified its inherited lease and set
	// close-on-exec; it has not called Docker.
	CrashAfterLease = "helper.after-lease"
	// CrashBeforeAnswer: the operation ran; its answer is not written.
	CrashBeforeAnswer = "helper.before-answer"
)

// Exit statuses of Main. Only 0 comes with an answer on stdout; the node
// answers unconfirmed for every other end, whatever stderr says.
const (
	exitAnswered = 0
	exitSetup    = 1
	exitUsage    = 2
)

// Main is `nodeagent helper`: it runs one provider operation (the request
// frame on stdin, the response frame on stdout) or, with --probe, one
// readiness probe, on the generation named by its flags, under the lease
// inherited as descriptor 3. stderr gets its log. It returns the exit
// status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// First of all: nothing the helper could start may inherit the lease
	// (lease.Inherited sets it again and checks the result).
	syscall.CloseOnExec(LeaseFD)
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", "", "the node's state directory")
	installation := fs.String("installation-id", "", "the installation UUID")
	generation := fs.Int64("generation", 0, "the deployment generation")
	digest := fs.String("specification-digest", "", "the generation's specification digest")
	nodeID := fs.String("node-id", "", "the node's UUID")
	endpoint := fs.String("docker-endpoint", "", "the Docker Engine address")
	network := fs.String("docker-network", "", "the node's network mode for containers")
	deadlineNS := fs.Int64("deadline", 0, "the budget's end, Unix nanoseconds")
	probe := fs.Bool("probe", false, "run the readiness probe instead of an operation")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *deadlineNS <= 0 {
		fmt.Fprintln(stderr, "nodeagent helper: --deadline is required")
		return exitUsage
	}
	// The request, read before anything else is touched.
	var req *proto.Request
	step := "probe"
	if !*probe {
		data, err := io.ReadAll(io.LimitReader(stdin, proto.MaxRequestFrame+1))
		if err != nil {
			return exitSetup
		}
		f, err := proto.Decode(data)
		r, ok := f.(*proto.Request)
		if err != nil || !ok {
			fmt.Fprintln(stderr, "nodeagent helper: the request is not a valid request frame")
			return exitUsage
		}
		if r.DeploymentGeneration != *generation {
			fmt.Fprintln(stderr, "nodeagent helper: the request names another deployment generation")
			return exitUsage
		}
		req, step = r, string(r.Operation)
	}
	gens, err := genstate.Open(*stateDir)
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent helper:", err)
		return exitSetup
	}
	b := genstate.Binding{InstallationID: *installation, Generation: *generation, SpecificationDigest: *digest}
	ls, err := lease.Inherited(LeaseFD, gens.Path(), b.Want(), lease.Shared)
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent helper:", err)
		return exitSetup
	}
	defer ls.Close()
	crashpoint.Hit(CrashAfterLease + "." + step)

	cfg, err := servable(gens, b)
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent helper:", err)
		return exitSetup
	}
	st, err := state.Open(*stateDir)
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent helper:", err)
		return exitSetup
	}
	prov, err := docker.New(docker.Config{Endpoint: *endpoint, NodeID: *nodeID, State: st, Network: *network,
		Generation: Bind(gens, cfg)})
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent helper:", err)
		return exitSetup
	}
	defer prov.Close()
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, *deadlineNS))
	defer cancel()

	if *probe {
		p := Probe{Ready: true}
		if err := prov.Probe(ctx); err != nil {
			p = Probe{Diagnostic: prov.Diagnose(err)}
		}
		out, _ := strictjson.Encode(p)
		if _, err := stdout.Write(out); err != nil {
			return exitSetup
		}
		return exitAnswered
	}

	resp, perr := provider.Execute(ctx, prov, req)
	if perr != nil {
		fmt.Fprintln(stderr, "nodeagent helper: operation failed:", perr)
	}
	crashpoint.Hit(CrashBeforeAnswer + "." + step)
	out, err := proto.Encode(resp)
	if err != nil {
		// A result the codec refuses (over the frame limit): the outcome
		// is unknown.
		code := proto.ErrUnconfirmed
		if req.Operation == proto.OpCommand || req.Operation == proto.OpCommandCompute {
			code = proto.ErrCommandUnconfirmed
		}
		if out, err = proto.Encode(&proto.Response{ID: req.ID, ConnectionID: req.ConnectionID, ErrorCode: code}); err != nil {
			return exitSetup
		}
	}
	if _, err := stdout.Write(out); err != nil {
		return exitSetup
	}
	return exitAnswered
}

// servable re-checks, under the inherited lease, that the generation's
// configuration is published and bound to b, and that no plan, journal or
// dropped marker exists.
func servable(gens *genstate.Dir, b genstate.Binding) (*genstate.Config, error) {
	for _, r := range []genstate.Record{genstate.RecordPlan, genstate.RecordJournal, genstate.RecordDropped} {
		ok, err := gens.Exists(b.Generation, r)
		if err != nil {
			return nil, err
		}
		if ok {
			return nil, fmt.Errorf("%w: %s present", ErrNotServable, r)
		}
	}
	cfg, err := gens.ReadConfig(b.Generation)
	if err != nil {
		return nil, err
	}
	if cfg.Binding != b {
		return nil, fmt.Errorf("%w: the configuration binds another specification", ErrNotServable)
	}
	return cfg, nil
}

// Bind turns a final configuration into the Docker provider's generation
// binding, reading and verifying the seccomp profile: missing or changed
// bytes make the provider a not-ready placeholder (SeccompMissing).
func Bind(gens *genstate.Dir, cfg *genstate.Config) *docker.Generation {
	g := &docker.Generation{ImageRef: cfg.ImageRef, ImageID: cfg.ImageID, Command: cfg.Command, Env: cfg.Env,
		User: cfg.User, MemoryBytes: cfg.MemoryBytes, NanoCPUs: cfg.NanoCPUs, NetworkMode: cfg.NetworkMode}
	if cfg.Seccomp != "" {
		f, _ := cfg.File(cfg.Seccomp)
		b, err := lease.ReadPrivate(filepath.Join(gens.FilesPath(cfg.Generation), f.Name), f.Size)
		sum := sha256.Sum256(b)
		if err != nil || int64(len(b)) != f.Size || hex.EncodeToString(sum[:]) != f.SHA256 {
			g.SeccompMissing = true
		} else {
			g.Seccomp = b
		}
	}
	return g
}
