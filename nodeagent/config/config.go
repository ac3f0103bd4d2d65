// Package config is nodeagent's configuration: a TOML file (see
// nodeagent/nodeagent.example.toml) whose every setting a command-line flag
// can override, the spec's timer defaults, validation with messages an
// operator can act on, and the reading of the node credential file.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sandgate/sandgate/node/proto"
)

// DefaultPath is the configuration file read when --config is not given
// (and only if it exists).
const DefaultPath = "/etc/sandgate/nodeagent.toml"

// Duration is a time.Duration written as a Go duration string ("10s",
// "1m30s") in the file and on the command line.
type Duration time.Duration

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// Timers are the protocol timers (spec node-protocol.md "Connection").
type Timers struct {
	// Heartbeat is the interval between heartbeats; default 10s.
	Heartbeat Duration `toml:"heartbeat"`
	// Idle closes the connection when no frame arrived for this long;
	// default 35s.
	Idle Duration `toml:"idle"`
	// Handshake bounds the WebSocket opening handshake; default 15s.
	Handshake Duration `toml:"handshake"`
	// Write bounds the writing of one frame; default 10s.
	Write Duration `toml:"write"`
	// Probe bounds one provider probe of a health report; default 5s.
	Probe Duration `toml:"probe"`
	// BackoffMin is the first reconnect wait (it doubles per failed
	// attempt, with jitter); default 1s.
	BackoffMin Duration `toml:"backoff_min"`
	// BackoffMax is the longest reconnect wait; default 1m.
	BackoffMax Duration `toml:"backoff_max"`
	// ShutdownGrace bounds the drain on SIGINT/SIGTERM: operations queued
	// or running finish and their responses are sent, new requests are
	// answered unconfirmed, then the node closes with 1001; default 10s.
	// The systemd unit's TimeoutStopSec must be longer.
	ShutdownGrace Duration `toml:"shutdown_grace"`
}

// Config is nodeagent's configuration.
type Config struct {
	// CoreOrigin is Core's origin, http:// or https://host[:port][/prefix];
	// the node connects with ws or wss accordingly. Required.
	CoreOrigin string `toml:"core_origin"`
	// NodeID is the node's enrolled UUID. Required.
	NodeID string `toml:"node_id"`
	// InstallationID is the enrolled installation UUID; empty means the one
	// the node generated in its state directory on first start.
	InstallationID string `toml:"installation_id"`
	// CredentialFile holds the node credential (one line), readable only by
	// the node's user; default DefaultCredentialFile, where `nodeagent
	// enrol` writes it.
	CredentialFile string `toml:"credential_file"`
	// CAFile optionally names PEM certificates to trust for wss instead of
	// the system roots.
	CAFile string `toml:"ca_file"`
	// StateDir is the node's private state directory; default
	// /var/lib/sandgate-nodeagent.
	StateDir string `toml:"state_dir"`
	// DockerEndpoint is the Docker Engine address; default
	// unix:///var/run/docker.sock.
	DockerEndpoint string `toml:"docker_endpoint"`
	// DockerNetwork is the network mode of sandbox containers; empty means
	// the daemon's default.
	DockerNetwork string `toml:"docker_network"`
	// DiskPath is a path on the filesystem of Docker's data root, for the
	// disk measurements; default /var/lib/docker.
	DiskPath string `toml:"disk_path"`
	// DeploymentGeneration is the enrolled deployment generation (> 0).
	// Required.
	DeploymentGeneration int64 `toml:"deployment_generation"`
	// SpecificationDigest is the enrolled generation's lowercase SHA-256
	// specification digest. Required.
	SpecificationDigest string `toml:"specification_digest"`
	// MaxActive is how many provider operations run at once, 1..32;
	// default 4.
	MaxActive int `toml:"max_active"`
	// LogLevel is debug, info, warn or error; default info.
	LogLevel string `toml:"log_level"`
	// GenerationManagement makes the node prepare, retain, repair and
	// reclaim deployment generations (docs/node-generations.md); default
	// false. With it, core_origin, node_id, installation_id,
	// deployment_generation and specification_digest may be left out:
	// they come from the identity `nodeagent enrol` stored in the state
	// directory (any value given must equal it).
	GenerationManagement bool `toml:"generation_management"`
	// MaxRetained is how many generations a generation-managing node
	// tells Core it can retain, 1..1024; default 8.
	MaxRetained int `toml:"max_retained"`
	// Timers are the protocol timers.
	Timers Timers `toml:"timers"`

	// PrintIdentity is the --print-identity action: print the node's
	// enrolment identity and exit. It is not a file setting, and it needs
	// neither core_origin nor credential_file.
	PrintIdentity bool `toml:"-"`
}

