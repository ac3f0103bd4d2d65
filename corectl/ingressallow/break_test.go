package ingressallow

import (
	"slices"
	"testing"

	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/sandbox"
)

// TestBreakProbeSourceAnnotationCannotHideAWidening: the read-back trusts
// the carrier's own probe-source annotation (so a restart or another
// replica sees no false drift). A hand edit that adds 0.0.0.0/0 to both
// that annotation and the whitelist must not pass as "no drift", and GET
// must not show the user's narrow set for a carrier open to everyone.
// Discovery only ever records /32 hosts, so anything else is refused.
func TestBreakProbeSourceAnnotationCannotHideAWidening(t *testing.T) {
	c := kubetest.Cluster("c1", "ingress")
	sb := &sandbox.Sandbox{ID: "sbx", Namespace: "ns"}
	u := []string{"203.0.113.0/24"}
	for _, p := range [][]string{{"0.0.0.0/0"}, {"10.0.0.0/8"}, {"10.9.9.9/32", "192.0.2.0/31"}} {
		ing := CarrierWithProbe(c, sb, u, p)
		if code, _ := CheckCarrier(c, sb, ing, u); code == "" {
			t.Errorf("a carrier whose probe sources are %v (whitelist %q) passes the read-back", p, ing.Annotations[AnnotationWhitelist])
		}
		if got, err := Configured(ing, u); err == nil && slices.Equal(got, u) {
			t.Errorf("GET shows %v for a whitelist %q", got, ing.Annotations[AnnotationWhitelist])
		}
	}
	ing := CarrierWithProbe(c, sb, u, []string{"10.9.9.9/32", "10.9.9.10/32"})
	if code, reason := CheckCarrier(c, sb, ing, u); code != "" {
		t.Fatalf("a carrier with /32 probe sources: %s %s", code, reason)
	}
}
