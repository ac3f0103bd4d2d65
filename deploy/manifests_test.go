package deploy

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/nsrights"
	nodev1 "github.com/sandgate/sandgate/nodecore/apis/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The kustomizations under deploy/: the two bases and the example overlays.
var (
	portalKustomizations = []string{"portal", "overlays/example", "overlays/example-e2b-domain", "overlays/example-edge-ingress",
		"overlays/example-edge-gateway-api", "overlays/example-edge-tls-caddy"}
	computeKustomizations = []string{"compute", "overlays/example-compute"}
)

// secretNames are the Secrets the Portal Deployments mount, as
// docs/deploy.md "Secrets" lists them; the example overlay adds
// gateway-execd-tokens.
var secretNames = []string{"corectl-api-keys", "corectl-internal-token", "corectl-kubeconfigs", "gateway-nodes",
	"gateway-peer-token", "gateway-probe-relay-token", "sandgate-credentials", "sandgate-token-key", "corectl-token-signing-key"}

// rendered is one kustomization's output.
type rendered struct {
	dir  string
	yaml []byte
	objs []*unstructured.Unstructured
}

// render builds the kustomization in dir (relative to deploy/) with
// kustomize's Go API, as `kubectl kustomize` does (with its default load
// restrictor: no file outside the kustomization's root), and decodes the
// objects in order.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return decodeRendered(t, dir, out)
}

// decodeRendered decodes kustomize's output of the kustomization dir.
func decodeRendered(t *testing.T, dir string, out []byte) *rendered {
	t.Helper()
	r := &rendered{dir: dir, yaml: out}
	yr := utilyaml.NewYAMLReader(bufioReader(out))
	for {
		doc, err := yr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		r.objs = append(r.objs, &unstructured.Unstructured{Object: m})
	}
	return r
}

// find returns the object of kind and name; the name of a generated
// ConfigMap matches with or without kustomize's hash suffix.
func (r *rendered) find(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range r.objs {
		if o.GetKind() != kind {
			continue
		}
		if o.GetName() == name || kind == "ConfigMap" && strings.HasPrefix(o.GetName(), name+"-") {
			return o
		}
	}
	t.Fatalf("%s: no %s %s", r.dir, kind, name)
	return nil
}

// deployment returns the typed Deployment name.
func (r *rendered) deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(r.find(t, "Deployment", name).Object, &d, true); err != nil {
		t.Fatalf("%s: Deployment %s: %v", r.dir, name, err)
	}
	return &d
}

// configMap returns the data of the (generated) ConfigMap name.
func (r *rendered) configMap(t *testing.T, name string) map[string]string {
	t.Helper()
	var cm corev1.ConfigMap
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.find(t, "ConfigMap", name).Object, &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

// mountsOf returns the container's mount path → the volume's source
// ("secret:<name>", "configMap:<name>", "emptyDir").
func mountsOf(d *appsv1.Deployment, c *corev1.Container) map[string]string {
	src := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		switch {
		case v.Secret != nil:
			src[v.Name] = "secret:" + v.Secret.SecretName
		case v.ConfigMap != nil:
			src[v.Name] = "configMap:" + v.ConfigMap.Name
		case v.EmptyDir != nil:
			src[v.Name] = "emptyDir"
		}
	}
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		out[m.MountPath] = src[m.Name]
	}
	return out
}

// mountOf returns the source of the mount that holds file ("" if none).
func mountOf(mounts map[string]string, file string) string {
	best := ""
	for p := range mounts {
		if strings.HasPrefix(file, p+"/") && len(p) > len(best) {
			best = p
		}
	}
	return mounts[best]
}

