package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// chartDir is the Helm chart, relative to deploy/.
const chartDir = "chart/sandgate"

// chartAllOn is the values file that turns every toggle of the chart on.
const chartAllOn = chartDir + "/ci/all-on-values.yaml"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary returns the pinned helm command line: $SANDGATE_HELM, or the
// one hack/helm/build.sh builds once and caches (a few minutes the first
// time, then instant).
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p := os.Getenv("SANDGATE_HELM"); p != "" {
			helmPath = p
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command("bash", "../hack/helm/build.sh")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			helmErr = fmt.Errorf("hack/helm/build.sh: %v\n%s", err, stderr.String())
			return
		}
		helmPath = strings.TrimSpace(string(out))
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// renderChart renders the chart with `helm template` as the release
// sandgate in the namespace sandgate, with the helm arguments args (-f,
// --set), and decodes the objects in order.
func renderChart(t *testing.T, args ...string) *rendered {
	t.Helper()
	cmd := exec.Command(helmBinary(t), append([]string{"template", "sandgate", chartDir, "--namespace", "sandgate"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	return decodeRendered(t, "chart "+strings.Join(args, " "), stdout.Bytes())
}

// helmLabels are the labels the chart adds to every object beside the
// bases' app.kubernetes.io/part-of.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// The intended differences between the chart with its default values and
// the kustomize bases, each removed by normalizeChart or normalizeKustomize
// before the objects are compared:
//
//   - The chart renders no Namespace for the Portal side: Helm installs
//     into the release's namespace, which exists before the release
//     (created with its Pod Security labels, docs/deploy.md "Helm").
//   - Every object carries Helm's labels (helmLabels) beside part-of.
//   - The CRDs (and corectl's compute Namespace) carry
//     helm.sh/resource-policy: keep, so helm uninstall leaves them.
//   - The ConfigMaps have fixed names where kustomize appends a hash of
//     their content; instead the pod templates carry a checksum/config
//     annotation of the ConfigMaps, so a change rolls the pods all the same.
//     So they have no old copies to prune either, and no label
//     sandgate.io/generated-config, which the bases' hashed ones carry
//     (generatedConfigLabel).
//   - The containers name imagePullPolicy (image.pullPolicy, IfNotPresent,
//     Kubernetes' own default for a tag other than latest).
//   - The RoleBinding gateway names its ServiceAccount's namespace (the
//     release's); kustomize's base leaves it to its namespace transformer.
func normalizeChart(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	labels := o.GetLabels()
	for _, k := range helmLabels {
		if labels[k] == "" {
			t.Errorf("chart: %s %s has no label %s", o.GetKind(), o.GetName(), k)
		}
		delete(labels, k)
	}
	o.SetLabels(labels)
	ann := o.GetAnnotations()
	if o.GetKind() == "CustomResourceDefinition" && ann["helm.sh/resource-policy"] != "keep" {
		t.Errorf("chart: CRD %s is not kept on uninstall (helm.sh/resource-policy %q)", o.GetName(), ann["helm.sh/resource-policy"])
	}
	delete(ann, "helm.sh/resource-policy")
	if len(ann) == 0 {
		ann = nil
	}
	o.SetAnnotations(ann)
	if o.GetKind() == "Deployment" {
		tmpl, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "annotations")
		if len(tmpl["checksum/config"]) != 64 {
			t.Errorf("chart: Deployment %s has no checksum/config annotation: %v", o.GetName(), tmpl)
		}
		delete(tmpl, "checksum/config")
		_ = unstructured.SetNestedStringMap(o.Object, tmpl, "spec", "template", "metadata", "annotations")
		forContainers(o, func(c map[string]any) { delete(c, "imagePullPolicy") })
	}
	if o.GetKind() == "RoleBinding" && o.GetName() == "gateway" {
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			delete(s.(map[string]any), "namespace")
		}
		_ = unstructured.SetNestedSlice(o.Object, subjects, "subjects")
	}
}

// normalizeKustomize removes kustomize's hash suffixes from the names of
// its generated ConfigMaps and of the references to them, and their label
// generatedConfigLabel.
func normalizeKustomize(o *unstructured.Unstructured, generated map[string]string) {
	if name, ok := generated[o.GetName()]; ok && o.GetKind() == "ConfigMap" {
		o.SetName(name)
		labels := o.GetLabels()
		delete(labels, generatedConfigLabel)
		o.SetLabels(labels)
	}
	if o.GetKind() == "RoleBinding" && o.GetName() == "gateway" {
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			delete(s.(map[string]any), "namespace")
		}
		_ = unstructured.SetNestedSlice(o.Object, subjects, "subjects")
	}
	if o.GetKind() != "Deployment" {
		return
	}
	rename := func(m map[string]any, key string) {
		if n, ok := m[key].(string); ok {
			if base, ok := generated[n]; ok {
				m[key] = base
			}
		}
	}
	vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		if cm, ok := v.(map[string]any)["configMap"].(map[string]any); ok {
			rename(cm, "name")
		}
	}
	_ = unstructured.SetNestedSlice(o.Object, vols, "spec", "template", "spec", "volumes")
	forContainers(o, func(c map[string]any) {
		if efs, ok := c["envFrom"].([]any); ok {
			for _, ef := range efs {
				if ref, ok := ef.(map[string]any)["configMapRef"].(map[string]any); ok {
					rename(ref, "name")
				}
			}
		}
		if envs, ok := c["env"].([]any); ok {
			for _, e := range envs {
				if ref, ok := dig(e, "valueFrom", "configMapKeyRef").(map[string]any); ok {
					rename(ref, "name")
				}
			}
		}
	})
}

