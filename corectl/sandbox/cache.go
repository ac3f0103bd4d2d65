package sandbox

import (
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/intern"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The informer cache of BatchSandboxes (corectl/daemon builds it, one per
// cluster) holds what corectl's cached readers use: the authorizer, the
// Locate question, the list routes and the expiry reconciler. With 10,000
// sandboxes an object's pod template (image, env, volumes, probes) and its
// managed fields are most of the cache's memory and of every read's copy,
// so the cache decodes BatchSandboxes into Cached, which holds only what
// those readers look at, and TrimCached drops the managed fields.

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

// TrimCached is the cache transform of BatchSandboxes, which the cache
// decodes into *Cached (AddToScheme; the fields no cached reader
// interprets are already gone): it drops the managed fields and shares
// the label keys and values, the annotation keys, the owner references'
// API version and kind and the template's label keys and values with the
// other cached objects (package intern). Anything other than a *Cached is
// returned as it is. A cached object is for reading only: it must never
// be written back (every write of corectl goes through its uncached
// client on an object it read there).
func TrimCached(obj any) (any, error) {
	c, ok := obj.(*Cached)
	if !ok {
		return obj, nil
	}
	c.ManagedFields = nil
	intern.Meta(c)
	c.Spec.Template.Metadata.Labels = intern.StringMap(c.Spec.Template.Metadata.Labels, true)
	for i := range c.Spec.Template.Spec.Containers {
		ct := &c.Spec.Template.Spec.Containers[i]
		ct.Name = intern.String(ct.Name)
	}
	return c, nil
}
