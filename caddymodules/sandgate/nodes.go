package sandgate

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/core"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/hub"
	"github.com/sandgate/sandgate/nodecore/portal"
)

// NodePresence is a sandgate.node_presence module: node presence and owner
// epochs shared by several gateway replicas (hub.Presence), the other
// replicas as the internal node API forwards to them (api.Peers), and the
// peer tokens of those forwarded requests.
type NodePresence interface {
	hub.Presence
	api.Peers
	// PeerTokens returns the token this replica forwards with and the
	// SHA-256 digests of the tokens it accepts from the others.
	PeerTokens() (send string, accept [][sha256.Size]byte)
	// Synced reports whether the presence's view of the other replicas
	// is loaded (readiness).
	Synced() bool
	// Connect binds the presence to the Portal cluster connection (the
	// app's kubernetes block; nil when there is none), after the module's
	// Provision and before the hub uses it. The error says what is
	// missing.
	Connect(cluster *portal.Cluster) error
}

// Values of Nodes.Store.
const (
	StoreFile       = core.StoreFile
	StoreKubernetes = core.StoreKubernetes
)

// DefaultOwnerEpoch is the owner epoch when none is configured.
const DefaultOwnerEpoch = core.DefaultOwnerEpoch

// Nodes is the node connection service's configuration (spec
// node-protocol.md "Connection"). JSON:
//
//	"nodes": {
//	  "credentials": {"source": "file", "path": "/etc/sandgate/nodes.yaml"},
//	  "owner_epoch": 1,
//	  "deployment": {"generation": 2, "specification_digest": "<64 hex>", "serving_generation": 1},
//	  "hello_timeout": "15s", "idle_timeout": "35s", "online_window": "45s",
//	  "write_timeout": "10s", "response_grace": "2s", "close_grace": "1s",
//	  "heartbeat_interval": "10s"
//	}
//
// Changing any of these with a reload keeps every node connection: the
// hub takes the new settings when the new config starts.
type Nodes struct {
	// CredentialsRaw is the node credential source, a module in the
	// sandgate.node_credentials namespace chosen by its "source" key
	// ("file"). Required.
	CredentialsRaw json.RawMessage `json:"credentials,omitempty" caddy:"namespace=sandgate.node_credentials inline_key=source"`

	// PresenceRaw makes several gateway replicas share node presence and
	// the owner epoch, a module in the sandgate.node_presence namespace
	// chosen by its "store" key ("kubernetes": Leases). Absent: this
	// gateway is the only replica (presence in memory, every welcome
	// carries owner_epoch).
	PresenceRaw json.RawMessage `json:"presence,omitempty" caddy:"namespace=sandgate.node_presence inline_key=store"`

	// OwnerEpoch is Core's owner epoch, sent in welcome and checked on
	// every heartbeat; > 0, default 1. Raising it (with a reload) closes
	// each connection at its next heartbeat (close code 4005) so the node
	// reconnects under the new epoch; it may not decrease while the
	// gateway runs (the reload is refused).
	OwnerEpoch int64 `json:"owner_epoch,omitempty"`

	// Deployment is advertised to generation-managing nodes in welcome and
	// heartbeat_ack: the target generation to prepare and the generation
	// to keep serving. Without it such nodes are refused (close code 4006).
	Deployment *NodeDeployment `json:"deployment,omitempty"`

	// HelloTimeout: a node must send hello this soon after the upgrade.
	// Default 15s.
	HelloTimeout caddy.Duration `json:"hello_timeout,omitempty"`
	// IdleTimeout: a connection with no frame for this long is closed.
	// Default 35s.
	IdleTimeout caddy.Duration `json:"idle_timeout,omitempty"`
	// OnlineWindow: a node is online while its last heartbeat is younger.
	// Default 45s.
	OnlineWindow caddy.Duration `json:"online_window,omitempty"`
	// WriteTimeout bounds the write of one frame. Default 10s.
	WriteTimeout caddy.Duration `json:"write_timeout,omitempty"`
	// ResponseGrace is how much longer than a request's timeout_ms Core
	// waits for the response before reporting outcome unknown. Default 2s.
	ResponseGrace caddy.Duration `json:"response_grace,omitempty"`
	// CloseGrace is how long Core waits for the node's close frame after
	// sending its own. Default 1s.
	CloseGrace caddy.Duration `json:"close_grace,omitempty"`
	// HeartbeatInterval is the period the nodes send heartbeats with
	// (nodeagent's timers.heartbeat). Default 10s, the protocol's. A
	// connection whose heartbeats come faster is closed with close code
	// 4007: beyond a burst of idle_timeout/heartbeat_interval + 2
	// heartbeats (5 with the defaults) it may send one per half interval.
	HeartbeatInterval caddy.Duration `json:"heartbeat_interval,omitempty"`
	// ShutdownGrace: when the gateway exits (SIGTERM, caddy stop), new
	// node connects and dispatches are refused at once, the dispatches
	// under way get up to this long to have their outcome, and then every
	// node connection is closed with 1001 so that nodes reconnect to
	// another replica at once. Default 15s. (Reloads keep the
	// connections.)
	ShutdownGrace caddy.Duration `json:"shutdown_grace,omitempty"`

	// StateDir is the directory of Core's durable node state when this
	// gateway is the only replica: the pools' run-time deployments
	// (pools.json), the placements (placements.jsonl), and, with
	// enrolment, the enrolled nodes and used enrolment tokens
	// (enrolment.json). Created (mode 0700) when missing. Placeholders such
	// as {env.STATE_DIR} are expanded. Default: none, the state is kept in
	// memory only (it survives `caddy reload`, not a restart) and
	// enrolment is off. Not with Store "kubernetes".
	StateDir string `json:"state_dir,omitempty"`

	// Store is where that durable node state lives: "file" (the default:
	// state_dir, or memory without one) for one gateway, or "kubernetes"
	// for several replicas: NodePool, NodePlacements, NodeEnrolmentToken
	// and EnrolledNode objects (group nodes.sandgate.io) in the namespace
	// of the sandgate app's kubernetes block, which is required, with
	// only credential and token SHA-256s stored; the CRDs are
	// deploy/portal/crds/ (docs/scale-out.md "Node state"). With
	// "kubernetes" enrolment is on and state_dir is refused. Errors at
	// provision: without the kubernetes block, with state_dir, an unknown
	// value, or objects the apiserver does not let the gateway list.
	Store string `json:"store,omitempty"`

	// Releases is the release store directory (`caddy sandgate-release
	// publish --store <dir>`), whose releases pools bind generations to and
	// whose manifests and artifacts the machine API serves. Default: none
	// (no release downloads; pools bind generations by digest only).
	Releases string `json:"releases,omitempty"`

	// Pools are the node pools by name (1..63 characters of [a-z0-9-]).
	// A node belongs to the pool of its enrolment (default "default").
	// Each generation-managing node is told its pool's deployment. Replaces
	// Deployment, which is the "default" pool's deployment written the old
	// way (both for "default" is an error).
	Pools map[string]*NodePool `json:"pools,omitempty"`
}