// writeConfigMap writes a ConfigMap's data into a new directory, one file
// per key, as Kubernetes mounts it.
func writeConfigMap(t *testing.T, data map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// gatewaySettingsEnv returns the gateway container's environment from its
// envFrom ConfigMaps ("NAME=value"), what Caddy expands {$NAME} with.
func gatewaySettingsEnv(t *testing.T, r *rendered) []string {
	t.Helper()
	d := r.deployment(t, "gateway")
	var env []string
	for _, ef := range d.Spec.Template.Spec.Containers[0].EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Fatalf("%s: gateway envFrom %+v is not a ConfigMap", r.dir, ef)
		}
		for k, v := range r.configMap(t, strings.TrimSuffix(ef.ConfigMapRef.Name, "-"+hashSuffix(ef.ConfigMapRef.Name))) {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// hashSuffix returns kustomize's hash suffix of a generated name.
func hashSuffix(name string) string { return name[strings.LastIndex(name, "-")+1:] }

// adaptGateway adapts the Caddyfile of the rendered ConfigMap
// gateway-config with bin/caddy, with the environment of the gateway
// container's envFrom ConfigMaps, and returns the JSON.
func adaptGateway(t *testing.T, r *rendered) map[string]any {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "caddy")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the gateway binary %s is missing; run make build", bin)
	}
	dir := writeConfigMap(t, r.configMap(t, "gateway-config"))
	cmd := exec.Command(bin, "adapt", "--config", filepath.Join(dir, "Caddyfile"))
	// Only the settings: nothing of this process's environment may fill a
	// {$NAME} the manifests do not set.
	cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}, gatewaySettingsEnv(t, r)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: caddy adapt of gateway-config's Caddyfile: %v\n%s", r.dir, err, stderr.String())
	}
	if strings.Contains(stderr.String(), `"level":"warn"`) || strings.Contains(stderr.String(), "WARN") {
		t.Errorf("%s: caddy adapt warned:\n%s", r.dir, stderr.String())
	}
	var cfg map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &cfg); err != nil {
		t.Fatalf("%s: caddy adapt printed %q: %v", r.dir, stdout.String(), err)
	}
	return cfg
}

// dig walks a decoded JSON document along keys.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

var filePath = regexp.MustCompile(`/etc/sandgate/[A-Za-z0-9._/-]+`)

// TestManifestsDecode checks the embedded copies of compute/ that
// corectl's tests install, and of portal/crds/ that the node stores'
// tests install.
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
	if err != nil || len(objs) != 9 {
		t.Fatalf("RBAC = %d objects, %v", len(objs), err)
	}
	// The namespaced writes are ClusterRoles that `corectl rbac` binds per
	// namespace (package corectl/nsrights names them); nothing here binds
	// them cluster-wide.
	for _, name := range []string{nsrights.IngressRole, nsrights.ProjectRole} {
		found := false
		for _, o := range objs {
			found = found || (o.GetKind() == "ClusterRole" && o.GetName() == name)
			if ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name"); o.GetKind() == "ClusterRoleBinding" && ref == name {
				t.Errorf("ClusterRoleBinding %s binds %s cluster-wide", o.GetName(), name)
			}
		}
		if !found {
			t.Errorf("rbac.yaml has no ClusterRole %s", name)
		}
	}
	// The compute kustomization renders exactly these files: the CRDs and
	// RBAC the tests install are what operators apply.
	r := render(t, "compute")
	for _, c := range crds {
		if r.find(t, "CustomResourceDefinition", c.Name) == nil {
			t.Fatalf("compute/ does not render %s", c.Name)
		}
	}
	for _, o := range objs {
		got := r.find(t, o.GetKind(), o.GetName())
		if got.GetNamespace() != o.GetNamespace() {
			t.Errorf("%s %s: rendered in %q, rbac.yaml says %q", o.GetKind(), o.GetName(), got.GetNamespace(), o.GetNamespace())
		}
	}
	// The gateway's CRDs: the four of nodes.sandgate.io, namespaced, which
	// the portal kustomization renders.
	nodeCRDs, err := NodeCRDs()
	if err != nil {
		t.Fatal(err)
	}
	names = nil
	portal := render(t, "portal")
	for _, c := range nodeCRDs {
		names = append(names, c.Name)
		if c.Spec.Scope != apiextensionsv1.NamespaceScoped || len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != "v1alpha1" {
			t.Errorf("%s: scope %s, versions %v", c.Name, c.Spec.Scope, c.Spec.Versions)
		}
		if portal.find(t, "CustomResourceDefinition", c.Name) == nil {
			t.Fatalf("portal/ does not render %s", c.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"enrollednodes.nodes.sandgate.io", "nodeenrolmenttokens.nodes.sandgate.io",
		"nodeplacements.nodes.sandgate.io", "nodepools.nodes.sandgate.io"}) {
		t.Fatalf("NodeCRDs = %v", names)
	}
}

