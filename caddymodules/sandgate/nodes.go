package sandgate

import (
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/caddyserver/caddy/v2"

	"github.com/sandgate/sandgate/caddymodules/internal/nodeconfig"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/core"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/hub"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/portal"
	"github.com/sandgate/sandgate/nodecore/releasestore"
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

// Nodes is the node connection service's configuration (the nodes block;
// nodeconfig.Nodes, whose JSON it is).
type Nodes = nodeconfig.Nodes

// DefaultShutdownGrace is Nodes.ShutdownGrace's default.
const DefaultShutdownGrace = nodeconfig.DefaultShutdownGrace

// NodePool is one node pool: the generations it knows and its
// deployment (core.Pool, whose JSON it is).
type NodePool = core.Pool

// PoolGeneration binds one generation (core.PoolGeneration).
type PoolGeneration = core.PoolGeneration

// NodeDeployment is the deployment advertised to generation-managing
// nodes (core.Deployment).
type NodeDeployment = core.Deployment

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

// provisionNodes loads the node credential source and the node presence,
// opens Core's node side (core.Open) with this config's settings and,
// with the api setting, builds the app's internal node API server.
func (a *App) provisionNodes(ctx caddy.Context) error {
	n := a.Nodes
	cfg, err := n.CoreConfig()
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
	if n.API != nil {
		return a.provisionNodeAPI(n.API)
	}
	return nil
}

// NodeCore returns Core's node side (the hub, pools, placements,
// enrolment, releases and node credentials), or nil when the config has no
// nodes block.
func (a *App) NodeCore() *core.Core { return a.core }

// NodeHub returns the node hub, or nil when the config has no nodes block.
func (a *App) NodeHub() *hub.Hub {
	if a.core == nil {
		return nil
	}
	return a.core.Hub()
}

// NodePools returns the pool registry, or nil when the config has no
// nodes block.
func (a *App) NodePools() *pool.Registry {
	if a.core == nil {
		return nil
	}
	return a.core.Pools()
}

// NodeEnrolment returns the enrolled-node store, or nil without a
// state_dir or store kubernetes.
func (a *App) NodeEnrolment() enrolment.Enrolments {
	if a.core == nil {
		return nil
	}
	return a.core.Enrolment()
}

// NodeCredentials returns the store that authenticates nodes (the
// operator's file merged with the enrolled nodes), or nil without a nodes
// block.
func (a *App) NodeCredentials() credential.Store {
	if a.core == nil {
		return nil
	}
	return a.core.Credentials()
}

// Releases returns the release store, or nil when none is configured.
func (a *App) Releases() *releasestore.Store {
	if a.core == nil {
		return nil
	}
	return a.core.Releases()
}

// NodePresence returns the shared node presence of several replicas, or
// nil (one replica).
func (a *App) NodePresence() NodePresence { return a.presence }

// portals holds the Portal cluster connections across config reloads,
// keyed by their resolved settings: a reload with the same kubernetes
// block keeps the connection (and the watches that live as long as it).
var portals = caddy.NewUsagePool()

// Kubernetes is how this gateway replica reaches the Portal cluster's
// kube-apiserver (the kubernetes block; nodeconfig.Kubernetes, whose JSON
// it is).
type Kubernetes = nodeconfig.Kubernetes

// pooledPortal lets the pool close the connection when the last config
// releases it.
type pooledPortal struct{ *portal.Cluster }

// Destruct implements caddy.Destructor.
func (p pooledPortal) Destruct() error { return p.Close() }

// provisionKubernetes connects to the Portal cluster, or takes the
// connection an earlier config made with the same settings and the same
// kubeconfig content.
func (a *App) provisionKubernetes() error {
	cfg, key, err := a.Kubernetes.PortalConfig()
	if err != nil {
		return err
	}
	v, _, err := portals.LoadOrNew(key, func() (caddy.Destructor, error) {
		c, err := portal.Connect(cfg)
		if err != nil {
			return nil, err
		}
		return pooledPortal{c}, nil
	})
	if err != nil {
		return err
	}
	a.portalKey, a.portal = key, v.(pooledPortal).Cluster
	return nil
}

// PortalCluster returns the connection to the Portal cluster, or nil
// without a kubernetes block. It lives while a config that has the same
// kubernetes block runs, across reloads; watches that serve the whole
// replica use its Context.
func (a *App) PortalCluster() *portal.Cluster { return a.portal }
