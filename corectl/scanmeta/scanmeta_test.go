package scanmeta

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/probesource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// answer wraps raw, a protobuf PartialObjectMetadataList, as the
// apiserver sends it.
func answer(t testing.TB, raw []byte) []byte {
	t.Helper()
	u := runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeProtobuf}
	b, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte{}, protobufPrefix...), b...)
}

// sample is a list with what the scan reads and what it skips.
func sample() *metav1.PartialObjectMetadataList {
	yes := true
	ts := metav1.NewTime(time.Unix(1_700_000_000, 0))
	l := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{Continue: "next-page", ResourceVersion: "42"}}
	l.Items = []metav1.PartialObjectMetadata{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u", ResourceVersion: "7", Generation: 3, CreationTimestamp: ts,
			DeletionTimestamp: &ts, Labels: map[string]string{"k": "v", "": ""},
			Annotations:     map[string]string{probesource.AnnotationEchoLifetime: "45s", "lkg": strings.Repeat("x", 1000)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "x/v1", Kind: "K", Name: "n", UID: "u", Controller: &yes}},
			Finalizers:      []string{"f"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: map[string]string{"other": "1"}}},
	}
	return l
}

// projected is what Decode must give for l.
func projected(l *metav1.PartialObjectMetadataList) []metav1.PartialObjectMetadata {
	out := make([]metav1.PartialObjectMetadata, len(l.Items))
	for i := range l.Items {
		out[i] = Project(&l.Items[i].ObjectMeta)
	}
	return out
}

func same(a, b []metav1.PartialObjectMetadata) bool {
	return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b)
}

// TestDecodeProtobuf: the partial decoding of a protobuf answer gives
// Project of the fully decoded items and the continue token.
func TestDecodeProtobuf(t *testing.T) {
	l := sample()
	raw, err := l.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	items, cont, err := Decode(answer(t, raw))
	if err != nil {
		t.Fatal(err)
	}
	if cont != "next-page" || !same(items, projected(l)) {
		t.Fatalf("got %q %+v\nwant %+v", cont, items, projected(l))
	}
	if items[0].Annotations[probesource.AnnotationEchoLifetime] != "45s" || len(items[0].Annotations) != 1 ||
		items[0].ManagedFields != nil || items[2].Annotations != nil {
		t.Fatalf("annotations or managed fields kept: %+v", items)
	}
}

// TestDecodeJSON: an answer that is not protobuf is decoded as JSON.
func TestDecodeJSON(t *testing.T) {
	l := sample()
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	items, cont, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if cont != "next-page" || !same(items, projected(l)) {
		t.Fatalf("got %q %+v", cont, items)
	}
}

// TestDecodeRefusesGarbage: neither protobuf nor JSON is an error, and so
// is a content encoding.
func TestDecodeRefusesGarbage(t *testing.T) {
	if _, _, err := Decode([]byte("<html>")); !errors.Is(err, errMetadata) {
		t.Fatalf("HTML: %v", err)
	}
	u := runtime.Unknown{Raw: []byte{}, ContentEncoding: "gzip"}
	b, _ := u.Marshal()
	if _, _, err := Decode(append(append([]byte{}, protobufPrefix...), b...)); !errors.Is(err, errMetadata) {
		t.Fatalf("content encoding: %v", err)
	}
}

// FuzzDecode: for any bytes the generated PartialObjectMetadataList
// Unmarshal accepts, Decode gives Project of its items and its continue
// token (the decisions the orphan scan takes on them are the same).
func FuzzDecode(f *testing.F) {
	l := sample()
	raw, err := l.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte{})
	one := &metav1.PartialObjectMetadataList{Items: l.Items[:1]}
	if raw, err = one.Marshal(); err == nil {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var full metav1.PartialObjectMetadataList
		if err := full.Unmarshal(raw); err != nil {
			return
		}
		items, cont, err := Decode(answer(t, raw))
		if err != nil {
			t.Fatalf("Decode: %v (the generated Unmarshal accepts it)", err)
		}
		if cont != full.Continue || !same(items, projected(&full)) {
			t.Fatalf("Decode differs:\n got %q %+v\nwant %q %+v", cont, items, full.Continue, projected(&full))
		}
	})
}
