package intern

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fresh returns a copy of s in its own memory, as a decoder gives.
func fresh(s string) string { return strings.Clone(s) }

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestUnstructuredSharesKeysAndLabels: two objects decoded apart share
// their map keys, label values, apiVersion and kind after Unstructured,
// keep every other value their own, and are otherwise unchanged.
func TestUnstructuredSharesKeysAndLabels(t *testing.T) {
	obj := func(name string) map[string]any {
		return map[string]any{
			fresh("apiVersion"): fresh("sandbox.opensandbox.io/v1alpha1"), fresh("kind"): fresh("BatchSandbox"),
			fresh("metadata"): map[string]any{fresh("name"): fresh(name),
				fresh("labels"):          map[string]any{fresh("managed-by"): fresh("sandgate")},
				fresh("annotations"):     map[string]any{fresh("end-at"): fresh("2026-12-05T00:00:00Z")},
				fresh("ownerReferences"): []any{map[string]any{fresh("kind"): fresh("Owner"), fresh("name"): fresh(name)}}},
			fresh("spec"): map[string]any{fresh("replicas"): int64(1)},
		}
	}
	a, b := obj("sb-a"), obj("sb-b")
	want := obj("sb-a")
	a, b = Unstructured(a), Unstructured(b)
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("changed: %v, want %v", a, want)
	}
	key := func(m map[string]any, k string) string {
		for kk := range m {
			if kk == k {
				return kk
			}
		}
		t.Fatalf("no key %q", k)
		return ""
	}
	ma, mb := a["metadata"].(map[string]any), b["metadata"].(map[string]any)
	la, lb := ma["labels"].(map[string]any), mb["labels"].(map[string]any)
	oa, ob := ma["ownerReferences"].([]any)[0].(map[string]any), mb["ownerReferences"].([]any)[0].(map[string]any)
	for _, p := range [][2]string{
		{key(a, "metadata"), key(b, "metadata")},
		{key(ma, "labels"), key(mb, "labels")},
		{key(la, "managed-by"), key(lb, "managed-by")},
		{la["managed-by"].(string), lb["managed-by"].(string)},
		{a["apiVersion"].(string), b["apiVersion"].(string)},
		{oa["kind"].(string), ob["kind"].(string)},
	} {
		if !same(p[0], p[1]) {
			t.Fatalf("%q not shared", p[0])
		}
	}
	ea, eb := ma["annotations"].(map[string]any)["end-at"].(string), mb["annotations"].(map[string]any)["end-at"].(string)
	if same(ea, eb) {
		t.Fatal("an annotation value was shared")
	}
	if Unstructured(nil) != nil {
		t.Fatal("nil")
	}
}

// TestMetaSharesLabelsAndKeys: labels (keys and values), annotation keys
// and owner reference kinds are shared; annotation values are not;
// nothing changes in content.
func TestMetaSharesLabelsAndKeys(t *testing.T) {
	meta := func() *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Name: fresh("x"),
			Labels:          map[string]string{fresh("managed-by"): fresh("sandgate")},
			Annotations:     map[string]string{fresh("state"): fresh("Verified")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: fresh("v1"), Kind: fresh("Owner"), Name: fresh("o")}}}
	}
	a, b, want := meta(), meta(), meta()
	Meta(a)
	Meta(b)
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("changed: %+v", a)
	}
	if !same(a.Labels["managed-by"], b.Labels["managed-by"]) || !same(a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind) {
		t.Fatal("label value or owner kind not shared")
	}
	for k := range a.Annotations {
		for kb := range b.Annotations {
			if !same(k, kb) {
				t.Fatal("annotation key not shared")
			}
		}
	}
	if same(a.Annotations["state"], b.Annotations["state"]) {
		t.Fatal("annotation value shared")
	}
	if StringMap(nil, true) != nil {
		t.Fatal("nil map")
	}
	empty := &metav1.ObjectMeta{}
	Meta(empty)
	if empty.Labels != nil || empty.Annotations != nil || empty.OwnerReferences != nil {
		t.Fatalf("empty metadata filled: %+v", empty)
	}
}
