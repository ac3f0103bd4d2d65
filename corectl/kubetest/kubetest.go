// Package kubetest starts a real kube-apiserver and etcd for corectl's
// tests with controller-runtime's envtest, installs corectl's CRDs and a
// minimal BatchSandbox CRD (batchsandbox-crd.yaml), and offers helpers to
// create test objects, among them the one fixture the egress and ingress
// allowlist engines' tests share (Env.Sandbox, with its Event Recorder). The binaries are those hack/kube/build.sh builds
// from the Go module proxy (docs/kube-apiserver.md).
//
// The control plane is package internal/kubeenv's: binaries from
// $KUBEBUILDER_ASSETS or build.sh's cache; without them Start fails with the
// command to run; tests never skip.
package kubetest

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/deploy"
	"github.com/sandgate/sandgate/internal/kubeenv"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

//go:embed batchsandbox-crd.yaml
var batchSandboxCRD []byte

// Env is a running control plane.
type Env struct {
	// Config reaches the apiserver as a cluster admin.
	Config *rest.Config
	// Scheme is cluster.NewScheme().
	Scheme *runtime.Scheme
	// Client is an uncached admin client.
	Client client.Client
	// KubeConfig is a kubeconfig file's content reaching the apiserver as
	// a cluster admin.
	KubeConfig []byte

	env *kubeenv.Env
	seq atomic.Int64
}

// Start starts kube-apiserver and etcd on 127.0.0.1 and installs the CRDs.
// Stop it with Stop.
func Start() (*Env, error) {
	crds, scheme, err := resources()
	if err != nil {
		return nil, err
	}
	ke, err := kubeenv.Start(crds, scheme)
	if err != nil {
		return nil, err
	}
	e, err := wrap(ke, scheme)
	if err != nil {
		_ = ke.Stop()
		return nil, err
	}
	return e, nil
}

// resources returns the CRDs (the BatchSandbox's and corectl's) and the
// scheme every Env has.
func resources() ([]*apiextensionsv1.CustomResourceDefinition, *runtime.Scheme, error) {
	crds, err := deploy.CRDs()
	if err != nil {
		return nil, nil, err
	}
	bs, err := deploy.DecodeCRD(batchSandboxCRD)
	if err != nil {
		return nil, nil, fmt.Errorf("kubetest: batchsandbox-crd.yaml: %w", err)
	}
	scheme, err := cluster.NewScheme()
	if err != nil {
		return nil, nil, err
	}
	return append([]*apiextensionsv1.CustomResourceDefinition{bs}, crds...), scheme, nil
}

// wrap returns the Env of the running control plane ke, with an admin
// client of scheme.
func wrap(ke *kubeenv.Env, scheme *runtime.Scheme) (*Env, error) {
	c, err := client.New(ke.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &Env{Config: ke.Config, Scheme: scheme, Client: c, KubeConfig: ke.KubeConfig, env: ke}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

// Main runs a test package against one control plane (kubeenv.Main): it
// starts it, stores it in *env, runs the tests and stops it. Use from
// TestMain:
//
//	func TestMain(m *testing.M) { kubetest.Main(m, &env) }
func Main(m *testing.M, env **Env) {
	crds, scheme, err := resources()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	kubeenv.Main(m, crds, scheme, func(ke *kubeenv.Env) (err error) {
		*env, err = wrap(ke, scheme)
		return err
	})
}

// Namespace creates a fresh namespace for t and returns its name.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", e.seq.Add(1), strings.ToLower(sanitize(t.Name())))
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

// BatchSandbox creates a BatchSandbox namespace/id whose pod template has
// labels, and returns it as read back.
func (e *Env) BatchSandbox(t testing.TB, namespace, id string, labels map[string]string) *unstructured.Unstructured {
	t.Helper()
	u := NewBatchSandbox(namespace, id, labels)
	if err := e.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("create BatchSandbox %s/%s: %v", namespace, id, err)
	}
	return u
}

// OwnedBatchSandbox is BatchSandbox with owner recorded as its creating
// credential (v1alpha1.AnnotationCredential and LabelCredential), as
// corectl's create records it.
func (e *Env) OwnedBatchSandbox(t testing.TB, namespace, id, owner string, labels map[string]string) *unstructured.Unstructured {
	t.Helper()
	u := NewBatchSandbox(namespace, id, labels)
	(&sandbox.Sandbox{Owner: owner}).MarkOwner(u)
	if err := e.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("create BatchSandbox %s/%s: %v", namespace, id, err)
	}
	return u
}

