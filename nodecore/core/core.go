// Package core composes Core's node side from plain settings: the release
// store, the durable node state (pools and their deployments, placements,
// enrolment; in a state directory, in memory, or in the Portal cluster),
// the node credentials (the operator's source merged with the enrolled
// nodes), the node hub with its metrics, and their life cycle across
// configuration reloads. The Caddy app "sandgate" (caddymodules/sandgate)
// parses the configuration into a Config, opens a Core per configuration
// and calls Start, Stop and Close from its own; it holds no node state of
// its own.
//
// The hub and the state stores outlive one configuration: Core takes them
// through Config.Shared, which a reload's new configuration shares with
// the old one (the app backs it with a caddy.UsagePool), so a reload keeps
// every node connection and the state as it is. Keys name the object:
// "sandgate.node.hub", "sandgate.node.pools:<state file>",
// "sandgate.node.placements:<journal>", "sandgate.node.enrolment:<file>",
// "sandgate.node.kubestore:<Portal connection key>".
package core

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/hub"
	"github.com/sandgate/sandgate/nodecore/placement"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/portal"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

// Values of Config.Store.
const (
	// StoreFile keeps the node state in Config.StateDir, or in memory
	// without one (the default, for one gateway).
	StoreFile = "file"
	// StoreKubernetes keeps it in the Portal cluster (package
	// nodecore/kubestore), for several replicas.
	StoreKubernetes = "kubernetes"
)

// DefaultOwnerEpoch is the owner epoch when none is configured.
const DefaultOwnerEpoch = 1

// Shared holds objects that outlive one configuration. Hold returns the
// object under key, calling open when no configuration holds one (loaded
// false) and taking one more reference otherwise (loaded true); Release
// drops one reference, and the last one closes the object. Both are safe
// for concurrent use.
type Shared interface {
	Hold(key string, open func() (io.Closer, error)) (v io.Closer, loaded bool, err error)
	Release(key string) error
}

// Config is one configuration of Core's node side. The zero value of
// every optional field is its default.
type Config struct {
	// OwnerEpoch is Core's owner epoch, > 0; 0 is DefaultOwnerEpoch. A
	// configuration may not lower the running hub's.
	OwnerEpoch int64
	// Deployment is the "default" pool's deployment written the old way;
	// nil: none.
	Deployment *Deployment
	// Pools are the node pools by name (pool.IsName).
	Pools map[string]*Pool
	// Timers are the hub's connection timers (zero: the protocol's
	// defaults).
	Timers hub.Timers
	// StateDir is the directory of the durable node state of one gateway,
	// placeholders expanded; created with mode 0700. "": in memory, and no
	// enrolment. Not with StoreKubernetes.
	StateDir string
	// Store is "" or StoreFile, or StoreKubernetes (needs Portal).
	Store string
	// Releases is the release store directory, placeholders expanded; "":
	// none.
	Releases string
	// Credentials is the operator's node credential source; nil: none
	// (then StateDir or StoreKubernetes must enrol nodes).
	Credentials credential.Store
	// Presence is the node presence shared by several replicas; nil: this
	// gateway is the only replica.
	Presence hub.Presence
	// Portal is the Portal cluster connection and PortalKey its key in the
	// app's pool (the Kubernetes store is shared per connection); nil
	// without one.
	Portal    *portal.Cluster
	PortalKey string
	// Logger is the node side's logger; nil: none.
	Logger *zap.Logger
	// Metrics is where the hub's collectors are registered; nil: nowhere.
	Metrics prometheus.Registerer
	// Shared holds the hub and the state stores across configurations.
	// Required.
	Shared Shared
}

// Core is Core's node side for one configuration. Its accessors return
// the shared objects; nil where the configuration has none.
type Core struct {
	cfg        Config
	log        *zap.Logger
	held       []string // keys taken from Shared, in order
	hub        *sharedHub
	hubConfig  hub.Config
	metrics    *Metrics
	pools      *pool.Registry
	poolSpecs  map[string]pool.Spec
	placements placement.Store
	enrolment  enrolment.Enrolments
	releases   *releasestore.Store
	creds      credential.Store
	hubUndo    func()
	poolsUndo  func()
}

// hubKey is the hub's key in Shared.
const hubKey = "sandgate.node.hub"

