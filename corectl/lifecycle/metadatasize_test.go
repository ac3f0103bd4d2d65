package lifecycle_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestMetadataBoundIsTheStoredSize: lifecycle.MaxMetadataBytes bounds
// the metadata as stored on the BatchSandbox (its JSON annotation), so a
// value of characters that JSON escapes (encoding/json writes "<" as the
// six bytes \u003c) counts as stored: 16,000 of them, under the bound as
// written but six times over it once stored, is 400 bad_request and
// nothing is created; the same count of plain letters is created, and
// its annotation is within the bound. Before, the escaped value was
// created with a 96 KB annotation.
func TestMetadataBoundIsTheStoredSize(t *testing.T) {
	w := start(t)
	body := func(v string) string {
		b, _ := json.Marshal(map[string]any{"templateID": "base", "metadata": map[string]string{"k": v}})
		return string(b)
	}
	var sb sandboxBody
	st, raw := w.do("POST", "/v2/sandboxes", "key-a", body(strings.Repeat("<", 16000)), &sb)
	if st != http.StatusBadRequest || !strings.Contains(string(raw), "metadata is larger than") {
		if st == http.StatusCreated {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(sandbox.GVK)
			if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: w.nsA, Name: sb.SandboxID}, u); err == nil {
				t.Logf("stored annotation: %d bytes", len(u.GetAnnotations()[v1alpha1.AnnotationMetadata]))
			}
		}
		t.Fatalf("create with 16,000 escaped characters = %d %.200s, want 400 metadata is larger than", st, raw)
	}
	sb = w.create(body(strings.Repeat("a", 16000)))
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: w.nsA, Name: sb.SandboxID}, u); err != nil {
		t.Fatal(err)
	}
	if n := len(u.GetAnnotations()[v1alpha1.AnnotationMetadata]); n > lifecycle.MaxMetadataBytes {
		t.Errorf("stored metadata of %d bytes, over %d", n, lifecycle.MaxMetadataBytes)
	}
}