// TestCRDBoundsMatchGo: the generated CRDs' array bounds equal the Go
// constants the programs enforce. controller-gen takes a bound from a
// +kubebuilder marker, which cannot name a Go constant, so the number is
// written twice: in the marker and in the constant (cidr.MaxEntries for
// every CIDR list, v1alpha1.MaxPlacements for a node's placements).
func TestCRDBoundsMatchGo(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	nodeCRDs, err := NodeCRDs()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, c := range append(crds, nodeCRDs...) {
		byName[c.Name] = c
	}
	for _, want := range []struct {
		crd  string
		path []string
		max  int
	}{
		{"sandboxingressallowlists.network.sandgate.io", []string{"spec", "desired"}, cidr.MaxEntries},
		{"sandboxingressallowlists.network.sandgate.io", []string{"status", "applied"}, cidr.MaxEntries},
		{"sandboxingressallowlists.network.sandgate.io", []string{"status", "lastVerified"}, cidr.MaxEntries},
		{"sandboxtemplatenetworks.network.sandgate.io", []string{"spec", "ingress"}, cidr.MaxEntries},
		{"sandboxtemplatenetworks.network.sandgate.io", []string{"spec", "egress"}, cidr.MaxEntries},
		{"nodeplacements.nodes.sandgate.io", []string{"spec", "placements"}, nodev1.MaxPlacements},
	} {
		c := byName[want.crd]
		if c == nil {
			t.Fatalf("no CRD %s", want.crd)
		}
		s := c.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, p := range want.path {
			if s == nil {
				break
			}
			next, ok := s.Properties[p]
			if !ok {
				s = nil
				break
			}
			s = &next
		}
		switch {
		case s == nil:
			t.Errorf("%s: no %s in the schema", want.crd, strings.Join(want.path, "."))
		case s.MaxItems == nil:
			t.Errorf("%s: %s has no maxItems, want %d (the Go constant)", want.crd, strings.Join(want.path, "."), want.max)
		case *s.MaxItems != int64(want.max):
			t.Errorf("%s: %s maxItems %d, want %d (the Go constant)", want.crd, strings.Join(want.path, "."), *s.MaxItems, want.max)
		}
	}
}

