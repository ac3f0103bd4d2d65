package nodeconnect

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/internal/kubeenv"
	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/nodecore/presence"
)

// TestReadPeerTokens: the first token is sent, every token is accepted;
// comments and blank lines are skipped; a short token, an empty file, a
// missing or oversized file are refused without showing a token.
func TestReadPeerTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newTok, oldTok := strings.Repeat("n", 40), strings.Repeat("o", 32)
	send, accept, err := readPeerTokens(write("two", "# rotation\n\n"+newTok+"\n  "+oldTok+"  \n"))
	if err != nil || send != newTok || len(accept) != 2 || accept[0] != sha256.Sum256([]byte(newTok)) || accept[1] != sha256.Sum256([]byte(oldTok)) {
		t.Fatalf("two tokens: %q %d %v", send, len(accept), err)
	}
	short := "short-secret-token"
	for name, path := range map[string]string{
		"short":     write("short", short+"\n"),
		"empty":     write("empty", "# nothing\n\n"),
		"missing":   filepath.Join(dir, "absent"),
		"oversized": write("big", strings.Repeat("x", maxPeerTokenFile+1)),
		"unset":     "",
	} {
		if _, _, err := readPeerTokens(path); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), short) {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
}

// TestCaddyKubernetesPresence runs the sandgate app with a kubernetes
// block and presence kubernetes against a real kube-apiserver: the Portal
// connection has the configured namespace and replica; a node's
// connection is claimed in its Lease under that replica and advertise
// address; a reload with the same settings keeps the connection, the
// presence and its loaded watch; a changed kubeconfig connects anew and
// the old connection's watches end; when the config stops, the Lease is
// released.
func TestCaddyKubernetesPresence(t *testing.T) {
	env, err := kubeenv.Start(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gw"}}
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := newFiles(t)
	kubeconfig, peer := filepath.Join(f.dir, "kubeconfig"), filepath.Join(f.dir, "peer-token")
	write(t, kubeconfig, string(env.KubeConfig))
	write(t, peer, strings.Repeat("p", 40)+"\n")
	withPresence := func(body string) obj {
		cfg := config(f, body)
		cfg["apps"].(obj)["sandgate"].(obj)["kubernetes"] = obj{"kubeconfig": kubeconfig, "namespace": "gw", "replica": "replica-a"}
		nodesOf(cfg)["presence"] = obj{"store": "kubernetes", "advertise": "http://127.0.0.1:" + f.port, "peer_token_file": peer}
		return cfg
	}
	app := func() *sandgate.App {
		a, err := caddy.ActiveContext().App(sandgate.AppName)
		if err != nil {
			t.Fatal(err)
		}
		return a.(*sandgate.App)
	}
	base := load(t, withPresence("v1"))
	first := app().PortalCluster()
	if first == nil || first.Namespace() != "gw" || first.Replica() != "replica-a" {
		t.Fatalf("Portal cluster %+v", first)
	}
	leases := app().NodePresence().(*KubernetesPresence).Leases
	n := dialNode(t, base, -1)
	lease, err := kube.CoordinationV1().Leases("gw").Get(t.Context(), presence.LeaseName(nodeID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != "replica-a" || lease.Annotations[presence.AnnotationAddress] != "http://127.0.0.1:"+f.port {
		t.Fatalf("Lease holder %v, annotations %v", h, lease.Annotations)
	}
	waittest.Until(t, timeout, "the Lease watch to load", func() bool { return app().NodePresence().Synced() })

	if err := caddy.Load(mustJSON(t, withPresence("v2")), true); err != nil {
		t.Fatalf("reload: %v", err)
	}
	waitReloaded(t)
	if app().PortalCluster() != first || app().NodePresence().(*KubernetesPresence).Leases != leases || !app().NodePresence().Synced() {
		t.Fatal("a reload with the same settings did not keep the Portal connection and the presence")
	}
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatalf("heartbeat after the reload: %v", err)
	}

	write(t, kubeconfig, string(env.KubeConfig)+"\n# rotated\n")
	if err := caddy.Load(mustJSON(t, withPresence("v3")), true); err != nil {
		t.Fatalf("reload with a changed kubeconfig: %v", err)
	}
	waitReloaded(t)
	if app().PortalCluster() == first {
		t.Fatal("a changed kubeconfig kept the old connection")
	}
	<-first.Context().Done()
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatalf("heartbeat after the second reload: %v", err)
	}

	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, timeout, "the Lease to be released", func() bool {
		l, err := kube.CoordinationV1().Leases("gw").Get(t.Context(), presence.LeaseName(nodeID), metav1.GetOptions{})
		return err == nil && (l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "")
	})
}
