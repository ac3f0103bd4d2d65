package kubestore

import (
	"fmt"
	"strconv"
	"sync"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/sandgate/sandgate/nodecore/apis/v1alpha1"
	"github.com/sandgate/sandgate/nodecore/pool"
)

// poolBackend is the pool.Backend over NodePool objects, one per pool.
type poolBackend struct {
	s *Store

	once sync.Once
	reg  *pool.Registry
	err  error
}

// Pools returns the pool registry kept in NodePool objects; every call
// returns the same registry. It follows the other replicas' changes
// through the watch (pool.Registry.Observe). Errors wrap pool.ErrState.
func (s *Store) Pools() (*pool.Registry, error) {
	b := s.poolBackend
	b.once.Do(func() {
		b.reg, b.err = pool.New(b)
		if b.err != nil {
			return
		}
		_, b.err = s.poolInformer.AddEventHandler(handlers(func(p *v1.NodePool) {
			st, err := stateOf(p)
			if err != nil {
				s.cfg.Logger.Warn("a NodePool object is malformed; the replica keeps the pool's last state", zap.String("pool", p.Name), zap.Error(err))
				return
			}
			b.reg.Observe(p.Name, st)
		}, func(*v1.NodePool) {}))
		if b.err != nil {
			b.err = fmt.Errorf("%w: %v", pool.ErrState, b.err)
		}
	})
	return b.reg, b.err
}

// stateOf converts a NodePool into the registry's state.
func stateOf(p *v1.NodePool) (*pool.State, error) {
	st := &pool.State{Target: p.Spec.Target, Serving: p.Spec.Serving, Generations: map[int64]pool.Binding{}, Version: p.ResourceVersion}
	if c := p.Status.Configured; c != nil {
		st.Configured = &pool.Configured{Target: c.Target, Serving: c.Serving}
	}
	for k, b := range p.Spec.Generations {
		g, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: pool %q: generation %q", pool.ErrState, p.Name, k)
		}
		st.Generations[g] = pool.Binding{Generation: g, SpecificationDigest: b.SpecificationDigest, Source: b.Release}
	}
	if err := st.Validate(p.Name); err != nil {
		return nil, err
	}
	return st, nil
}

// objectOf converts a pool's state into its NodePool (without version).
func (b *poolBackend) objectOf(name string, st *pool.State) *v1.NodePool {
	p := &v1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.s.cfg.Namespace, Labels: labels("")},
		Spec: v1.NodePoolSpec{Target: st.Target, Serving: st.Serving, Generations: map[string]v1.GenerationBinding{}}}
	for g, bd := range st.Generations {
		p.Spec.Generations[strconv.FormatInt(g, 10)] = v1.GenerationBinding{SpecificationDigest: bd.SpecificationDigest, Release: bd.Source}
	}
	if c := st.Configured; c != nil {
		p.Status.Configured = &v1.ConfiguredDeployment{Target: c.Target, Serving: c.Serving}
	}
	return p
}

// Load implements pool.Backend: every NodePool, read from the apiserver.
// A malformed object is left out (and logged).
func (b *poolBackend) Load() (map[string]*pool.State, error) {
	ctx, cancel := b.s.request()
	defer cancel()
	var l v1.NodePoolList
	if err := b.s.client.List(ctx, &l, client.InNamespace(b.s.cfg.Namespace)); err != nil {
		return nil, fmt.Errorf("%w: listing the NodePools: %v", pool.ErrState, err)
	}
	out := make(map[string]*pool.State, len(l.Items))
	for i := range l.Items {
		st, err := stateOf(&l.Items[i])
		if err != nil {
			b.s.cfg.Logger.Warn("a NodePool object is malformed and is left out", zap.String("pool", l.Items[i].Name), zap.Error(err))
			continue
		}
		out[l.Items[i].Name] = st
	}
	return out, nil
}

// Save implements pool.Backend: each change is a create, an update or a
// delete conditional on its From version. When one fails, those already
// made are put back (conditionally on the version they were given) and
// the error is returned: pool.ErrStale for a concurrent change,
// pool.ErrState otherwise.
func (b *poolBackend) Save(changes []pool.Change) error {
	for i, c := range changes {
		if err := b.apply(c); err != nil {
			for j := i - 1; j >= 0; j-- {
				b.undo(changes[j])
			}
			return err
		}
	}
	return nil
}

// apply makes one change.
func (b *poolBackend) apply(c pool.Change) error {
	ctx, cancel := b.s.request()
	defer cancel()
	var err error
	switch {
	case c.To == nil && c.From == nil:
		return nil
	case c.To == nil:
		rv := c.From.Version
		err = b.s.client.Delete(ctx, &v1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: b.s.cfg.Namespace}},
			client.Preconditions{ResourceVersion: &rv})
	case c.From == nil:
		obj := b.objectOf(c.Name, c.To)
		if err = b.s.client.Create(ctx, obj); err == nil {
			c.To.Version = obj.ResourceVersion
		}
	default:
		obj := b.objectOf(c.Name, c.To)
		obj.ResourceVersion = c.From.Version
		if err = b.s.client.Update(ctx, obj); err == nil {
			c.To.Version = obj.ResourceVersion
		}
	}
	switch {
	case err == nil:
		return nil
	case conflict(err):
		return fmt.Errorf("%w: pool %q: %v", pool.ErrStale, c.Name, err)
	default:
		return fmt.Errorf("%w: pool %q: %v", pool.ErrState, c.Name, err)
	}
}

// undo puts back what apply made, conditionally on the version it gave.
func (b *poolBackend) undo(c pool.Change) {
	ctx, cancel := b.s.request()
	defer cancel()
	var err error
	switch {
	case c.From == nil && c.To != nil:
		rv := c.To.Version
		err = b.s.client.Delete(ctx, &v1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: b.s.cfg.Namespace}},
			client.Preconditions{ResourceVersion: &rv})
	case c.From != nil && c.To != nil:
		obj := b.objectOf(c.Name, c.From)
		obj.ResourceVersion = c.To.Version
		err = b.s.client.Update(ctx, obj)
	case c.From != nil:
		err = b.s.client.Create(ctx, b.objectOf(c.Name, c.From))
	}
	if err != nil && !apierrors.IsNotFound(err) {
		b.s.cfg.Logger.Warn("a pool change could not be put back after a later one failed", zap.String("pool", c.Name), zap.Error(err))
	}
}

var _ pool.Backend = (*poolBackend)(nil)
