package kubetest

import (
	"context"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// Fault names one apiserver call to fail: the N-th (1-based) call of Verb
// ("get", "list", "create", "update", "delete", or "status" for a status
// subresource update) on objects of Kind, as FaultyClient's kindOf names
// them. With Mutate, a "get" is not failed: the object read back is
// altered by FaultyClient's mutate instead.
type Fault struct {
	// Verb is the call: get, list, create, update, delete or status.
	Verb string
	// Kind is the object's kind as FaultyClient's kindOf names it.
	Kind string
	// N is which call of Verb on Kind fails, from 1.
	N int
	// Mutate alters the object a get reads back instead of failing it.
	Mutate bool
}

// FaultyClient returns a client on e's apiserver that answers the calls
// named by faults with 503 ServiceUnavailable ("injected fault") and
// passes every other call through. kindOf names the kind of an object or
// list ("" means its calls are never counted or faulted); mutate alters an
// object read back by a Get whose Fault has Mutate set. It panics if the
// client cannot be built (a test-setup mistake).
func (e *Env) FaultyClient(kindOf func(obj any) string, mutate func(client.Object), faults ...Fault) client.Client {
	wc, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	counts := map[string]int{}
	hit := func(verb string, obj any) (fail, alter bool) {
		kind := kindOf(obj)
		if kind == "" {
			return false, false
		}
		mu.Lock()
		defer mu.Unlock()
		counts[verb+"/"+kind]++
		for _, f := range faults {
			if f.Verb == verb && f.Kind == kind && f.N == counts[verb+"/"+kind] {
				return true, f.Mutate
			}
		}
		return false, false
	}
	injected := apierrors.NewServiceUnavailable("injected fault")
	return interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			fail, alter := hit("get", obj)
			if fail && !alter {
				return injected
			}
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if alter {
				mutate(obj)
			}
			return nil
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if fail, _ := hit("list", list); fail {
				return injected
			}
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if fail, _ := hit("create", obj); fail {
				return injected
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if fail, _ := hit("update", obj); fail {
				return injected
			}
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if fail, _ := hit("delete", obj); fail {
				return injected
			}
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if fail, _ := hit("status", obj); fail {
				return injected
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
}