// Defaults returns the configuration before the file and flags apply.
func Defaults() Config {
	return Config{
		StateDir:       "/var/lib/sandgate-nodeagent",
		CredentialFile: DefaultCredentialFile,
		DockerEndpoint: "unix:///var/run/docker.sock",
		DiskPath:       "/var/lib/docker",
		MaxActive:      4,
		MaxRetained:    8,
		LogLevel:       "info",
		Timers: Timers{
			Heartbeat:  Duration(10 * time.Second),
			Idle:       Duration(35 * time.Second),
			Handshake:  Duration(15 * time.Second),
			Write:      Duration(10 * time.Second),
			Probe:      Duration(5 * time.Second),
			BackoffMin: Duration(time.Second),
			BackoffMax: Duration(time.Minute),

			ShutdownGrace: Duration(10 * time.Second),
		},
	}
}

// setting is one configuration setting: its flag name, its help text and
// where it lives in Config.
type setting struct {
	name, help string
	set        func(c *Config, v string) error
}

func str(f func(c *Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *f(c) = v; return nil }
}

func dur(f func(c *Config) *Duration) func(*Config, string) error {
	return func(c *Config, v string) error { return f(c).UnmarshalText([]byte(v)) }
}

var settings = []setting{
	{"core-origin", "Core's origin, http://… or https://…[/prefix]; the node connects to <origin>/api/v1/sandbox-node/connect over ws or wss to match (file: core_origin; required)",
		str(func(c *Config) *string { return &c.CoreOrigin })},
	{"node-id", "the node's enrolled UUID (file: node_id; required)",
		str(func(c *Config) *string { return &c.NodeID })},
	{"installation-id", "the enrolled installation UUID (file: installation_id; default: generated once and kept in the state directory)",
		str(func(c *Config) *string { return &c.InstallationID })},
	{"credential-file", "file holding the node credential, sent as a Bearer token; must not be readable by group or others (file: credential_file; default " + DefaultCredentialFile + ", where nodeagent enrol writes it)",
		str(func(c *Config) *string { return &c.CredentialFile })},
	{"ca-file", "PEM certificates to trust for wss instead of the system roots (file: ca_file; optional)",
		str(func(c *Config) *string { return &c.CAFile })},
	{"state-dir", "private state directory: installation ID, highest owner epoch, renewals (file: state_dir; default /var/lib/sandgate-nodeagent)",
		str(func(c *Config) *string { return &c.StateDir })},
	{"docker-endpoint", "Docker Engine address in DOCKER_HOST form (file: docker_endpoint; default unix:///var/run/docker.sock)",
		str(func(c *Config) *string { return &c.DockerEndpoint })},
	{"docker-network", "network mode of sandbox containers, e.g. bridge or none (file: docker_network; default: the daemon's)",
		str(func(c *Config) *string { return &c.DockerNetwork })},
	{"disk-path", "a path on Docker's data filesystem, for the disk measurements of health reports (file: disk_path; default /var/lib/docker)",
		str(func(c *Config) *string { return &c.DiskPath })},
	{"deployment-generation", "the enrolled deployment generation, a positive integer; requests for any other are answered invalid (file: deployment_generation; required)",
		func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			c.DeploymentGeneration = n
			return err
		}},
	{"specification-digest", "the enrolled generation's specification digest, 64 lowercase hex digits (file: specification_digest; required)",
		str(func(c *Config) *string { return &c.SpecificationDigest })},
	{"max-active", "how many provider operations run at once, 1..32; at most 32 are queued or running together (file: max_active; default 4)",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			c.MaxActive = n
			return err
		}},
	{"generation-management", "true to prepare, retain, repair and reclaim deployment generations as Core's deployment says (file: generation_management; default false)",
		func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			c.GenerationManagement = b
			return err
		}},
	{"max-retained", "how many deployment generations a generation-managing node can retain, 1..1024 (file: max_retained; default 8)",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			c.MaxRetained = n
			return err
		}},
	{"log-level", "debug, info, warn or error (file: log_level; default info)",
		str(func(c *Config) *string { return &c.LogLevel })},
	{"heartbeat", "interval between heartbeats (file: timers.heartbeat; default 10s)",
		dur(func(c *Config) *Duration { return &c.Timers.Heartbeat })},
	{"idle-timeout", "close and reconnect when no frame arrived for this long (file: timers.idle; default 35s)",
		dur(func(c *Config) *Duration { return &c.Timers.Idle })},
	{"handshake-timeout", "bound on the WebSocket opening handshake (file: timers.handshake; default 15s)",
		dur(func(c *Config) *Duration { return &c.Timers.Handshake })},
	{"write-timeout", "bound on writing one frame (file: timers.write; default 10s)",
		dur(func(c *Config) *Duration { return &c.Timers.Write })},
	{"probe-timeout", "bound on the Docker probe of each health report (file: timers.probe; default 5s)",
		dur(func(c *Config) *Duration { return &c.Timers.Probe })},
	{"backoff-min", "first reconnect wait; it doubles per failed attempt, with jitter (file: timers.backoff_min; default 1s)",
		dur(func(c *Config) *Duration { return &c.Timers.BackoffMin })},
	{"backoff-max", "longest reconnect wait (file: timers.backoff_max; default 1m)",
		dur(func(c *Config) *Duration { return &c.Timers.BackoffMax })},
	{"shutdown-grace", "on SIGINT/SIGTERM, how long running operations may finish and send their responses before the node closes (file: timers.shutdown_grace; default 10s)",
		dur(func(c *Config) *Duration { return &c.Timers.ShutdownGrace })},
}

