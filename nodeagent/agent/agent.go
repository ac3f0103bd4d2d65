// Package agent is the node end of the sandbox-node protocol (spec
// node-protocol.md "Connection" and "Provider requests"): it dials Core's
// connect endpoint over ws or wss with the node's Bearer credential, sends
// hello with the node's identity and first health report, keeps the
// connection alive with heartbeats, checks every request's connection,
// owner epoch and sequence, and runs provider operations within their
// budgets on a bounded queue.
//
// A 401 from Core is a permanent rejection (Run returns ErrRejected); any
// other failure is retried with bounded, jittered exponential backoff. The
// agent never retries an operation: Core is the only lifecycle owner.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/generation"
	"github.com/sandgate/sandgate/nodeagent/health"
	"github.com/sandgate/sandgate/nodeagent/provider"
	"github.com/sandgate/sandgate/nodeagent/state"
)

// ConnectPath is the path of Core's node connect endpoint, below the
// origin (spec "Connection").
const ConnectPath = "/api/v1/sandbox-node/connect"

// QueueCapacity is how many provider operations of one connection may be
// queued or running at once (spec: Core keeps at most 32 pending requests
// per connection; a request beyond a full queue closes the connection).
// The bound is per connection, as Core counts it: operations of an earlier
// connection that are still running do not take the new connection's
// slots (Core no longer counts them), and they hold workers (MaxActive),
// so the node-wide total stays bounded by QueueCapacity + MaxActive.
const QueueCapacity = proto.MaxPendingRequests

// ErrRejected is returned by Run when Core answered the connect request
// with 401: the node credential is rejected, permanently. The agent does
// not retry.
var ErrRejected = errors.New("agent: Core rejected the node credential (HTTP 401); the node must be re-enrolled")

// Timers are the protocol's timers; New fills zero fields with the
// defaults of the spec.
type Timers struct {
	// Heartbeat is the interval between heartbeats (default 10 s).
	Heartbeat time.Duration
	// Idle closes the connection when no frame arrived for this long
	// (default 35 s).
	Idle time.Duration
	// Handshake bounds the WebSocket opening handshake (default 15 s, the
	// time Core gives the node to send hello).
	Handshake time.Duration
	// Write bounds the writing of one frame (default 10 s).
	Write time.Duration
	// Probe bounds one provider probe of a health report (default 5 s).
	Probe time.Duration
	// BackoffMin and BackoffMax bound the reconnect backoff (defaults 1 s
	// and 60 s).
	BackoffMin, BackoffMax time.Duration
	// ShutdownGrace bounds the drain when Run's context ends on a welcomed
	// connection (default 10 s): requests already queued or running
	// complete and their responses are sent, new ones are answered
	// unconfirmed without running, and when none is left or the grace
	// runs out the node closes with 1001 (going away). Responses of
	// operations still running when the grace runs out are not sent (Core
	// treats their outcome as unknown).
	ShutdownGrace time.Duration
}

// DefaultTimers returns the spec's timers.
func DefaultTimers() Timers {
	return Timers{
		Heartbeat:  10 * time.Second,
		Idle:       35 * time.Second,
		Handshake:  15 * time.Second,
		Write:      10 * time.Second,
		Probe:      5 * time.Second,
		BackoffMin: time.Second,
		BackoffMax: time.Minute,

		ShutdownGrace: 10 * time.Second,
	}
}

