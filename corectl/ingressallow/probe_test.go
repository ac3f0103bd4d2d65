package ingressallow

import (
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestProbeMerge checks the merge and strip rules of spec §5.2.2 IV.
func TestProbeMerge(t *testing.T) {
	u := []string{"203.0.113.0/24"}
	p := []string{"10.9.9.9/32"}
	if got := Effective(u, p); !slices.Equal(got, []string{"10.9.9.9/32", "203.0.113.0/24"}) {
		t.Fatalf("Effective = %v", got)
	}
	if got := Effective(nil, p); got != nil {
		t.Fatalf("an unrestricted set became %v", got)
	}
	if got := Effective(p, p); !slices.Equal(got, p) {
		t.Fatalf("Effective(p, p) = %v", got)
	}
	e := []string{"10.9.9.9/32", "203.0.113.0/24"}
	if got := StripProbe(e, p, u); !slices.Equal(got, u) {
		t.Fatalf("StripProbe = %v", got)
	}
	if got := StripProbe(e, p, e); !slices.Equal(got, e) {
		t.Fatalf("a user CIDR that is also a probe source was stripped: %v", got)
	}
	for v, ok := range map[string]bool{``: true, `["10.9.9.9/32"]`: true, `["10.9.9.9"]`: false, `{}`: false, `x`: false} {
		ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if v != "" {
			ing.Annotations[AnnotationProbeSources] = v
		}
		if _, err := ProbeSources(ing); (err == nil) != ok {
			t.Errorf("ProbeSources(%q) error = %v", v, err)
		}
	}
}
