package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/sandgate/sandgate/corectl/sandbox"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EndpointsAnnotation is the BatchSandbox annotation OpenSandbox's
// controller writes the pod IPs to, a JSON array such as ["10.0.0.5"]
// (docs/wire-facts.md §X2.4).
const EndpointsAnnotation = "sandbox.opensandbox.io/endpoints"

// MarkReady does what OpenSandbox's controller does when a BatchSandbox's
// pod runs: status.ready = ready (status subresource; replicas 1) and the
// endpoints annotation [endpoint]. A BatchSandbox that is already gone is
// not an error.
func (e *Env) MarkReady(ctx context.Context, namespace, id string, ready int, endpoint string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	u.SetNamespace(namespace)
	u.SetName(id)
	eps, _ := json.Marshal([]string{endpoint})
	ann := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, EndpointsAnnotation, eps)
	if err := e.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(ann))); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotate BatchSandbox %s/%s: %w", namespace, id, err)
	}
	st := fmt.Sprintf(`{"status":{"ready":%d,"replicas":1}}`, ready)
	if err := e.Client.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(st))); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set status of BatchSandbox %s/%s: %w", namespace, id, err)
	}
	return nil
}

// RunSandboxController plays OpenSandbox's controller for the
// BatchSandboxes of namespaces: every BatchSandbox added is marked ready
// with endpoint (MarkReady). The watches are established when it returns;
// they stop when ctx ends, and the returned function waits for that.
// Errors while marking go to report (it may be called concurrently).
func (e *Env) RunSandboxController(ctx context.Context, endpoint string, report func(error), namespaces ...string) (wait func(), err error) {
	wc, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	for _, ns := range namespaces {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
		wi, err := wc.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			return nil, fmt.Errorf("watch BatchSandboxes in %s: %w", ns, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wi.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-wi.ResultChan():
					if !ok {
						return
					}
					u, isU := ev.Object.(*unstructured.Unstructured)
					if ev.Type != watch.Added || !isU {
						continue
					}
					if err := e.MarkReady(ctx, u.GetNamespace(), u.GetName(), 1, endpoint); err != nil && ctx.Err() == nil {
						report(err)
					}
				}
			}
		}()
	}
	return wg.Wait, nil
}

// ResolvedSandbox is what OpenSandbox's ingress knows about a sandbox.
type ResolvedSandbox struct {
	// Namespace is the BatchSandbox's namespace.
	Namespace string
	// Ready is status.ready >= 1.
	Ready bool
	// Endpoint is element [0] of the endpoints annotation ("" if none).
	Endpoint string
}

// Resolve finds the BatchSandbox named id in any namespace the way
// OpenSandbox's ingress does (docs/wire-facts.md §X2.4); false when there is
// none or the apiserver cannot answer. The apiserver filters by name
// (field selector metadata.name), so a resolve costs the same however
// many BatchSandboxes earlier tests left.
func (e *Env) Resolve(ctx context.Context, id string) (ResolvedSandbox, bool) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
	if err := e.Client.List(ctx, list, client.MatchingFields{"metadata.name": id}); err != nil {
		return ResolvedSandbox{}, false
	}
	for _, u := range list.Items {
		if u.GetName() != id {
			continue
		}
		ready, _, _ := unstructured.NestedInt64(u.Object, "status", "ready")
		var eps []string
		_ = json.Unmarshal([]byte(u.GetAnnotations()[EndpointsAnnotation]), &eps)
		r := ResolvedSandbox{Namespace: u.GetNamespace(), Ready: ready >= 1}
		if len(eps) > 0 {
			r.Endpoint = eps[0]
		}
		return r, true
	}
	return ResolvedSandbox{}, false
}