// Config configures an Agent. Every field is required unless it says
// otherwise.
type Config struct {
	// Origin is Core's origin, http or https (the connection uses ws or
	// wss accordingly), optionally with a path prefix.
	Origin *url.URL
	// NodeID is the node's UUID (lowercase).
	NodeID string
	// Credential returns the node credential; it is called before every
	// connection attempt, so a rotated credential file takes effect on the
	// next attempt. The value is only ever sent in the Authorization
	// header, never logged.
	Credential func() (string, error)
	// InstallationID is this installation's UUID.
	InstallationID string
	// DeploymentGeneration is the enrolled deployment generation (> 0);
	// the node serves only that generation.
	DeploymentGeneration int64
	// SpecificationDigest is the enrolled generation's lowercase SHA-256
	// specification digest.
	SpecificationDigest string
	// MaxActive is how many operations run at once, 1..32.
	MaxActive int
	// Fingerprint returns the backend fingerprint for hello; it is called
	// before every connection attempt, and an error makes the attempt fail
	// (and be retried).
	Fingerprint func(ctx context.Context) (string, error)
	// Provider runs the operations; its declaration is validated by New.
	Provider provider.Provider
	// DiskPath is a path on the provider's data filesystem, for the health
	// report's disk measurements.
	DiskPath string
	// State is the node's state directory, where the highest owner epoch
	// is kept.
	State *state.Dir
	// Timers are the protocol timers; zero fields take the defaults.
	Timers Timers
	// TLS is the TLS configuration of wss connections; nil means the
	// system roots. Optional.
	TLS *tls.Config
	// Log receives the agent's log; nil discards it. Credentials, frame
	// contents and provider error text never go to it at levels above
	// Debug.
	Log *slog.Logger
	// Generations, when set, makes the node generation-managing (spec
	// "Generation control"): hello says generation_management, hello and
	// heartbeats carry its observations, the deployment of welcome and
	// heartbeat_ack goes to it, it proposes retention entries, and every
	// request runs on the provider of the generation it names, in a
	// native helper. Nil: the node serves its enrolled generation only,
	// on Provider. Optional.
	Generations *generation.Manager
	// MaxRetained is hello's max_retained of a generation-managing node
	// (how many generations it can retain), 1..1024; default 8. Ignored
	// without Generations.
	MaxRetained int
}

// Agent is the node's connection to Core. Create it with New and run it
// with Run.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	reporter *health.Reporter
	dialer   *websocket.Dialer

	// workers holds one token per running operation, node-wide (cap
	// MaxActive); each session has its own queue slots (QueueCapacity).
	// active counts the operations queued or running, node-wide.
	workers chan struct{}
	active  atomic.Int32
}

// New validates cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Origin == nil || (cfg.Origin.Scheme != "http" && cfg.Origin.Scheme != "https") || cfg.Origin.Host == "":
		return nil, errors.New("agent: the origin must be an http or https URL with a host")
	case !proto.IsUUID(cfg.NodeID):
		return nil, errors.New("agent: the node ID must be a lowercase UUID")
	case !proto.IsUUID(cfg.InstallationID):
		return nil, errors.New("agent: the installation ID must be a lowercase UUID")
	case cfg.DeploymentGeneration <= 0:
		return nil, errors.New("agent: the deployment generation must be positive")
	case !proto.IsDigest(cfg.SpecificationDigest):
		return nil, errors.New("agent: the specification digest must be a lowercase SHA-256 hex digest")
	case cfg.MaxActive < 1 || cfg.MaxActive > proto.MaxActiveOperations:
		return nil, fmt.Errorf("agent: max active must be 1..%d", proto.MaxActiveOperations)
	case cfg.Credential == nil || cfg.Fingerprint == nil || cfg.Provider == nil || cfg.State == nil:
		return nil, errors.New("agent: Credential, Fingerprint, Provider and State are required")
	}
	// The declaration is complete by construction (provider.Declare);
	// check that it names only real operations and safe reasons once more
	// before accepting work.
	if !cfg.Provider.Kind().Valid() {
		return nil, errors.New("agent: the provider's kind must be docker or microsandbox")
	}
	decl := cfg.Provider.Declaration()
	for _, op := range proto.Operations {
		if u, ok := decl.Unsupported(op); ok && (u.Operation != op || u.Reason == "") {
			return nil, fmt.Errorf("agent: the provider's declaration of %q is malformed", op)
		}
	}
	def := DefaultTimers()
	t := &cfg.Timers
	for _, p := range []struct {
		v *time.Duration
		d time.Duration
	}{
		{&t.Heartbeat, def.Heartbeat}, {&t.Idle, def.Idle}, {&t.Handshake, def.Handshake}, {&t.Write, def.Write},
		{&t.Probe, def.Probe}, {&t.BackoffMin, def.BackoffMin}, {&t.BackoffMax, def.BackoffMax},
		{&t.ShutdownGrace, def.ShutdownGrace},
	} {
		if *p.v <= 0 {
			*p.v = p.d
		}
	}
	if t.BackoffMax < t.BackoffMin {
		return nil, errors.New("agent: the maximum backoff is below the minimum")
	}
	if cfg.MaxRetained == 0 {
		cfg.MaxRetained = 8
	}
	if cfg.Generations != nil && (cfg.MaxRetained < 1 || cfg.MaxRetained > proto.MaxRetainedGenerations) {
		return nil, fmt.Errorf("agent: max retained must be 1..%d", proto.MaxRetainedGenerations)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		cfg:     cfg,
		log:     log,
		workers: make(chan struct{}, cfg.MaxActive),
		dialer: &websocket.Dialer{
			Proxy:            http.ProxyFromEnvironment,
			HandshakeTimeout: t.Handshake,
			TLSClientConfig:  cfg.TLS,
		},
	}
	a.reporter = &health.Reporter{
		Probe:        cfg.Provider.Probe,
		Diagnose:     cfg.Provider.Diagnose,
		ProbeTimeout: t.Probe,
		Active:       a.Active,
		DiskPath:     cfg.DiskPath,
	}
	return a, nil
}

