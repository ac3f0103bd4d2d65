package deploy

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/httpapi"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// edgeSecret is the Secret of the edge certificate: what
// components/tls-cert-manager's Certificate writes and what the
// terminators (tls-caddy, ingress-nginx, gateway-api) read.
const edgeSecret = "sandgate-edge-tls"

// edgeOverlays are the example overlays with the edge components.
var edgeOverlays = []string{"overlays/example-edge-ingress", "overlays/example-edge-gateway-api", "overlays/example-edge-tls-caddy"}

// edgeCRDModules are the Go modules whose CRD manifests the edge components'
// kinds need in the test apiserver, and the directory of those manifests in
// the module: Gateway API's standard channel and cert-manager's CRDs. The Go
// module proxy serves both (as modules; nothing of them is compiled in).
var edgeCRDModules = []struct{ module, dir string }{
	{"sigs.k8s.io/gateway-api@v1.6.3", "config/crd/standard"},
	{"github.com/cert-manager/cert-manager@v1.21.2", "deploy/crds"},
}

// edgeCRDs returns the CustomResourceDefinitions of edgeCRDModules, each
// module fetched into Go's module cache with `go mod download` (run outside
// this module, so its go.mod and go.sum stay as they are).
func edgeCRDs(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, m := range edgeCRDModules {
		cmd := exec.Command("go", "mod", "download", "-json", m.module)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go mod download %s: %v\n%s%s", m.module, err, stdout.String(), stderr.String())
		}
		var info struct{ Dir, Error string }
		if err := json.Unmarshal(stdout.Bytes(), &info); err != nil || info.Dir == "" {
			t.Fatalf("go mod download %s printed %q (%v)", m.module, stdout.String(), err)
		}
		files, err := filepath.Glob(filepath.Join(info.Dir, m.dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no manifests in %s (%v)", m.module, m.dir, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decodeAll(data)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" {
					out = append(out, o)
				}
			}
		}
	}
	return out
}

// ingresses returns the rendered Ingresses, typed.
func (r *rendered) ingresses(t *testing.T) []networkingv1.Ingress {
	t.Helper()
	var out []networkingv1.Ingress
	for _, o := range r.objs {
		if o.GetKind() != "Ingress" {
			continue
		}
		var ing networkingv1.Ingress
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &ing, true); err != nil {
			t.Fatalf("%s: Ingress %s: %v", r.dir, o.GetName(), err)
		}
		out = append(out, ing)
	}
	return out
}

// servicePort returns the port of Service name that a reference by port name
// or number selects, failing the test when there is none.
func (r *rendered) servicePort(t *testing.T, name, portName string, number int32) corev1.ServicePort {
	t.Helper()
	var s corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.find(t, "Service", name).Object, &s); err != nil {
		t.Fatal(err)
	}
	for _, p := range s.Spec.Ports {
		if (portName != "" && p.Name == portName) || (portName == "" && p.Port == number) {
			return p
		}
	}
	t.Fatalf("%s: Service %s has no port %q/%d", r.dir, name, portName, number)
	return corev1.ServicePort{}
}

// The public listeners and where the edge must send each: Service and
// port.
var edgeBackends = map[string]string{"gateway": "gateway:30083", "gateway-node-connect": "gateway-node-connect:30085", "corectl-api": "corectl:8090"}

// streamIdle is the longest a data-plane stream or a node connection is
// idle by design: the gateway's default keepalive period of a command or
// watch stream (gateway/dataplane.Config.KeepaliveInterval, 90 s; the E2B
// SDKs ask for 50 s); node heartbeats come every 10 s. An edge must keep an
// idle connection open longer than this.
const streamIdle = 90