// forContainers calls f on each container of a Deployment's pod template.
func forContainers(o *unstructured.Unstructured, f func(map[string]any)) {
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		f(c.(map[string]any))
	}
	_ = unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")
}

// objectKey names an object by kind, namespace and name.
func objectKey(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// TestChartMatchesKustomize renders the Helm chart with `helm template`
// and the matching kustomizations with kustomize's Go API, and requires
// the same objects (kind, namespace, name) with the same content (RBAC
// rules, pod and container security contexts, NetworkPolicies, container
// args, ports, probes, volumes, ConfigMap data, CRD schemas: every field)
// once the intended differences listed at normalizeChart are taken out:
//
//   - default values: deploy/portal and deploy/portal-flowcontrol (the
//     Portal cluster), less the Namespace sandgate;
//   - portal.enabled=false, compute.enabled=true: deploy/compute;
//   - the same with compute.cni set to Cilium's names:
//     deploy/overlays/example-compute.
func TestChartMatchesKustomize(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		dirs  []string
		extra []string // objects of the bases the chart leaves out on purpose
	}{
		{"defaults", nil, []string{"portal", "portal-flowcontrol"}, []string{"Namespace /sandgate"}},
		{"compute", []string{"--set", "portal.enabled=false,compute.enabled=true"}, []string{"compute"}, nil},
		{"example-compute", []string{"--set", "portal.enabled=false,compute.enabled=true,compute.cni.daemonSet=cilium,compute.cni.configMap=cilium-config"},
			[]string{"overlays/example-compute"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chart := map[string]*unstructured.Unstructured{}
			for _, o := range renderChart(t, tc.args...).objs {
				o = o.DeepCopy()
				normalizeChart(t, o)
				if _, dup := chart[objectKey(o)]; dup {
					t.Errorf("chart: %s twice", objectKey(o))
				}
				chart[objectKey(o)] = o
			}
			kust := map[string]*unstructured.Unstructured{}
			for _, dir := range tc.dirs {
				r := render(t, dir)
				generated := map[string]string{}
				for _, o := range r.objs {
					if o.GetKind() == "ConfigMap" {
						generated[o.GetName()] = strings.TrimSuffix(o.GetName(), "-"+hashSuffix(o.GetName()))
					}
				}
				for _, o := range r.objs {
					o = o.DeepCopy()
					normalizeKustomize(o, generated)
					if slices.Contains(tc.extra, objectKey(o)) {
						continue
					}
					kust[objectKey(o)] = o
				}
			}
			var keys []string
			for k := range kust {
				keys = append(keys, k)
			}
			for k := range chart {
				if kust[k] == nil {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				c, want := chart[k], kust[k]
				switch {
				case c == nil:
					t.Errorf("%s: in kustomize build %v, not in the chart", k, tc.dirs)
				case want == nil:
					t.Errorf("%s: in the chart, not in kustomize build %v", k, tc.dirs)
				default:
					if d := diffValues("", c.Object, want.Object); len(d) > 0 {
						t.Errorf("%s: the chart's differs from kustomize build %v:\n  %s", k, tc.dirs, strings.Join(d, "\n  "))
					}
				}
			}
			if len(chart) == 0 {
				t.Error("the chart rendered nothing")
			}
			t.Logf("%d objects of the chart compared with kustomize build %v", len(chart), tc.dirs)
		})
	}
}

// diffValues lists the paths where two decoded JSON/YAML values differ,
// with both values (chart first).
func diffValues(path string, a, b any) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var keys []string
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var out []string
		for _, k := range keys {
			out = append(out, diffValues(path+"."+k, am[k], bm[k])...)
		}
		return out
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok && len(as) == len(bs) {
		var out []string
		for i := range as {
			out = append(out, diffValues(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i])...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("%s: chart %s, kustomize %s", path, short(a), short(b))}
}

// short is a value's JSON, cut to 300 bytes.
func short(v any) string {
	raw, _ := json.Marshal(v)
	if len(raw) > 300 {
		return string(raw[:300]) + "…"
	}
	return string(raw)
}

// TestChartE2BDomain: with e2bDomain on for sbx.example.com, the chart's
// gateway-config holds the example-e2b-domain overlay's e2b-domain.caddyfile
// (the same lines, comments aside), the gateway mounts the certificate and
// listens where the overlay's does, and the listener's Service and
// NetworkPolicy are the overlay's.
func TestChartE2BDomain(t *testing.T) {
	chart := renderChart(t, "--set", "e2bDomain.enabled=true,e2bDomain.domain=sbx.example.com")
	overlay := render(t, "overlays/example-e2b-domain")
	noComments := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.TrimSpace(l) != "" {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	got, want := chart.configMap(t, "gateway-config")["e2b-domain.caddyfile"], overlay.configMap(t, "gateway-config")["e2b-domain.caddyfile"]
	if noComments(got) != noComments(want) {
		t.Errorf("the chart's e2b-domain.caddyfile\n%s\nthe overlay's\n%s", got, want)
	}
	cg, og := chart.deployment(t, "gateway"), overlay.deployment(t, "gateway")
	cm, om := mountsOf(cg, &cg.Spec.Template.Spec.Containers[0]), mountsOf(og, &og.Spec.Template.Spec.Containers[0])
	if cm["/etc/sandgate/tls"] != "secret:gateway-tls" || om["/etc/sandgate/tls"] != cm["/etc/sandgate/tls"] {
		t.Errorf("the certificate mount: chart %q, overlay %q", cm["/etc/sandgate/tls"], om["/etc/sandgate/tls"])
	}
	// The same ports; the overlay's patch puts its port first.
	cp, op := cg.Spec.Template.Spec.Containers[0].Ports, og.Spec.Template.Spec.Containers[0].Ports
	byName := func(a, b corev1.ContainerPort) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(cp, byName)
	slices.SortFunc(op, byName)
	if !reflect.DeepEqual(cp, op) {
		t.Errorf("the gateway's ports: chart %+v, overlay %+v", cp, op)
	}
	for _, k := range [][2]string{{"Service", "gateway-e2b-domain"}, {"NetworkPolicy", "gateway-e2b-domain"}} {
		c, o := chart.find(t, k[0], k[1]), overlay.find(t, k[0], k[1])
		if d := diffValues("", c.Object["spec"], o.Object["spec"]); len(d) > 0 {
			t.Errorf("%s %s: %s", k[0], k[1], strings.Join(d, "; "))
		}
	}
}

// TestChartCopiesCurrent: the chart's files/ hold the same bytes as the
// deploy/ files they copy (hack/helm/sync.sh; make chart-sync).
func TestChartCopiesCurrent(t *testing.T) {
	for src, dst := range map[string]string{"portal/crds": "crds/portal", "compute/crds": "crds/compute", "portal/gateway": "gateway",
		"portal/corectl": "corectl"} {
		names, err := filepath.Glob(filepath.Join(src, "*"))
		if err != nil {
			t.Fatal(err)
		}
		copies, err := filepath.Glob(filepath.Join(chartDir, "files", dst, "*"))
		if err != nil {
			t.Fatal(err)
		}
		if len(copies) != len(names) {
			t.Errorf("%s has %d files, the chart's files/%s %d: run make chart-sync", src, len(names), dst, len(copies))
		}
		for _, n := range names {
			sameFile(t, n, filepath.Join(chartDir, "files", dst, filepath.Base(n)))
		}
	}
	for _, f := range []string{"podmonitors.yaml", "prometheusrule.yaml", "sandgate-dashboard.json"} {
		sameFile(t, filepath.Join("monitoring", f), filepath.Join(chartDir, "files", "monitoring", f))
	}
	sameFile(t, "components/tls-caddy/tls.caddyfile", filepath.Join(chartDir, "files", "tls-caddy", "tls.caddyfile"))
}

// sameFile fails the test when the two files' bytes differ.
func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Errorf("%s: %v (run make chart-sync)", b, err)
		return
	}
	if !bytes.Equal(x, y) {
		t.Errorf("%s differs from %s: run make chart-sync", b, a)
	}
}

