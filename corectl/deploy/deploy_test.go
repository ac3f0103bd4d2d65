package deploy

import (
	"slices"
	"testing"
)

func TestManifestsDecode(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
		if c.Spec.Group != "network.sandgate.io" || len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != "v1alpha1" {
			t.Errorf("%s: group/version %s/%v", c.Name, c.Spec.Group, c.Spec.Versions)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"cniqualifications.network.sandgate.io", "sandboxingressallowlists.network.sandgate.io", "sandboxtemplatenetworks.network.sandgate.io"}) {
		t.Fatalf("CRDs = %v", names)
	}
	if _, err := DecodeCRD([]byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: {bogus: 1}\n")); err == nil {
		t.Fatal("DecodeCRD accepted an unknown field")
	}
	if _, err := DecodeCRD([]byte("apiVersion: v1\nkind: ConfigMap\n")); err == nil {
		t.Fatal("DecodeCRD accepted another kind")
	}
	objs, err := RBAC()
	if err != nil || len(objs) != 7 {
		t.Fatalf("RBAC = %d objects, %v", len(objs), err)
	}
}
