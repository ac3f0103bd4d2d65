package ingressallow

import (
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/intern"
	networkingv1 "k8s.io/api/networking/v1"
)

// TrimCached is the informer-cache transform of SandboxIngressAllowlists
// (corectl/daemon builds the cache, one per cluster). The cache's only
// readers are controller.IngressReconciler's event filters (the spec's
// cluster ID, the generation) and its settled test (Settled: the
// generation, the status's observed generation, verification state, last
// error code and LKG); every cycle reads the allowlist from the apiserver.
// So the cached allowlist keeps its metadata without managed fields, of
// its spec the cluster ID, and of its status those four fields: the
// desired rules, the applied set, the error message, the carrier
// reference and the conditions are dropped (no cached reader looks at
// them). Label and annotation keys and label values are shared with the
// other cached objects (package intern). A trimmed allowlist is for
// reading only: it must never be written back. Anything other than a
// *v1alpha1.SandboxIngressAllowlist is returned as it is.
func TrimCached(obj any) (any, error) {
	al, ok := obj.(*v1alpha1.SandboxIngressAllowlist)
	if !ok {
		return obj, nil
	}
	al.ManagedFields = nil
	al.Spec = v1alpha1.SandboxIngressAllowlistSpec{ClusterID: al.Spec.ClusterID}
	al.Status = v1alpha1.SandboxIngressAllowlistStatus{
		ObservedGeneration: al.Status.ObservedGeneration,
		VerificationState:  al.Status.VerificationState,
		LastErrorCode:      al.Status.LastErrorCode,
		LastVerified:       al.Status.LastVerified,
	}
	intern.Meta(al)
	return al, nil
}

// TrimCachedCarrier is the informer-cache transform of the managed
// Ingresses: their metadata without managed fields and their spec, which
// the settled test reads whole (CheckCarrier), without their status (the
// ingress controller's load-balancer addresses, which nothing of corectl
// reads); its label and annotation keys and label values shared (package
// intern). For reading only, like TrimCached. Anything other than a
// *networkingv1.Ingress is returned as it is.
func TrimCachedCarrier(obj any) (any, error) {
	ing, ok := obj.(*networkingv1.Ingress)
	if !ok {
		return obj, nil
	}
	ing.ManagedFields = nil
	ing.Status = networkingv1.IngressStatus{}
	intern.Meta(ing)
	return ing, nil
}
