package deploy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/hasher"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"
)

// generatedConfigLabel labels every ConfigMap the bases and overlays
// generate with a hash of its content in its name, and nothing else:
// docs/deploy.md "Old ConfigMaps and Secrets" prunes the old ones by it.
const generatedConfigLabel = "sandgate.io/generated-config"

// hashedByKustomize reports whether o, a ConfigMap or Secret, carries
// kustomize's name suffix: its name is <name>-<hash>, where hash is what
// kustomize's hasher computes from the object named <name> (kind, name,
// data; the type too for a Secret). A fixed name (disableNameSuffixHash)
// or a name that merely contains a dash does not match.
func hashedByKustomize(t *testing.T, o *unstructured.Unstructured) bool {
	t.Helper()
	i := strings.LastIndex(o.GetName(), "-")
	if i < 0 {
		return false
	}
	c := o.DeepCopy()
	c.SetName(o.GetName()[:i])
	data, err := yaml.Marshal(c.Object)
	if err != nil {
		t.Fatal(err)
	}
	node, err := kyaml.Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	h, err := (&hasher.Hasher{}).Hash(node)
	if err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return h == o.GetName()[i+1:]
}

// checkGeneratedLabels requires the objects of r to carry the prune
// labels of docs/deploy.md "Old ConfigMaps and Secrets" exactly where they
// belong: generatedConfigLabel="true" on every ConfigMap whose name has
// kustomize's hash suffix and on nothing else (not on a ConfigMap with a
// fixed name, which is replaced in place and has no old copies), and
// generatedSecretLabel only on Secrets (TestSecretsRollPods requires it on
// every Secret overlays/example-secrets generates). It returns the number
// of hashed ConfigMaps.
func checkGeneratedLabels(t *testing.T, r *rendered) int {
	t.Helper()
	hashed := 0
	for _, o := range r.objs {
		v, labelled := o.GetLabels()[generatedConfigLabel]
		switch {
		case o.GetKind() == "ConfigMap" && hashedByKustomize(t, o):
			hashed++
			if v != "true" {
				t.Errorf("%s: ConfigMap %s has a hashed name but not the label %s=true (%q): the documented prune would leave its old copies", r.dir, o.GetName(), generatedConfigLabel, v)
			}
		case labelled:
			t.Errorf("%s: %s %s carries the label %s but is no ConfigMap with a hashed name: the documented prune of old ConfigMaps would select it", r.dir, o.GetKind(), o.GetName(), generatedConfigLabel)
		}
		if _, ok := o.GetLabels()[generatedSecretLabel]; ok && o.GetKind() != "Secret" {
			t.Errorf("%s: %s %s carries the label %s: the documented prune of old generated Secrets would select it", r.dir, o.GetKind(), o.GetName(), generatedSecretLabel)
		}
	}
	return hashed
}

// TestGeneratedConfigMapsLabelled renders every kustomization under
// deploy/ (overlays/example-secrets with fake files) and requires the
// prune labels where they belong (checkGeneratedLabels): every ConfigMap
// generated with a hashed name, gateway-config, corectl-config and
// sandgate-settings (merged by the overlays and the components over the
// base's, whose generators set the label), carries
// sandgate.io/generated-config=true, and no other object does (not the
// monitoring pack's Grafana dashboard, which has a fixed name).
func TestGeneratedConfigMapsLabelled(t *testing.T) {
	dirs := append(append([]string{"portal-flowcontrol", "monitoring"}, portalKustomizations...), computeKustomizations...)
	for _, dir := range append(dirs, "overlays/example-secrets") {
		var r *rendered
		if dir == "overlays/example-secrets" {
			r = renderWithSecrets(t, nil)
		} else {
			r = render(t, dir)
		}
		hashed := checkGeneratedLabels(t, r)
		want := 0
		if dir == "portal" || strings.HasPrefix(dir, "overlays/example") && dir != "overlays/example-compute" {
			want = 3 // gateway-config, corectl-config, sandgate-settings
		}
		if hashed != want {
			t.Errorf("%s: %d ConfigMaps with a hashed name, want %d", dir, hashed, want)
		}
	}
	// The check itself: a hashed ConfigMap without the label and the
	// label on a fixed-name ConfigMap are both reported.
	r := render(t, "overlays/example")
	cm := r.find(t, "ConfigMap", "gateway-config").DeepCopy()
	if !hashedByKustomize(t, cm) {
		t.Fatalf("gateway-config %s is not recognised as hashed", cm.GetName())
	}
	fixed := render(t, "monitoring").find(t, "ConfigMap", "sandgate-grafana-dashboard").DeepCopy()
	if hashedByKustomize(t, fixed) {
		t.Fatalf("the dashboard %s is taken for a hashed ConfigMap", fixed.GetName())
	}
	changed := cm.DeepCopy()
	changed.Object["data"] = map[string]any{"Caddyfile": "changed"}
	if hashedByKustomize(t, changed) {
		t.Errorf("a ConfigMap whose data no longer matches its name's hash is taken for a hashed one")
	}
}
