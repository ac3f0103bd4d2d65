package sandbox

import (
	"reflect"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestTrimCachedKeepsWhatReadersUse: the trimmed object keeps metadata
// (without managed fields), status, replicas, the template's labels and
// each container's name and resources, and nothing else of spec; From
// reads the same sandbox from it.
func TestTrimCachedKeepsWhatReadersUse(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "BatchSandbox",
		"metadata": map[string]any{"name": "sb1", "namespace": "p", "uid": "u1",
			"labels":      map[string]any{v1alpha1.LabelCredential: "cabc"},
			"annotations": map[string]any{"a": "b"}},
		"spec": map[string]any{
			"replicas": int64(1),
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"alloc": "al1"}},
				"spec": map[string]any{
					"containers": []any{map[string]any{"name": "sandbox", "image": "img", "env": []any{map[string]any{"name": "X", "value": "secret"}},
						"resources": map[string]any{"limits": map[string]any{"cpu": "2"}}}},
					"volumes": []any{map[string]any{"name": "v"}},
				},
			},
			"expireTime": "x",
		},
		"status": map[string]any{"ready": int64(1)},
	}}
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m"}})
	before, err := From(u.DeepCopy(), "alloc")
	if err != nil {
		t.Fatal(err)
	}
	out, err := TrimCached(u)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*unstructured.Unstructured)
	if len(got.GetManagedFields()) != 0 {
		t.Fatal("managed fields kept")
	}
	wantSpec := map[string]any{"replicas": int64(1), "template": map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"alloc": "al1"}},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "sandbox",
			"resources": map[string]any{"limits": map[string]any{"cpu": "2"}}}}},
	}}
	if !reflect.DeepEqual(got.Object["spec"], wantSpec) {
		t.Fatalf("spec %v, want %v", got.Object["spec"], wantSpec)
	}
	if got.Object["status"].(map[string]any)["ready"] != int64(1) || got.GetAnnotations()["a"] != "b" {
		t.Fatalf("status or annotations lost: %v", got.Object)
	}
	after, err := From(got, "alloc")
	if err != nil || !reflect.DeepEqual(before, after) {
		t.Fatalf("From after trimming = %+v, %v; before %+v", after, err, before)
	}
	if k := CredentialIndex(got); !reflect.DeepEqual(k, []string{"p/cabc"}) {
		t.Fatalf("CredentialIndex = %v", k)
	}
	if other, _ := TrimCached("tombstone"); other != "tombstone" {
		t.Fatal("a non-object changed")
	}
}
