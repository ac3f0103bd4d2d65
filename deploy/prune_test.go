package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var (
	kubectlOnce sync.Once
	kubectlPath string
	kubectlErr  error
)

// kubectlBinary returns kubectl of the apiserver's version: the one
// hack/kube/kubectl.sh builds once and caches (under a minute the first
// time after hack/kube/build.sh, then instant).
func kubectlBinary(t *testing.T) string {
	t.Helper()
	kubectlOnce.Do(func() {
		var stderr bytes.Buffer
		// Built in make test's phase 9; a run of this package alone builds
		// it here (about a minute the first time), bounded.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "../hack/kube/kubectl.sh")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			kubectlErr = fmt.Errorf("hack/kube/kubectl.sh: %v\n%s", err, stderr.String())
			return
		}
		kubectlPath = strings.TrimSpace(string(out))
	})
	if kubectlErr != nil {
		t.Fatal(kubectlErr)
	}
	return kubectlPath
}

// copyDeploy copies deploy/'s manifests (every file but the Go files and
// the Helm chart) to dst, as an operator's checkout would hold them.
func copyDeploy(t *testing.T, dst string) {
	t.Helper()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == "chart" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, p), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// writeSecretFiles writes what overlays/example-secrets' secrets/
// directory holds (secretDir with the changes in change) under root.
func writeSecretFiles(t *testing.T, root string, change map[string]string) {
	t.Helper()
	dir := filepath.Join(root, "overlays", "example-secrets", "secrets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range secretDir(change) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// prunedLine is a line of kubectl apply --prune naming an object it
// deleted (or, with --dry-run=server, would delete).
var prunedLine = regexp.MustCompile(`^(configmap|secret)/(\S+) pruned( \(server dry run\))?$`)

// TestPruneGenerated follows docs/deploy.md "Old ConfigMaps and Secrets"
// with the real kubectl (hack/kube/kubectl.sh, the apiserver's version) on
// a real kube-apiserver (envtest, 127.0.0.1): deploy/compute and
// overlays/example-secrets (from a copy of deploy/ with fake secret files)
// are applied with client-side kubectl apply -k, beside objects of the
// operator's that a careless prune would take (a ConfigMap and a Secret in
// the namespace sandgate without the labels, a labelled ConfigMap and
// Secret in the namespace default, the monitoring pack's fixed-name
// dashboard ConfigMap). A second apply of the same files writes nothing
// (no object of the namespace sandgate changes its resourceVersion, and
// kubectl diff -k shows no difference), and kubectl's "configured" for it
// names only Secrets whose data kustomize wrapped over several lines and
// the PodDisruptionBudgets (docs/deploy.md "Applying again": kubectl's
// report of a patch it sent, not a change). Then a gateway file, a token and a setting
// change: the next apply adds new hashed gateway-config, sandgate-settings
// and gateway-peer-token beside the old ones. The documented ConfigMap
// prune, with --dry-run=server first, names exactly the two old hashed
// ConfigMaps and deletes nothing; run for real it deletes exactly them;
// the documented Secret prune likewise the old gateway-peer-token. Every
// other object applied is still there (the namespaces corectl-system and
// sandgate, corectl-config, the operator's objects, the dashboard), the
// ConfigMaps and Secrets of the namespaces sandgate, default and
// corectl-system are the ones before less the pruned, and every
// ConfigMap and Secret the Deployments refer to exists.
func TestPruneGenerated(t *testing.T) {
	kubectl := kubectlBinary(t)
	env, c, _ := startApplyEnv(t)
	ctx := context.Background()
	tmp := t.TempDir()
	kc := filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(tmp, "deploy")
	copyDeploy(t, root)
	writeSecretFiles(t, root, nil)
	home := filepath.Join(tmp, "home") // kubectl's discovery cache
	run := func(stdin string, args ...string) []string {
		t.Helper()
		// Each call is bounded: kubectl's own requests by
		// --request-timeout, the process by the context.
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, kubectl, append([]string{"--kubeconfig", kc, "--request-timeout", "60s"}, args...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG=")
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		if stderr.Len() > 0 {
			t.Errorf("kubectl %s wrote to stderr:\n%s", strings.Join(args, " "), stderr.String())
		}
		return strings.Split(strings.TrimSpace(stdout.String()), "\n")
	}
	overlay := filepath.Join(root, "overlays", "example-secrets")
	renderOverlay := func() *rendered { return render(t, overlay) }

	// The installation and the operator's other objects.
	run("", "apply", "-k", "compute")
	first := renderOverlay()
	run("", "apply", "-k", "overlays/example-secrets")
	operator := `apiVersion: v1
kind: ConfigMap
metadata: {name: operator-notes, namespace: sandgate}
data: {note: kept}
---
apiVersion: v1
kind: Secret
metadata: {name: operator-secret, namespace: sandgate}
stringData: {token: kept}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: elsewhere-config, namespace: default, labels: {sandgate.io/generated-config: "true"}}
data: {note: kept}
---
apiVersion: v1
kind: Secret
metadata: {name: elsewhere-secret, namespace: default, labels: {sandgate.io/generated-secret: "true"}}
stringData: {token: kept}
`
	run(operator, "apply", "-f", "-")
	extra, err := decodeAll([]byte(operator))
	if err != nil {
		t.Fatal(err)
	}
	dashboard := render(t, "monitoring").find(t, "ConfigMap", "sandgate-grafana-dashboard").DeepCopy()
	dashboardJSON, err := dashboard.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	run(string(dashboardJSON), "apply", "-f", "-")
	extra = append(extra, dashboard)

	// The same files again: nothing written, and kubectl's "configured"
	// only where docs/deploy.md says it appears anyway.
	before := resourceVersions(t, c, "sandgate")
	wrapped := map[string]bool{}
	for _, o := range first.objs {
		if o.GetKind() != "Secret" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		for _, v := range data {
			if strings.Contains(v, "\n") {
				wrapped["secret/"+o.GetName()] = true
			}
		}
	}
	if len(wrapped) == 0 {
		t.Fatal("no generated Secret has wrapped data: the fake key files are shorter than the test assumes")
	}
	for _, l := range run("", "apply", "-k", "overlays/example-secrets") {
		name, result, _ := strings.Cut(l, " ")
		if result != "configured" {
			continue
		}
		if !wrapped[name] && !strings.HasPrefix(name, "poddisruptionbudget.policy/") {
			t.Errorf("a second apply of the same files: %s", l)
		}
		t.Logf("a second apply of the same files: %s (kubectl's; nothing is written)", l)
	}
	if after := resourceVersions(t, c, "sandgate"); !maps.Equal(before, after) {
		t.Errorf("a second apply of the same files changed objects in the namespace sandgate:\n%s", mapDiff(before, after))
	}
	// kubectl diff (a server-side dry run of the same patch, compared with
	// what is stored) shows no difference: exit status 0, no output.
	if out := run("", "diff", "-k", "overlays/example-secrets"); len(out) != 1 || out[0] != "" {
		t.Errorf("kubectl diff -k after applying the same files:\n%s", strings.Join(out, "\n"))
	}

	// A change of a generated ConfigMap's file, of a generated Secret's
	// and of a setting.
	pools := filepath.Join(root, "overlays", "example", "pools.caddyfile")
	data, err := os.ReadFile(pools)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pools, append(data, "# changed\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	writeSecretFiles(t, root, map[string]string{"peer.token": "peer-token-rotated-rotated-rotate"})
	settings := filepath.Join(overlay, "secrets", "settings.env")
	data, err = os.ReadFile(settings)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(settings, append(data, "SANDGATE_NODE_API_TOKEN_SHA256="+sha256Hex("node-api-token")+"\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	second := renderOverlay()
	run("", "apply", "-k", "overlays/example-secrets")

	// What the prunes must delete: the labelled objects of the first
	// rendering that the second no longer has.
	names := func(r *rendered, kind, label string) map[string]bool {
		out := map[string]bool{}
		for _, o := range r.objs {
			if o.GetKind() == kind && o.GetLabels()[label] == "true" {
				out[o.GetName()] = true
			}
		}
		return out
	}
	old := map[string][]string{}
	for _, k := range []struct{ kind, label string }{{"ConfigMap", generatedConfigLabel}, {"Secret", generatedSecretLabel}} {
		now := names(second, k.kind, k.label)
		for n := range names(first, k.kind, k.label) {
			if !now[n] {
				old[k.kind] = append(old[k.kind], n)
			}
		}
		sort.Strings(old[k.kind])
	}
	var oldPlain []string
	for _, n := range append(slices.Clone(old["ConfigMap"]), old["Secret"]...) {
		oldPlain = append(oldPlain, strings.TrimSuffix(n, "-"+hashSuffix(n)))
	}
	sort.Strings(oldPlain)
	if want := []string{"gateway-config", "gateway-peer-token", "sandgate-settings"}; !slices.Equal(oldPlain, want) {
		t.Fatalf("the change replaced %v, want %v (old names %v)", oldPlain, want, old)
	}

	// The documented prunes, each dry-run first, then for real.
	namespaces := []string{"sandgate", "default", "corectl-system"}
	for _, p := range []struct{ kind, label, allow string }{
		{"ConfigMap", generatedConfigLabel, "core/v1/ConfigMap"},
		{"Secret", generatedSecretLabel, "core/v1/Secret"},
	} {
		prune := []string{"apply", "-k", "overlays/example-secrets", "--prune", "-l", p.label + "=true", "--prune-allowlist=" + p.allow}
		pruned := func(lines []string, dryRun bool) []string {
			var out []string
			for _, l := range lines {
				if m := prunedLine.FindStringSubmatch(l); m != nil && (m[3] != "") == dryRun {
					out = append(out, m[2])
				} else if strings.Contains(l, "pruned") {
					t.Errorf("%s prune: unexpected line %q", p.kind, l)
				}
			}
			sort.Strings(out)
			return out
		}
		have := objectsIn(t, c, namespaces)
		if got := pruned(run("", append(prune, "--dry-run=server")...), true); !slices.Equal(got, old[p.kind]) {
			t.Errorf("%s prune --dry-run=server names %v, want the old ones %v", p.kind, got, old[p.kind])
		}
		if now := objectsIn(t, c, namespaces); !maps.Equal(have, now) {
			t.Errorf("%s prune --dry-run=server changed the cluster:\n%s", p.kind, mapDiff(have, now))
		}
		if got := pruned(run("", prune...), false); !slices.Equal(got, old[p.kind]) {
			t.Errorf("%s prune deleted %v, want the old ones %v", p.kind, got, old[p.kind])
		}
		want := map[string]string{}
		for k, v := range have {
			want[k] = v
		}
		for _, n := range old[p.kind] {
			delete(want, p.kind+" sandgate/"+n)
		}
		if now := objectsIn(t, c, namespaces); !maps.Equal(want, now) {
			t.Errorf("after the %s prune:\n%s", p.kind, mapDiff(want, now))
		}
	}

	// Everything applied but the old generated objects is there.
	gone := map[string]bool{}
	for kind, ns := range old {
		for _, n := range ns {
			gone[kind+" sandgate/"+n] = true
		}
	}
	var applied []*unstructured.Unstructured
	for _, r := range []*rendered{render(t, filepath.Join(root, "compute")), first, second} {
		applied = append(applied, r.objs...)
	}
	for _, o := range append(applied, extra...) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(o.GroupVersionKind())
		err := c.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, u)
		switch {
		case gone[objectKey(o)] && !apierrors.IsNotFound(err):
			t.Errorf("%s after the prunes: %v, want NotFound", objectKey(o), err)
		case !gone[objectKey(o)] && err != nil:
			t.Errorf("%s after the prunes: %v", objectKey(o), err)
		}
	}
	for _, d := range []string{"gateway", "corectl"} {
		dep := second.deployment(t, d)
		for _, v := range dep.Spec.Template.Spec.Volumes {
			kind, name := "", ""
			switch {
			case v.ConfigMap != nil:
				kind, name = "ConfigMap", v.ConfigMap.Name
			case v.Secret != nil:
				kind, name = "Secret", v.Secret.SecretName
			default:
				continue
			}
			if gone[kind+" sandgate/"+name] {
				t.Errorf("Deployment %s mounts %s %s, which the prune deleted", d, kind, name)
			}
		}
	}
}

// resourceVersions maps the ConfigMaps, Secrets, Deployments, Services,
// ServiceAccounts, PodDisruptionBudgets and NetworkPolicies of namespace
// ns ("Kind ns/name") to their resourceVersions: objects no controller
// writes in envtest, so a change is a write of kubectl's.
func resourceVersions(t *testing.T, c client.Client, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, gvk := range []struct{ group, version, kind string }{{"", "v1", "ConfigMap"}, {"", "v1", "Secret"},
		{"apps", "v1", "Deployment"}, {"", "v1", "Service"}, {"", "v1", "ServiceAccount"},
		{"policy", "v1", "PodDisruptionBudget"}, {"networking.k8s.io", "v1", "NetworkPolicy"}} {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion(strings.TrimPrefix(gvk.group+"/"+gvk.version, "/"))
		l.SetKind(gvk.kind + "List")
		if err := c.List(context.Background(), l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			out[gvk.kind+" "+ns+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	return out
}

// objectsIn maps the ConfigMaps and Secrets of the namespaces, and the
// namespaces themselves, to "" (their keys "Kind ns/name"; a Namespace's
// ns is empty): what exists.
func objectsIn(t *testing.T, c client.Client, namespaces []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ns := range namespaces {
		for _, kind := range []string{"ConfigMap", "Secret"} {
			l := &unstructured.UnstructuredList{}
			l.SetAPIVersion("v1")
			l.SetKind(kind + "List")
			if err := c.List(context.Background(), l, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			for _, o := range l.Items {
				out[kind+" "+ns+"/"+o.GetName()] = ""
			}
		}
	}
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion("v1")
	l.SetKind("NamespaceList")
	if err := c.List(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	for _, o := range l.Items {
		out["Namespace /"+o.GetName()] = ""
	}
	return out
}

// mapDiff lists what b lacks of a ("-"), adds to it ("+") or holds
// with another value ("~"), one key a line.
func mapDiff(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		w, ok := b[k]
		switch {
		case !ok:
			out = append(out, "- "+k)
		case w != v:
			out = append(out, "~ "+k+": "+v+" → "+w)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "+ "+k)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
