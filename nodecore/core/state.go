package core

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/kubestore"
	"github.com/sandgate/sandgate/nodecore/placement"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

// Pool is one node pool: the generations it knows and its deployment.
// JSON:
//
//	{"generations": [{"generation": 7, "release": "busybox-7"},
//	                 {"generation": 8, "specification_digest": "<64 hex>"}],
//	 "target": 8, "serving": 7}
//
// The deployment can also be changed at run time (the admin routes, PUT
// /sandgate/pools/<name>/deployment); a reload keeps such a change unless
// it changes target or serving itself.
type Pool struct {
	// Generations bind deployment generations to a release of the release
	// store (the specification digest is then the SHA-256 of the release's
	// manifest.json, computed by Core) or to an explicit specification
	// digest. A generation is bound once and for all: binding it to
	// another digest later is refused.
	Generations []PoolGeneration `json:"generations,omitempty"`
	// Target is the target generation, which must be bound. Absent: the
	// pool has no deployment until one is set at run time.
	Target int64 `json:"target,omitempty"`
	// Serving is the serving generation; absent is null.
	Serving int64 `json:"serving,omitempty"`
}

// PoolGeneration binds one generation: exactly one of Release and
// SpecificationDigest.
type PoolGeneration struct {
	// Generation is the deployment generation, > 0.
	Generation int64 `json:"generation"`
	// Release is a release source in the release store.
	Release string `json:"release,omitempty"`
	// SpecificationDigest is the generation's lowercase hex SHA-256
	// specification digest.
	SpecificationDigest string `json:"specification_digest,omitempty"`
}

// Deployment is the deployment advertised to generation-managing nodes.
type Deployment struct {
	// Generation is the target deployment generation, > 0. Required.
	Generation int64 `json:"generation"`
	// SpecificationDigest is the target's lowercase hex SHA-256
	// specification digest. Required.
	SpecificationDigest string `json:"specification_digest"`
	// ServingGeneration is the generation nodes keep serving, > 0; absent
	// (0) is sent as null.
	ServingGeneration int64 `json:"serving_generation,omitempty"`
}

// Check validates the owner epoch and the deployment; the error names
// the setting.
func (n *Config) Check() error {
	if n.OwnerEpoch < 0 {
		return errors.New("owner_epoch must be positive")
	}
	if d := n.Deployment; d != nil {
		switch {
		case d.Generation <= 0:
			return errors.New("deployment generation must be positive")
		case !proto.IsDigest(d.SpecificationDigest):
			return errors.New("deployment specification_digest must be 64 lowercase hexadecimal digits")
		case d.ServingGeneration < 0:
			return errors.New("deployment serving_generation must be positive")
		}
	}
	return nil
}

// closer closes nothing: the state it holds is on disk (or gone with the
// process).
type closer struct{ v any }

func (closer) Close() error { return nil }

// placementCloser closes a placement journal, if the store is one.
type placementCloser struct{ placement.Store }

func (p placementCloser) Close() error {
	if f, ok := p.Store.(*placement.File); ok {
		return f.Close()
	}
	return nil
}

// checkPools validates the pools' static settings; the error names the
// pool and generation.
func (n *Config) checkPools() error {
	if n.Deployment != nil && n.Pools[pool.Default] != nil {
		return errors.New("deployment and pool default both set the default pool's deployment: use one")
	}
	names := make([]string, 0, len(n.Pools))
	for name := range n.Pools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := n.Pools[name]
		if !pool.IsName(name) {
			return fmt.Errorf("pool %q: a pool name is 1..63 characters of [a-z0-9-], starting and ending with a letter or digit", name)
		}
		if p == nil {
			return fmt.Errorf("pool %q: empty definition", name)
		}
		if p.Target < 0 || p.Serving < 0 {
			return fmt.Errorf("pool %q: target and serving must be positive", name)
		}
		seen := map[int64]bool{}
		for _, g := range p.Generations {
			switch {
			case g.Generation <= 0:
				return fmt.Errorf("pool %q: generation numbers must be positive", name)
			case seen[g.Generation]:
				return fmt.Errorf("pool %q: generation %d is bound twice", name, g.Generation)
			case (g.Release == "") == (g.SpecificationDigest == ""):
				return fmt.Errorf("pool %q generation %d: give exactly one of release and specification_digest", name, g.Generation)
			case g.Release != "" && !release.IsSource(g.Release):
				return fmt.Errorf("pool %q generation %d: release %q is not a release source name", name, g.Generation, g.Release)
			case g.SpecificationDigest != "" && !proto.IsDigest(g.SpecificationDigest):
				return fmt.Errorf("pool %q generation %d: specification_digest must be 64 lowercase hexadecimal digits", name, g.Generation)
			}
			seen[g.Generation] = true
		}
		if p.Target > 0 && !seen[p.Target] {
			return fmt.Errorf("pool %q: target generation %d is not bound by a generation line", name, p.Target)
		}
	}
	return nil
}

