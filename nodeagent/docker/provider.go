// Package docker is the node's Docker provider: it runs the provider
// operations of the sandbox-node protocol on a Docker Engine through its
// API (github.com/docker/docker/client, with API version negotiation). The
// mapping of each operation onto Docker calls, results and error codes is
// written down in nodeagent/README.md; this package is its implementation.
//
// A sandbox is one or more containers, one per compute generation, named
// after a digest of the exact reference and labelled with the node, the
// exact reference and the deployment generation. A container whose name is
// ours but whose labels are not exactly ours answers ownership; nothing
// here ever pulls images, retries a mutation or removes anything Core did
// not ask to remove.
package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/node/operation"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
	"github.com/sandgate/sandgate/nodeagent/state"
)

// MinAPIVersion is the oldest Docker Engine API version the provider
// supports (Docker 20.10, the version the tests run against).
const MinAPIVersion = "1.41"

// Config configures a Provider.
type Config struct {
	// Endpoint is the Docker Engine address in DOCKER_HOST form, for
	// example unix:///var/run/docker.sock.
	Endpoint string
	// NodeID is the node's UUID; every container carries it as a label.
	NodeID string
	// State is the node's state directory (renewal records); nil only for
	// a provider that probes and imports (renew then answers unconfirmed).
	State *state.Dir
	// Network is the network mode of sandbox containers; empty means the
	// daemon's default.
	Network string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Generation binds the provider to one prepared deployment generation
	// (a generation-managing node's native helper); nil means the
	// enrolled-generation provider that runs the image a create names.
	Generation *Generation
}

// Provider is the Docker provider. It is safe for concurrent use.
type Provider struct {
	cfg  Config
	base *client.Client // owns the transport cli shares
	cli  *client.Client
	decl provider.Declaration
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider for cfg and validates its operation declaration.
// It does not contact the daemon.
func New(cfg Config) (*Provider, error) {
	if cfg.Endpoint == "" || cfg.NodeID == "" {
		return nil, errors.New("docker: Endpoint and NodeID are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// The declaration is the one registered for Docker, which Core's
	// proxy applies too (package node/operation).
	decl, ok := operation.For(proto.ProviderDocker)
	if !ok {
		return nil, errors.New("docker: no operation declaration is registered for the docker provider")
	}
	// base configures the transport for the endpoint (unix socket or
	// TCP); cli sends through the same transport with its JSON read
	// answers bounded (boundedTransport). WithHost comes first so that cli
	// keeps the endpoint for its hijacked exec attach, which dials it
	// directly.
	base, err := client.NewClientWithOpts(client.WithHost(cfg.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("docker: endpoint %q: %w", cfg.Endpoint, err)
	}
	hc := base.HTTPClient()
	hc.Transport = boundedTransport{next: hc.Transport}
	cli, err := client.NewClientWithOpts(client.WithHost(cfg.Endpoint), client.WithHTTPClient(hc), client.WithAPIVersionNegotiation())
	if err != nil {
		base.Close()
		return nil, fmt.Errorf("docker: endpoint %q: %w", cfg.Endpoint, err)
	}
	return &Provider{cfg: cfg, base: base, cli: cli, decl: decl}, nil
}

// Close releases the client's idle connections.
func (p *Provider) Close() error {
	p.cli.Close()
	return p.base.Close()
}

// Kind returns proto.ProviderDocker.
func (p *Provider) Kind() proto.Provider { return proto.ProviderDocker }

// Declaration returns the provider's operation declaration: every
// operation except suspend, resume and delete_snapshot.
func (p *Provider) Declaration() provider.Declaration { return p.decl }

// errAPIVersion is the probe error of a daemon older than MinAPIVersion.
var errAPIVersion = errors.New("docker: the daemon's API version is older than " + MinAPIVersion)

// Probe pings the daemon and checks its API version; a provider bound to a
// generation also checks that the engine holds the generation's image (by
// its ID) and that the seccomp profile bytes are present. Errors are
// those of the Docker client, errAPIVersion, errImageMissing or
// errSeccompMissing; Diagnose classifies them.
func (p *Provider) Probe(ctx context.Context) error {
	ping, err := p.cli.Ping(ctx)
	if err != nil {
		return err
	}
	if ping.APIVersion == "" || versions.LessThan(ping.APIVersion, MinAPIVersion) {
		return errAPIVersion
	}
	return p.probeGeneration(ctx)
}

// Diagnose maps a Probe error to one fixed diagnostic code, from the
// error's type and never its text:
//
//	context deadline exceeded                → docker_timeout
//	permission denied on the socket          → docker_permission_denied
//	cannot connect (no socket, refused)      → docker_unreachable
//	API version older than MinAPIVersion     → docker_api_version_unsupported
//	HTTP 5xx from the daemon                 → docker_daemon_error
//	the generation's image is not there      → image_missing
//	its seccomp profile is missing/changed   → seccomp_profile_missing
//	anything else                            → provider_unavailable
func (p *Provider) Diagnose(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return proto.DiagDockerTimeout
	case errors.Is(err, fs.ErrPermission):
		return proto.DiagDockerPermissionDenied
	case client.IsErrConnectionFailed(err):
		return proto.DiagDockerUnreachable
	case errors.Is(err, errAPIVersion):
		return proto.DiagDockerAPIVersionUnsupported
	case errors.Is(err, errImageMissing):
		return proto.DiagImageMissing
	case errors.Is(err, errSeccompMissing):
		return proto.DiagSeccompProfileMissing
	case cerrdefs.IsInternal(err), cerrdefs.IsUnavailable(err), cerrdefs.IsDataLoss(err), cerrdefs.IsNotImplemented(err):
		return proto.DiagDockerDaemonError
	}
	return proto.DiagProviderUnavailable
}

// Fingerprint returns the backend fingerprint of hello: the lowercase hex
// SHA-256 of "docker", the engine ID and the server version, each followed
// by a newline. It needs the daemon.
func (p *Provider) Fingerprint(ctx context.Context) (string, error) {
	info, err := p.cli.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("docker: read the engine identity: %w", err)
	}
	if info.ID == "" {
		return "", errors.New("docker: the engine reports no ID")
	}
	sum := sha256.Sum256([]byte("docker\n" + info.ID + "\n" + info.ServerVersion + "\n"))
	return hex.EncodeToString(sum[:]), nil
}