// longestPrefix returns the index of the path (Prefix, matched by path
// elements as Kubernetes defines it) that matches p with the most
// characters, or -1.
func longestPrefix(paths []string, p string) int {
	best := -1
	for i, pre := range paths {
		if pre == "/" || p == pre || strings.HasPrefix(p, strings.TrimSuffix(pre, "/")+"/") {
			if best < 0 || len(pre) > len(paths[best]) {
				best = i
			}
		}
	}
	return best
}

// TestEdgeComponents checks what the edge overlays render: one certificate
// (the Secret sandgate-edge-tls) whose names cover every public host; with
// ingress-nginx and Gateway API, one route per public listener (data
// plane, node connect, corectl's API) to the right Service port, TLS from
// that Secret, idle timeouts above the streams' keepalive and no request
// timeout on the streams, nothing routed to the internal node API, the
// probe relay or the metrics ports, and every corectl route under
// /internal refused at the edge while every other corectl route reaches
// corectl; with tls-caddy, TLS on the data plane, node connect and the
// corectl API site (Caddy's adapted configuration), that site refusing
// /internal and forwarding the rest to corectl, and the base without TLS.
func TestEdgeComponents(t *testing.T) {
	var internal, public []string
	for _, rt := range httpapi.Routes {
		if strings.HasPrefix(rt.Pattern, "/internal/") {
			internal = append(internal, rt.Pattern)
		} else {
			public = append(public, rt.Pattern)
		}
	}
	if len(internal) == 0 {
		t.Fatal("corectl has no /internal/ route: this test's premise changed")
	}
	for _, dir := range edgeOverlays {
		t.Run(strings.ReplaceAll(dir, "/", "-"), func(t *testing.T) {
			r := render(t, dir)
			cert := r.find(t, "Certificate", "sandgate-edge")
			if s, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); s != edgeSecret {
				t.Errorf("the Certificate writes Secret %q, want %s", s, edgeSecret)
			}
			names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			if ref, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name"); ref == "sandgate-edge" {
				t.Errorf("the example overlay keeps the component's placeholder issuer")
			}
			covered := func(host string) {
				if !slices.Contains(names, host) {
					t.Errorf("host %s is not in the Certificate's dnsNames %v", host, names)
				}
			}
			switch {
			case strings.HasSuffix(dir, "-ingress"):
				checkIngresses(t, r, covered, internal, public)
			case strings.HasSuffix(dir, "-gateway-api"):
				checkGatewayAPI(t, r, covered, internal, public)
			case strings.HasSuffix(dir, "-tls-caddy"):
				checkCaddyTLS(t, r)
			}
		})
	}
	// The base serves plain HTTP: TLS ends in front of it, or tls-caddy
	// adds it.
	if tls := dig(adaptGateway(t, render(t, "portal")), "apps", "tls"); tls != nil {
		t.Errorf("the base gateway configures TLS: %v", tls)
	}
}