// TestChartValuesRefused: values the chart cannot render correctly fail
// `helm template` with a message naming the value (values.schema.json and
// the templates' own checks), rather than rendering a broken installation.
func TestChartValuesRefused(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"tokenKey.algorithm=RS1", "/tokenKey/algorithm"},
		{"tokenKey.slot.algorithm=none", "/tokenKey/slot/algorithm"},
		{"settings.nodeApiTokenSha256=abc", "/settings/nodeApiTokenSha256"},
		{"settings.probeRelayTokenSha256=" + strings.Repeat("A", 64), "/settings/probeRelayTokenSha256"},
		{"gateway.replicaz=3", "replicaz"},
		{"gateway.image.digest=sha256:xyz", "/gateway/image/digest"},
		{"gateway.service.type=External", "/gateway/service/type"},
		{"gatewayAPI.enabled=true", "gatewayAPI.parentRefs"},
		{"certManager.enabled=true", "certManager.issuerRef.name"},
		{"tlsCaddy.enabled=true,ingress.enabled=true", "tlsCaddy.enabled"},
		{"tlsCaddy.enabled=true,gatewayAPI.enabled=true,gatewayAPI.parentRefs[0].name=gw", "tlsCaddy.enabled"},
		{"tlsCaddy.service.type=External", "/tlsCaddy/service/type"},
	} {
		cmd := exec.Command(helmBinary(t), "template", "sandgate", chartDir, "--namespace", "sandgate", "--set", tc.set)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("--set %s: %v, output does not name %s:\n%s", tc.set, err, tc.want, out)
		}
	}
}

