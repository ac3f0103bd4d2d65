// Command nodeagent is the sandbox node agent: it connects to Core over the
// sandbox-node protocol, reports the node's health and runs provider
// operations on the local Docker engine. Run it with --help for its
// settings and --version for the sandgate commit it was built from;
// nodeagent/README.md describes the operation mapping and
// nodeagent/nodeagent.service runs it under systemd.
//
// Exit status: 0 after SIGINT or SIGTERM, 1 on a runtime failure, 2 on a
// configuration error, 3 when Core rejects the node credential (HTTP 401,
// permanent: the agent does not retry).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/version"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/agent"
	"github.com/sandgate/sandgate/nodeagent/config"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/enrol"
	"github.com/sandgate/sandgate/nodeagent/generation"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/helper"
	"github.com/sandgate/sandgate/nodeagent/preparer"
	"github.com/sandgate/sandgate/nodeagent/state"
)

// Exit statuses.
const (
	exitOK       = 0
	exitFailure  = 1
	exitConfig   = 2
	exitRejected = 3
	// exitEnrolRefused: `nodeagent enrol` refused; nothing was written.
	exitEnrolRefused = 4
	// exitEnrolPrepare: enrolled (credential and identity written), but
	// reading the configuration back or preparing the runtime failed; the
	// service retries it.
	exitEnrolPrepare = 5
	// exitEnrolUnknown: the enrolment's answer was lost; Core may have
	// registered the node; nothing was written.
	exitEnrolUnknown = 6
)