// checkIngresses checks the ingress-nginx component as rendered in r.
func checkIngresses(t *testing.T, r *rendered, covered func(string), internal, public []string) {
	got := map[string]string{}
	var apiPaths []string
	var apiIngress []string
	for _, ing := range r.ingresses(t) {
		if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" {
			t.Errorf("Ingress %s: class %v, want nginx", ing.Name, ing.Spec.IngressClassName)
		}
		if len(ing.Spec.Rules) != 1 || len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != edgeSecret ||
			!slices.Equal(ing.Spec.TLS[0].Hosts, []string{ing.Spec.Rules[0].Host}) {
			t.Errorf("Ingress %s: rules %+v, TLS %+v; want one host with TLS from %s", ing.Name, ing.Spec.Rules, ing.Spec.TLS, edgeSecret)
			continue
		}
		host := ing.Spec.Rules[0].Host
		covered(host)
		for _, p := range ing.Spec.Rules[0].HTTP.Paths {
			if p.PathType == nil || *p.PathType != networkingv1.PathTypePrefix {
				t.Errorf("Ingress %s path %s: type %v, want Prefix", ing.Name, p.Path, p.PathType)
			}
			b := p.Backend.Service
			sp := r.servicePort(t, b.Name, b.Port.Name, b.Port.Number)
			target := b.Name + ":" + strconv.Itoa(int(sp.Port))
			if ing.Name == "corectl-api" || ing.Name == "corectl-api-internal" {
				apiPaths = append(apiPaths, p.Path)
				apiIngress = append(apiIngress, ing.Name)
				if host != r.ingressHost(t, "corectl-api") {
					t.Errorf("Ingress %s serves host %s, corectl-api %s", ing.Name, host, r.ingressHost(t, "corectl-api"))
				}
			}
			if ing.Name == "corectl-api-internal" {
				continue
			}
			got[ing.Name] = target
		}
		a := ing.Annotations
		if ing.Name == "gateway" || ing.Name == "gateway-node-connect" {
			for _, k := range []string{"proxy-read-timeout", "proxy-send-timeout"} {
				if n, err := strconv.Atoi(a["nginx.ingress.kubernetes.io/"+k]); err != nil || n <= streamIdle {
					t.Errorf("Ingress %s: %s %q, want more than the streams' %d s between keepalives", ing.Name, k, a["nginx.ingress.kubernetes.io/"+k], streamIdle)
				}
			}
			for _, k := range []string{"proxy-buffering", "proxy-request-buffering"} {
				if a["nginx.ingress.kubernetes.io/"+k] != "off" {
					t.Errorf("Ingress %s: %s %q, want off (streams pass as they come)", ing.Name, k, a["nginx.ingress.kubernetes.io/"+k])
				}
			}
		}
		if ing.Name == "corectl-api-internal" && a["nginx.ingress.kubernetes.io/denylist-source-range"] != "0.0.0.0/0,::/0" {
			t.Errorf("Ingress corectl-api-internal denies %q, want every source", a["nginx.ingress.kubernetes.io/denylist-source-range"])
		}
	}
	if !maps.Equal(got, edgeBackends) {
		t.Errorf("the Ingresses route %v, want %v", got, edgeBackends)
	}
	// ingress-nginx picks the longest matching Prefix path of a host.
	for _, p := range internal {
		if i := longestPrefix(apiPaths, p); i < 0 || apiIngress[i] != "corectl-api-internal" {
			t.Errorf("corectl's internal route %s is not refused at the edge (paths %v)", p, apiPaths)
		}
	}
	for _, p := range public {
		if i := longestPrefix(apiPaths, p); i < 0 || apiIngress[i] != "corectl-api" {
			t.Errorf("corectl's route %s does not reach corectl through the Ingress (paths %v)", p, apiPaths)
		}
	}
}

// ingressHost returns the host of the Ingress name's first rule.
func (r *rendered) ingressHost(t *testing.T, name string) string {
	t.Helper()
	for _, ing := range r.ingresses(t) {
		if ing.Name == name && len(ing.Spec.Rules) > 0 {
			return ing.Spec.Rules[0].Host
		}
	}
	t.Fatalf("%s: no Ingress %s", r.dir, name)
	return ""
}

