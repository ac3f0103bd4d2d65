package sandbox

import (
	"reflect"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestTrimCachedKeepsWhatReadersUse: the trimmed object keeps metadata
// (without managed fields), status.ready, replicas, the template's labels
// and each container's name and resource limits, and nothing else of spec or
// status; From reads the same sandbox from it.
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
						"resources": map[string]any{"limits": map[string]any{"cpu": "2"}, "requests": map[string]any{"cpu": "1"}}}},
					"volumes": []any{map[string]any{"name": "v"}},
				},
			},
			"expireTime": "x",
		},
		"status": map[string]any{"ready": int64(1), "replicas": int64(1), "taskPending": int64(0), "allocated": int64(1)},
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
	if !reflect.DeepEqual(got.Object["status"], map[string]any{"ready": int64(1)}) || got.GetAnnotations()["a"] != "b" {
		t.Fatalf("status %v, want only ready 1; annotations %v", got.Object["status"], got.GetAnnotations())
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

// TestAnnotationReadsInPlace: Annotation answers as GetAnnotations does
// for present and absent keys, objects without annotations or metadata,
// and counts a value that is not a string as absent; OwnerOf answers the
// same for the unstructured object and a typed copy.
func TestAnnotationReadsInPlace(t *testing.T) {
	u := NewObject()
	if v, ok := Annotation(u, "a"); ok || v != "" {
		t.Fatalf("no metadata: %q %v", v, ok)
	}
	if u.GetAPIVersion() != "sandbox.opensandbox.io/v1alpha1" || u.GetKind() != "BatchSandbox" {
		t.Fatalf("NewObject kind %v", u.GroupVersionKind())
	}
	u.SetName("sb1")
	if _, ok := Annotation(u, "a"); ok {
		t.Fatal("no annotations: found")
	}
	u.SetAnnotations(map[string]string{"a": "b", "empty": "", v1alpha1.AnnotationCredential: "own"})
	for _, k := range []string{"a", "empty", "missing", v1alpha1.AnnotationCredential} {
		v, ok := Annotation(u, k)
		w, wok := u.GetAnnotations()[k]
		if v != w || ok != wok {
			t.Fatalf("Annotation(%q) = %q %v, GetAnnotations %q %v", k, v, ok, w, wok)
		}
	}
	if OwnerOf(u) != "own" || OwnerOf(&metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationCredential: "own"}}) != "own" {
		t.Fatal("OwnerOf")
	}
	u.Object["metadata"].(map[string]any)["annotations"].(map[string]any)["n"] = int64(1)
	if _, ok := Annotation(u, "n"); ok {
		t.Fatal("a number counted as an annotation")
	}
}
