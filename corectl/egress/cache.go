package egress

import (
	"github.com/sandgate/sandgate/corectl/intern"
	networkingv1 "k8s.io/api/networking/v1"
)

// TrimCached is the informer-cache transform of the platform
// NetworkPolicies (corectl/daemon builds the cache, one per cluster). The
// cache's only reader is controller.EgressRecovery, which looks at the
// identity labels and the verification-state and verifying-since
// annotations (VerifyingSince); the engine itself reads every policy from
// the apiserver. So the cached policy keeps its metadata without managed
// fields and without AnnotationLastVerifiedSpec (the LKG: a JSON copy of
// a spec), and its spec is dropped (no cached reader looks at them). Label and annotation keys and
// label values are shared with the other cached objects (package intern). A trimmed policy is for reading
// only: it must never be written back. Anything other than a
// *networkingv1.NetworkPolicy is returned as it is.
func TrimCached(obj any) (any, error) {
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return obj, nil
	}
	np.ManagedFields = nil
	if _, ok := np.Annotations[AnnotationLastVerifiedSpec]; ok {
		ann := make(map[string]string, len(np.Annotations)-1)
		for k, v := range np.Annotations {
			if k != AnnotationLastVerifiedSpec {
				ann[k] = v
			}
		}
		np.Annotations = ann
	}
	np.Spec = networkingv1.NetworkPolicySpec{}
	intern.Meta(np)
	return np, nil
}