// checkGatewayAPI checks the gateway-api component as rendered in r.
func checkGatewayAPI(t *testing.T, r *rendered, covered func(string), internal, public []string) {
	gw := r.find(t, "Gateway", "sandgate")
	listeners, _, _ := unstructured.NestedSlice(gw.Object, "spec", "listeners")
	hostOf := map[string]string{}
	for _, l := range listeners {
		l := l.(map[string]any)
		name, host := l["name"].(string), l["hostname"].(string)
		hostOf[name] = host
		covered(host)
		refs, _, _ := unstructured.NestedSlice(l, "tls", "certificateRefs")
		if l["protocol"] != "HTTPS" || dig(l, "tls", "mode") != "Terminate" || len(refs) != 1 || dig(refs[0], "name") != edgeSecret {
			t.Errorf("listener %s: %v, want HTTPS terminating with Secret %s", name, l, edgeSecret)
		}
	}
	got := map[string]string{}
	for _, o := range r.objs {
		if o.GetKind() != "HTTPRoute" {
			continue
		}
		parents, _, _ := unstructured.NestedSlice(o.Object, "spec", "parentRefs")
		hosts, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "hostnames")
		if len(parents) != 1 || dig(parents[0], "name") != "sandgate" || len(hosts) != 1 {
			t.Errorf("HTTPRoute %s: parents %v hostnames %v, want one listener of Gateway sandgate and one host", o.GetName(), parents, hosts)
			continue
		}
		section, _ := dig(parents[0], "sectionName").(string)
		if hostOf[section] == "" || hostOf[section] != hosts[0] {
			t.Errorf("HTTPRoute %s: host %s on listener %q, which serves %q", o.GetName(), hosts[0], section, hostOf[section])
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "rules")
		var paths, backends []string
		for _, rule := range rules {
			rule := rule.(map[string]any)
			matches, _ := rule["matches"].([]any)
			if len(matches) != 1 || dig(matches[0], "path", "type") != "PathPrefix" {
				t.Errorf("HTTPRoute %s: rule matches %v, want one PathPrefix", o.GetName(), matches)
				continue
			}
			paths = append(paths, dig(matches[0], "path", "value").(string))
			refs, _ := rule["backendRefs"].([]any)
			if len(refs) == 0 {
				backends = append(backends, "")
				continue
			}
			name, _ := dig(refs[0], "name").(string)
			port, _ := dig(refs[0], "port").(float64) // JSON's numbers
			sp := r.servicePort(t, name, "", int32(port))
			backends = append(backends, name+":"+strconv.Itoa(int(sp.Port)))
			timeout := dig(rule, "timeouts", "request")
			if o.GetName() != "corectl-api" && timeout != "0s" {
				t.Errorf("HTTPRoute %s: request timeout %v, want 0s (none) for the streams", o.GetName(), timeout)
			}
		}
		if i := longestPrefix(paths, "/"); i >= 0 {
			got[o.GetName()] = backends[i]
		}
		if o.GetName() != "corectl-api" {
			continue
		}
		for _, p := range internal {
			if i := longestPrefix(paths, p); i < 0 || backends[i] != "" {
				t.Errorf("corectl's internal route %s is forwarded by HTTPRoute corectl-api (paths %v → %v)", p, paths, backends)
			}
		}
		for _, p := range public {
			if i := longestPrefix(paths, p); i < 0 || backends[i] != "corectl:8090" {
				t.Errorf("corectl's route %s does not reach corectl (paths %v → %v)", p, paths, backends)
			}
		}
	}
	if !maps.Equal(got, edgeBackends) {
		t.Errorf("the HTTPRoutes route %v, want %v", got, edgeBackends)
	}
}

