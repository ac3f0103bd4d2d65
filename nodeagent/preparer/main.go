package preparer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/nodeagent/config"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/generation"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/lease"
	"github.com/sandgate/sandgate/nodeagent/machineclient"
	"github.com/sandgate/sandgate/nodeagent/state"
)

// Command is the subcommand of the nodeagent executable that runs the
// preparer.
const Command = "preparer"

// LeaseFD is the descriptor a preparer inherits the node's exclusive
// lease on.
const LeaseFD = 3

// Settings are what a preparer needs besides its job: where the node
// keeps its state, how to reach Core and Docker.
type Settings struct {
	// StateDir is the node's state directory.
	StateDir string
	// NodeID is the node's UUID.
	NodeID string
	// CoreOrigin is Core's origin (http or https).
	CoreOrigin string
	// CredentialFile holds the node credential.
	CredentialFile string
	// CAFile optionally names PEM certificates to trust for https.
	CAFile string
	// DockerEndpoint is the Docker Engine address.
	DockerEndpoint string
}

func (s Settings) args() []string {
	return []string{"--state-dir", s.StateDir, "--node-id", s.NodeID, "--core-origin", s.CoreOrigin,
		"--credential-file", s.CredentialFile, "--ca-file", s.CAFile, "--docker-endpoint", s.DockerEndpoint}
}

// TLS returns the TLS configuration for CAFile (nil without one).
func (s Settings) TLS() (*tls.Config, error) {
	if s.CAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(s.CAFile)
	pool := x509.NewCertPool()
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca_file %s holds no readable PEM certificate", s.CAFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Main is `nodeagent preparer`: it runs one job and returns its exit
// status (see the Exit constants). Its log goes to stderr, which the node
// never parses.
func Main(args []string, stderr io.Writer) int {
	// The inherited lease must not leak into anything the preparer starts.
	syscall.CloseOnExec(LeaseFD)
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var s Settings
	fs.StringVar(&s.StateDir, "state-dir", "", "the node's state directory")
	fs.StringVar(&s.NodeID, "node-id", "", "the node's UUID")
	fs.StringVar(&s.CoreOrigin, "core-origin", "", "Core's origin")
	fs.StringVar(&s.CredentialFile, "credential-file", "", "the node credential file")
	fs.StringVar(&s.CAFile, "ca-file", "", "PEM certificates to trust for https")
	fs.StringVar(&s.DockerEndpoint, "docker-endpoint", "", "the Docker Engine address")
	kind := fs.String("job", "", "prepare, repair or reclaim")
	installation := fs.String("installation-id", "", "the installation UUID")
	g := fs.Int64("generation", 0, "the deployment generation")
	digest := fs.String("specification-digest", "", "the generation's specification digest")
	withLease := fs.Bool("lease", false, "descriptor 3 is the generation's exclusive lease")
	deadline := fs.Int64("deadline", 0, "the attempt's end, Unix nanoseconds")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	b := genstate.Binding{InstallationID: *installation, Generation: *g, SpecificationDigest: *digest}
	ctx := context.Background()
	if *deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, *deadline))
		defer cancel()
	}
	j, dk, err := NewJob(generation.JobKind(*kind), b, s)
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent preparer:", err)
		return ExitCode(err, nil)
	}
	defer dk.Close()
	if *withLease {
		ls, err := lease.Inherited(LeaseFD, j.Generations.Path(), b.Want(), lease.Exclusive)
		if err != nil {
			fmt.Fprintln(stderr, "nodeagent preparer:", err)
			return ExitCode(err, dk)
		}
		j.Lease = ls
		defer ls.Close()
	}
	j.Log = stderr
	err = Run(ctx, j)
	if err != nil {
		fmt.Fprintf(stderr, "nodeagent preparer: %s of generation %d: %v\n", *kind, *g, err)
	}
	return ExitCode(err, dk)
}

// NewJob builds a job from the node's settings (the credential is read
// from its file). The caller closes the Docker provider.
func NewJob(kind generation.JobKind, b genstate.Binding, s Settings) (*Job, *docker.Provider, error) {
	if kind != generation.JobPrepare && kind != generation.JobRepair && kind != generation.JobReclaim {
		return nil, nil, &failure{exit: ExitUsage, err: fmt.Errorf("unknown job %q", kind)}
	}
	gens, err := genstate.Open(s.StateDir)
	if err != nil {
		return nil, nil, err
	}
	st, err := state.Open(s.StateDir)
	if err != nil {
		return nil, nil, err
	}
	origin, err := url.Parse(s.CoreOrigin)
	if err != nil || (origin.Scheme != "http" && origin.Scheme != "https") || origin.Host == "" {
		return nil, nil, &failure{exit: ExitUsage, err: errors.New("--core-origin must be an http or https URL")}
	}
	tlsConf, err := s.TLS()
	if err != nil {
		return nil, nil, &failure{exit: ExitUsage, err: err}
	}
	cred, err := config.ReadCredential(s.CredentialFile)
	if err != nil {
		return nil, nil, &failure{exit: ExitUsage, err: err}
	}
	dk, err := docker.New(docker.Config{Endpoint: s.DockerEndpoint, NodeID: s.NodeID, State: st})
	if err != nil {
		return nil, nil, &failure{exit: ExitUsage, err: err}
	}
	return &Job{Kind: kind, Binding: b, Generations: gens, Core: machineclient.New(origin, tlsConf),
		Auth: machineclient.Auth{NodeID: s.NodeID, Credential: cred}, Docker: dk}, dk, nil
}

// Launcher runs preparer jobs in `nodeagent preparer` processes for the
// generation manager (it implements generation.Preparer).
type Launcher struct {
	// Executable is the nodeagent executable.
	Executable string
	// Settings are passed to every preparer.
	Settings Settings
	// Stderr receives the preparers' log; nil discards it. It is never
	// parsed.
	Stderr io.Writer
}

// Run starts the preparer for job, passing ls (when not nil) as
// descriptor 3, and waits for it. When ctx's deadline (the attempt's 30
// minutes) passes, the preparer is killed; its journals make that safe.
// The outcome comes from the exit status alone.
func (l *Launcher) Run(ctx context.Context, job generation.Job, ls *lease.Lease) generation.Outcome {
	args := append([]string{Command, "--job", string(job.Kind),
		"--installation-id", job.Binding.InstallationID,
		"--generation", strconv.FormatInt(job.Binding.Generation, 10),
		"--specification-digest", job.Binding.SpecificationDigest}, l.Settings.args()...)
	if d, ok := ctx.Deadline(); ok {
		args = append(args, "--deadline", strconv.FormatInt(d.UnixNano(), 10))
	}
	cmd := exec.Command(l.Executable, args...)
	if ls != nil {
		cmd.Args = append(cmd.Args, "--lease")
		cmd.ExtraFiles = []*os.File{ls.File()}
	}
	cmd.Stdout, cmd.Stderr = l.Stderr, l.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return OutcomeOf(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return OutcomeOf(err)
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		return OutcomeOf(ctx.Err())
	}
}
