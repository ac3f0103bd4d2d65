package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/kubeenv"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestChartApply dry-runs the chart's rendering on a real kube-apiserver
// with restricted Pod Security, as TestManifestsApply does the bases': the
// namespace sandgate is created as docs/deploy.md "Helm" says (the base's
// Namespace, with its Pod Security labels), the CRDs of cert-manager's
// Certificate, Gateway API's HTTPRoute and the Prometheus Operator's
// PodMonitor and PrometheusRule are installed from their pinned modules
// (edgeCRDs; hack/helm/crds.sh generates the last two), then each rendering (default values,
// ci/all-on-values.yaml with every toggle on, and tlsCaddy on, which
// excludes the Ingress and HTTPRoute toggles) is sent: its Namespaces and
// CRDs created, every other object with a server-side apply in dry-run
// mode. Each object must be accepted without a warning. The all-on
// rendering's PodMonitors and PrometheusRule must also be deploy/monitoring's
// objects, with the release's namespace and the labels of the values.
//
// Before that, on the cluster with only the namespace sandgate, the real
// helm (hack/helm) installs the chart with the Portal and compute sides and
// uninstalls it: the CRDs and corectl's namespace are kept
// (helm.sh/resource-policy: keep), the rest is gone, and a reinstall under
// the same release name takes the kept objects back. The dry runs then
// meet those kept objects as an operator's reinstall would.
func TestChartApply(t *testing.T) {
	env, c, w := startApplyEnv(t)
	ctx := context.Background()

	// The release's namespace, with the base's Pod Security labels.
	ns := render(t, "portal").find(t, "Namespace", "sandgate").DeepCopy()
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	waitPodSecurity(t, c, "sandgate")

	// First, on the empty cluster: helm install and uninstall.
	t.Run("helm-install-uninstall-keeps-crds", func(t *testing.T) { checkHelmInstallUninstall(t, env, c) })

	// Third-party CRDs of the toggles' kinds: Gateway API's and
	// cert-manager's from their modules (as TestManifestsApply installs
	// them), the Prometheus Operator's generated from its API types module.
	crds := edgeCRDs(t)
	var stderr bytes.Buffer
	cmd := exec.Command("bash", "../hack/helm/crds.sh")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/helm/crds.sh: %v\n%s", err, stderr.String())
	}
	for _, f := range strings.Fields(string(out)) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		crds = append(crds, objs...)
	}
	for _, o := range crds {
		if o.GetKind() != "CustomResourceDefinition" {
			t.Fatalf("%s %s, want only CRDs", o.GetKind(), o.GetName())
		}
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("CRD %s: %v", o.GetName(), err)
		}
		waitEstablished(t, c, o.GetName())
	}
	w.take()

	monitoring := render(t, "monitoring")
	for _, tc := range []struct {
		name string
		args []string
	}{{"defaults", nil}, {"all-on", []string{"-f", chartAllOn}}, {"tls-caddy", []string{"--set", "tlsCaddy.enabled=true"}}} {
		r := renderChart(t, tc.args...)
		kinds := map[string]int{}
		for _, first := range []bool{true, false} {
			for _, o := range r.objs {
				o := o.DeepCopy()
				isFirst := o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition"
				if isFirst != first {
					continue
				}
				if o.GetKind() == "PodMonitor" || o.GetKind() == "PrometheusRule" {
					checkChartMonitoring(t, o, monitoring)
				}
				var err error
				if first {
					err = c.Create(ctx, o)
					if apierrors.IsAlreadyExists(err) {
						// The CRDs again in the second rendering.
						err = c.Patch(ctx, o, client.Apply, client.FieldOwner("sandgate-chart-test"), client.ForceOwnership)
					}
				} else {
					err = c.Patch(ctx, o, client.Apply, client.FieldOwner("sandgate-chart-test"), client.ForceOwnership, client.DryRunAll)
				}
				if err != nil {
					t.Errorf("%s: %s %s/%s refused: %v", tc.name, o.GetKind(), o.GetNamespace(), o.GetName(), err)
				} else {
					kinds[o.GetKind()]++
				}
				if first && o.GetKind() == "CustomResourceDefinition" {
					waitEstablished(t, c, o.GetName())
				}
			}
		}
		if ws := w.take(); len(ws) > 0 {
			t.Errorf("%s: the apiserver warned:\n%s", tc.name, strings.Join(ws, "\n"))
		}
		t.Logf("%s: %d objects accepted %v", tc.name, len(r.objs), kinds)
		want := []string{"ConfigMap", "CustomResourceDefinition", "Deployment", "NetworkPolicy", "FlowSchema", "Service"}
		if tc.name == "all-on" {
			want = append(want, "Certificate", "HTTPRoute", "Ingress", "HorizontalPodAutoscaler", "Namespace", "PodMonitor", "PrometheusRule", "ClusterRole")
		}
		for _, k := range want {
			if kinds[k] == 0 {
				t.Errorf("%s: no %s accepted", tc.name, k)
			}
		}
	}
}

