package kubetest

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/corectl/sandbox"
)

// SameViewFromRead returns get's view of sandbox ns/name (a network
// engine's Get: egress.Engine, ingressallow.Engine) after checking that
// getOf (the engine's GetOf) gives a deeply equal view from the sandbox's
// BatchSandbox read with c, as the control API's ownership check hands
// its read to the GET views. It fails t on either error or a difference.
func SameViewFromRead[V any](t testing.TB, ctx context.Context, c client.Client, ns, name string,
	get func(context.Context, string, string) (V, error), getOf func(context.Context, client.Object) (V, error)) V {
	t.Helper()
	view, err := get(ctx, ns, name)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	of, err := getOf(ctx, u)
	if err != nil {
		t.Fatalf("GetOf: %v", err)
	}
	if !reflect.DeepEqual(of, view) {
		t.Fatalf("GetOf = %+v, Get = %+v", of, view)
	}
	return view
}
