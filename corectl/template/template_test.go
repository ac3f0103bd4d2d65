package template

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) { kubetest.Main(m, &env) }

func TestStorePutGetVersions(t *testing.T) {
	ctx := context.Background()
	s := &Store{Client: env.Client, Namespace: env.Namespace(t)}
	if _, err := s.Get(ctx, "e2b-test"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before Put: %v", err)
	}
	for _, id := range []string{"", "Upper", "a/b", "-x"} {
		if _, err := s.Put(ctx, id, Network{}); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Put(%q) = %v, want ErrInvalidID", id, err)
		}
	}
	n := Network{Ingress: []v1alpha1.IngressRule{{CIDR: "203.0.113.0/24", Description: "office"}}, Egress: []v1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}}}
	v1, err := s.Put(ctx, "e2b-test", n)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "e2b-test")
	if err != nil || got.Version != v1.Version || got.TemplateID != "e2b-test" || !slices.Equal(got.Ingress, n.Ingress) || !slices.Equal(got.Egress, n.Egress) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	empty := Network{Ingress: []v1alpha1.IngressRule{}, Egress: []v1alpha1.EgressRule{}}
	v2, err := s.Put(ctx, "e2b-test", empty)
	if err != nil || v2.Version <= v1.Version || len(v2.Ingress) != 0 || len(v2.Egress) != 0 || v2.Ingress == nil {
		t.Fatalf("second Put = %+v, %v; want a newer version with empty lists", v2, err)
	}
}