// NewBatchSandbox returns (without creating) a BatchSandbox namespace/id
// with one replica and the given pod-template labels.
func NewBatchSandbox(namespace, id string, labels map[string]string) *unstructured.Unstructured {
	l := map[string]any{}
	for k, v := range labels {
		l[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"replicas": int64(1),
			"template": map[string]any{
				"metadata": map[string]any{"labels": l},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "sandbox", "image": "sandbox:latest"}}},
			},
		},
	}}
	u.SetGroupVersionKind(sandbox.GVK)
	u.SetNamespace(namespace)
	u.SetName(id)
	return u
}

// Pod creates a pod controlled by the BatchSandbox owner, with labels, and
// returns it.
func (e *Env) Pod(t testing.TB, owner *unstructured.Unstructured, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	yes := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: owner.GetNamespace(), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: sandbox.GVK.GroupVersion().String(), Kind: sandbox.GVK.Kind,
				Name: owner.GetName(), UID: owner.GetUID(), Controller: &yes,
			}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "sandbox:latest"}}},
	}
	if err := e.Client.Create(context.Background(), p); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return p
}

// Cluster returns a valid cluster configuration for tests: ID id, a
// kube-dns DNS selector, an "nginx" ingress class on host
// sandbox.example.test, managed Ingresses and the OpenSandbox ingress
// Service "opensandbox-ingress:80" in ingressNamespace, and a matching CNI
// qualification record.
func Cluster(id, ingressNamespace string) *cluster.Cluster {
	facts := cluster.CNIFacts{Implementation: "calico", Version: "v3.28.1", Fingerprint: "sha256:test"}
	return &cluster.Cluster{
		ID:         id,
		Kubeconfig: "/dev/null",
		FixedEntry: "http://127.0.0.1:30090",
		Ingress: cluster.IngressCarrier{
			ClassName: "nginx", Host: "sandbox.example.test", Namespace: ingressNamespace,
			BackendService: "opensandbox-ingress", BackendPort: intstr.FromInt32(80),
		},
		DNS: cluster.DNSSelector{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		},
		CNI:              facts,
		CNIQualification: &cluster.CNIQualification{ClusterID: id, CNIFacts: facts, QualifiedAt: "2026-09-01T00:00:00Z"},
	}
}

// SandboxTemplates returns the sandbox templates of the test
// configurations: "base", one container "sandbox" (image
// sandbox-base:test) with limits of 2 CPUs, 2 GiB of memory and 10 GiB of
// ephemeral storage, and one env entry TEMPLATE_ENV=base.
func SandboxTemplates() []cluster.SandboxTemplate {
	return []cluster.SandboxTemplate{{
		ID: "base",
		Pod: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "sandbox", Image: "sandbox-base:test",
			Env: []corev1.EnvVar{{Name: "TEMPLATE_ENV", Value: "base"}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
			}},
		}}},
	}}
}

// Eventually polls cond every few milliseconds until it returns true or an
// error, or the deadline passes; it fails t with what on timeout or error.
// It is the tests' only way to wait (no sleeps as synchronisation).
func Eventually(t testing.TB, deadline time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if err != nil {
			last = err
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s (last error: %v)", deadline, what, last)
		case <-tick.C:
		}
	}
}

// IntOrString is a helper for tests building ports.
func IntOrString(v int32) *intstr.IntOrString { p := intstr.FromInt32(v); return &p }
