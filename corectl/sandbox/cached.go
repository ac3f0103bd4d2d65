package sandbox

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"
)

// Cached is a BatchSandbox as corectl's informer cache and its orphan scan
// hold it: the object's metadata and, of the rest, only the fields
// corectl's readers of those copies interpret (the template's labels for
// From, each container's name and resource limits for the sizes the list
// reports, status.ready for PodServing). Decoding a BatchSandbox into it
// drops every other field (pod template, volumes, probes, OpenSandbox's
// other status fields) as the JSON is read, so the cache never holds
// them; at 10,000 sandboxes that is about a third of the memory of the
// same facts as unstructured maps (docs/benchmarks.md "The heap by
// kind"). AddToScheme registers it for the BatchSandbox kind.
//
// A Cached object is for reading only: written back, it would replace the
// object's spec with this subset. Every write of corectl goes through its
// uncached client on an *unstructured.Unstructured it read there.
type Cached struct {
	metav1.TypeMeta `json:",inline"`
	// ObjectMeta is the object's metadata (managed fields dropped by
	// TrimCached).
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the part of spec that is read.
	Spec CachedSpec `json:"spec,omitempty"`
	// Status is the part of status that is read.
	Status CachedStatus `json:"status,omitempty"`
}

// CachedSpec is the part of a BatchSandbox's spec that Cached keeps.
type CachedSpec struct {
	// Template is spec.template.
	Template CachedTemplate `json:"template,omitempty"`
}

// CachedTemplate is the part of spec.template that Cached keeps.
type CachedTemplate struct {
	// Metadata is spec.template.metadata (its labels).
	Metadata CachedTemplateMeta `json:"metadata,omitempty"`
	// Spec is spec.template.spec (its containers).
	Spec CachedPodSpec `json:"spec,omitempty"`
}

// CachedTemplateMeta is spec.template.metadata's labels, which hold the
// allocation label (From).
type CachedTemplateMeta struct {
	// Labels is spec.template.metadata.labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Malformed is set when the apiserver's metadata did not decode
	// (labels that are not strings: the BatchSandbox's schema need not
	// say); TemplateLabels then fails, as it does for the whole object.
	Malformed bool `json:"-"`
}

// UnmarshalJSON decodes data, or records it as Malformed: one malformed
// BatchSandbox must not fail the decoding of the cache's whole list.
func (m *CachedTemplateMeta) UnmarshalJSON(data []byte) error {
	type plain CachedTemplateMeta
	var p plain
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &p); err != nil {
		*m = CachedTemplateMeta{Malformed: true}
		return nil
	}
	*m = CachedTemplateMeta(p)
	return nil
}

// CachedPodSpec is spec.template.spec's containers.
type CachedPodSpec struct {
	// Containers are the pod's containers, name and limits only.
	Containers []CachedContainer `json:"containers,omitempty"`
	// Malformed is set when the containers did not decode (a name that is
	// not a string, a limit that is not a quantity); PodSpecOf then has
	// no spec, as for the whole object.
	Malformed bool `json:"-"`
}

// UnmarshalJSON decodes data, or records it as Malformed (as
// CachedTemplateMeta's).
func (p *CachedPodSpec) UnmarshalJSON(data []byte) error {
	type plain CachedPodSpec
	var v plain
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &v); err != nil {
		*p = CachedPodSpec{Malformed: true}
		return nil
	}
	*p = CachedPodSpec(v)
	return nil
}

// CachedContainer is one container's name and resources.limits.
type CachedContainer struct {
	// Name is the container's name.
	Name string `json:"name"`
	// Resources is the container's resources (its limits).
	Resources CachedResources `json:"resources,omitempty"`
}

// CachedResources is a container's resources.limits (cluster.SizesOf
// reads no requests).
type CachedResources struct {
	// Limits is resources.limits.
	Limits CachedLimits `json:"limits,omitempty"`
}

// CachedLimits are the limits cluster.SizesOf reads: cpu, memory and
// ephemeral-storage, each nil when the container has none. Three fields
// instead of a corev1.ResourceList map: about 200 bytes a container
// against about 600.
type CachedLimits struct {
	// CPU is limits["cpu"].
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory is limits["memory"].
	Memory *resource.Quantity `json:"memory,omitempty"`
	// EphemeralStorage is limits["ephemeral-storage"].
	EphemeralStorage *resource.Quantity `json:"ephemeral-storage,omitempty"`
}

// ResourceList returns the limits as a corev1.ResourceList (only those
// set; nil when none is).
func (l CachedLimits) ResourceList() corev1.ResourceList {
	var out corev1.ResourceList
	for _, e := range []struct {
		name corev1.ResourceName
		q    *resource.Quantity
	}{{corev1.ResourceCPU, l.CPU}, {corev1.ResourceMemory, l.Memory}, {corev1.ResourceEphemeralStorage, l.EphemeralStorage}} {
		if e.q != nil {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[e.name] = e.q.DeepCopy()
		}
	}
	return out
}

// deepCopy returns l with quantities of its own.
func (l CachedLimits) deepCopy() CachedLimits {
	cp := func(q *resource.Quantity) *resource.Quantity {
		if q == nil {
			return nil
		}
		c := q.DeepCopy()
		return &c
	}
	return CachedLimits{CPU: cp(l.CPU), Memory: cp(l.Memory), EphemeralStorage: cp(l.EphemeralStorage)}
}

