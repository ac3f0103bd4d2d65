package nsrights

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/gateway/credential"
)

func testCluster() *cluster.Cluster {
	c := &cluster.Cluster{ID: "a"}
	c.Ingress.Namespace = "ingress"
	return c
}

func TestNeededAndBindings(t *testing.T) {
	creds := map[string]credential.Credential{
		"1": {ID: "1", ClusterID: "a", ProjectNamespace: "proj-b"},
		"2": {ID: "2", ClusterID: "a", ProjectNamespace: "proj-a"},
		"3": {ID: "3", ClusterID: "a", ProjectNamespace: "proj-b", Enabled: true},
		"4": {ID: "4", ClusterID: "other", ProjectNamespace: "proj-c"},
	}
	got := Needed(testCluster(), creds)
	want := []Grant{{"ingress", IngressRole}, {"proj-a", ProjectRole}, {"proj-b", ProjectRole}}
	if !slices.Equal(got, want) {
		t.Fatalf("Needed = %v, want %v", got, want)
	}
	bs := Bindings(got, ServiceAccount{Namespace: "sys", Name: "corectl"})
	if len(bs) != 3 {
		t.Fatalf("%d bindings", len(bs))
	}
	b := bs[2]
	if b.Namespace != "proj-b" || b.Name != ProjectRole || b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != ProjectRole ||
		len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Namespace != "sys" || b.Subjects[0].Name != "corectl" {
		t.Fatalf("binding %+v", b)
	}
	if bs[0].RoleRef.Name != IngressRole || bs[0].Namespace != "ingress" {
		t.Fatalf("ingress binding %+v", bs[0])
	}
}

// reviewer answers from allowed (namespace/resource) or fails with err.
type reviewer struct {
	allowed map[string]bool
	err     error
}

func (r *reviewer) Create(_ context.Context, s *authorizationv1.SelfSubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SelfSubjectAccessReview, error) {
	if r.err != nil {
		return nil, r.err
	}
	ra := s.Spec.ResourceAttributes
	if ra.Verb != "create" || ra.Group != "networking.k8s.io" {
		return nil, errors.New("unexpected review")
	}
	out := s.DeepCopy()
	out.Status.Allowed = r.allowed[ra.Namespace+"/"+ra.Resource]
	return out, nil
}

func TestCheckerReportsMissingAndRecovery(t *testing.T) {
	creds := map[string]credential.Credential{"1": {ID: "1", ClusterID: "a", ProjectNamespace: "proj"}}
	r := &reviewer{allowed: map[string]bool{"ingress/ingresses": true}}
	var last map[[2]string]bool
	c := &Checker{Cluster: testCluster(), Credentials: func() map[string]credential.Credential { return creds }, Reviewer: r,
		Log: logr.Discard(), Report: func(h map[[2]string]bool) { last = h }}
	if m := c.Check(context.Background()); !slices.Equal(m, []Grant{{"proj", ProjectRole}}) {
		t.Fatalf("missing %v", m)
	}
	if !last[[2]string{"ingress", IngressRole}] || last[[2]string{"proj", ProjectRole}] || len(last) != 2 {
		t.Fatalf("report %v", last)
	}
	r.allowed["proj/networkpolicies"] = true
	if m := c.Check(context.Background()); m != nil || !last[[2]string{"proj", ProjectRole}] {
		t.Fatalf("after the binding: missing %v, report %v", m, last)
	}
	// A review that cannot be asked keeps the last report.
	r.err = errors.New("apiserver down")
	if m := c.Check(context.Background()); m != nil || len(last) != 2 {
		t.Fatalf("unavailable: %v %v", m, last)
	}
}
