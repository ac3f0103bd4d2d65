// Package pooltest is the contract of a pool.Backend, as tests: the rules
// of package pool (bindings never change, the latest change wins across
// reloads and restarts, a refusal stores nothing, undo) run against any
// backend. The state file's tests and the Kubernetes store's tests
// (package nodecore/kubestore) both run it.
package pooltest

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/pool"
)

// Store is one empty store under test.
type Store struct {
	// Open returns a new Registry on the store (each call a restart of the
	// gateway, or another replica).
	Open func(t *testing.T) *pool.Registry
	// Snapshot returns the stored state in a comparable form, to show that
	// a refusal stored nothing.
	Snapshot func(t *testing.T) string
	// Shared is true for a store several replicas write at once: the
	// concurrent-change tests run too.
	Shared bool
}

// Digests of the test generations.
var (
	D7 = strings.Repeat("7a", 32)
	D8 = strings.Repeat("8b", 32)
	D9 = strings.Repeat("9c", 32)
)

func ptr(v int64) *int64 { return &v }

// Dep returns pool name's deployment, failing the test when it has none.
func Dep(t *testing.T, r *pool.Registry, name string) proto.Deployment {
	t.Helper()
	d, ok := r.Deployment(name)
	if !ok {
		t.Fatalf("pool %s has no deployment", name)
	}
	return d
}

// Same reports whether d is generation gen with digest and serving (0:
// null).
func Same(d proto.Deployment, gen int64, digest string, serving int64) bool {
	if d.Generation != gen || d.SpecificationDigest != digest {
		return false
	}
	if serving == 0 {
		return d.ServingGeneration == nil
	}
	return d.ServingGeneration != nil && *d.ServingGeneration == serving
}

// Spec7 is a config with pool default at generation 7 from release rel-7.
func Spec7() map[string]pool.Spec {
	return map[string]pool.Spec{"default": {Bindings: []pool.Binding{{Generation: 7, SpecificationDigest: D7, Source: "rel-7"}}, Target: 7}}
}

// Run runs every contract test; newStore returns an empty store.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("ConfigureAndSet", func(t *testing.T) { ConfigureAndSet(t, newStore(t)) })
	t.Run("RefusalsStoreNothing", func(t *testing.T) { RefusalsStoreNothing(t, newStore(t)) })
	t.Run("StateSurvivesRestart", func(t *testing.T) { StateSurvivesRestart(t, newStore(t)) })
	t.Run("ConfigureUndo", func(t *testing.T) { ConfigureUndo(t, newStore(t)) })
	if s := newStore(t); s.Shared {
		t.Run("ConcurrentReplicas", func(t *testing.T) { ConcurrentReplicas(t, s) })
	}
}

// ConfigureAndSet: a config applies its pool; Set rolls the deployment; a
// reload with the same pool block keeps the run-time deployment, one that
// changes it applies it.
func ConfigureAndSet(t *testing.T, s Store) {
	r := s.Open(t)
	if _, ok := r.Deployment("default"); ok {
		t.Fatal("a deployment before any config")
	}
	if _, err := r.Configure(Spec7()); err != nil {
		t.Fatal(err)
	}
	if d := Dep(t, r, "default"); !Same(d, 7, D7, 0) {
		t.Fatalf("%+v", d)
	}
	// Roll to 8 at run time, keep serving 7.
	d, err := r.Set("default", 8, ptr(7), &pool.Binding{Generation: 8, SpecificationDigest: D8, Source: "rel-8"})
	if err != nil || !Same(d, 8, D8, 7) || !Same(Dep(t, r, "default"), 8, D8, 7) {
		t.Fatalf("%+v %v", d, err)
	}
	if b, ok := r.Binding("default", 8); !ok || b.Source != "rel-8" || b.SpecificationDigest != D8 {
		t.Fatalf("%+v", b)
	}
	if !r.HasSource("default", "rel-8") || r.HasSource("default", "rel-9") || r.HasSource("gpu", "rel-8") {
		t.Fatal("HasSource")
	}
	// Serving flips to 8; target 8 is bound already.
	if d, err := r.Set("default", 8, ptr(8), nil); err != nil || !Same(d, 8, D8, 8) {
		t.Fatalf("%+v %v", d, err)
	}
	// A reload with the same pool block keeps the run-time deployment.
	if _, err := r.Configure(Spec7()); err != nil {
		t.Fatal(err)
	}
	if d := Dep(t, r, "default"); !Same(d, 8, D8, 8) {
		t.Fatalf("a reload with an unchanged pool block reverted the deployment: %+v", d)
	}
	// A reload that changes the block applies it.
	sp := Spec7()
	p := sp["default"]
	p.Serving = 7
	sp["default"] = p
	if _, err := r.Configure(sp); err != nil {
		t.Fatal(err)
	}
	if d := Dep(t, r, "default"); !Same(d, 7, D7, 7) {
		t.Fatalf("%+v", d)
	}
	st := r.Pools()
	if len(st) != 1 || len(st[0].Generations) != 2 || st[0].Generations[1].Generation != 8 || st[0].Deployment == nil {
		t.Fatalf("%+v", st)
	}
}