// CachedStatus is the part of a BatchSandbox's status that Cached keeps.
type CachedStatus struct {
	// Ready is status.ready, the number of ready pods OpenSandbox's
	// controller reports (0 when absent or not an integer, as
	// unstructured.NestedInt64 reads it).
	Ready int64 `json:"ready,omitempty"`
}

// UnmarshalJSON decodes data; a status that does not decode is a zero
// one (as CachedTemplateMeta's).
func (st *CachedStatus) UnmarshalJSON(data []byte) error {
	type plain CachedStatus
	var v plain
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &v); err != nil {
		*st = CachedStatus{}
		return nil
	}
	*st = CachedStatus(v)
	return nil
}

// CachedList is a list of Cached, the BatchSandboxList kind as the cache
// and the orphan scan read it.
type CachedList struct {
	metav1.TypeMeta `json:",inline"`
	// ListMeta is the list's metadata (resourceVersion, continue).
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the BatchSandboxes. Pointers, so that a list from the
	// cache without deep copies (client.UnsafeDisableDeepCopy) hands out
	// the cache's objects without copying each.
	Items []*Cached `json:"items"`
}

// AddToScheme registers Cached and CachedList as the BatchSandbox and
// BatchSandboxList kinds (GVK's group and version), with the group's
// list and watch options, so that a client or cache built on the scheme
// decodes BatchSandboxes into them when asked with them. Readers that ask
// with *unstructured.Unstructured still get the whole object.
func AddToScheme(s *runtime.Scheme) error {
	gv := GVK.GroupVersion()
	s.AddKnownTypeWithName(GVK, &Cached{})
	s.AddKnownTypeWithName(gv.WithKind(GVK.Kind+"List"), &CachedList{})
	metav1.AddToGroupVersion(s, gv)
	return nil
}

// NewCached returns an empty Cached to read a BatchSandbox into.
func NewCached() *Cached { return &Cached{} }

// DeepCopyInto copies c into out, sharing nothing.
func (c *Cached) DeepCopyInto(out *Cached) {
	*out = *c
	out.TypeMeta = c.TypeMeta
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if c.Spec.Template.Metadata.Labels != nil {
		out.Spec.Template.Metadata.Labels = make(map[string]string, len(c.Spec.Template.Metadata.Labels))
		for k, v := range c.Spec.Template.Metadata.Labels {
			out.Spec.Template.Metadata.Labels[k] = v
		}
	}
	if c.Spec.Template.Spec.Containers != nil {
		out.Spec.Template.Spec.Containers = make([]CachedContainer, len(c.Spec.Template.Spec.Containers))
		for i, ct := range c.Spec.Template.Spec.Containers {
			out.Spec.Template.Spec.Containers[i] = CachedContainer{Name: ct.Name,
				Resources: CachedResources{Limits: ct.Resources.Limits.deepCopy()}}
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (c *Cached) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	out := new(Cached)
	c.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *CachedList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &CachedList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]*Cached, len(l.Items))
		for i, c := range l.Items {
			if c != nil {
				out.Items[i] = c.DeepCopyObject().(*Cached)
			}
		}
	}
	return out
}

// PodSpec is the template's pod spec as far as Cached holds it: the
// containers' names and limits.
func (c *Cached) PodSpec() *corev1.PodSpec {
	spec := &corev1.PodSpec{Containers: make([]corev1.Container, len(c.Spec.Template.Spec.Containers))}
	for i, ct := range c.Spec.Template.Spec.Containers {
		spec.Containers[i] = corev1.Container{Name: ct.Name, Resources: corev1.ResourceRequirements{Limits: ct.Resources.Limits.ResourceList()}}
	}
	return spec
}

// Ready is status.ready of a BatchSandbox read as *unstructured.Unstructured
// or *Cached (0 when absent, not an integer, or another type).
func Ready(obj client.Object) int64 {
	switch o := obj.(type) {
	case *Cached:
		return o.Status.Ready
	case *unstructured.Unstructured:
		r, _, _ := unstructured.NestedInt64(o.Object, "status", "ready")
		return r
	}
	return 0
}

// PodSpecOf is the template's pod spec of a BatchSandbox read as
// *unstructured.Unstructured (the whole spec) or *Cached (Cached.PodSpec);
// false when it has none or it does not parse.
func PodSpecOf(obj client.Object) (*corev1.PodSpec, bool) {
	switch o := obj.(type) {
	case *Cached:
		if o.Spec.Template.Spec.Malformed {
			return nil, false
		}
		return o.PodSpec(), true
	case *unstructured.Unstructured:
		m, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		if !ok {
			return nil, false
		}
		var spec corev1.PodSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
			return nil, false
		}
		return &spec, true
	}
	return nil, false
}

// TemplateLabels is spec.template.metadata.labels of a BatchSandbox read
// as *unstructured.Unstructured or *Cached (nil when absent; the map may
// be the object's own: read only); the error names labels that are not
// strings, or an object of another type.
func TemplateLabels(obj client.Object) (map[string]string, error) {
	switch o := obj.(type) {
	case *Cached:
		if o.Spec.Template.Metadata.Malformed {
			return nil, errors.New("the labels are not a map of strings")
		}
		return o.Spec.Template.Metadata.Labels, nil
	case *unstructured.Unstructured:
		labels, _, err := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		return labels, err
	}
	return nil, fmt.Errorf("a %T is not a BatchSandbox", obj)
}
