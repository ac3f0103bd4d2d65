package controle2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gatewaySource is the address the gateway's data plane dials the fixed
// entry from (its transport's local_address): the gateway's own source,
// unlike corectl's and the SDK's 127.0.0.1.
const gatewaySource = "127.0.0.2"

// nginxLog records what the ingress-nginx emulation decided.
type nginxLog struct {
	mu      sync.Mutex
	sources map[string]int      // source address → requests
	lists   map[string][]string // path → the whitelist applied to it
}

func (l *nginxLog) source(remote string) string {
	ip, _, err := net.SplitHostPort(remote)
	if err != nil {
		ip = remote
	}
	l.mu.Lock()
	l.sources[ip]++
	l.mu.Unlock()
	return ip
}

// TestSDKRestrictedSandboxThroughProbeRelay is a restricted sandbox
// (its template's ingress allowlist is 203.0.113.0/24: neither the SDK's
// address nor the gateway's) used through the gateway by the E2B JS SDK.
// bin/corectl (its own process, the real kube-apiserver) sends its
// readiness pings and probe-source discovery through bin/caddy's probe
// relay (fixed_entry_probe), so the probe source it merges into the
// managed Ingress is the gateway's data-plane source and the Host it
// probes with is the gateway's; the fixed entry is the nginx-behaviour
// stand-in, which refuses other sources (403) and other Hosts (404). At
// start corectl checks the relay: a corectl whose ingress.host is not the
// Host the gateway sends exits naming both.
func TestSDKRestrictedSandboxThroughProbeRelay(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	ns, ingNS, tplNS := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile := write("primary.key", "relay-e2e-hmac-secret-0123456789abcdef0123456789")
	const relayToken = "relay-e2e-token-0123456789abcdef0123456789"
	relayTokenFile := write("relay.token", relayToken+"\n")
	digest := sha256.Sum256([]byte(relayToken))
	credFile := write("credentials.yaml", fmt.Sprintf("credentials:\n  - {id: cred-r, enabled: true, projectNamespace: %s, clusterId: cluster-a}\n", ns))
	keys := write("keys.yaml", "keys:\n"+
		"  - {name: r, sha256: "+apikey.Digest("key-r")+", credentialId: cred-r}\n"+
		"  - {name: admin, sha256: "+apikey.Digest("key-admin")+", templateAdmin: true}\n")
	kubeconfig := write("kubeconfig", string(env.KubeConfig))
	c := kubetest.Cluster("cluster-a", ingNS)
	c.Kubeconfig = kubeconfig
	host := c.Ingress.Host
	clusterFile := func(name, ingressHost string) string {
		cc := *c
		cc.Ingress.Host = ingressHost
		b, err := json.Marshal(cluster.Config{Clusters: []cluster.Cluster{cc},
			Templates: cluster.TemplateStore{ClusterID: "cluster-a", Namespace: tplNS}, SandboxTemplates: kubetest.SandboxTemplates()})
		if err != nil {
			t.Fatal(err)
		}
		return write(name, string(b))
	}

	// The gateway: its cluster's Host is the managed Ingresses' host, its
	// data plane dials from gatewaySource, and its internal listener
	// serves the probe relay.
	// The fixed entry's listener is bound here and held until the harness
	// serves on it (corectl's cluster file names it first). The relay's
	// address is chosen before the gateway binds it (the Caddyfile names
	// it), so another process can take it in between: the whole start is
	// tried again with new addresses, at most twice, when the gateway
	// finds its address in use (it failed CI once).
	var (
		h         *harness.Env
		relayAddr string
	)
	for attempt := 1; ; attempt++ {
		feLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		feAddr := feLn.Addr().String()
		relayAddr = freeAddr(t)
		c.FixedEntry = "http://" + feAddr
		caddyfile := strings.NewReplacer(
			"cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}} {\n\t\t\thost "+host+"\n\t\t}",
			"dial_timeout 3s", "dial_timeout 3s\n\t\t\tlocal_address "+gatewaySource,
		).Replace(harness.DefaultCaddyfile) + "\nhttp://" + relayAddr + " {\n\tbind 127.0.0.1\n\tfixed_entry_probe {\n\t\ttoken_sha256 " +
			hex.EncodeToString(digest[:]) + "\n\t}\n\trespond 404\n}\n"
		h, err = harness.Start(harness.Config{RepoRoot: root, Caddyfile: caddyfile, CredentialsFile: credFile, KeyFile: keyFile,
			KeyID: "primary", FixedEntryListener: feLn, Listens: []string{relayAddr}})
		if err == nil {
			break
		}
		_ = feLn.Close()
		if attempt == 3 || !(errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, harness.ErrBindRace)) {
			t.Fatal(err)
		}
		t.Logf("start attempt %d: %v; again with new addresses", attempt, err)
	}
	t.Cleanup(h.Close)
	h.Ingress.SetResolver(func(id string) (fixedentry.Sandbox, bool) {
		r, ok := env.Resolve(context.Background(), id)
		return fixedentry.Sandbox{Ready: r.Ready, Endpoint: r.Endpoint, Namespace: r.Namespace,
			Ports: map[int]string{44772: h.ExecdAddr}}, ok
	})
	// ingress-nginx in front of it: the Ingresses corectl writes, matched
	// by Host and path, with their whitelists and echo snippets.
	if fixedentry.AnnotationWhitelist != ingressallow.AnnotationWhitelist || fixedentry.AnnotationSnippet != probesource.AnnotationSnippet ||
		fixedentry.EchoSnippet != probesource.EchoSnippet {
		t.Fatal("the nginx stand-in reads other annotations than corectl writes")
	}
	nl := &nginxLog{sources: map[string]int{}, lists: map[string][]string{}}
	h.Ingress.SetNginx(&fixedentry.Nginx{Host: host, Source: nl.source, Route: func(path string) (fixedentry.NginxRoute, bool) {
		var list networkingv1.IngressList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ingNS)); err != nil {
			return fixedentry.NginxRoute{}, false
		}
		r, ok := fixedentry.IngressRoute(list.Items, host, path)
		if r.Restricted {
			nl.mu.Lock()
			nl.lists[path] = r.Whitelist
			nl.mu.Unlock()
		}
		return r, ok
	}})

	ctx, cancel := context.WithCancel(context.Background())
	wait, err := env.RunSandboxController(ctx, "127.0.0.1", func(err error) { t.Errorf("controller: %v", err) }, ns)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); wait() })
	args := func(clusters string) []string {
		return []string{"-config", clusters, "-credentials", credFile, "-api-keys", keys, "-listen", "127.0.0.1:0",
			"-leader-elect=false", "-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", keyFile,
			"-ready-budget", "30s", "-probe-relay-url", "http://" + relayAddr, "-probe-relay-token-file", relayTokenFile, "-probe-relay-wait", "10s"}
	}

	t.Run("host mismatch refused at start", func(t *testing.T) {
		p := startCorectl(t, root, args(clusterFile("other.json", "other.example.test"))...)
		select {
		case err := <-p.done:
			p.done <- err // for startCorectl's cleanup
			want := "the gateway sends Host " + host + ", the managed Ingresses' host is other.example.test"
			if err == nil || !strings.Contains(p.logText(), want) {
				t.Fatalf("corectl exited with %v, log:\n%s\nwant the error %q", err, p.logText(), want)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("corectl with another ingress.host kept running:\n%s", p.logText())
		}
	})

	cc := startCorectl(t, root, args(clusterFile("clusters.json", host))...)
	api := "http://" + cc.addr
	req, _ := http.NewRequest("PUT", api+"/sandbox-templates/base/network", strings.NewReader(`{"ingress":[{"cidr":"203.0.113.0/24"}],"egress":[]}`))
	req.Header.Set("X-API-Key", "key-admin")
	resp, err := testClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("template PUT: %v %v", err, resp)
	}
	resp.Body.Close()

	pkg := sdkPackages[0]
	var r lifecycleResult
	runSDK(t, root, pkg, "lifecycle", 2*time.Minute, &r, "E2B_API_URL="+api, "E2B_SANDBOX_URL="+h.Gateway,
		"E2B_API_KEY=key-r", "SCENARIO_DIR=/home/user/relay", `NETWORK={"allowOut":["198.51.100.7"]}`)
	checkLifecycle(t, r)

	// Every request reached the fixed entry from the gateway's source with
	// the managed Ingresses' Host: corectl's probes through the relay too.
	var ping, data, echo int
	for _, q := range h.Ingress.Requests() {
		if q.Host != host {
			t.Errorf("%s %s arrived with Host %q, want %q", q.Method, q.Path, q.Host, host)
		}
		switch {
		case q.Path == "/"+r.SandboxID+"/44772/ping" && q.Status == 200:
			ping++
		case strings.HasPrefix(q.Path, probesource.EchoPathPrefix) && q.Status == 200:
			echo++
		case q.SandboxID == r.SandboxID && q.Status == 200:
			data++
		}
	}
	nl.mu.Lock()
	defer nl.mu.Unlock()
	if len(nl.sources) != 1 || nl.sources[gatewaySource] == 0 {
		t.Fatalf("nginx saw the sources %v, want only the gateway's %s", nl.sources, gatewaySource)
	}
	if ping == 0 || data == 0 || echo == 0 {
		t.Fatalf("the fixed entry answered 200 to %d readiness pings, %d echo dials, %d data-plane requests; want some of each", ping, echo, data)
	}
	// The sandbox's paths were restricted to the template's allowlist and
	// the gateway's source, never the SDK's (or corectl's) 127.0.0.1.
	restricted := 0
	for path, wl := range nl.lists {
		if !strings.HasPrefix(path, "/"+r.SandboxID+"/") {
			continue
		}
		restricted++
		if !slices.Contains(wl, "203.0.113.0/24") || !slices.Contains(wl, gatewaySource+"/32") || slices.ContainsFunc(wl, func(s string) bool { return strings.HasPrefix(s, "127.0.0.1") }) {
			t.Errorf("%s: whitelist %v, want 203.0.113.0/24 and %s/32 and not 127.0.0.1", path, wl, gatewaySource)
		}
	}
	if restricted == 0 {
		t.Fatal("no request to the sandbox went through a restricted Ingress")
	}
}
