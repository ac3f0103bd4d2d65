package pool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
)

var (
	d7 = strings.Repeat("7a", 32)
	d8 = strings.Repeat("8b", 32)
	d9 = strings.Repeat("9c", 32)
)

func ptr(v int64) *int64 { return &v }

func dep(t *testing.T, r *Registry, name string) proto.Deployment {
	t.Helper()
	d, ok := r.Deployment(name)
	if !ok {
		t.Fatalf("pool %s has no deployment", name)
	}
	return d
}

func same(d proto.Deployment, gen int64, digest string, serving int64) bool {
	if d.Generation != gen || d.SpecificationDigest != digest {
		return false
	}
	if serving == 0 {
		return d.ServingGeneration == nil
	}
	return d.ServingGeneration != nil && *d.ServingGeneration == serving
}

func spec7() map[string]Spec {
	return map[string]Spec{"default": {Bindings: []Binding{{Generation: 7, SpecificationDigest: d7, Source: "rel-7"}}, Target: 7}}
}

func TestConfigureAndSet(t *testing.T) {
	r, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Deployment("default"); ok {
		t.Fatal("a deployment before any config")
	}
	if _, err := r.Configure(spec7()); err != nil {
		t.Fatal(err)
	}
	if d := dep(t, r, "default"); !same(d, 7, d7, 0) {
		t.Fatalf("%+v", d)
	}
	// Roll to 8 at run time, keep serving 7.
	d, err := r.Set("default", 8, ptr(7), &Binding{Generation: 8, SpecificationDigest: d8, Source: "rel-8"})
	if err != nil || !same(d, 8, d8, 7) || !same(dep(t, r, "default"), 8, d8, 7) {
		t.Fatalf("%+v %v", d, err)
	}
	if b, ok := r.Binding("default", 8); !ok || b.Source != "rel-8" || b.SpecificationDigest != d8 {
		t.Fatalf("%+v", b)
	}
	// Serving flips to 8; target 8 is bound already.
	if d, err := r.Set("default", 8, ptr(8), nil); err != nil || !same(d, 8, d8, 8) {
		t.Fatalf("%+v %v", d, err)
	}
	// A reload with the same pool block keeps the run-time deployment.
	if _, err := r.Configure(spec7()); err != nil {
		t.Fatal(err)
	}
	if d := dep(t, r, "default"); !same(d, 8, d8, 8) {
		t.Fatalf("a reload with an unchanged pool block reverted the deployment: %+v", d)
	}
	// A reload that changes the block applies it.
	s := spec7()
	p := s["default"]
	p.Serving = 7
	s["default"] = p
	if _, err := r.Configure(s); err != nil {
		t.Fatal(err)
	}
	if d := dep(t, r, "default"); !same(d, 7, d7, 7) {
		t.Fatalf("%+v", d)
	}
	st := r.Pools()
	if len(st) != 1 || len(st[0].Generations) != 2 || st[0].Generations[1].Generation != 8 {
		t.Fatalf("%+v", st)
	}
}

func TestRefusalsChangeNothing(t *testing.T) {
	r, _ := Open(filepath.Join(t.TempDir(), "pools.json"))
	if _, err := r.Configure(spec7()); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(r.Path())
	for name, tc := range map[string]struct {
		f    func() error
		want error
	}{
		"unknown pool":   {func() error { _, err := r.Set("gpu", 7, nil, nil); return err }, ErrUnknownPool},
		"unbound target": {func() error { _, err := r.Set("default", 9, nil, nil); return err }, ErrUnbound},
		"rebinding": {func() error {
			_, err := r.Set("default", 7, nil, &Binding{Generation: 7, SpecificationDigest: d9})
			return err
		}, ErrConflict},
		"other source": {func() error {
			_, err := r.Set("default", 7, nil, &Binding{Generation: 7, SpecificationDigest: d7, Source: "rel-x"})
			return err
		}, ErrConflict},
		"binding for another generation": {func() error {
			_, err := r.Set("default", 7, nil, &Binding{Generation: 8, SpecificationDigest: d8})
			return err
		}, ErrInvalid},
		"zero serving": {func() error { _, err := r.Set("default", 7, ptr(0), nil); return err }, ErrInvalid},
		"config rebinding": {func() error {
			return r.Check(map[string]Spec{"default": {Bindings: []Binding{{Generation: 7, SpecificationDigest: d9}}, Target: 7}})
		}, ErrConflict},
		"config unbound target": {func() error {
			_, err := r.Configure(map[string]Spec{"default": {Target: 9}})
			return err
		}, ErrUnbound},
		"config bad name": {func() error { _, err := r.Configure(map[string]Spec{"Default": {}}); return err }, ErrInvalid},
		"bad digest": {func() error {
			_, err := r.Set("default", 9, nil, &Binding{Generation: 9, SpecificationDigest: strings.ToUpper(d9)})
			return err
		}, ErrInvalid},
	} {
		if err := tc.f(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	after, _ := os.ReadFile(r.Path())
	if string(before) != string(after) || !same(dep(t, r, "default"), 7, d7, 0) {
		t.Fatal("a refusal changed the state")
	}
	if _, ok := r.Binding("default", 9); ok {
		t.Fatal("a refused binding was kept")
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pools.json")
	r, _ := Open(path)
	if _, err := r.Configure(spec7()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Set("default", 8, ptr(7), &Binding{Generation: 8, SpecificationDigest: d8, Source: "rel-8"}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	// A restart with the same config keeps the run-time change.
	r2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r2.Deployment("default"); ok {
		t.Fatal("a deployment before the config defines the pool")
	}
	if _, err := r2.Configure(spec7()); err != nil {
		t.Fatal(err)
	}
	if d := dep(t, r2, "default"); !same(d, 8, d8, 7) {
		t.Fatalf("%+v", d)
	}
	// A corrupt state file is refused with a clear error.
	if err := os.WriteFile(path, []byte(`{"version": 1, "pools": {"default": {"target": -1}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrState) {
		t.Fatalf("%v", err)
	}
	if err := os.WriteFile(path, []byte(`{"version": 2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrState) {
		t.Fatalf("%v", err)
	}
}

func TestConfigureUndo(t *testing.T) {
	r, _ := Open("")
	if _, err := r.Configure(spec7()); err != nil {
		t.Fatal(err)
	}
	s := spec7()
	s["default"] = Spec{Bindings: []Binding{{Generation: 7, SpecificationDigest: d7}, {Generation: 8, SpecificationDigest: d8}}, Target: 8, Serving: 7}
	s["gpu"] = Spec{Bindings: []Binding{{Generation: 1, SpecificationDigest: d9}}, Target: 1}
	undo, err := r.Configure(s)
	if err != nil {
		t.Fatal(err)
	}
	undo()
	if d := dep(t, r, "default"); !same(d, 7, d7, 0) || r.Configured("gpu") {
		t.Fatalf("undo: %+v", d)
	}
	// An undo after another change does nothing.
	undo, _ = r.Configure(s)
	if _, err := r.Set("default", 7, nil, nil); err != nil {
		t.Fatal(err)
	}
	undo()
	if !r.Configured("gpu") {
		t.Fatal("a stale undo took effect")
	}
}

func TestIsName(t *testing.T) {
	for s, want := range map[string]bool{"default": true, "gpu-1": true, "": false, "-a": false, "a-": false, "A": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false, "a_b": false} {
		if IsName(s) != want {
			t.Errorf("IsName(%q) = %v", s, !want)
		}
	}
}
