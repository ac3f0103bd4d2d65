// Package intern shares the strings that repeat across the objects of
// corectl's informer caches. Decoding gives every object its own copy of
// every map key ("metadata", "network.sandgate.io/lifecycle", …) and of
// every label value ("sandgate", the cluster ID); at 10,000 sandboxes, four
// cached objects each, those copies are a measurable part of the cache
// (docs/benchmarks.md "corectl at 10,000 sandboxes"). The cache transforms
// (sandbox.TrimCached, egress.TrimCached, ingressallow.TrimCached) pass
// their objects' metadata through here so that each such string is held once
// (package unique; a string no cached object holds any more is released).
// Values that differ per object (names, UIDs, timestamps, annotation
// values) are left alone: interning them would only add a table entry.
package intern

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// String returns the shared copy of s.
func String(s string) string { return unique.Make(s).Value() }

// StringMap returns a copy of m with every key shared, and every value
// too when values is true; nil when m is nil.
func StringMap(m map[string]string, values bool) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if values {
			v = String(v)
		}
		out[String(k)] = v
	}
	return out
}

// Meta shares, in obj's metadata, the label keys and values, the
// annotation keys and the owner references' API version and kind.
func Meta(obj metav1.Object) {
	obj.SetLabels(StringMap(obj.GetLabels(), true))
	obj.SetAnnotations(StringMap(obj.GetAnnotations(), false))
	if refs := obj.GetOwnerReferences(); len(refs) > 0 {
		for i := range refs {
			refs[i].APIVersion, refs[i].Kind = String(refs[i].APIVersion), String(refs[i].Kind)
		}
		obj.SetOwnerReferences(refs)
	}
}
