package lifecycle_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// servePodMetrics makes the test apiserver serve metrics.k8s.io/v1beta1
// PodMetrics at the path metrics-server's aggregated API has
// (/apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods/<name>), from a
// CustomResourceDefinition with the same group, version, kind and plural
// and the same top-level fields (timestamp, window, containers[].usage).
// envtest runs no aggregation layer or metrics-server, and no registry
// serves metrics-server; the objects written are metrics-server's JSON
// (quantities as it writes them: CPU in nanocores, memory in Ki). A group
// under k8s.io needs the api-approved annotation.
func servePodMetrics(t *testing.T) {
	t.Helper()
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "pods.metrics.k8s.io",
			Annotations: map[string]string{"api-approved.kubernetes.io": "unapproved, test stand-in for metrics-server"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: lifecycle.PodMetricsGVK.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "pods", Singular: "podmetrics", Kind: "PodMetrics", ListKind: "PodMetricsList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: lifecycle.PodMetricsGVK.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"timestamp":  {Type: "string"},
						"window":     {Type: "string"},
						"containers": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}},
					},
				}},
			}},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := env.Client.Create(context.Background(), u); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// podMetrics writes a PodMetrics object for pod ns/name.
func podMetrics(t *testing.T, ns, name string, at time.Time, containers []any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"timestamp": at.UTC().Format(time.RFC3339), "window": "10.009s", "containers": containers,
	}}
	u.SetGroupVersionKind(lifecycle.PodMetricsGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	kubetest.Eventually(t, 30*time.Second, "PodMetrics "+name+" to be written", func() (bool, error) {
		err := env.Client.Create(context.Background(), u.DeepCopy())
		return err == nil, nil // the CRD may not be established yet
	})
}

// TestMetricsFromPodMetrics: GET /sandboxes/{id}/metrics reads the
// resource metrics API through the apiserver: one sample per pod of the
// sandbox, the sandbox container's usage (other containers ignored)
// against its template's limits (base: 2 CPUs, 2 GiB, 10 GiB); a pod
// without a sample, or with one it cannot read, gives nothing, and a
// sandbox without samples an empty list. Every answer is E2B's
// []SandboxMetric. corectl runs as its service account with the RBAC of
// package deploy (which must grant get on metrics.k8s.io pods).
func TestMetricsFromPodMetrics(t *testing.T) {
	servePodMetrics(t)
	w := startAs(t, serviceAccount(t))
	id := w.create(`{"templateID":"base"}`).SandboxID
	quiet := w.create(`{"templateID":"base"}`).SandboxID
	owner := bs(w.nsA, id)
	env.Pod(t, owner, id+"-0", nil)
	env.Pod(t, owner, id+"-1", nil) // no sample yet
	env.Pod(t, bs(w.nsA, quiet), quiet+"-0", nil)
	at := time.Now().Add(-5 * time.Second).Truncate(time.Second)
	podMetrics(t, w.nsA, id+"-0", at, []any{
		map[string]any{"name": "sidecar", "usage": map[string]any{"cpu": "900000000n", "memory": "1048576Ki"}},
		map[string]any{"name": "sandbox", "usage": map[string]any{"cpu": "500000000n", "memory": "262144Ki"}},
	})
	// A sample metrics-server would not write: the quiet sandbox's pod
	// has an unreadable CPU quantity.
	podMetrics(t, w.nsA, quiet+"-0", at, []any{
		map[string]any{"name": "sandbox", "usage": map[string]any{"cpu": "lots", "memory": "1Ki"}},
	})

	st, _, body := w.call("GET", "/sandboxes/"+id+"/metrics", "key-a", "")
	if st != http.StatusOK {
		t.Fatalf("metrics = %d %s", st, body)
	}
	conform(t, "metrics", "[]SandboxMetric", body)
	var got []lifecycle.Metric
	if err := json.Unmarshal(body, &got); err != nil || len(got) != 1 {
		t.Fatalf("metrics %s (%v), want one sample", body, err)
	}
	m := got[0]
	want := lifecycle.Metric{Timestamp: at.UTC().Format(time.RFC3339), TimestampUnix: at.Unix(), CPUCount: 2,
		MemUsed: 256 << 20, MemTotal: 2 << 30, DiskTotal: 10 << 30}
	pct := m.CPUUsedPct
	m.CPUUsedPct = 0
	if m != want || math.Abs(pct-25) > 1e-9 {
		t.Fatalf("sample %+v (cpuUsedPct %g), want %+v with cpuUsedPct 25", m, pct, want)
	}

	st, _, body = w.call("GET", "/sandboxes/"+quiet+"/metrics", "key-a", "")
	if st != http.StatusOK || string(body) != "[]\n" && string(body) != "[]" {
		t.Fatalf("metrics of a sandbox with an unreadable sample = %d %s, want []", st, body)
	}
	// Another credential sees no sandbox, whatever the samples say.
	if st, _, body := w.call("GET", "/sandboxes/"+id+"/metrics", "key-a2", ""); st != http.StatusNotFound {
		t.Fatalf("metrics as another credential = %d %s", st, body)
	}

	// GET /sandboxes/metrics: E2B's SandboxesWithMetrics, the latest
	// sample of each named sandbox in the caller's list; the quiet one
	// (no readable sample) and a sandbox that does not exist are left
	// out, and another credential gets nothing.
	names := id + "," + quiet + ",sb00000000000000000000"
	st, _, body = w.call("GET", "/sandboxes/metrics?sandbox_ids="+names, "key-a", "")
	if st != http.StatusOK {
		t.Fatalf("GET /sandboxes/metrics = %d %s", st, body)
	}
	conform(t, "/sandboxes/metrics", "SandboxesWithMetrics", body)
	var all struct{ Sandboxes map[string]lifecycle.Metric }
	if err := json.Unmarshal(body, &all); err != nil || len(all.Sandboxes) != 1 || all.Sandboxes[id].TimestampUnix != at.Unix() ||
		all.Sandboxes[id].MemUsed != 256<<20 {
		t.Fatalf("GET /sandboxes/metrics = %s (%v)", body, err)
	}
	if st, _, body := w.call("GET", "/sandboxes/metrics?sandbox_ids="+names, "key-a2", ""); st != http.StatusOK ||
		strings.TrimSpace(string(body)) != `{"sandboxes":{}}` {
		t.Fatalf("GET /sandboxes/metrics as another credential = %d %s", st, body)
	}
	many := strings.Repeat(id+",", 100) + id
	for _, q := range []string{"", "?sandbox_ids=", "?sandbox_ids=" + id + "," + id, "?sandbox_ids=Not_An_ID", "?sandbox_ids=" + id + "&sandbox_ids=" + quiet,
		"?sandbox_ids=" + many} {
		if st, _, body := w.call("GET", "/sandboxes/metrics"+q, "key-a", ""); st != http.StatusBadRequest {
			t.Errorf("GET /sandboxes/metrics%.40s = %d %s, want 400", q, st, body)
		} else {
			conform(t, "/sandboxes/metrics"+q, "Error", body)
		}
	}
}
