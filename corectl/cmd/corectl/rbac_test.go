package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestRBACPrintsTheNamespaceBindings: `corectl rbac` on the shipped
// cluster configuration prints one RoleBinding in the cluster's ingress
// namespace and one per project namespace of that cluster's credentials
// (disabled ones included, other clusters' left out), each for corectl's
// ServiceAccount, in a form kubectl applies.
func TestRBACPrintsTheNamespaceBindings(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials.yaml")
	if err := os.WriteFile(creds, []byte(`credentials:
  - {id: c1, enabled: true, projectNamespace: team-b, clusterId: cluster-1}
  - {id: c2, enabled: false, projectNamespace: team-a, clusterId: cluster-1}
  - {id: c3, enabled: true, projectNamespace: team-b, clusterId: cluster-1}
  - {id: c4, enabled: true, projectNamespace: team-z, clusterId: cluster-2}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runRBAC([]string{"-config", "../../../deploy/portal/corectl/clusters.yaml", "-credentials", creds,
		"-service-account", "ops/corectl-a"}, &out); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		var b rbacv1.RoleBinding
		if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if b.Kind != "RoleBinding" || b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != b.Name || len(b.Subjects) != 1 ||
			b.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Namespace: "ops", Name: "corectl-a"}) {
			t.Errorf("binding %+v", b)
		}
		got = append(got, b.Namespace+" "+b.RoleRef.Name)
	}
	want := []string{"opensandbox-system corectl-ingress-namespace", "team-a corectl-project-namespace", "team-b corectl-project-namespace"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("bindings %v, want %v", got, want)
	}
	for _, bad := range [][]string{{"-cluster", "nope"}, {"-service-account", "corectl"}} {
		args := append([]string{"-config", "../../../deploy/portal/corectl/clusters.yaml", "-credentials", creds}, bad...)
		if err := runRBAC(args, &bytes.Buffer{}); err == nil {
			t.Errorf("corectl rbac %v: no error", bad)
		}
	}
}