func main() {
	// The private subcommands run in processes the node starts; they
	// install no signal handling of their own.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case helper.Command:
			os.Exit(helper.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
		case preparer.Command:
			os.Exit(preparer.Main(os.Args[2:], os.Stderr))
		case "enrol":
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			code := runEnrol(ctx, os.Args[2:], os.Stdout, os.Stderr)
			stop()
			os.Exit(code)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// newLogger returns nodeagent's logger: one JSON object a line on w for
// each record at level or above, with the keys of the gateway's and
// corectl's JSON logs (zap's production encoding, so one log pipeline
// reads all three): "ts" (Unix time in seconds, fractional), "level" (lower
// case: debug, info, warn, error), "msg", then the record's attributes.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) > 0 {
			return a
		}
		switch a.Key {
		case slog.TimeKey:
			return slog.Float64("ts", float64(a.Value.Time().UnixNano())/1e9)
		case slog.LevelKey:
			if l, ok := a.Value.Any().(slog.Level); ok {
				return slog.String(slog.LevelKey, strings.ToLower(l.String()))
			}
		}
		return a
	}}))
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, stderr)
	if errors.Is(err, config.ErrHelp) {
		return exitOK
	}
	if errors.Is(err, config.ErrVersion) {
		fmt.Fprintln(stdout, version.Get())
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent:", err)
		return exitConfig
	}
	var level slog.Level
	level.UnmarshalText([]byte(cfg.LogLevel))
	log := newLogger(stderr, level)

	st, err := state.Open(cfg.StateDir)
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent:", err)
		return exitConfig
	}
	if cfg.GenerationManagement {
		// A generation-managing node takes what it left out from the
		// identity `nodeagent enrol` stored.
		id, err := st.Identity()
		switch {
		case err == nil:
			err = cfg.ApplyIdentity(config.Identity{CoreOrigin: id.CoreOrigin, NodeID: id.NodeID, InstallationID: id.InstallationID,
				DeploymentGeneration: id.DeploymentGeneration, SpecificationDigest: id.SpecificationDigest})
		case errors.Is(err, state.ErrNoIdentity):
			if err = cfg.Validate(); err != nil {
				// Most likely the unit was started before the host
				// was enrolled: say so, not only which setting is
				// missing.
				hint := fmt.Sprintf("generation_management is on and the state directory %s holds no enrolled identity: run `nodeagent enrol` first, or give every setting", cfg.StateDir)
				if _, serr := os.Lstat(cfg.CredentialFile); serr == nil {
					// enrol writes the credential just before the
					// identity: a host with the one and not the other
					// had its enrol cut off in between.
					hint = fmt.Sprintf("generation_management is on; the credential file %s exists but the state directory %s holds no enrolled identity: an earlier `nodeagent enrol` was cut off after it wrote the credential, and its enrolment token is used; remove the credential file and run `nodeagent enrol` with a new token",
						cfg.CredentialFile, cfg.StateDir)
				}
				err = fmt.Errorf("%w (%s)", err, hint)
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, "nodeagent:", err)
			return exitConfig
		}
	}
	installation := cfg.InstallationID
	if installation == "" {
		if installation, err = st.InstallationID(); err != nil {
			fmt.Fprintln(stderr, "nodeagent:", err)
			return exitFailure
		}
	}
	prov, err := docker.New(docker.Config{Endpoint: cfg.DockerEndpoint, NodeID: cfg.NodeID, State: st, Network: cfg.DockerNetwork})
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent:", err)
		return exitConfig
	}
	defer prov.Close()
	if cfg.PrintIdentity {
		return printIdentity(ctx, cfg, installation, prov, stdout, stderr)
	}

	// Fail fast on a credential file that cannot work; it is read again
	// before every connection attempt.
	if _, err := config.ReadCredential(cfg.CredentialFile); err != nil {
		fmt.Fprintln(stderr, "nodeagent:", err)
		return exitConfig
	}
	var tlsConf *tls.Config
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		pool := x509.NewCertPool()
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			fmt.Fprintf(stderr, "nodeagent: config: ca_file %s holds no readable PEM certificate\n", cfg.CAFile)
			return exitConfig
		}
		tlsConf = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	origin, _ := url.Parse(cfg.CoreOrigin) // validated by config.Load
	t := cfg.Timers
	var mgr *generation.Manager
	if cfg.GenerationManagement {
		if mgr, err = generations(cfg, installation, stderr, log); err != nil {
			fmt.Fprintln(stderr, "nodeagent:", err)
			return exitConfig
		}
		go mgr.Run(ctx)
	}
	ag, err := agent.New(agent.Config{
		Origin:               origin,
		NodeID:               cfg.NodeID,
		Credential:           func() (string, error) { return config.ReadCredential(cfg.CredentialFile) },
		InstallationID:       installation,
		DeploymentGeneration: cfg.DeploymentGeneration,
		SpecificationDigest:  cfg.SpecificationDigest,
		MaxActive:            cfg.MaxActive,
		Fingerprint:          fingerprint(prov, st, time.Duration(t.Probe), log),
		Provider:             prov,
		DiskPath:             cfg.DiskPath,
		State:                st,
		TLS:                  tlsConf,
		Log:                  log,
		Generations:          mgr,
		MaxRetained:          cfg.MaxRetained,
		Timers: agent.Timers{
			Heartbeat:  time.Duration(t.Heartbeat),
			Idle:       time.Duration(t.Idle),
			Handshake:  time.Duration(t.Handshake),
			Write:      time.Duration(t.Write),
			Probe:      time.Duration(t.Probe),
			BackoffMin: time.Duration(t.BackoffMin),
			BackoffMax: time.Duration(t.BackoffMax),

			ShutdownGrace: time.Duration(t.ShutdownGrace),
		},
	})
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent:", err)
		return exitConfig
	}
	log.Info("starting", "node_id", cfg.NodeID, "installation_id", installation, "core_origin", cfg.CoreOrigin,
		"deployment_generation", cfg.DeploymentGeneration, "max_active", cfg.MaxActive)

	err = ag.Run(ctx)
	switch {
	case errors.Is(err, agent.ErrRejected):
		fmt.Fprintln(stderr, "nodeagent: Core rejected the node credential (HTTP 401). This is permanent: "+
			"re-enroll the node or install a valid credential file, then start nodeagent again.")
		return exitRejected
	case ctx.Err() != nil:
		log.Info("stopped")
		return exitOK
	}
	fmt.Fprintln(stderr, "nodeagent:", err)
	return exitFailure
}

// identity is what Core's node enrolment records about a node (the members
// of a nodecore/credential file entry other than enabled and credential_sha256).
type identity struct {
	NodeID               string `json:"node_id"`
	InstallationID       string `json:"installation_id"`
	Provider             string `json:"provider"`
	BackendFingerprint   string `json:"backend_fingerprint"`
	DeploymentGeneration int64  `json:"deployment_generation"`
	SpecificationDigest  string `json:"specification_digest"`
	GenerationManagement bool   `json:"generation_management"`
}

// printIdentity writes the node's enrolment identity as JSON to stdout.
func printIdentity(ctx context.Context, cfg *config.Config, installation string, prov *docker.Provider, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timers.Probe))
	defer cancel()
	fp, err := prov.Fingerprint(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent: the backend fingerprint needs the Docker engine:", err)
		return exitFailure
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(identity{NodeID: cfg.NodeID, InstallationID: installation, Provider: string(proto.ProviderDocker),
		BackendFingerprint: fp, DeploymentGeneration: cfg.DeploymentGeneration, SpecificationDigest: cfg.SpecificationDigest}); err != nil {
		return exitFailure
	}
	return exitOK
}

