package ingressallow

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClaimants(t *testing.T) {
	nginx, other := "nginx", "other"
	ing := func(name string, class *string, ann map[string]string, host string, paths ...string) networkingv1.Ingress {
		var ps []networkingv1.HTTPIngressPath
		for _, p := range paths {
			ps = append(ps, networkingv1.HTTPIngressPath{Path: p})
		}
		return networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: ann},
			Spec: networkingv1.IngressSpec{IngressClassName: class, Rules: []networkingv1.IngressRule{{Host: host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: ps}}}}},
		}
	}
	for _, tc := range []struct {
		name string
		ing  networkingv1.Ingress
		want bool
	}{
		{"same path", ing("a", &nginx, nil, "h.example.test", "/sbx/"), true},
		{"bare path", ing("a", &nginx, nil, "h.example.test", "/sbx"), true},
		{"sub path", ing("a", &nginx, nil, "h.example.test", "/sbx/44772"), true},
		{"no host", ing("a", &nginx, nil, "", "/sbx/"), true},
		{"wildcard host", ing("a", &nginx, nil, "*.example.test", "/sbx/"), true},
		{"wildcard two levels", ing("a", &nginx, nil, "*.test", "/sbx/"), false},
		{"other host", ing("a", &nginx, nil, "x.example.test", "/sbx/"), false},
		{"root path", ing("a", &nginx, nil, "h.example.test", "/"), false},
		{"sibling id", ing("a", &nginx, nil, "h.example.test", "/sbxy/"), false},
		{"other class", ing("a", &other, nil, "h.example.test", "/sbx/"), false},
		{"unset class", ing("a", nil, nil, "h.example.test", "/sbx/"), true},
		{"legacy class annotation, other", ing("a", nil, map[string]string{"kubernetes.io/ingress.class": "other"}, "h.example.test", "/sbx/"), false},
		{"legacy class annotation, same", ing("a", nil, map[string]string{"kubernetes.io/ingress.class": "nginx"}, "h.example.test", "/sbx/"), true},
		{"own", ing("own", &nginx, nil, "h.example.test", "/sbx/"), false},
	} {
		got := Claimants([]networkingv1.Ingress{tc.ing}, "ns/own", "h.example.test", "nginx", "/sbx/")
		if (len(got) > 0) != tc.want {
			t.Errorf("%s: Claimants = %v, want claim %v", tc.name, got, tc.want)
		}
	}
}

// TestIsCycleWrite: an update is a cycle's own write only when the new
// network.sandgate.io/cycle mark is well formed and later than the old
// one; a mark put back (a replayed copy), dropped, unchanged or malformed
// is someone else's edit.
func TestIsCycleWrite(t *testing.T) {
	ing := func(mark string) *networkingv1.Ingress {
		i := &networkingv1.Ingress{}
		if mark != "" {
			i.Annotations = map[string]string{AnnotationCycle: mark}
		}
		return i
	}
	for _, tc := range []struct {
		old, cur string
		want     bool
	}{
		{"", "1", true},
		{"1", "2", true},
		{"1", "1-rollback", true},
		{"1-rollback", "2", true},
		{"9", "10", true},
		{"garbage", "3", true},
		{"2", "1", false},
		{"2", "1-rollback", false},
		{"2-rollback", "2", false},
		{"3", "3", false},
		{"3", "", false},
		{"3", "4x", false},
		{"3", "04", false},
		{"3", "+4", false},
		{"3", "-4", false},
		{"3", "4-rollback-rollback", false},
		{"3", "99999999999999999999", false},
	} {
		if got := IsCycleWrite(ing(tc.old), ing(tc.cur)); got != tc.want {
			t.Errorf("IsCycleWrite(%q → %q) = %v, want %v", tc.old, tc.cur, got, tc.want)
		}
	}
	if cycleMark(7, false) != "7" || cycleMark(7, true) != "7-rollback" {
		t.Errorf("cycleMark(7) = %q, %q", cycleMark(7, false), cycleMark(7, true))
	}
}
