package sandbox

import (
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/intern"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The informer cache of BatchSandboxes (corectl/daemon builds it, one per
// cluster) holds what corectl's cached readers use: the authorizer, the
// Locate question, the list routes and the expiry reconciler. With 10,000
// sandboxes an object's pod template (image, env, volumes, probes) and its
// managed fields are most of the cache's memory and of every read's copy,
// so TrimCached keeps only what those readers look at.

// IndexCredential is the field index of the BatchSandbox cache by
// namespace and creating credential (CredentialIndexKey), which the list
// routes read for a credential that is not project-wide.
const IndexCredential = "sandgate.credential"

// CredentialIndexKey is the IndexCredential value of the BatchSandboxes of
// namespace ns labelled with credential label value label
// (CredentialLabelValue): "<ns>/<label>".
func CredentialIndexKey(ns, label string) string { return ns + "/" + label }

// CredentialIndex is IndexCredential's index function: the object's
// CredentialIndexKey, or none when it has no v1alpha1.LabelCredential.
func CredentialIndex(o client.Object) []string {
	l := o.GetLabels()[v1alpha1.LabelCredential]
	if l == "" {
		return nil
	}
	return []string{CredentialIndexKey(o.GetNamespace(), l)}
}

// TrimCached is the cache transform of BatchSandboxes: it drops the
// managed fields and, of spec, keeps replicas, the pod template's metadata
// and each container's name and resource limits (what Orchestrator.SizesOf
// and From read; cluster.SizesOf reads the limits only), and of status only ready (what lifecycle.PodServing reads;
// OpenSandbox's controller records more there); metadata and annotations
// stay whole. Its map keys and label values are shared with the other
// cached objects (package intern). Anything other
// than an *unstructured.Unstructured is returned as it is. A trimmed object
// is for reading only: it must never be written back (every write of
// corectl goes through its uncached client on an object it read there).
func TrimCached(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	if st, ok := u.Object["status"].(map[string]any); ok {
		kept := map[string]any{}
		if r, ok := st["ready"]; ok {
			kept["ready"] = r
		}
		u.Object["status"] = kept
	}
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return u, nil
	}
	kept := map[string]any{}
	if r, ok := spec["replicas"]; ok {
		kept["replicas"] = r
	}
	if tpl, ok := spec["template"].(map[string]any); ok {
		t := map[string]any{}
		if md, ok := tpl["metadata"]; ok {
			t["metadata"] = md
		}
		if ps, ok := tpl["spec"].(map[string]any); ok {
			if cs, ok := ps["containers"].([]any); ok {
				out := make([]any, 0, len(cs))
				for _, c := range cs {
					cm, ok := c.(map[string]any)
					if !ok {
						continue
					}
					keep := map[string]any{"name": cm["name"]}
					if r, ok := cm["resources"].(map[string]any); ok {
						if l, ok := r["limits"]; ok {
							keep["resources"] = map[string]any{"limits": l}
						}
					}
					out = append(out, keep)
				}
				t["spec"] = map[string]any{"containers": out}
			}
		}
		kept["template"] = t
	}
	u.Object["spec"] = kept
	u.Object = intern.Unstructured(u.Object)
	return u, nil
}