// NodePool is one node pool: the generations it knows and its
// deployment (core.Pool, whose JSON it is).
type NodePool = core.Pool

// PoolGeneration binds one generation (core.PoolGeneration).
type PoolGeneration = core.PoolGeneration

// DefaultShutdownGrace is Nodes.ShutdownGrace's default.
const DefaultShutdownGrace = 15 * time.Second

// NodeDeployment is the deployment advertised to generation-managing
// nodes (core.Deployment).
type NodeDeployment = core.Deployment

// coreConfig is the nodes block as Core's node side takes it; the error
// names the setting.
func (n *Nodes) coreConfig() (core.Config, error) {
	repl := caddy.NewReplacer()
	cfg := core.Config{
		OwnerEpoch: n.OwnerEpoch, Deployment: n.Deployment, Pools: n.Pools,
		StateDir: repl.ReplaceAll(n.StateDir, ""), Store: n.Store, Releases: repl.ReplaceAll(n.Releases, ""),
		Timers: hub.Timers{
			Hello: time.Duration(n.HelloTimeout), Idle: time.Duration(n.IdleTimeout),
			Online: time.Duration(n.OnlineWindow), Write: time.Duration(n.WriteTimeout),
			ResponseGrace: time.Duration(n.ResponseGrace), CloseGrace: time.Duration(n.CloseGrace),
			Heartbeat: time.Duration(n.HeartbeatInterval),
		},
	}
	if err := cfg.Check(); err != nil {
		return cfg, err
	}
	for _, t := range []struct {
		name string
		d    caddy.Duration
	}{
		{"hello_timeout", n.HelloTimeout}, {"idle_timeout", n.IdleTimeout}, {"online_window", n.OnlineWindow},
		{"write_timeout", n.WriteTimeout}, {"response_grace", n.ResponseGrace}, {"close_grace", n.CloseGrace},
		{"heartbeat_interval", n.HeartbeatInterval},
		{"shutdown_grace", n.ShutdownGrace},
	} {
		if t.d < 0 {
			return cfg, fmt.Errorf("%s must not be negative", t.name)
		}
		if time.Duration(t.d) > time.Hour {
			return cfg, fmt.Errorf("%s must be at most 1h", t.name)
		}
	}
	return cfg, nil
}

