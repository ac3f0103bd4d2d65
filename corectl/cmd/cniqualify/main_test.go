package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/qualify"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var env *kubetest.Env

func TestMain(m *testing.M) { kubetest.Main(m, &env) }

// TestRunAgainstTheConfiguredCluster runs the command's run as an operator
// would, from a cluster configuration and its kubeconfig, with the
// default prober replaced by none (the test apiserver runs no pods): every
// row is printed, the cluster is not qualified, and no record is printed.
func TestRunAgainstTheConfiguredCluster(t *testing.T) {
	dir := t.TempDir()
	ns, ingNS := env.Namespace(t), env.Namespace(t)
	dns := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns-cniqualify", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "dns", Image: "coredns:test"}}}}
	if err := env.Client.Create(context.Background(), dns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
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
	var out bytes.Buffer
	ok, err := run(context.Background(), &out, cfg, "c1", func(c client.Client, cl *cluster.Cluster) *qualify.Suite {
		return &qualify.Suite{Client: c, Cluster: cl, Namespace: ns, Allowed: "203.0.113.10:443", Denied: "198.51.100.20:443"}
	})
	if err != nil || ok {
		t.Fatalf("run = %v, %v; want not qualified, no error\n%s", ok, err, out.String())
	}
	text := out.String()
	for _, want := range []string{qualify.RowEgressEnforcement, qualify.RowObservability, "cluster c1: not qualified"} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "cniQualification:") {
		t.Errorf("a record was printed for an unqualified run:\n%s", text)
	}
	if _, err := run(context.Background(), &out, cfg, "nope", nil); err == nil {
		t.Error("an unknown cluster was accepted")
	}
}