// Open checks cfg, opens the release store and the node state, merges the
// node credentials, takes the shared hub and checks that it accepts this
// configuration (an owner epoch lower than the running one is refused).
// The first configuration also applies its pools and hub settings here, so
// that a hub is never served unconfigured; later ones apply them in Start.
// Errors name the setting, pool or generation; on error nothing stays
// held.
func Open(cfg Config) (*Core, error) {
	if cfg.Shared == nil {
		return nil, errors.New("core: Config.Shared is required")
	}
	if cfg.Credentials == nil && cfg.StateDir == "" && cfg.Store != StoreKubernetes {
		return nil, errors.New("a node credential source (credentials file <path>), a state_dir or store kubernetes for enrolled nodes is required")
	}
	c := &Core{cfg: cfg, log: cfg.Logger}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	if err := c.open(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

func (c *Core) open() error {
	cfg := c.cfg
	if err := c.openState(); err != nil {
		return err
	}
	var stores credential.Merged
	if cfg.Credentials != nil {
		stores = append(stores, cfg.Credentials)
	}
	if c.enrolment != nil {
		stores = append(stores, c.enrolment)
	}
	var store credential.Store = stores
	if len(stores) == 1 {
		// A Refresher stays in Merged, which asks it about the node IDs
		// no view knows.
		if _, refresher := stores[0].(credential.Refresher); !refresher {
			store = stores[0]
		}
	}
	c.creds = store
	epoch := cfg.OwnerEpoch
	if epoch == 0 {
		epoch = DefaultOwnerEpoch
	}
	c.hubConfig = hub.Config{
		Credentials: store,
		OwnerEpoch:  epoch,
		Pools:       c.pools,
		Placements:  c.placements,
		Timers:      cfg.Timers,
		Logger:      c.log,
	}
	if cfg.Presence != nil {
		c.hubConfig.Presence = cfg.Presence
	}
	v, _, err := c.hold(hubKey, func() (io.Closer, error) { return &sharedHub{Hub: hub.New()}, nil })
	if err != nil {
		return err
	}
	c.hub = v.(*sharedHub)
	c.metrics = RegisterMetrics(cfg.Metrics, c.hub.Hub)
	c.hubConfig.Observer = c.metrics
	if err := c.hub.CheckConfig(c.hubConfig); err != nil {
		return err
	}
	if !c.hub.Configured() {
		return c.hub.Configure(c.hubConfig)
	}
	return nil
}

// hold takes key from Shared and records it for Close.
func (c *Core) hold(key string, open func() (io.Closer, error)) (io.Closer, bool, error) {
	v, loaded, err := c.cfg.Shared.Hold(key, open)
	if err != nil {
		return nil, false, err
	}
	c.held = append(c.held, key)
	return v, loaded, nil
}

// Start makes this configuration's pools and hub settings the running
// ones (a reload's new configuration takes over the hub here, its
// connections untouched). On error nothing is changed.
func (c *Core) Start() error {
	undo, err := c.pools.Configure(c.poolSpecs)
	if err != nil {
		return err
	}
	c.poolsUndo = undo
	undo, err = c.hub.Apply(c.hubConfig)
	if err != nil {
		c.poolsUndo()
		c.poolsUndo = nil
		return err
	}
	c.hubUndo = undo
	return nil
}

// Stop puts back the hub settings and pools Start replaced (when no later
// configuration replaced them since). When the process is exiting it
// instead begins draining the hub: no new node connects or dispatches, the
// dispatches under way get up to grace to finish, then every node
// connection is closed with 1001; the pools stay as they are (the state
// must not go back). Close waits for the drain.
func (c *Core) Stop(exiting bool, grace time.Duration) {
	if c.hubUndo != nil {
		c.hubUndo()
		c.hubUndo = nil
	}
	if exiting {
		c.hub.drain(grace, c.log)
	}
	if c.poolsUndo != nil && !exiting {
		c.poolsUndo()
	}
	c.poolsUndo = nil
}

// Close releases this configuration's references to the shared objects,
// the hub last (its drain may still use the stores); each is closed when
// no configuration holds it any more (the hub then closes every node
// connection). The error joins the release errors.
func (c *Core) Close() error {
	var err error
	for i := len(c.held) - 1; i >= 0; i-- {
		if c.held[i] == hubKey {
			continue
		}
		err = errors.Join(err, c.cfg.Shared.Release(c.held[i]))
	}
	for _, k := range c.held {
		if k == hubKey {
			err = errors.Join(err, c.cfg.Shared.Release(k))
		}
	}
	c.held = nil
	return err
}

// Hub returns the node hub.
func (c *Core) Hub() *hub.Hub { return c.hub.Hub }

// Pools returns the pool registry.
func (c *Core) Pools() *pool.Registry { return c.pools }

// Placements returns the placement store.
func (c *Core) Placements() placement.Store { return c.placements }

// Enrolment returns the enrolled-node store, nil without a state
// directory or the Kubernetes store.
func (c *Core) Enrolment() enrolment.Enrolments { return c.enrolment }

// Releases returns the release store, nil without one.
func (c *Core) Releases() *releasestore.Store { return c.releases }

// Credentials returns the store that authenticates nodes: the operator's
// source merged with the enrolled nodes.
func (c *Core) Credentials() credential.Store { return c.creds }

// Metrics returns the hub's metrics, which also observe the internal node
// API's forwarding (api.ForwardObserver).
func (c *Core) Metrics() *Metrics { return c.metrics }

// sharedHub is the hub as Shared holds it: its Close waits for a drain
// that began (the process is exiting) and then closes every node
// connection (close code 1001).
type sharedHub struct {
	*hub.Hub
	drainOnce sync.Once
	drained   chan struct{} // closed when a drain began with drain has ended
}

// drain begins the hub's graceful shutdown (hub.Shutdown with grace) in
// the background, once.
func (p *sharedHub) drain(grace time.Duration, log *zap.Logger) {
	p.drainOnce.Do(func() {
		p.drained = make(chan struct{})
		go func() {
			defer close(p.drained)
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			if err := p.Hub.Shutdown(ctx); err != nil {
				log.Warn("node connections closed before every dispatch under way had its outcome", zap.Duration("shutdown_grace", grace))
			}
		}()
	})
}

// Close implements io.Closer.
func (p *sharedHub) Close() error {
	p.drainOnce.Do(func() {}) // no drain may begin from now on
	if p.drained != nil {
		<-p.drained
	}
	return p.Hub.Close()
}
