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