// checkCaddyTLS checks the tls-caddy component as rendered in r, in the
// gateway's adapted configuration.
func checkCaddyTLS(t *testing.T, r *rendered) {
	cfg := adaptGateway(t, r)
	// The Secret's files through the key_pair_files certificate manager
	// (re-read when the kubelet updates them), not Caddy's load_files
	// (read once).
	if files := dig(cfg, "apps", "tls", "certificates"); files != nil {
		t.Errorf("the gateway loads certificates once from files %v; want them through key_pair_files only", files)
	}
	policies, _ := dig(cfg, "apps", "tls", "automation", "policies").([]any)
	var managers []any
	for _, p := range policies {
		m, _ := dig(p, "get_certificate").([]any)
		managers = append(managers, m...)
	}
	if len(policies) != 1 || len(managers) == 0 {
		t.Fatalf("automation policies %v, want one with the key_pair_files certificate manager", policies)
	}
	for _, m := range managers {
		if dig(m, "via") != "key_pair_files" || dig(m, "certificate") != "/etc/sandgate/edge-tls/tls.crt" || dig(m, "key") != "/etc/sandgate/edge-tls/tls.key" {
			t.Errorf("certificate manager %v, want key_pair_files of the Secret %s's tls.crt and tls.key", m, edgeSecret)
		}
	}
	gw := r.deployment(t, "gateway")
	if src := mountOf(mountsOf(gw, &gw.Spec.Template.Spec.Containers[0]), "/etc/sandgate/edge-tls/tls.crt"); src != "secret:"+edgeSecret {
		t.Errorf("/etc/sandgate/edge-tls is mounted from %q, want Secret %s", src, edgeSecret)
	}
	tlsOn := map[string]bool{}
	var api map[string]any
	for _, s := range dig(cfg, "apps", "http", "servers").(map[string]any) {
		l, _ := dig(s, "listen").([]any)
		if len(l) != 1 {
			continue
		}
		pol, _ := dig(s, "tls_connection_policies").([]any)
		tlsOn[l[0].(string)] = len(pol) > 0
		if l[0] == ":30084" {
			api = s.(map[string]any)
		}
	}
	want := map[string]bool{":30083": true, ":30085": true, ":30084": true, ":30086": false, ":9180": false}
	if !maps.Equal(tlsOn, want) {
		t.Errorf("TLS per listener %v, want %v (public listeners only)", tlsOn, want)
	}
	if api == nil {
		t.Fatal("no site on :30084 (corectl's API over TLS)")
	}
	raw := mustJSON(api)
	if !strings.Contains(raw, `"dial":"corectl:8090"`) || !strings.Contains(raw, `"path":["/internal","/internal/*"]`) ||
		!strings.Contains(raw, `"status_code":404`) {
		t.Errorf("the :30084 site does not refuse /internal and forward the rest to corectl:8090:\n%s", raw)
	}
	logs := mustJSON(dig(cfg, "logging"))
	if !strings.Contains(logs, "request\\u003eheaders\\u003eX-Api-Key") && !strings.Contains(logs, "request>headers>X-Api-Key") {
		t.Errorf("no access log filter deletes X-Api-Key: %s", logs)
	}
	s := r.find(t, "Service", "gateway-corectl-api")
	ports, _, _ := unstructured.NestedSlice(s.Object, "spec", "ports")
	if len(ports) != 1 || dig(ports[0], "targetPort") != "corectl-api" {
		t.Errorf("Service gateway-corectl-api ports %v, want the gateway's corectl-api port", ports)
	}
}