// poolSpecs resolves the pools into registry specs, reading each bound
// release's manifest from the store for its specification digest.
func (n *Config) poolSpecs(store *releasestore.Store) (map[string]pool.Spec, error) {
	specs := map[string]pool.Spec{}
	if d := n.Deployment; d != nil {
		specs[pool.Default] = pool.Spec{
			Bindings: []pool.Binding{{Generation: d.Generation, SpecificationDigest: d.SpecificationDigest}},
			Target:   d.Generation, Serving: d.ServingGeneration,
		}
	}
	for name, p := range n.Pools {
		s := pool.Spec{Target: p.Target, Serving: p.Serving}
		for _, g := range p.Generations {
			b := pool.Binding{Generation: g.Generation, SpecificationDigest: g.SpecificationDigest}
			if g.Release != "" {
				if store == nil {
					return nil, fmt.Errorf("pool %q generation %d: release %q needs a release store (releases <dir>)", name, g.Generation, g.Release)
				}
				rel, err := store.Release(g.Release)
				if err != nil {
					return nil, fmt.Errorf("pool %q generation %d: %w", name, g.Generation, err)
				}
				b.SpecificationDigest, b.Source = rel.Digest, g.Release
			}
			s.Bindings = append(s.Bindings, b)
		}
		specs[name] = s
	}
	return specs, nil
}

// openState opens the release store and the node state (the state
// directory's files, or the Kubernetes store), and checks (or, for the
// first configuration, applies) this configuration's pools.
func (c *Core) openState() error {
	n := &c.cfg
	if err := n.checkPools(); err != nil {
		return err
	}
	if n.Releases != "" {
		store, err := releasestore.OpenStore(n.Releases)
		if err != nil {
			return fmt.Errorf("releases: %w", err)
		}
		c.releases = store
	}
	specs, err := n.poolSpecs(c.releases)
	if err != nil {
		return err
	}
	c.poolSpecs = specs
	var loaded bool
	switch n.Store {
	case "", StoreFile:
		loaded, err = c.openFileState()
	case StoreKubernetes:
		loaded, err = c.openKubeState()
	default:
		return fmt.Errorf("store %q: must be file or kubernetes", n.Store)
	}
	if err != nil {
		return err
	}
	if !loaded {
		// The first configuration applies its pools at once, so that the
		// hub never serves a generation-managing node without them.
		_, err := c.pools.Configure(specs)
		return err
	}
	return c.pools.Check(specs)
}

// openFileState opens the state directory's files (or the memory stores
// without one); loaded reports that the pool registry was already open (a
// reload).
func (c *Core) openFileState() (loaded bool, err error) {
	statePath, journal := "", ""
	if c.cfg.StateDir != "" {
		dir, err := filepath.Abs(c.cfg.StateDir)
		if err != nil {
			return false, fmt.Errorf("state_dir: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("state_dir: %w", err)
		}
		statePath = filepath.Join(dir, "pools.json")
		journal = filepath.Join(dir, "placements.jsonl")
		enrolPath := filepath.Join(dir, "enrolment.json")
		v, _, err := c.hold("sandgate.node.enrolment:"+enrolPath, func() (io.Closer, error) {
			s, err := enrolment.Open(enrolPath, nil)
			if err != nil {
				return nil, err
			}
			return closer{s}, nil
		})
		if err != nil {
			return false, err
		}
		c.enrolment = v.(closer).v.(*enrolment.Store)
	}
	pv, _, err := c.hold("sandgate.node.placements:"+journal, func() (io.Closer, error) {
		if journal == "" {
			return placementCloser{placement.NewMemory()}, nil
		}
		f, err := placement.Open(journal)
		if err != nil {
			return nil, err
		}
		return placementCloser{f}, nil
	})
	if err != nil {
		return false, err
	}
	c.placements = pv.(placementCloser).Store
	v, loaded, err := c.hold("sandgate.node.pools:"+statePath, func() (io.Closer, error) {
		r, err := pool.Open(statePath)
		if err != nil {
			return nil, err
		}
		return closer{r}, nil
	})
	if err != nil {
		return false, err
	}
	c.pools = v.(closer).v.(*pool.Registry)
	return loaded, nil
}

// sharedKubeStore is the Kubernetes node store as Shared holds it, with
// its pool registry.
type sharedKubeStore struct {
	*kubestore.Store
	pools *pool.Registry
}

// openKubeState opens (or, on a reload, shares) the node state kept in
// the Portal cluster (package nodecore/kubestore); loaded reports that it
// was already open.
func (c *Core) openKubeState() (loaded bool, err error) {
	pc := c.cfg.Portal
	if pc == nil {
		return false, errors.New("store kubernetes needs the sandgate app's kubernetes block (the Portal cluster connection)")
	}
	if c.cfg.StateDir != "" {
		return false, errors.New("store kubernetes keeps the node state in the Portal cluster: remove state_dir")
	}
	log := c.log.Named("store")
	v, loaded, err := c.hold("sandgate.node.kubestore:"+c.cfg.PortalKey, func() (io.Closer, error) {
		s, err := kubestore.Open(kubestore.Config{REST: pc.RESTConfig(), Namespace: pc.Namespace(), Context: pc.Context(), Logger: log})
		if err != nil {
			return nil, err
		}
		reg, err := s.Pools()
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		return sharedKubeStore{Store: s, pools: reg}, nil
	})
	if err != nil {
		return false, err
	}
	ks := v.(sharedKubeStore)
	c.pools, c.placements, c.enrolment = ks.pools, ks.Placements(), ks.Enrolment()
	return loaded, nil
}
