package sandbox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// batchSandboxJSON is a BatchSandbox as the apiserver answers it: pod
// template with image, env and volumes, managed fields, OpenSandbox's
// status fields.
const batchSandboxJSON = `{"apiVersion":"sandbox.opensandbox.io/v1alpha1","kind":"BatchSandbox",
"metadata":{"name":"sb1","namespace":"p","uid":"u1","resourceVersion":"7","creationTimestamp":"2026-12-05T10:00:00Z",
 "labels":{"network.sandgate.io/credential":"cabc","app.kubernetes.io/managed-by":"sandgate"},
 "annotations":{"a":"b","network.sandgate.io/credential-id":"own","sandbox.opensandbox.io/endpoints":"[\"10.0.0.7\"]"},
 "managedFields":[{"manager":"m","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]},
"spec":{"replicas":1,"expireTime":"x","template":{
 "metadata":{"labels":{"alloc":"al1"},"annotations":{"t":"u"}},
 "spec":{"containers":[{"name":"sandbox","image":"img","env":[{"name":"X","value":"secret"}],
   "resources":{"limits":{"cpu":"2","memory":"1Gi","ephemeral-storage":"10Gi"},"requests":{"cpu":"1"}}},{"name":"side"}],
  "volumes":[{"name":"vol"}]}}},
"status":{"ready":1,"replicas":1,"taskPending":0,"allocated":1}}`

// TestCachedKeepsWhatReadersUse: a BatchSandbox decoded into Cached
// through a scheme with AddToScheme (as the informer cache and the orphan
// scan decode it) and trimmed holds metadata without managed fields, the
// template's labels, each container's name and limits and status.ready,
// and nothing else of spec or status; From, Ready, PodSpecOf, Annotation,
// OwnerOf and CredentialIndex answer for it as for the whole object read
// unstructured.
func TestCachedKeepsWhatReadersUse(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	obj, _, err := serializer.NewCodecFactory(s).UniversalDeserializer().Decode([]byte(batchSandboxJSON), nil, NewCached())
	if err != nil {
		t.Fatal(err)
	}
	out, err := TrimCached(obj)
	if err != nil {
		t.Fatal(err)
	}
	c := out.(*Cached)
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(batchSandboxJSON)); err != nil {
		t.Fatal(err)
	}
	if len(c.GetManagedFields()) != 0 {
		t.Fatal("managed fields kept")
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"img", "secret", "vol", "requests", "expireTime", "taskPending", "allocated", "managedFields", `"t"`} {
		if strings.Contains(string(b), gone) {
			t.Errorf("the cached object holds %s: %s", gone, b)
		}
	}
	want, err := From(u, "alloc")
	if err != nil {
		t.Fatal(err)
	}
	got, err := From(c, "alloc")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("From(cached) = %+v, %v; from the whole object %+v", got, err, want)
	}
	if Ready(c) != 1 || Ready(u) != 1 {
		t.Fatalf("Ready %d, whole %d", Ready(c), Ready(u))
	}
	ps, ok := PodSpecOf(c)
	wps, wok := PodSpecOf(u)
	if !ok || !wok || len(ps.Containers) != 2 || ps.Containers[0].Name != "sandbox" || len(ps.Containers[0].Resources.Limits) != 3 ||
		!reflect.DeepEqual(ps.Containers[0].Resources.Limits, wps.Containers[0].Resources.Limits) || ps.Containers[1].Resources.Limits != nil {
		t.Fatalf("PodSpecOf(cached) = %+v, whole %+v", ps, wps)
	}
	for _, k := range []string{"a", "missing", v1alpha1.AnnotationCredential} {
		v, ok := Annotation(c, k)
		w, wok := Annotation(u, k)
		if v != w || ok != wok {
			t.Fatalf("Annotation(%q) = %q %v, whole %q %v", k, v, ok, w, wok)
		}
	}
	if OwnerOf(c) != "own" {
		t.Fatalf("OwnerOf = %q", OwnerOf(c))
	}
	if k := CredentialIndex(c); !reflect.DeepEqual(k, []string{"p/cabc"}) {
		t.Fatalf("CredentialIndex = %v", k)
	}
	got.TemplateLabels["alloc"] = "changed"
	if c.Spec.Template.Metadata.Labels["alloc"] != "al1" {
		t.Fatal("From handed out the cached object's template labels")
	}
	cp := c.DeepCopyObject().(*Cached)
	cp.Annotations["a"], cp.Spec.Template.Metadata.Labels["alloc"] = "x", "y"
	*cp.Spec.Template.Spec.Containers[0].Resources.Limits.CPU = resource.MustParse("9")
	if q := c.Spec.Template.Spec.Containers[0].Resources.Limits.CPU; c.Annotations["a"] != "b" || c.Spec.Template.Metadata.Labels["alloc"] != "al1" || q.String() != "2" {
		t.Fatal("DeepCopyObject shares the original's maps")
	}
	if other, _ := TrimCached("tombstone"); other != "tombstone" {
		t.Fatal("a non-object changed")
	}
}

