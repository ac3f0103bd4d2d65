package template

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) { kubetest.Main(m, &env) }

func TestDecodeRequest(t *testing.T) {
	n, err := DecodeRequest([]byte(`{"ingress":[{"cidr":"203.0.113.9/24","description":"office"}],"egress":[{"cidr":"10.1.1.1/8"},{"cidr":"1.1.1.1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(n.Ingress, []v1alpha1.IngressRule{{CIDR: "203.0.113.0/24", Description: "office"}}) ||
		!slices.Equal(n.EgressCIDRs(), []string{"1.1.1.1/32", "10.0.0.0/8"}) {
		t.Fatalf("DecodeRequest = %+v", n)
	}
	n, err = DecodeRequest([]byte(`{}`))
	if err != nil || n.Ingress == nil || n.Egress == nil || len(n.Ingress)+len(n.Egress) != 0 {
		t.Fatalf("empty object = %+v, %v; want two empty lists", n, err)
	}
	for _, body := range []string{``, `[]`, `{"ingress":null}`, `{"egress":[{"cidr":"1.1.1.1","port":1}]}`, `{"other":1}`,
		`{"egress":[{"cidr":"1.2.3.4/24/24"}]}`, `{"ingress":[{"cidr":"x"}]}`, `{"egress":[],"egress":[]}`} {
		if _, err := DecodeRequest([]byte(body)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("DecodeRequest(%s) = %v, want ErrBadRequest", body, err)
		}
	}
	if _, err := DecodeRequest([]byte(`{"egress":[{"cidr":"1.1.1.1"},{"cidr":"1.1.1.1 2.2.2.2"}]}`)); !errors.Is(err, cidr.ErrInvalid) {
		t.Fatalf("invalid egress CIDR: %v", err)
	}
}

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
	n, _ := DecodeRequest([]byte(`{"ingress":[{"cidr":"203.0.113.0/24","description":"office"}],"egress":[{"cidr":"10.0.0.0/8"}]}`))
	v1, err := s.Put(ctx, "e2b-test", n)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "e2b-test")
	if err != nil || got.Version != v1.Version || got.TemplateID != "e2b-test" || !slices.Equal(got.Ingress, n.Ingress) || !slices.Equal(got.Egress, n.Egress) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	empty, _ := DecodeRequest([]byte(`{}`))
	v2, err := s.Put(ctx, "e2b-test", empty)
	if err != nil || v2.Version <= v1.Version || len(v2.Ingress) != 0 || len(v2.Egress) != 0 || v2.Ingress == nil {
		t.Fatalf("second Put = %+v, %v; want a newer version with empty lists", v2, err)
	}
}