// checkChartMonitoring requires a PodMonitor or PrometheusRule of the chart
// to be deploy/monitoring's object of that kind and name, in the namespace
// sandgate, with the all-on values' label release: prometheus.
func checkChartMonitoring(t *testing.T, o *unstructured.Unstructured, monitoring *rendered) {
	t.Helper()
	want := monitoring.find(t, o.GetKind(), o.GetName())
	if o.GetNamespace() != "sandgate" || o.GetLabels()["release"] != "prometheus" || o.GetLabels()["app.kubernetes.io/part-of"] != "sandgate" {
		t.Errorf("chart: %s %s: namespace %q, labels %v", o.GetKind(), o.GetName(), o.GetNamespace(), o.GetLabels())
	}
	if !reflect.DeepEqual(o.Object["spec"], want.Object["spec"]) {
		t.Errorf("chart: %s %s: spec differs from deploy/monitoring's: %v", o.GetKind(), o.GetName(), diffValues("spec", o.Object["spec"], want.Object["spec"]))
	}
}

// checkHelmInstallUninstall installs the chart with both sides (release
// sandgate-both in the namespace sandgate) with the pinned helm, checks
// that its objects exist, uninstalls it and checks that the CRDs and the
// Namespace corectl-system stay while the Deployments and the ClusterRole
// go; then installs and uninstalls it again, over the kept objects.
func checkHelmInstallUninstall(t *testing.T, env *kubeenv.Env, c client.Client) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	helm := func(args ...string) {
		t.Helper()
		cmd := exec.Command(helmBinary(t), append(args, "--kubeconfig", kc, "--namespace", "sandgate")...)
		// helm keeps its cache and config under HOME.
		home := t.TempDir()
		cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %v: %v\n%s", args, err, out)
		}
		if strings.Contains(strings.ToLower(string(out)), "warning") {
			t.Errorf("helm %v warned:\n%s", args, out)
		}
	}
	ctx := context.Background()
	get := func(group, kind, ns, name string) error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: "v1", Kind: kind})
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
	}
	helm("install", "sandgate-both", chartDir, "--set", "compute.enabled=true")
	for _, o := range []struct{ group, kind, ns, name string }{{"apps", "Deployment", "sandgate", "gateway"},
		{"rbac.authorization.k8s.io", "ClusterRole", "", "corectl"}, {"apiextensions.k8s.io", "CustomResourceDefinition", "", "nodepools.nodes.sandgate.io"},
		{"", "Namespace", "", "corectl-system"}} {
		if err := get(o.group, o.kind, o.ns, o.name); err != nil {
			t.Errorf("after helm install: %s %s/%s: %v", o.kind, o.ns, o.name, err)
		}
	}
	helm("uninstall", "sandgate-both")
	for _, o := range []struct{ group, kind, ns, name string }{{"apiextensions.k8s.io", "CustomResourceDefinition", "", "nodepools.nodes.sandgate.io"},
		{"apiextensions.k8s.io", "CustomResourceDefinition", "", "sandboxingressallowlists.network.sandgate.io"},
		{"", "Namespace", "", "corectl-system"}} {
		if err := get(o.group, o.kind, o.ns, o.name); err != nil {
			t.Errorf("after helm uninstall: %s %s is gone (want it kept): %v", o.kind, o.name, err)
		}
	}
	for _, o := range []struct{ group, kind, ns, name string }{{"apps", "Deployment", "sandgate", "gateway"},
		{"rbac.authorization.k8s.io", "ClusterRole", "", "corectl"}, {"", "ConfigMap", "sandgate", "gateway-config"}} {
		if err := get(o.group, o.kind, o.ns, o.name); !apierrors.IsNotFound(err) {
			t.Errorf("after helm uninstall: %s %s/%s: %v, want NotFound", o.kind, o.ns, o.name, err)
		}
	}
	// A reinstall under the same release name takes the kept objects back.
	helm("install", "sandgate-both", chartDir, "--set", "compute.enabled=true")
	if err := get("apps", "Deployment", "sandgate", "gateway"); err != nil {
		t.Errorf("after reinstalling: Deployment gateway: %v", err)
	}
	helm("uninstall", "sandgate-both")
}
