package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestKeepStateComponent renders, for a Portal and a compute overlay, the
// uninstall kustomization docs/runbook.md "Uninstalling" describes (the
// overlay plus the component components/keep-state) and checks that it is
// the overlay's objects without its CustomResourceDefinitions and
// Namespaces: what kubectl delete -k of it removes is every other object,
// and the state in the CRDs' objects and the namespaces survives.
func TestKeepStateComponent(t *testing.T) {
	deployDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, overlay := range []string{"overlays/example", "overlays/example-compute"} {
		dir := t.TempDir()
		rel := func(p string) string {
			r, err := filepath.Rel(dir, filepath.Join(deployDir, p))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + rel(overlay) +
			"\ncomponents:\n  - " + rel("components/keep-state") + "\n"
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		ids := func(r *rendered) (kept, dropped []string) {
			for _, o := range r.objs {
				id := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
				if o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace" {
					dropped = append(dropped, id)
				} else {
					kept = append(kept, id)
				}
			}
			slices.Sort(kept)
			return kept, dropped
		}
		all, state := ids(render(t, overlay))
		got, left := ids(render(t, dir))
		if len(left) != 0 {
			t.Errorf("%s + keep-state still renders %v", overlay, left)
		}
		if !slices.Equal(got, all) {
			t.Errorf("%s + keep-state renders\n%v\nwant\n%v", overlay, got, all)
		}
		if len(state) < 4 || len(got) < 5 {
			t.Errorf("%s: %d objects kept, %d left out", overlay, len(got), len(state))
		}
	}
}
