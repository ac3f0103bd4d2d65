package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/kubetest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var env *kubetest.Env

func TestMain(m *testing.M) { kubetest.Main(m, &env) }

// TestRunServesTheAPI runs the command as an operator would — kubeconfig,
// cluster configuration, credential and key files — against the real
// apiserver, makes an egress PUT through its API, and stops it with
// SIGTERM.
func TestRunServesTheAPI(t *testing.T) {
	dir := t.TempDir()
	ns, ingNS := env.Namespace(t), env.Namespace(t)
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "corectl-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	env.OwnedBatchSandbox(t, ns, "sbx", "cred", map[string]string{"allocation-id": "a1"})
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kubeconfig := write("kubeconfig", string(env.KubeConfig))
	cfg := write("clusters.yaml", `
clusters:
  - id: c1
    kubeconfig: `+kubeconfig+`
    fixedEntry: http://127.0.0.1:30090
    ingress: {className: nginx, host: `+ns+`.example.test, namespace: `+ingNS+`, backendService: opensandbox-ingress, backendPort: 80}
    dns:
      namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}
      podSelector: {matchLabels: {k8s-app: kube-dns}}
    cni: {implementation: calico, version: v3.28.1, fingerprint: "sha256:x"}
    cniQualification: {clusterId: c1, implementation: calico, version: v3.28.1, fingerprint: "sha256:x"}
templates: {clusterId: c1, namespace: `+ns+`}
`)
	creds := write("credentials.yaml", "credentials:\n  - {id: cred, enabled: true, projectNamespace: "+ns+", clusterId: c1}\n")
	keys := write("keys.yaml", "keys:\n  - {name: k, sha256: "+apikey.Digest("key")+", credentialId: cred}\n")
	// run binds the API on a port the kernel picks and tells it through
	// serving.
	addrc := make(chan string, 1)
	saved := serving
	serving = func(addr, _ string) { addrc <- addr }
	t.Cleanup(func() { serving = saved })

	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-config", cfg, "-credentials", creds, "-api-keys", keys, "-listen", "127.0.0.1:0"})
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("run did not serve within 60 s")
	}
	// A failure below leaves run running: stop it before the cleanup
	// above puts serving back (run has read it, but a run still going
	// would outlive the test). serving was called, so SIGTERM stops run.
	stopped := false
	t.Cleanup(func() {
		if stopped {
			return
		}
		select {
		case err := <-done:
			// run returned by itself: its handler is gone, and a
			// SIGTERM now would end this test binary.
			if err != nil {
				t.Errorf("run returned: %v", err)
			}
			return
		default:
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Errorf("stop run: %v", err)
			return
		}
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("run did not stop after SIGTERM")
		}
	})
	var code int
	var body string
	kubetest.Eventually(t, 60*time.Second, "an egress PUT through the command's API", func() (bool, error) {
		req, _ := http.NewRequest("PUT", "http://"+addr+"/sandboxes/sbx/network", strings.NewReader(`{"defaultAction":"deny","egress":[{"cidr":"10.0.0.0/8"}]}`))
		req.Header.Set("X-API-Key", "key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body = resp.StatusCode, string(b)
		return true, nil
	})
	if code != 200 || !strings.Contains(body, `"networkReady":true`) {
		t.Fatalf("PUT = %d %s", code, body)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Fatalf("run after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run did not stop after SIGTERM")
	}
}