// Active returns the number of provider operations queued or running on
// the node, at most proto.MaxActiveOperations (32): the health report's
// active_operations. Operations still running after their connection
// closed count until the provider returns; right after a reconnect they
// and the new connection's queue can together exceed 32, and the report
// then says 32.
func (a *Agent) Active() int { return min(int(a.active.Load()), proto.MaxActiveOperations) }

// connectURL returns the WebSocket URL of Core's connect endpoint.
func (a *Agent) connectURL() string {
	u := *a.cfg.Origin
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + ConnectPath
	u.RawPath = ""
	u.RawQuery = url.Values{"node_id": {a.cfg.NodeID}}.Encode()
	u.Fragment = ""
	return u.String()
}

// Run connects to Core and serves it until ctx ends (it then returns
// ctx.Err(), after draining a welcomed connection for at most
// Timers.ShutdownGrace: see Timers.ShutdownGrace) or Core rejects the credential (ErrRejected). Every other
// failure — a refused or dropped connection, any other HTTP status
// (a proxy's 403 included), a protocol violation by either side — closes
// the connection and is retried after a jittered, exponentially growing
// wait between Timers.BackoffMin and Timers.BackoffMax; the wait starts
// again from the minimum after a connection that Core welcomed. A 409
// with Retry-After (another gateway replica still holds the node's claim,
// which lapses then: the replica died) is retried when it says, plus up to
// a quarter of it as jitter, at most Timers.BackoffMax, so a node is back
// soon after the dead replica's claim lapses rather than at the end of a
// backoff grown during the refusals. A 429 with Retry-After (the hub's
// connect budget for this node is spent: it reconnected too often) is
// retried when it says, the same way. After Core closed a welcomed
// connection with 1001 (going away: the replica shuts down and has
// released the node's claim) the agent reconnects at once, after a jitter
// of at most goingAwayJitter (or Timers.BackoffMin if smaller), so another
// replica takes the node without the backoff.
func (a *Agent) Run(ctx context.Context) error {
	b := backoff{min: a.cfg.Timers.BackoffMin, max: a.cfg.Timers.BackoffMax}
	for {
		welcomed, err := a.connect(ctx)
		if errors.Is(err, ErrRejected) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if welcomed {
			b.reset()
		}
		var wait time.Duration
		if ra := (*retryAfterError)(nil); errors.As(err, &ra) {
			wait = ra.wait(a.cfg.Timers.BackoffMax)
		} else if welcomed && goingAway(err) {
			wait = goingAwayWait(a.cfg.Timers.BackoffMin)
		} else {
			wait = b.next()
		}
		a.log.Info("connection ended; reconnecting", "error", err, "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// connect makes one connection attempt and serves the connection until it
// ends. It reports whether Core welcomed the node.
func (a *Agent) connect(ctx context.Context) (bool, error) {
	cred, err := a.cfg.Credential()
	if err != nil {
		return false, fmt.Errorf("agent: read the node credential: %w", err)
	}
	fp, err := a.cfg.Fingerprint(ctx)
	if err != nil {
		return false, fmt.Errorf("agent: backend fingerprint: %w", err)
	}
	hdr := http.Header{"Authorization": {"Bearer " + cred}}
	conn, resp, err := a.dialer.DialContext(ctx, a.connectURL(), hdr)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return false, ErrRejected
		}
		if resp != nil {
			err := fmt.Errorf("agent: connect refused with HTTP %d", resp.StatusCode)
			if d, ok := retryAfter(resp); ok {
				return false, &retryAfterError{err: err, after: d}
			}
			return false, err
		}
		return false, fmt.Errorf("agent: connect: %w", err)
	}
	s := newSession(a, conn)
	return s.serve(ctx, fp)
}
