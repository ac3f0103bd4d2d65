package sandgate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/caddyserver/caddy/v2"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/kubestore"
	"github.com/sandgate/sandgate/nodecore/placement"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

// registries holds the pool registries across reloads, keyed by their
// state file ("" for the in-memory one).
var registries = caddy.NewUsagePool()

// pooledRegistry lets the pool drop a registry when no config holds it.
type pooledRegistry struct{ *pool.Registry }

// Destruct does nothing: the state is on disk (or gone with the process).
func (pooledRegistry) Destruct() error { return nil }

// enrolments holds the enrolled-node stores across reloads, keyed by
// their state file.
var enrolments = caddy.NewUsagePool()

// pooledEnrolment lets the pool drop a store when no config holds it.
type pooledEnrolment struct{ *enrolment.Store }

// Destruct does nothing: the store is on disk.
func (pooledEnrolment) Destruct() error { return nil }

// placementStores holds the placement stores across reloads, keyed by
// their journal ("" for the in-memory one).
var placementStores = caddy.NewUsagePool()

// pooledPlacements closes a journal when no config holds it.
type pooledPlacements struct{ placement.Store }

// Destruct closes the journal file, if any.
func (p pooledPlacements) Destruct() error {
	if f, ok := p.Store.(*placement.File); ok {
		return f.Close()
	}
	return nil
}

// checkPools validates the pools' static settings; the error names the
// pool and generation.
func (n *Nodes) checkPools() error {
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
func (n *Nodes) poolSpecs(store *releasestore.Store) (map[string]pool.Spec, error) {
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

// provisionPools opens the release store and the node state (the state
// directory's files, or the Kubernetes store), and checks (or, for the
// first config, applies) this config's pools.
func (a *App) provisionPools() error {
	n := a.Nodes
	if err := n.checkPools(); err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	if n.Releases != "" {
		store, err := releasestore.OpenStore(repl.ReplaceAll(n.Releases, ""))
		if err != nil {
			return fmt.Errorf("releases: %w", err)
		}
		a.releases = store
	}
	specs, err := n.poolSpecs(a.releases)
	if err != nil {
		return err
	}
	a.poolSpecs = specs
	var loaded bool
	switch n.Store {
	case "", StoreFile:
		loaded, err = a.provisionFileState(repl)
	case StoreKubernetes:
		loaded, err = a.provisionKubeState()
	default:
		return fmt.Errorf("store %q: must be file or kubernetes", n.Store)
	}
	if err != nil {
		return err
	}
	if !loaded {
		// The first config applies its pools at once, so that the hub
		// never serves a generation-managing node without them.
		_, err := a.pools.Configure(specs)
		return err
	}
	return a.pools.Check(specs)
}

// provisionFileState opens the state directory's files (or the memory
// stores without one); loaded reports that the pool registry was already
// open (a reload).
func (a *App) provisionFileState(repl *caddy.Replacer) (loaded bool, err error) {
	n := a.Nodes
	statePath := ""
	if n.StateDir != "" {
		dir, err := filepath.Abs(repl.ReplaceAll(n.StateDir, ""))
		if err != nil {
			return false, fmt.Errorf("state_dir: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("state_dir: %w", err)
		}
		a.stateDir = dir
		statePath = filepath.Join(dir, "pools.json")
		enrolPath := filepath.Join(dir, "enrolment.json")
		v, _, err := enrolments.LoadOrNew(enrolPath, func() (caddy.Destructor, error) {
			s, err := enrolment.Open(enrolPath, nil)
			if err != nil {
				return nil, err
			}
			return pooledEnrolment{s}, nil
		})
		if err != nil {
			return false, err
		}
		a.enrolmentKey = enrolPath
		a.enrolment = v.(pooledEnrolment).Store
	}
	journal := ""
	if a.stateDir != "" {
		journal = filepath.Join(a.stateDir, "placements.jsonl")
	}
	pv, _, err := placementStores.LoadOrNew(journal, func() (caddy.Destructor, error) {
		if journal == "" {
			return pooledPlacements{placement.NewMemory()}, nil
		}
		f, err := placement.Open(journal)
		if err != nil {
			return nil, err
		}
		return pooledPlacements{f}, nil
	})
	if err != nil {
		return false, err
	}
	a.placementsKey = journal
	a.placementsHeld = true
	a.placements = pv.(pooledPlacements).Store
	key := "sandgate.node.pools:" + statePath
	v, loaded, err := registries.LoadOrNew(key, func() (caddy.Destructor, error) {
		r, err := pool.Open(statePath)
		if err != nil {
			return nil, err
		}
		return pooledRegistry{r}, nil
	})
	if err != nil {
		return false, err
	}
	a.poolsKey = key
	a.pools = v.(pooledRegistry).Registry
	return loaded, nil
}

// kubeStores holds the Kubernetes node stores across reloads, keyed by
// the Portal cluster connection they use.
var kubeStores = caddy.NewUsagePool()

// pooledKubeStore closes the store's watches when no config holds it.
type pooledKubeStore struct {
	*kubestore.Store
	pools *pool.Registry
}

// Destruct stops the store's watches.
func (p pooledKubeStore) Destruct() error { return p.Close() }

// provisionKubeState opens (or, on a reload, shares) the node state kept
// in the Portal cluster (package nodecore/kubestore); loaded reports that it
// was already open.
func (a *App) provisionKubeState() (loaded bool, err error) {
	if a.portal == nil {
		return false, errors.New("store kubernetes needs the sandgate app's kubernetes block (the Portal cluster connection)")
	}
	if a.Nodes.StateDir != "" {
		return false, errors.New("store kubernetes keeps the node state in the Portal cluster: remove state_dir")
	}
	key := "sandgate.node.kubestore:" + a.portalKey
	pc := a.portal
	log := a.logger.Named("nodes.store")
	v, loaded, err := kubeStores.LoadOrNew(key, func() (caddy.Destructor, error) {
		s, err := kubestore.Open(kubestore.Config{REST: pc.RESTConfig(), Namespace: pc.Namespace(), Context: pc.Context(), Logger: log})
		if err != nil {
			return nil, err
		}
		reg, err := s.Pools()
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		return pooledKubeStore{Store: s, pools: reg}, nil
	})
	if err != nil {
		return false, err
	}
	ks := v.(pooledKubeStore)
	a.kubeStoreKey = key
	a.pools, a.placements, a.enrolment = ks.pools, ks.Placements(), ks.Enrolment()
	return loaded, nil
}