// ErrHelp is returned by Load when --help was asked for; the usage has
// been written.
var ErrHelp = flag.ErrHelp

// ErrVersion is returned by Load when --version was asked for; the caller
// prints the version (package internal/version) and exits 0.
var ErrVersion = errors.New("config: --version asked for")

// Load builds the configuration from the defaults, then the file named by
// --config (or DefaultPath if it exists), then the flags in args, and
// validates it. Usage and flag errors are written to output.
func Load(args []string, output io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("nodeagent", flag.ContinueOnError)
	fs.SetOutput(output)
	path := fs.String("config", "", "TOML configuration file; every flag below overrides the setting of the same meaning in it (default "+DefaultPath+" if it exists)")
	printIdentity := fs.Bool("print-identity", false, "print the identity Core's enrolment needs (node, installation, provider, backend fingerprint, generation, digest) as JSON and exit; needs Docker")
	showVersion := fs.Bool("version", false, "print the sandgate commit this binary was built from and exit")
	values := make(map[string]*string, len(settings))
	for _, s := range settings {
		values[s.name] = fs.String(s.name, "", s.help)
	}
	fs.Usage = func() {
		fmt.Fprintf(output, "Usage: nodeagent [--config FILE] [flags]\n"+
			"       nodeagent enrol --core https://… --token-file F [flags]   (enrols the host: nodeagent enrol --help)\n\n"+
			"nodeagent is the sandbox node agent: it connects to Core, reports the node's health and runs\n"+
			"provider operations on the local Docker engine. Exit status: 0 stopped by a signal, 1 runtime\n"+
			"failure, 2 bad configuration, 3 Core rejected the node credential (HTTP 401; re-enroll).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("config: unexpected argument %q", fs.Arg(0))
	}
	if *showVersion {
		return nil, ErrVersion
	}

	c, err := fileAndFlags(*path, fs, values)
	if err != nil {
		return nil, err
	}
	c.PrintIdentity = *printIdentity
	if c.GenerationManagement && c.identityPending() {
		// Completed from the enrolled identity by ApplyIdentity, which
		// validates.
		return c, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// fileAndFlags builds a configuration from the defaults, the file path
// (or DefaultPath if it exists, when path is empty) and the flags set in
// fs (values holds the settings' flag values).
func fileAndFlags(path string, fs *flag.FlagSet, values map[string]*string) (*Config, error) {
	c := Defaults()
	if path == "" {
		if _, err := os.Stat(DefaultPath); err == nil {
			path = DefaultPath
		}
	}
	if path != "" {
		md, err := toml.DecodeFile(path, &c)
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return nil, fmt.Errorf("config: %s: unknown setting %q", path, und[0].String())
		}
	}
	var ferr error
	fs.Visit(func(f *flag.Flag) {
		for _, s := range settings {
			if s.name == f.Name && ferr == nil {
				if err := s.set(&c, *values[s.name]); err != nil {
					ferr = fmt.Errorf("config: --%s: %w", s.name, err)
				}
			}
		}
	})
	if ferr != nil {
		return nil, ferr
	}
	return &c, nil
}

// DefaultCredentialFile is where `nodeagent enrol` writes the credential
// and where the agent reads it when neither the configuration nor
// --credential-file names a file (Defaults).
const DefaultCredentialFile = "/etc/sandgate/node.credential"

// Enrolment is what `nodeagent enrol` is asked to do.
type Enrolment struct {
	// Core is Core's origin, http:// or https://.
	Core string
	// Token is the one-time enrolment token (from --token or the file
	// --token-file names). It is never logged or echoed.
	Token string
	// Config are the node's settings (state directory, credential file,
	// Docker, CA, max_active, max_retained).
	Config *Config
}

// enrolSettings are the settings `nodeagent enrol` takes as flags.
var enrolSettings = []string{"state-dir", "credential-file", "ca-file", "docker-endpoint", "docker-network",
	"disk-path", "max-active", "max-retained", "probe-timeout"}

// LoadEnrolment parses `nodeagent enrol`'s arguments: --core, --token or
// --token-file, --config and the node settings of enrolSettings. It
// checks them without touching the disk beyond reading the files named.
// A configuration that already names a node (node_id) is refused: an
// enrolment creates the identity. credential_file left out is
// DefaultCredentialFile; one given empty (file or flag) is refused, as
// the agent's Validate refuses it.
func LoadEnrolment(args []string, output io.Writer) (*Enrolment, error) {
	fs := flag.NewFlagSet("nodeagent enrol", flag.ContinueOnError)
	fs.SetOutput(output)
	path := fs.String("config", "", "TOML configuration file for the node's settings (default "+DefaultPath+" if it exists)")
	core := fs.String("core", "", "Core's origin, https://… (or http:// on a trusted network); required")
	token := fs.String("token", "", "the one-time enrolment token (visible to other local users in the process list: prefer --token-file)")
	tokenFile := fs.String("token-file", "", "a file holding the one-time enrolment token")
	values := map[string]*string{}
	for _, s := range settings {
		for _, n := range enrolSettings {
			if s.name == n {
				help := s.help
				if n == "credential-file" {
					// enrol writes the credential there; it has a default.
					help = "where the node credential is written, mode 0600; it must not exist yet (file: credential_file; default " + DefaultCredentialFile + ")"
				}
				values[s.name] = fs.String(s.name, "", help)
			}
		}
	}
	fs.Usage = func() {
		fmt.Fprintf(output, "Usage: nodeagent enrol --core https://… (--token T | --token-file F) [--config FILE] [flags]\n\n"+
			"Enrols this host with Core: checks the host, Docker and the exact runtime Core selects, registers the\n"+
			"node with the one-time token, then writes the credential (mode 0600) and the node identity and\n"+
			"installs that runtime. Every refusal happens before anything is written. Exit status: 0 enrolled,\n"+
			"2 bad arguments, 4 refused (nothing written), 5 enrolled but preparing the runtime failed (the\n"+
			"service retries it), 6 the enrolment's answer was lost (Core may have registered the node and used\n"+
			"the token; nothing written), 1 failure while writing the node's files.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("enrol: unexpected argument %q", fs.Arg(0))
	}
	c, err := fileAndFlags(*path, fs, values)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(*core)
	switch {
	case *core == "":
		return nil, errors.New("enrol: --core is required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, errors.New("enrol: --core must be https://host[:port][/prefix] (or http://) without credentials, query or fragment")
	case (*token == "") == (*tokenFile == ""):
		return nil, errors.New("enrol: give exactly one of --token and --token-file")
	case c.NodeID != "":
		return nil, errors.New("enrol: the configuration already names a node (node_id); an enrolment creates a new identity")
	}
	tok := *token
	if *tokenFile != "" {
		if tok, err = ReadCredential(*tokenFile); err != nil {
			return nil, fmt.Errorf("enrol: token file: %w", err)
		}
	}
	if len(tok) > 512 {
		return nil, errors.New("enrol: the enrolment token is longer than 512 bytes")
	}
	for i := range len(tok) {
		if tok[i] < 0x21 || tok[i] > 0x7e {
			return nil, errors.New("enrol: the enrolment token must be printable ASCII without spaces")
		}
	}
	c.CoreOrigin = *core
	switch {
	case c.CredentialFile == "":
		// Only an explicit credential_file = "" (or --credential-file "")
		// leaves it empty (Defaults); the agent refuses it too (Validate).
		return nil, errors.New("enrol: credential_file must not be empty (leave it out for the default " + DefaultCredentialFile + ")")
	case c.StateDir == "" || c.DockerEndpoint == "":
		return nil, errors.New("enrol: state_dir and docker_endpoint must not be empty")
	case c.MaxActive < 1 || c.MaxActive > proto.MaxActiveOperations:
		return nil, fmt.Errorf("enrol: max_active must be 1..%d", proto.MaxActiveOperations)
	case c.MaxRetained < 1 || c.MaxRetained > proto.MaxRetainedGenerations:
		return nil, fmt.Errorf("enrol: max_retained must be 1..%d", proto.MaxRetainedGenerations)
	}
	return &Enrolment{Core: *core, Token: tok, Config: c}, nil
}

// identityPending reports whether a setting the enrolled identity
// supplies is missing.
func (c *Config) identityPending() bool {
	return c.CoreOrigin == "" || c.NodeID == "" || c.DeploymentGeneration == 0 || c.SpecificationDigest == ""
}

// Identity is what `nodeagent enrol` stores about the node (package
// state, node/identity.json).
type Identity struct {
	// CoreOrigin, NodeID and InstallationID are core_origin, node_id
	// and installation_id of the file.
	CoreOrigin, NodeID, InstallationID string
	// DeploymentGeneration and SpecificationDigest are the generation
	// the node enrolled with.
	DeploymentGeneration int64
	SpecificationDigest  string
}

// ApplyIdentity fills the settings the enrolled identity supplies and
// were left out, refuses a setting that contradicts it, and validates.
func (c *Config) ApplyIdentity(id Identity) error {
	fill := func(name string, dst *string, v string) error {
		switch {
		case *dst == "":
			*dst = v
		case *dst != v:
			return fmt.Errorf("config: %s differs from the enrolled identity in the state directory", name)
		}
		return nil
	}
	if err := errors.Join(fill("core_origin", &c.CoreOrigin, id.CoreOrigin), fill("node_id", &c.NodeID, id.NodeID),
		fill("installation_id", &c.InstallationID, id.InstallationID),
		fill("specification_digest", &c.SpecificationDigest, id.SpecificationDigest)); err != nil {
		return err
	}
	switch {
	case c.DeploymentGeneration == 0:
		c.DeploymentGeneration = id.DeploymentGeneration
	case c.DeploymentGeneration != id.DeploymentGeneration:
		return errors.New("config: deployment_generation differs from the enrolled identity in the state directory")
	}
	return c.Validate()
}

// Validate checks every setting and names the first wrong one.
func (c *Config) Validate() error {
	if !c.PrintIdentity {
		u, err := url.Parse(c.CoreOrigin)
		switch {
		case c.CoreOrigin == "":
			return errors.New("config: core_origin is required")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
			return errors.New("config: core_origin must be http://host[:port][/prefix] or https://… without credentials, query or fragment")
		case c.CredentialFile == "":
			return errors.New("config: credential_file is required")
		}
	}
	switch {
	case !proto.IsUUID(c.NodeID):
		return errors.New("config: node_id must be a lowercase UUID")
	case c.InstallationID != "" && !proto.IsUUID(c.InstallationID):
		return errors.New("config: installation_id must be a lowercase UUID")
	case c.StateDir == "":
		return errors.New("config: state_dir is required")
	case c.DockerEndpoint == "":
		return errors.New("config: docker_endpoint is required")
	case c.DiskPath == "":
		return errors.New("config: disk_path is required")
	case c.DeploymentGeneration <= 0:
		return errors.New("config: deployment_generation must be a positive integer")
	case !proto.IsDigest(c.SpecificationDigest):
		return errors.New("config: specification_digest must be 64 lowercase hex digits")
	case c.MaxActive < 1 || c.MaxActive > proto.MaxActiveOperations:
		return fmt.Errorf("config: max_active must be 1..%d", proto.MaxActiveOperations)
	case c.MaxRetained < 1 || c.MaxRetained > proto.MaxRetainedGenerations:
		return fmt.Errorf("config: max_retained must be 1..%d", proto.MaxRetainedGenerations)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return errors.New("config: log_level must be debug, info, warn or error")
	}
	t := c.Timers
	for _, d := range []struct {
		name string
		v    Duration
	}{{"heartbeat", t.Heartbeat}, {"idle", t.Idle}, {"handshake", t.Handshake}, {"write", t.Write},
		{"probe", t.Probe}, {"backoff_min", t.BackoffMin}, {"backoff_max", t.BackoffMax},
		{"shutdown_grace", t.ShutdownGrace}} {
		if d.v <= 0 {
			return fmt.Errorf("config: timers.%s must be positive", d.name)
		}
	}
	switch {
	case t.Heartbeat >= t.Idle:
		return errors.New("config: timers.heartbeat must be shorter than timers.idle, or Core would time the node out")
	case t.BackoffMax < t.BackoffMin:
		return errors.New("config: timers.backoff_max must not be below timers.backoff_min")
	}
	return nil
}

// maxCredential bounds the credential file.
const maxCredential = 8 << 10

// ReadCredential reads the node credential from path: one line of
// printable ASCII (surrounding whitespace is trimmed). It refuses a file
// that group or others may read, an empty one, and one with other bytes,
// so the value can go into an HTTP header as it is. Errors never quote
// the file's content.
func ReadCredential(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("config: credential file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("config: credential file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("config: credential file %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("config: credential file %s must not be accessible to group or others (mode %v; chmod 600)", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCredential+1))
	if err != nil {
		return "", fmt.Errorf("config: credential file: %w", err)
	}
	if len(b) > maxCredential {
		return "", fmt.Errorf("config: credential file %s is larger than %d bytes", path, maxCredential)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "", fmt.Errorf("config: credential file %s is empty", path)
	}
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return "", fmt.Errorf("config: credential file %s must hold one token of printable ASCII without spaces", path)
		}
	}
	return string(b), nil
}