// TestPortalManifests checks what the Portal kustomizations promise, without
// an apiserver: the gateway's replicas, disruption budget, probes on the
// health site, resource requests and Services; corectl's flags (each one
// bin/corectl knows), leader election, probes and files; every file the
// programs read lies in a mount of the right kind; every Secret mounted is
// one docs/deploy.md lists.
func TestPortalManifests(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	usage, _ := exec.Command(filepath.Join(root, "bin", "corectl"), "-h").CombinedOutput()
	if !strings.Contains(string(usage), "-leader-elect") {
		t.Fatalf("bin/corectl -h printed no flags (run make build):\n%s", usage)
	}
	for _, dir := range portalKustomizations {
		t.Run(strings.ReplaceAll(dir, "/", "-"), func(t *testing.T) {
			r := render(t, dir)
			gw := r.deployment(t, "gateway")
			if *gw.Spec.Replicas < 2 {
				t.Errorf("gateway replicas = %d, want at least 2", *gw.Spec.Replicas)
			}
			pdb := r.find(t, "PodDisruptionBudget", "gateway")
			if sel, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels"); !labelsMatch(sel, gw.Spec.Template.Labels) {
				t.Errorf("the gateway's PodDisruptionBudget selects %v, the pods are labelled %v", sel, gw.Spec.Template.Labels)
			}
			c := &gw.Spec.Template.Spec.Containers[0]
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			for probe, want := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz"} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || ports[probe.HTTPGet.Port.StrVal] != 9180 {
					t.Errorf("gateway probe %+v, want GET %s on the health port 9180", probe, want)
				}
			}
			for _, cont := range append(gw.Spec.Template.Spec.Containers, r.deployment(t, "corectl").Spec.Template.Spec.Containers...) {
				if cont.Resources.Requests.Cpu().IsZero() || cont.Resources.Requests.Memory().IsZero() {
					t.Errorf("container %s has no CPU and memory requests", cont.Name)
				}
			}
			// Each Service exposes one container port, by its name: the
			// node API keeps Service port 30086 (the sandgate app's
			// listener, container port 30087), the probe relay keeps 30086
			// in the pod (a Caddy site), where an earlier release served
			// both; the relay's Service targets it by number, so that the
			// pods of that release, which name the port node-api, stay
			// its endpoints (TestUpgradeFromSharedInternalPort).
			for svc, want := range map[string]struct {
				port   int32
				target string
				// container is the target's port number in the pod.
				container int32
			}{"gateway": {30083, "dataplane", 30083}, "gateway-node-connect": {30085, "node-connect", 30085},
				"gateway-internal": {30086, "node-api", 30087}, "gateway-probe-relay": {30086, "probe-relay", 30086}} {
				var s corev1.Service
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.find(t, "Service", svc).Object, &s); err != nil {
					t.Fatal(err)
				}
				byNumber := svc == "gateway-probe-relay"
				if !labelsMatch(s.Spec.Selector, gw.Spec.Template.Labels) || len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != want.port ||
					(!byNumber && s.Spec.Ports[0].TargetPort.StrVal != want.target) ||
					(byNumber && (s.Spec.Ports[0].TargetPort.Type != intstr.Int || s.Spec.Ports[0].TargetPort.IntVal != want.container)) ||
					ports[want.target] != want.container {
					t.Errorf("Service %s: %+v, want port %d to the gateway's container port %s (%d)", svc, s.Spec, want.port, want.target, want.container)
				}
				// corectl's -probe-relay-url resolves the name to every
				// ready replica, which only a headless Service gives.
				if headless := s.Spec.ClusterIP == corev1.ClusterIPNone; headless != (svc == "gateway-probe-relay") {
					t.Errorf("Service %s: clusterIP %q; only gateway-probe-relay is headless", svc, s.Spec.ClusterIP)
				}
			}
			gwMounts := mountsOf(gw, c)
			checkSecrets(t, gw, dir)

			cd := r.deployment(t, "corectl")
			cc := &cd.Spec.Template.Spec.Containers[0]
			checkSecrets(t, cd, dir)
			cMounts := mountsOf(cd, cc)
			args := map[string]string{}
			for _, a := range cc.Args {
				name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if !ok || !strings.HasPrefix(a, "-") {
					t.Fatalf("corectl argument %q is not -name=value", a)
				}
				if !strings.Contains(string(usage), "\n  -"+name+" ") && !strings.Contains(string(usage), "\n  -"+name+"\n") {
					t.Errorf("corectl has no flag -%s", name)
				}
				args[name] = val
			}
			if args["leader-elect"] != "true" || args["probe-listen"] != ":8091" {
				t.Errorf("corectl args %v: leader election and -probe-listen :8091 expected", args)
			}
			// corectl reaches the probe relay through its headless Service
			// on the relay's own port, the one -h gives as the example.
			if got := args["probe-relay-url"]; got != "http://gateway-probe-relay:30086" {
				t.Errorf("corectl -probe-relay-url=%s, want http://gateway-probe-relay:30086 (Service gateway-probe-relay)", got)
			}
			if !strings.Contains(string(usage), "e.g. http://gateway-probe-relay:30086,") {
				t.Errorf("bin/corectl -h does not give http://gateway-probe-relay:30086 as -probe-relay-url's example:\n%s", usage)
			}
			for probe, want := range map[*corev1.Probe]string{cc.ReadinessProbe: "/readyz", cc.LivenessProbe: "/healthz"} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.StrVal != "probes" {
					t.Errorf("corectl probe %+v, want GET %s on the probes port", probe, want)
				}
			}
			// corectl serves no probe while it waits for the probe relay
			// (-probe-relay-wait, or its default as -h prints it): the
			// startup probe must outlast that wait, or the kubelet kills a
			// corectl that starts before the gateway is ready.
			relayWait := args["probe-relay-wait"]
			if relayWait == "" {
				m := regexp.MustCompile(`\n  -probe-relay-wait duration\n[^\n]*\(default ([0-9a-z.]+)\)`).FindSubmatch(usage)
				if m == nil {
					t.Fatalf("bin/corectl -h shows no default of -probe-relay-wait:\n%s", usage)
				}
				relayWait = string(m[1])
			}
			wait, err := time.ParseDuration(relayWait)
			if err != nil {
				t.Fatalf("-probe-relay-wait %q: %v", relayWait, err)
			}
			if sp := cc.StartupProbe; sp == nil {
				t.Error("corectl has no startup probe")
			} else if allowed := time.Duration(sp.PeriodSeconds*sp.FailureThreshold) * time.Second; allowed <= wait {
				t.Errorf("corectl's startup probe allows %s (periodSeconds × failureThreshold), not more than -probe-relay-wait %s", allowed, wait)
			}
			for _, f := range []struct{ flag, kind string }{{"config", "configMap:corectl-config"}, {"credentials", "secret:sandgate-credentials"},
				{"api-keys", "secret:corectl-api-keys"}, {"token-key-file", "secret:corectl-token-signing-key"}, {"internal-token-file", "secret:corectl-internal-token"},
				{"probe-relay-token-file", "secret:gateway-probe-relay-token"}} {
				if got := mountOf(cMounts, args[f.flag]); strings.TrimSuffix(got, "-"+hashSuffix(got)) != f.kind && got != f.kind {
					t.Errorf("corectl -%s=%s is in %q, want %s", f.flag, args[f.flag], got, f.kind)
				}
			}
			// The credentials and the internal token are the same Secrets
			// for both programs.
			for _, p := range []string{"/etc/sandgate/credentials", "/etc/sandgate/corectl-internal"} {
				if gwMounts[p] == "" || gwMounts[p] != cMounts[p] {
					t.Errorf("%s: the gateway mounts %q, corectl %q", p, gwMounts[p], cMounts[p])
				}
			}
			// Least privilege: the signing key is corectl's alone, and the
			// default algorithm is asymmetric (the gateway's Secret holds
			// only the public key).
			for p, src := range gwMounts {
				if strings.HasPrefix(src, "secret:corectl-token-signing-key") {
					t.Errorf("the gateway mounts the signing key Secret at %s", p)
				}
			}
			if !strings.HasPrefix(gwMounts["/etc/sandgate/token-key"], "secret:sandgate-token-key") {
				t.Errorf("the gateway's token keys come from %q, want Secret sandgate-token-key", gwMounts["/etc/sandgate/token-key"])
			}
			if alg := r.configMap(t, "sandgate-settings")["SANDGATE_TOKEN_ALGORITHM"]; alg != "EdDSA" {
				t.Errorf("SANDGATE_TOKEN_ALGORITHM = %q, want EdDSA (asymmetric by default)", alg)
			}
		})
	}
}