// TestDeployWalkthroughOverlays runs step 3 of docs/deploy.md "From an empty
// cluster to an SDK call over TLS" as written (its sh block, in a copy of
// deploy/) and renders the overlay it makes: the operator's two overlay
// copies render what the example edge overlay renders, with no file of the
// bases or components touched.
func TestDeployWalkthroughOverlays(t *testing.T) {
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "3. **Your overlays.**")
	if !ok {
		t.Fatal(`docs/deploy.md has no step "3. **Your overlays.**"`)
	}
	step3, step4, ok := strings.Cut(after, "4. **Secrets.**")
	if !ok {
		t.Fatal(`docs/deploy.md has no step "4. **Secrets.**"`)
	}
	step4, _, _ = strings.Cut(step4, "5. **Apply.**")
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "deploy"), os.DirFS(".")); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ name, text string }{{"step 3", step3}, {"step 4", step4}} {
		_, block, ok := strings.Cut(step.text, "```sh\n")
		block, _, ok2 := strings.Cut(block, "```")
		if !ok || !ok2 {
			t.Fatalf("%s of docs/deploy.md has no sh block", step.name)
		}
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s's commands:\n%s\n%v\n%s", step.name, block, err, out)
		}
	}
	// The edge overlay's copy builds on the example's copy, and the
	// copies' comments name the copies.
	k, err := os.ReadFile(filepath.Join(root, "deploy/overlays/prod-edge/kustomization.yaml"))
	if err != nil || !strings.Contains(string(k), "\n  - ../prod\n") || strings.Contains(string(k), "../example\n") {
		t.Fatalf("after step 3 prod-edge's kustomization.yaml (%v) does not name ../prod alone:\n%s", err, k)
	}
	for dir, was := range map[string]string{"prod": "overlays/example\n", "prod-edge": "overlays/example-edge-ingress"} {
		k, err := os.ReadFile(filepath.Join(root, "deploy/overlays", dir, "kustomization.yaml"))
		if err != nil || strings.Contains(string(k), was) || !strings.Contains(string(k), "apply -k deploy/overlays/"+dir+"\n") {
			t.Errorf("after step 3 %s's kustomization.yaml (%v) still names deploy/%s, or not its own directory, in its comment:\n%s", dir, err, was, k)
		}
	}
	got := render(t, filepath.Join(root, "deploy/overlays/prod-edge"))
	want := render(t, "overlays/example-edge-ingress")
	if !bytes.Equal(got.yaml, want.yaml) {
		t.Errorf("the walkthrough's overlay renders differently from overlays/example-edge-ingress:\n%s", got.yaml)
	}
	// Step 4's copy of example-secrets builds on prod-edge: with its files
	// in place it renders every object prod-edge renders (a generated
	// ConfigMap under its new hash), the example-secrets Secrets, and the
	// relay token's digest in sandgate-settings.
	k, err = os.ReadFile(filepath.Join(root, "deploy/overlays/prod-secrets/kustomization.yaml"))
	if err != nil || !strings.Contains(string(k), "\n  - ../prod-edge\n") || strings.Contains(string(k), "../example\n") ||
		strings.Contains(string(k), "overlays/example-secrets") {
		t.Fatalf("after step 4 prod-secrets' kustomization.yaml (%v) does not name ../prod-edge alone, or still names example-secrets:\n%s", err, k)
	}
	if err := os.MkdirAll(filepath.Join(root, "deploy/overlays/prod-secrets/secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, v := range secretDir(nil) {
		if err := os.WriteFile(filepath.Join(root, "deploy/overlays/prod-secrets/secrets", name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	withSecrets := render(t, filepath.Join(root, "deploy/overlays/prod-secrets"))
	plain := func(o *unstructured.Unstructured) string {
		name := o.GetName()
		// kustomize's name hash: 10 characters of this alphabet.
		if h := hashSuffix(name); (o.GetKind() == "ConfigMap" || o.GetKind() == "Secret") && len(h) == 10 &&
			strings.Trim(h, "245689bcdfghkmt7") == "" {
			name = strings.TrimSuffix(name, "-"+h)
		}
		return o.GetKind() + "/" + o.GetNamespace() + "/" + name
	}
	has := map[string]bool{}
	for _, o := range withSecrets.objs {
		has[plain(o)] = true
	}
	for _, o := range got.objs {
		if !has[plain(o)] {
			t.Errorf("step 4's prod-secrets lacks %s of prod-edge", plain(o))
		}
	}
	for _, name := range append(secretNames, "gateway-execd-tokens") {
		if !has["Secret/sandgate/"+name] {
			t.Errorf("step 4's prod-secrets generates no Secret %s", name)
		}
	}
	if d := withSecrets.configMap(t, "sandgate-settings")["SANDGATE_PROBE_RELAY_TOKEN_SHA256"]; d != sha256Hex(secretFiles["relay.token"]) {
		t.Errorf("step 4's prod-secrets: sandgate-settings' relay digest %s is not the SHA-256 of its relay token", d)
	}
	// Nothing outside the two new overlays changed.
	for _, dir := range []string{"portal", "components", "overlays/example", "overlays/example-edge-ingress"} {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			a, _ := os.ReadFile(p)
			b, err := os.ReadFile(filepath.Join(root, "deploy", p))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("step 3 changed or removed deploy/%s", p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