// fingerprint returns the agent's Fingerprint function: the Docker
// engine's fingerprint, remembered in the state directory, so that a node
// whose daemon is down still says hello (with the last known fingerprint)
// and reports itself not ready.
func fingerprint(prov *docker.Provider, st *state.Dir, timeout time.Duration, log *slog.Logger) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		fp, err := prov.Fingerprint(ctx)
		if err == nil {
			if old, lerr := st.Load(state.FingerprintRecord); lerr != nil || string(bytes.TrimSpace(old)) != fp {
				if serr := st.Store(state.FingerprintRecord, []byte(fp+"\n")); serr != nil {
					return "", serr
				}
			}
			return fp, nil
		}
		old, lerr := st.Load(state.FingerprintRecord)
		if lerr == nil && proto.IsDigest(string(bytes.TrimSpace(old))) {
			log.Warn("cannot read the Docker engine identity; using the last known backend fingerprint")
			return string(bytes.TrimSpace(old)), nil
		}
		return "", err
	}
}

// selfImage is the kernel's name for the executable file of the calling
// process.
const selfImage = "/proc/self/exe"

// selfExecutable names the program the node's helpers and preparers run:
// /proc/self/exe, which the kernel resolves to the very file this process
// was started from, even after the installed path was replaced by an
// upgrade (a new file renamed over the old name, as install(1) and package
// managers do). A helper or preparer thus always runs the build of the
// agent that launched it, never a newer one installed meanwhile; the new
// build runs only after the agent restarts (nodeagent/README.md,
// "Upgrading the agent"). The error says /proc is not mounted.
func selfExecutable() (string, error) {
	if _, err := os.Stat(selfImage); err != nil {
		return "", fmt.Errorf("cannot find the nodeagent executable for its helpers (%s; is /proc mounted?): %w", selfImage, err)
	}
	return selfImage, nil
}

// generations builds the generation manager of a generation-managing
// node: helpers and preparers are this very executable, and the manager
// has read what the generations directory holds (restart recovery; it
// acts only once a connection supplies the deployment).
func generations(cfg *config.Config, installation string, stderr io.Writer, log *slog.Logger) (*generation.Manager, error) {
	exe, err := selfExecutable()
	if err != nil {
		return nil, err
	}
	gens, err := genstate.Open(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	runner := &helper.Launcher{Executable: exe, StateDir: cfg.StateDir, Generations: gens, NodeID: cfg.NodeID,
		DockerEndpoint: cfg.DockerEndpoint, DockerNetwork: cfg.DockerNetwork, Stderr: stderr, Log: log}
	prep := &preparer.Launcher{Executable: exe, Stderr: stderr, Settings: preparer.Settings{StateDir: cfg.StateDir,
		NodeID: cfg.NodeID, CoreOrigin: cfg.CoreOrigin, CredentialFile: cfg.CredentialFile, CAFile: cfg.CAFile,
		DockerEndpoint: cfg.DockerEndpoint}}
	mgr, err := generation.New(generation.Config{InstallationID: installation, Generations: gens, Preparer: prep,
		Runner: runner, ProbeTimeout: time.Duration(cfg.Timers.Probe), Log: log})
	if err != nil {
		return nil, err
	}
	return mgr, mgr.Load()
}

// runEnrol is `nodeagent enrol`; it returns the exit status.
func runEnrol(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e, err := config.LoadEnrolment(args, stderr)
	if errors.Is(err, config.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "nodeagent enrol:", err)
		return exitConfig
	}
	res, err := enrol.Run(ctx, e, stdout)
	switch {
	case errors.Is(err, enrol.ErrRefused):
		fmt.Fprintln(stderr, "nodeagent enrol:", err)
		return exitEnrolRefused
	case errors.Is(err, enrol.ErrPreparation):
		fmt.Fprintln(stderr, "nodeagent enrol:", err)
		return exitEnrolPrepare
	case errors.Is(err, enrol.ErrEnrolmentUnknown):
		fmt.Fprintln(stderr, "nodeagent enrol:", err)
		return exitEnrolUnknown
	case err != nil:
		fmt.Fprintln(stderr, "nodeagent enrol: failed while writing the node's files:", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "node %s is enrolled and generation %d is installed.\n"+
		"Run it with generation_management = true, state_dir = %q and credential_file = %q in its configuration\n"+
		"(node_id, installation_id, core_origin and the enrolled generation come from the state directory),\n"+
		"e.g. systemctl enable --now nodeagent.\n", res.Identity.NodeID, res.Identity.DeploymentGeneration,
		e.Config.StateDir, e.Config.CredentialFile)
	return exitOK
}