// TestCachedDecodesMalformedSandboxes: a list whose BatchSandboxes have
// template labels that are not strings, containers that do not decode, a
// limit that is not a quantity or a status.ready that is not an integer
// still decodes (one such object must not stop the cache); each object
// then answers as the whole object read unstructured does: From fails
// for its labels, PodSpecOf gives no containers (so no sizes), Ready is 0; the well-formed
// object beside them is read as usual.
func TestCachedDecodesMalformedSandboxes(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	items := []string{
		`{"metadata":{"name":"labels"},"spec":{"template":{"metadata":{"labels":{"alloc":1}}}},"status":{"ready":1}}`,
		`{"metadata":{"name":"containers"},"spec":{"template":{"metadata":{"labels":{"alloc":"a2"}},"spec":{"containers":[{"name":7}]}}}}`,
		`{"metadata":{"name":"limit"},"spec":{"template":{"metadata":{"labels":{"alloc":"a3"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"lots"}}}]}}}}`,
		`{"metadata":{"name":"status"},"spec":{"template":{"metadata":{"labels":{"alloc":"a4"}}}},"status":{"ready":"1"}}`,
		`{"metadata":{"name":"fine"},"spec":{"template":{"metadata":{"labels":{"alloc":"a5"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":2,"memory":"1Gi"}}}]}}},"status":{"ready":1}}`,
	}
	var l CachedList
	body := `{"apiVersion":"sandbox.opensandbox.io/v1alpha1","kind":"BatchSandboxList","metadata":{},"items":[` + strings.Join(items, ",") + `]}`
	if _, _, err := serializer.NewCodecFactory(s).UniversalDeserializer().Decode([]byte(body), nil, &l); err != nil || len(l.Items) != len(items) {
		t.Fatalf("decode: %v, %d items", err, len(l.Items))
	}
	for i, c := range l.Items {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(`{"apiVersion":"sandbox.opensandbox.io/v1alpha1","kind":"BatchSandbox",` + items[i][1:])); err != nil {
			t.Fatal(err)
		}
		_, err := From(c, "alloc")
		_, werr := From(u, "alloc")
		if (err == nil) != (werr == nil) {
			t.Errorf("%s: From %v, whole %v", c.Name, err, werr)
		}
		ps, ok := PodSpecOf(c)
		wps, wok := PodSpecOf(u)
		has, whas := ok && len(ps.Containers) > 0, wok && len(wps.Containers) > 0
		if has != whas || Ready(c) != Ready(u) {
			t.Errorf("%s: containers from PodSpecOf %v, whole %v; Ready %d, whole %d", c.Name, has, whas, Ready(c), Ready(u))
		}
	}
	ps, ok := PodSpecOf(l.Items[4])
	if !ok || len(ps.Containers) != 1 || ps.Containers[0].Resources.Limits.Cpu().String() != "2" || Ready(l.Items[4]) != 1 {
		t.Fatalf("the well-formed object: %+v %v, ready %d", ps, ok, Ready(l.Items[4]))
	}
}

// TestCachedListDecodesFreshPerPage: a CachedList decoded a second time
// (the orphan scan's next page) after its items were reset holds only the
// second answer's objects and annotations.
func TestCachedListDecodesFreshPerPage(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(s).UniversalDeserializer()
	page := func(name, ann string) string {
		return `{"apiVersion":"sandbox.opensandbox.io/v1alpha1","kind":"BatchSandboxList","metadata":{},"items":[` +
			`{"metadata":{"name":"` + name + `","annotations":{"` + ann + `":"v"}}}]}`
	}
	var l CachedList
	if _, _, err := dec.Decode([]byte(page("sb1", "a1")), nil, &l); err != nil || len(l.Items) != 1 {
		t.Fatalf("first page: %v, %d items", err, len(l.Items))
	}
	l.Items = nil
	if _, _, err := dec.Decode([]byte(page("sb2", "a2")), nil, &l); err != nil || len(l.Items) != 1 {
		t.Fatalf("second page: %v, %d items", err, len(l.Items))
	}
	if c := l.Items[0]; c.Name != "sb2" || len(c.Annotations) != 1 || c.Annotations["a2"] != "v" {
		t.Fatalf("second page's object %s %v", c.Name, c.Annotations)
	}
}

// TestAnnotationReadsInPlace: Annotation answers as GetAnnotations does
// for present and absent keys, objects without annotations or metadata,
// and counts a value that is not a string as absent; OwnerOf answers the
// same for the unstructured object and a typed copy.
func TestAnnotationReadsInPlace(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "BatchSandbox"}}
	if v, ok := Annotation(u, "a"); ok || v != "" {
		t.Fatalf("no metadata: %q %v", v, ok)
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
