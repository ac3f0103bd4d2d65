package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandgate/sandgate/corectl/nsrights"
)

// TestChartRoleBindingsMatchCorectlRBAC: the RoleBindings the chart renders
// from compute.ingressNamespace and compute.projectNamespaces are the ones
// `corectl rbac` prints for the same cluster (package nsrights), field for
// field and in the same order, once Helm's labels are taken out. corectl is
// built from this tree and run on the shipped clusters.yaml (cluster-1,
// ingress namespace opensandbox-system) and a credential file naming
// project namespaces of cluster-1 (a repeated one, a disabled one) and of
// another cluster; the chart is given the namespaces an operator reads off
// those files, the repeat included. A second case moves corectl's
// ServiceAccount (compute.namespace, corectl rbac -service-account).
func TestChartRoleBindingsMatchCorectlRBAC(t *testing.T) {
	dir := t.TempDir()
	corectl := filepath.Join(dir, "corectl")
	if out, err := exec.Command("go", "build", "-o", corectl, "../corectl/cmd/corectl").CombinedOutput(); err != nil {
		t.Fatalf("go build corectl: %v\n%s", err, out)
	}
	creds := filepath.Join(dir, "credentials.yaml")
	if err := os.WriteFile(creds, []byte(`credentials:
  - {id: c1, enabled: true, projectNamespace: team-b, clusterId: cluster-1}
  - {id: c2, enabled: false, projectNamespace: team-a, clusterId: cluster-1}
  - {id: c3, enabled: true, projectNamespace: team-b, clusterId: cluster-1}
  - {id: c4, enabled: true, projectNamespace: team-z, clusterId: cluster-2}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []nsrights.ServiceAccount{nsrights.DefaultServiceAccount, {Namespace: "ops", Name: "corectl"}} {
		t.Run(sa.Namespace, func(t *testing.T) {
			cmd := exec.Command(corectl, "rbac", "-config", "portal/corectl/clusters.yaml", "-credentials", creds,
				"-service-account", sa.Namespace+"/"+sa.Name)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("corectl rbac: %v\n%s", err, stderr.String())
			}
			want := decodeRendered(t, "corectl rbac", stdout.Bytes()).objs
			chart := renderChart(t, "--set", "portal.enabled=false,compute.enabled=true,compute.namespace="+sa.Namespace+
				",compute.ingressNamespace=opensandbox-system,compute.projectNamespaces={team-b,team-a,team-b}")
			var got []*unstructured.Unstructured
			for _, o := range chart.objs {
				role, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
				if o.GetKind() == "RoleBinding" && (role == nsrights.IngressRole || role == nsrights.ProjectRole) {
					o = o.DeepCopy()
					normalizeChart(t, o)
					got = append(got, o)
				}
			}
			if len(want) != 3 {
				t.Fatalf("corectl rbac printed %d objects, want 3 (the ingress namespace, team-a, team-b):\n%s", len(want), stdout.String())
			}
			if len(got) != len(want) {
				t.Fatalf("the chart renders %d namespace RoleBindings, corectl rbac %d", len(got), len(want))
			}
			for i := range want {
				// corectl marshals a zero ObjectMeta.CreationTimestamp as null.
				unstructured.RemoveNestedField(want[i].Object, "metadata", "creationTimestamp")
				if d := diffValues("", got[i].Object, want[i].Object); len(d) > 0 {
					t.Errorf("RoleBinding %d (%s): the chart's differs from corectl rbac's:\n  %s", i, objectKey(want[i]), strings.Join(d, "\n  "))
				}
			}
		})
	}
}
