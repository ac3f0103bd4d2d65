package ingressallow

import (
	"reflect"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTrimCachedKeepsWhatSettledReads: the cached allowlist keeps its
// metadata, cluster ID and the status fields Settled reads, so Settled
// answers the same on it as on the whole object; the rest is dropped.
func TestTrimCachedKeepsWhatSettledReads(t *testing.T) {
	for _, st := range []v1alpha1.SandboxIngressAllowlistStatus{
		{ObservedGeneration: 3, VerificationState: v1alpha1.StateVerified, LastVerified: []string{"10.0.0.0/8"}, Applied: []string{"10.0.0.0/8"},
			AppliedVersion: "42", Cycle: 5, CarrierRef: &v1alpha1.CarrierRef{Namespace: "ing", Name: "x", Host: "h"},
			Conditions: []metav1.Condition{{Type: "Verified", Status: metav1.ConditionTrue, Reason: "Verified", Message: "ok"}}},
		{ObservedGeneration: 3, VerificationState: v1alpha1.StateVerifying},
		{ObservedGeneration: 2, VerificationState: v1alpha1.StateVerified},
		{ObservedGeneration: 3, VerificationState: v1alpha1.StatePending, LastErrorCode: CodeAllowlistMismatch, LastErrorMessage: "why"},
		{ObservedGeneration: 3, VerificationState: v1alpha1.StatePending, LastErrorCode: CodeWriteFailed, LastErrorMessage: "why"},
		{ObservedGeneration: 3, VerificationState: v1alpha1.StateIndeterminate},
	} {
		al := &v1alpha1.SandboxIngressAllowlist{
			ObjectMeta: metav1.ObjectMeta{Name: "sb1", Namespace: "p", Generation: 3, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
			Spec:       v1alpha1.SandboxIngressAllowlistSpec{ClusterID: "c1", Desired: []v1alpha1.IngressRule{{}}, Revision: 7},
			Status:     st,
		}
		whole := al.DeepCopy()
		out, err := TrimCached(al)
		if err != nil {
			t.Fatal(err)
		}
		got := out.(*v1alpha1.SandboxIngressAllowlist)
		want := v1alpha1.SandboxIngressAllowlistStatus{ObservedGeneration: st.ObservedGeneration, VerificationState: st.VerificationState,
			LastErrorCode: st.LastErrorCode, LastVerified: st.LastVerified}
		if !reflect.DeepEqual(got.Status, want) || !reflect.DeepEqual(got.Spec, v1alpha1.SandboxIngressAllowlistSpec{ClusterID: "c1"}) {
			t.Fatalf("trimmed to spec %+v status %+v", got.Spec, got.Status)
		}
		if got.Name != "sb1" || got.Generation != 3 || len(got.ManagedFields) != 0 {
			t.Fatalf("metadata %+v", got.ObjectMeta)
		}
		// Settled's answer without a carrier depends on the status alone.
		if Settled(nil, got, nil, nil) != Settled(nil, whole, nil, nil) {
			t.Fatalf("Settled differs on status %+v", st)
		}
	}
	if other, _ := TrimCached("tombstone"); other != "tombstone" {
		t.Fatal("a non-allowlist changed")
	}
}

// TestTrimCachedCarrierKeepsSpec: the cached carrier keeps metadata and
// spec (CheckCarrier reads them) and loses status and managed fields.
func TestTrimCachedCarrierKeepsSpec(t *testing.T) {
	class := "nginx"
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: map[string]string{AnnotationWhitelist: "10.0.0.0/8"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec:       networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{{Host: "h"}}},
		Status: networkingv1.IngressStatus{LoadBalancer: networkingv1.IngressLoadBalancerStatus{
			Ingress: []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.1"}}}},
	}
	spec, meta := *ing.Spec.DeepCopy(), ing.ObjectMeta.DeepCopy()
	meta.ManagedFields = nil
	out, err := TrimCachedCarrier(ing)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*networkingv1.Ingress)
	if !reflect.DeepEqual(got.Spec, spec) || !reflect.DeepEqual(got.ObjectMeta, *meta) || len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("trimmed carrier %+v", got)
	}
	if other, _ := TrimCachedCarrier("tombstone"); other != "tombstone" {
		t.Fatal("a non-Ingress changed")
	}
}