// shared holds Core's hub and node state stores across config reloads
// (core.Shared): each config holds one reference per object it uses, so
// a reload keeps every node connection and only the last config's
// cleanup closes them.
var shared = usagePool{caddy.NewUsagePool()}

// usagePool is core.Shared over a caddy.UsagePool.
type usagePool struct{ p *caddy.UsagePool }

// destructor lets the pool close an object when no config holds it.
type destructor struct{ io.Closer }

// Destruct implements caddy.Destructor.
func (d destructor) Destruct() error { return d.Close() }

// Hold implements core.Shared.
func (u usagePool) Hold(key string, open func() (io.Closer, error)) (io.Closer, bool, error) {
	v, loaded, err := u.p.LoadOrNew(key, func() (caddy.Destructor, error) {
		c, err := open()
		if err != nil {
			return nil, err
		}
		return destructor{c}, nil
	})
	if err != nil {
		return nil, false, err
	}
	return v.(destructor).Closer, loaded, nil
}

// Release implements core.Shared.
func (u usagePool) Release(key string) error {
	_, err := u.p.Delete(key)
	return err
}

// provisionNodes loads the node credential source and the node presence
// and opens Core's node side (core.Open) with this config's settings.
func (a *App) provisionNodes(ctx caddy.Context) error {
	n := a.Nodes
	cfg, err := n.coreConfig()
	if err != nil {
		return err
	}
	if n.CredentialsRaw != nil {
		mod, err := ctx.LoadModule(n, "CredentialsRaw")
		if err != nil {
			return fmt.Errorf("loading the node credential source: %w", err)
		}
		store, ok := mod.(credential.Store)
		if !ok {
			return fmt.Errorf("node credential source module %T does not implement credential.Store", mod)
		}
		cfg.Credentials = store
	}
	if n.PresenceRaw != nil {
		mod, err := ctx.LoadModule(n, "PresenceRaw")
		if err != nil {
			return fmt.Errorf("loading the node presence: %w", err)
		}
		p, ok := mod.(NodePresence)
		if !ok {
			return fmt.Errorf("node presence module %T does not implement NodePresence", mod)
		}
		if err := p.Connect(a.portal); err != nil {
			return err
		}
		a.presence, cfg.Presence = p, p
	}
	cfg.Portal, cfg.PortalKey = a.portal, a.portalKey
	cfg.Logger, cfg.Metrics, cfg.Shared = a.logger.Named("nodes"), ctx.GetMetricsRegistry(), shared
	c, err := core.Open(cfg)
	if err != nil {
		return err
	}
	a.core = c
	return nil
}