// RefusalsStoreNothing: every refused Set, Check and Configure returns its
// error class and leaves the store as it was.
func RefusalsStoreNothing(t *testing.T, s Store) {
	r := s.Open(t)
	if _, err := r.Configure(Spec7()); err != nil {
		t.Fatal(err)
	}
	before := s.Snapshot(t)
	for name, tc := range map[string]struct {
		f    func() error
		want error
	}{
		"unknown pool":   {func() error { _, err := r.Set("gpu", 7, nil, nil); return err }, pool.ErrUnknownPool},
		"unbound target": {func() error { _, err := r.Set("default", 9, nil, nil); return err }, pool.ErrUnbound},
		"rebinding": {func() error {
			_, err := r.Set("default", 7, nil, &pool.Binding{Generation: 7, SpecificationDigest: D9})
			return err
		}, pool.ErrConflict},
		"other source": {func() error {
			_, err := r.Set("default", 7, nil, &pool.Binding{Generation: 7, SpecificationDigest: D7, Source: "rel-x"})
			return err
		}, pool.ErrConflict},
		"binding for another generation": {func() error {
			_, err := r.Set("default", 7, nil, &pool.Binding{Generation: 8, SpecificationDigest: D8})
			return err
		}, pool.ErrInvalid},
		"zero serving": {func() error { _, err := r.Set("default", 7, ptr(0), nil); return err }, pool.ErrInvalid},
		"config rebinding": {func() error {
			return r.Check(map[string]pool.Spec{"default": {Bindings: []pool.Binding{{Generation: 7, SpecificationDigest: D9}}, Target: 7}})
		}, pool.ErrConflict},
		"config unbound target": {func() error {
			_, err := r.Configure(map[string]pool.Spec{"default": {Target: 9}})
			return err
		}, pool.ErrUnbound},
		"config bad name": {func() error { _, err := r.Configure(map[string]pool.Spec{"Default": {}}); return err }, pool.ErrInvalid},
		"config conflict in a second pool": {func() error {
			_, err := r.Configure(map[string]pool.Spec{
				"a-first": {Bindings: []pool.Binding{{Generation: 1, SpecificationDigest: D8}}, Target: 1},
				"default": {Bindings: []pool.Binding{{Generation: 7, SpecificationDigest: D9}}, Target: 7}})
			return err
		}, pool.ErrConflict},
		"bad digest": {func() error {
			_, err := r.Set("default", 9, nil, &pool.Binding{Generation: 9, SpecificationDigest: strings.ToUpper(D9)})
			return err
		}, pool.ErrInvalid},
	} {
		if err := tc.f(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if after := s.Snapshot(t); before != after || !Same(Dep(t, r, "default"), 7, D7, 0) {
		t.Fatalf("a refusal changed the store:\n%s\n%s", before, after)
	}
	if _, ok := r.Binding("default", 9); ok {
		t.Fatal("a refused binding was kept")
	}
	if r.Configured("a-first") {
		t.Fatal("a refused config defined a pool")
	}
}

// StateSurvivesRestart: a new registry on the store (a restart, another
// replica) has no deployment before its config defines the pool, and with
// the same config keeps the run-time change.
func StateSurvivesRestart(t *testing.T, s Store) {
	r := s.Open(t)
	if _, err := r.Configure(Spec7()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Set("default", 8, ptr(7), &pool.Binding{Generation: 8, SpecificationDigest: D8, Source: "rel-8"}); err != nil {
		t.Fatal(err)
	}
	r2 := s.Open(t)
	if _, ok := r2.Deployment("default"); ok {
		t.Fatal("a deployment before the config defines the pool")
	}
	if err := r2.Check(Spec7()); err != nil {
		t.Fatal(err)
	}
	if err := r2.Check(map[string]pool.Spec{"default": {Bindings: []pool.Binding{{Generation: 8, SpecificationDigest: D9}}, Target: 8}}); !errors.Is(err, pool.ErrConflict) {
		t.Fatalf("the restarted registry lost a binding: %v", err)
	}
	if _, err := r2.Configure(Spec7()); err != nil {
		t.Fatal(err)
	}
	if d := Dep(t, r2, "default"); !Same(d, 8, D8, 7) {
		t.Fatalf("%+v", d)
	}
}

// ConfigureUndo: undo puts back the deployment and the configured pools
// Configure replaced, keeps the bindings it added (they may have been
// advertised), and does nothing once another change came after it.
func ConfigureUndo(t *testing.T, s Store) {
	r := s.Open(t)
	if _, err := r.Configure(Spec7()); err != nil {
		t.Fatal(err)
	}
	sp := Spec7()
	sp["default"] = pool.Spec{Bindings: []pool.Binding{{Generation: 7, SpecificationDigest: D7}, {Generation: 8, SpecificationDigest: D8}}, Target: 8, Serving: 7}
	sp["gpu"] = pool.Spec{Bindings: []pool.Binding{{Generation: 1, SpecificationDigest: D9}}, Target: 1}
	undo, err := r.Configure(sp)
	if err != nil {
		t.Fatal(err)
	}
	undo()
	if d := Dep(t, r, "default"); !Same(d, 7, D7, 0) || r.Configured("gpu") {
		t.Fatalf("undo: %+v", d)
	}
	for _, x := range []*pool.Registry{r, s.Open(t)} {
		if err := x.Check(map[string]pool.Spec{"default": {Bindings: []pool.Binding{{Generation: 8, SpecificationDigest: D9}}, Target: 8}}); !errors.Is(err, pool.ErrConflict) {
			t.Fatalf("undo dropped a binding: %v", err)
		}
	}
	// After a restart the same config applies its own deployment again.
	r2 := s.Open(t)
	if _, err := r2.Configure(Spec7()); err != nil {
		t.Fatal(err)
	}
	if d := Dep(t, r2, "default"); !Same(d, 7, D7, 0) {
		t.Fatalf("after the undo and a restart: %+v", d)
	}
	// An undo after another change does nothing.
	r = s.Open(t)
	if _, err := r.Configure(Spec7()); err != nil {
		t.Fatal(err)
	}
	undo, _ = r.Configure(sp)
	if _, err := r.Set("default", 7, nil, nil); err != nil {
		t.Fatal(err)
	}
	undo()
	if !r.Configured("gpu") || !Same(Dep(t, r, "default"), 7, D7, 0) {
		t.Fatal("a stale undo took effect")
	}
	r3 := s.Open(t)
	if _, err := r3.Configure(map[string]pool.Spec{"gpu": {Bindings: []pool.Binding{{Generation: 1, SpecificationDigest: D9}}, Target: 1}}); err != nil {
		t.Fatal(err)
	}
	if d := Dep(t, r3, "gpu"); !Same(d, 1, D9, 0) {
		t.Fatalf("a stale undo changed the gpu pool: %+v", d)
	}
}

// ConcurrentReplicas: two registries on one shared store bind different
// generations at once (both bindings are kept: no change is lost), and
// race to bind one generation to different digests (exactly one wins,
// the other is refused with ErrConflict).
func ConcurrentReplicas(t *testing.T, s Store) {
	a, b := s.Open(t), s.Open(t)
	for _, r := range []*pool.Registry{a, b} {
		if _, err := r.Configure(Spec7()); err != nil {
			t.Fatal(err)
		}
	}
	const n = 10
	var wg sync.WaitGroup
	for i := range n {
		for j, r := range []*pool.Registry{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := int64(100 + 2*i + j)
				if _, err := r.Set("default", g, ptr(7), &pool.Binding{Generation: g, SpecificationDigest: D8}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	c := s.Open(t)
	if _, err := c.Configure(Spec7()); err != nil {
		t.Fatal(err)
	}
	st := c.Pools()
	if len(st) != 1 || len(st[0].Generations) != 1+2*n {
		t.Fatalf("concurrent bindings were lost: %+v", st)
	}
	// One generation, two digests, at once.
	var won, refused int
	var mu sync.Mutex
	for _, x := range []struct {
		r *pool.Registry
		d string
	}{{a, D8}, {b, D9}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := x.r.Set("default", 200, nil, &pool.Binding{Generation: 200, SpecificationDigest: x.d})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, pool.ErrConflict):
				refused++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || refused != 1 {
		t.Fatalf("%d won, %d refused: one binding must win", won, refused)
	}
}