// checkSecrets fails unless every Secret d mounts is a documented one (or,
// in the example overlay, gateway-execd-tokens).
func checkSecrets(t *testing.T, d *appsv1.Deployment, dir string) {
	t.Helper()
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		overlay := (strings.HasPrefix(dir, "overlays/example") && v.Secret.SecretName == "gateway-execd-tokens") ||
			(dir == "overlays/example-e2b-domain" && v.Secret.SecretName == "gateway-tls") ||
			(dir == "overlays/example-edge-tls-caddy" && v.Secret.SecretName == "sandgate-edge-tls")
		if !slices.Contains(secretNames, v.Secret.SecretName) && !overlay {
			t.Errorf("%s mounts Secret %s, which docs/deploy.md does not list", d.Name, v.Secret.SecretName)
		}
	}
}

// labelsMatch reports whether the selector sel selects labels.
func labelsMatch(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// unnamedServer is the name Caddy gives a server the Caddyfile does not
// name (srv0, srv1, … in the order of the sites).
var unnamedServer = regexp.MustCompile(`^srv[0-9]+$`)

// TestGatewayCaddyfileAdapts adapts the Caddyfile of the rendered ConfigMap
// gateway-config with bin/caddy, with only the environment the Deployment
// gives it, for the base, the example overlays and the Helm chart (its
// defaults, and every toggle on), and checks the result
// against the Deployment: the sites listen on its container ports, the
// health site serves the probes, every file the configuration names lies in
// a mount (secrets in Secrets), and secrets are placeholders, never values.
func TestGatewayCaddyfileAdapts(t *testing.T) {
	// The Helm chart's too, with its defaults, with every toggle on (the
	// example overlay's clusters and pools, and E2B_DOMAIN's site) and with
	// Caddy's own TLS (tlsCaddy, which excludes the Ingress toggle).
	for _, dir := range append(slices.Clone(portalKustomizations), "chart", "chart-all-on", "chart-tls-caddy") {
		t.Run(strings.ReplaceAll(dir, "/", "-"), func(t *testing.T) {
			var r *rendered
			switch dir {
			case "chart":
				r = renderChart(t)
			case "chart-tls-caddy":
				r = renderChart(t, "--set", "tlsCaddy.enabled=true")
			case "chart-all-on":
				r = renderChart(t, "-f", chartAllOn, "--set-file", `gateway.configFiles.clusters\.caddyfile=overlays/example/clusters.caddyfile`,
					"--set-file", `gateway.configFiles.pools\.caddyfile=overlays/example/pools.caddyfile`,
					"--set-file", "corectl.clustersYaml=overlays/example-e2b-domain/clusters.yaml")
			default:
				r = render(t, dir)
			}
			cfg := adaptGateway(t, r)
			raw, _ := json.Marshal(cfg)
			gw := r.deployment(t, "gateway")
			c := &gw.Spec.Template.Spec.Containers[0]

			var listen []string
			health := ""
			servers, _ := dig(cfg, "apps", "http", "servers").(map[string]any)
			for name, s := range servers {
				l, _ := dig(s, "listen").([]any)
				if unnamedServer.MatchString(name) {
					t.Errorf("the server listening on %v has no name (the servers global option's name): its HTTP metrics get the label server=%q", l, name)
				}
				for _, a := range l {
					listen = append(listen, a.(string))
				}
				if strings.Contains(mustJSON(s), `"handler":"sandgate_health"`) && len(l) == 1 {
					health = l[0].(string)
				}
			}
			// The internal node API is the sandgate app's own listener
			// (the nodes block's api), on the container port node-api,
			// with the settings' two token digests; no Caddy server
			// listens there, and no sandbox_node_api handler is left.
			ports := map[string]string{}
			for _, p := range c.Ports {
				ports[p.Name] = ":" + strconv.Itoa(int(p.ContainerPort))
			}
			apiListen, _ := dig(cfg, "apps", "sandgate", "nodes", "api", "listen").(string)
			if apiListen != ":30087" || ports["node-api"] != ":30087" {
				t.Errorf("the nodes block's api listens on %q, want :30087, the container port node-api (%q)", apiListen, ports["node-api"])
			}
			settings := r.configMap(t, "sandgate-settings")
			wantDigests := []any{settings["SANDGATE_NODE_API_TOKEN_SHA256"], settings["SANDGATE_NODE_API_TOKEN_SLOT_SHA256"]}
			if got, _ := dig(cfg, "apps", "sandgate", "nodes", "api", "token_sha256").([]any); !slices.Equal(got, wantDigests) || got[0] == "" {
				t.Errorf("the node API accepts the digests %v, want the settings' SANDGATE_NODE_API_TOKEN_SHA256 and _SLOT_SHA256 %v", got, wantDigests)
			}
			if slices.Contains(listen, apiListen) {
				t.Errorf("a Caddy server listens on %s too, the node API's address (both would bind it with SO_REUSEPORT)", apiListen)
			}
			if strings.Contains(string(raw), `"handler":"sandbox_node_api"`) {
				t.Error("a site still serves the node API with sandbox_node_api; the shipped configuration uses the app's api")
			}
			listen = append(listen, apiListen)
			var want []string
			for _, p := range ports {
				want = append(want, p)
			}
			slices.Sort(listen)
			slices.Sort(want)
			if !slices.Equal(listen, want) {
				t.Errorf("the Caddyfile's sites and the node API listen on %v, the container's ports are %v", listen, want)
			}
			if health != ":9180" {
				t.Errorf("sandgate_health is served on %q, the probes ask :9180", health)
			}

			mounts := mountsOf(gw, c)
			if mounts["/etc/caddy"] == "" || !strings.HasPrefix(mounts["/etc/caddy"], "configMap:gateway-config") {
				t.Errorf("/etc/caddy is mounted from %q, want the ConfigMap gateway-config", mounts["/etc/caddy"])
			}
			for _, f := range filePath.FindAllString(string(raw), -1) {
				if !strings.HasPrefix(mountOf(mounts, f), "secret:") {
					t.Errorf("the configuration reads %s, which is not in a Secret mounted into the gateway (%v)", f, mounts)
				}
			}
			if got := dig(cfg, "apps", "sandgate", "authorizer", "bearer_token_file"); got != "/etc/sandgate/corectl-internal/token" {
				t.Errorf("the authorizer's bearer_token_file = %v, want corectl's internal token file", got)
			}
			if keys, _ := dig(cfg, "apps", "sandgate", "token_keys").([]any); len(keys) != 2 {
				t.Errorf("token_keys = %v, want the current key and the rotation slot", keys)
			}
			if (dir == "overlays/example" || dir == "chart-all-on") && dig(cfg, "apps", "sandgate", "clusters", "cluster-b", "execd_access_token") != "{file./etc/sandgate/execd/cluster-b}" {
				t.Errorf("cluster-b's execd_access_token = %v", dig(cfg, "apps", "sandgate", "clusters", "cluster-b"))
			}
			if strings.Contains(string(raw), "{$") {
				t.Errorf("a {$NAME} the settings do not set is left in the configuration:\n%s", raw)
			}
			if got := dig(cfg, "apps", "sandgate", "nodes", "store"); got != "kubernetes" {
				t.Errorf("nodes store = %v, want kubernetes (several replicas share the node state)", got)
			}
			if got := dig(cfg, "apps", "sandgate", "nodes", "presence", "store"); got != "kubernetes" {
				t.Errorf("nodes presence = %v, want kubernetes (several replicas)", got)
			}

			// Both programs know the same compute clusters with the same
			// fixed entries, and the gateway sends each cluster's
			// ingress.host (what corectl checks at start through the probe
			// relay), which the relay serves on the internal port for
			// corectl's -probe-relay-url.
			cc, err := cluster.Parse([]byte(r.configMap(t, "corectl-config")["clusters.yaml"]))
			if err != nil {
				t.Fatalf("corectl-config's clusters.yaml: %v", err)
			}
			gwClusters, _ := dig(cfg, "apps", "sandgate", "clusters").(map[string]any)
			if len(gwClusters) != len(cc.Clusters) {
				t.Errorf("the gateway knows %d clusters, corectl %d", len(gwClusters), len(cc.Clusters))
			}
			for _, c := range cc.Clusters {
				if got := dig(gwClusters, c.ID, "fixed_entry"); got != c.FixedEntry {
					t.Errorf("cluster %s: the gateway's fixed entry is %v, corectl's %s", c.ID, got, c.FixedEntry)
				}
				if got, _ := dig(gwClusters, c.ID, "host").(string); c.Ingress.Host == "" || got != c.Ingress.Host {
					t.Errorf("cluster %s: the gateway sends Host %q, corectl's ingress.host is %q (both must be set and equal)", c.ID, got, c.Ingress.Host)
				}
			}
			// The probe relay is a site of its own, the server named
			// probe_relay (its caddy_http_* series' label), on the
			// container port probe-relay, with the settings' two relay
			// token digests; no other server has the handler.
			relay := servers["probe_relay"]
			if got := mustJSON(dig(relay, "listen")); got != `[":30086"]` || ports["probe-relay"] != ":30086" {
				t.Errorf("the server probe_relay listens on %s, want [\":30086\"], the container port probe-relay (%q)", got, ports["probe-relay"])
			}
			relayDigests := mustJSON([]any{settings["SANDGATE_PROBE_RELAY_TOKEN_SHA256"], settings["SANDGATE_PROBE_RELAY_TOKEN_SLOT_SHA256"]})
			if got := mustJSON(dig(relay, "routes")); !strings.Contains(got, `"handler":"fixed_entry_probe","token_sha256":`+relayDigests) {
				t.Errorf("the server probe_relay's routes are %s, want fixed_entry_probe with the settings' digests %s", got, relayDigests)
			}
			for name, srv := range servers {
				if name != "probe_relay" && strings.Contains(mustJSON(srv), `"handler":"fixed_entry_probe"`) {
					t.Errorf("the server %s serves fixed_entry_probe too; only probe_relay may", name)
				}
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
