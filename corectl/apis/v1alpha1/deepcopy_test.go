package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDeepCopyIsDeep(t *testing.T) {
	al := &SandboxIngressAllowlist{
		ObjectMeta: metav1.ObjectMeta{Name: "sbx", Labels: map[string]string{"a": "b"}},
		Spec:       SandboxIngressAllowlistSpec{ClusterID: "c1", Desired: []IngressRule{{CIDR: "10.0.0.0/8"}}},
		Status: SandboxIngressAllowlistStatus{Applied: []string{"10.0.0.0/8"}, LastVerified: []string{"10.0.0.0/8"},
			CarrierRef: &CarrierRef{Name: "x"}, Conditions: []metav1.Condition{{Type: "Verified"}}},
	}
	cp := al.DeepCopyObject().(*SandboxIngressAllowlist)
	cp.Labels["a"] = "z"
	cp.Spec.Desired[0].CIDR = "0.0.0.0/0"
	cp.Status.Applied[0], cp.Status.LastVerified[0] = "0.0.0.0/0", "0.0.0.0/0"
	cp.Status.CarrierRef.Name = "y"
	cp.Status.Conditions[0].Type = "Ready"
	if al.Labels["a"] != "b" || al.Spec.Desired[0].CIDR != "10.0.0.0/8" || al.Status.Applied[0] != "10.0.0.0/8" ||
		al.Status.LastVerified[0] != "10.0.0.0/8" || al.Status.CarrierRef.Name != "x" || al.Status.Conditions[0].Type != "Verified" {
		t.Fatalf("DeepCopy shares memory: %+v", al)
	}
	tn := &SandboxTemplateNetwork{Spec: SandboxTemplateNetworkSpec{Ingress: []IngressRule{{CIDR: "1.1.1.1/32"}}, Egress: []EgressRule{{CIDR: "2.2.2.2/32"}}}}
	tc := tn.DeepCopyObject().(*SandboxTemplateNetwork)
	tc.Spec.Ingress[0].CIDR, tc.Spec.Egress[0].CIDR = "x", "y"
	if tn.Spec.Ingress[0].CIDR != "1.1.1.1/32" || tn.Spec.Egress[0].CIDR != "2.2.2.2/32" {
		t.Fatal("template DeepCopy shares memory")
	}
	for _, l := range []runtime.Object{&SandboxIngressAllowlistList{Items: []SandboxIngressAllowlist{*al}}, &SandboxTemplateNetworkList{Items: []SandboxTemplateNetwork{*tn}}} {
		if l.DeepCopyObject() == l {
			t.Fatal("list DeepCopyObject returned the receiver")
		}
	}
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil || !s.Recognizes(GroupVersion.WithKind("SandboxIngressAllowlist")) || !s.Recognizes(GroupVersion.WithKind("SandboxTemplateNetwork")) {
		t.Fatalf("AddToScheme: %v", err)
	}
}