// TestChartValuesDocumented: every value of the chart's values.yaml (each
// leaf, or a free-form map such as gateway.configFiles) is named in
// the table of docs/deploy.md's "Helm" section ("### Values"), in full (`gateway.replicas`), as a
// sibling of the row's first name (`.minReplicas`), as a wildcard of its
// parent (`corectl.image.*`), or with <listener> for the three listeners.
func TestChartValuesDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, helm, ok := strings.Cut(string(doc), "\n## Helm\n")
	if ok {
		_, helm, ok = strings.Cut(helm, "\n### Values\n")
	}
	if !ok {
		t.Fatal(`docs/deploy.md has no "## Helm" section with a "### Values" table`)
	}
	helm, _, _ = strings.Cut(helm, "\n### ")
	free := map[string]bool{"gateway.configFiles": true, "gateway.resources": true, "corectl.resources": true, "gateway.podLabels": true,
		"gateway.podAnnotations": true, "gateway.nodeSelector": true, "gateway.affinity": true, "corectl.podLabels": true,
		"corectl.podAnnotations": true, "corectl.nodeSelector": true, "corectl.affinity": true, "ingress.annotations": true,
		"monitoring.podMonitors.labels": true, "monitoring.prometheusRule.labels": true, "certManager.issuerRef": true,
		"ingress.dataplane.annotations": true, "ingress.nodeConnect.annotations": true, "ingress.api.annotations": true,
		"ingress.api.internalAnnotations": true}
	var leaves []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, isMap := v.(map[string]any)
		if !isMap || free[prefix] {
			leaves = append(leaves, prefix)
			return
		}
		for k, sub := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			walk(p, sub)
		}
	}
	walk("", values)
	sort.Strings(leaves)
	named := func(s string) bool { return strings.Contains(helm, "`"+s+"`") }
	for _, leaf := range leaves {
		forms := []string{leaf}
		for _, l := range []string{".dataplane.", ".nodeConnect.", ".api."} {
			if strings.Contains(leaf, l) {
				forms = append(forms, strings.Replace(leaf, l, ".<listener>.", 1))
			}
		}
		ok := false
		for _, f := range forms {
			parts := strings.Split(f, ".")
			ok = ok || named(f)
			for i := 1; i < len(parts); i++ {
				// `.pdb.maxUnavailable`, `corectl.image.*`, `.autoscaling.*`
				ok = ok || named("."+strings.Join(parts[i:], ".")) || named(strings.Join(parts[:i], ".")+".*")
				for j := 1; j < i; j++ {
					ok = ok || named("."+strings.Join(parts[j:i], ".")+".*")
				}
			}
		}
		if !ok {
			t.Errorf("the value %s is not named in docs/deploy.md \"Helm\"", leaf)
		}
	}
	t.Logf("%d values checked", len(leaves))
}
