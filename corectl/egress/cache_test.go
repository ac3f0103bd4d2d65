package egress

import (
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTrimCachedKeepsWhatRecoveryReads: the cached policy keeps its name,
// labels and every annotation but the LKG (EgressRecovery reads the
// verification state and VerifyingSince), and loses its spec and managed
// fields; anything else passes through.
func TestTrimCachedKeepsWhatRecoveryReads(t *testing.T) {
	since := time.Date(2026, 12, 5, 1, 2, 3, 0, time.UTC)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName("al1"), Namespace: "p",
			Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: "c1"},
			Annotations: map[string]string{AnnotationLastVerifiedSpec: `{"podSelector":{}}`, AnnotationVerificationState: v1alpha1.StateVerifying,
				v1alpha1.AnnotationVerifyingSince: since.Format(time.RFC3339), AnnotationVerificationErrorCode: "X"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{}}},
	}
	out, err := TrimCached(np)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*networkingv1.NetworkPolicy)
	if got.Name != PolicyName("al1") || got.Namespace != "p" || got.Labels[v1alpha1.LabelClusterID] != "c1" {
		t.Fatalf("identity lost: %+v", got.ObjectMeta)
	}
	if _, ok := got.Annotations[AnnotationLastVerifiedSpec]; ok || len(got.Annotations) != 3 {
		t.Fatalf("annotations %v, want all but %s", got.Annotations, AnnotationLastVerifiedSpec)
	}
	if got.Annotations[AnnotationVerificationState] != v1alpha1.StateVerifying || !VerifyingSince(got).Equal(since) {
		t.Fatalf("state %q since %v", got.Annotations[AnnotationVerificationState], VerifyingSince(got))
	}
	if len(got.ManagedFields) != 0 || len(got.Spec.Egress) != 0 || len(got.Spec.PolicyTypes) != 0 {
		t.Fatalf("managed fields or spec kept: %+v", got)
	}
	if other, _ := TrimCached("tombstone"); other != "tombstone" {
		t.Fatal("a non-policy changed")
	}
}
