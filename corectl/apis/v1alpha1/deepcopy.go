package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DeepCopyInto copies in into out.
func (in *SandboxIngressAllowlist) DeepCopyInto(out *SandboxIngressAllowlist) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Desired = cloneSlice(in.Spec.Desired)
	out.Status.Applied = cloneSlice(in.Status.Applied)
	out.Status.LastVerified = cloneSlice(in.Status.LastVerified)
	if in.Status.CarrierRef != nil {
		c := *in.Status.CarrierRef
		out.Status.CarrierRef = &c
	}
	if in.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(in.Status.Conditions))
		for i := range in.Status.Conditions {
			in.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
}

// DeepCopy returns a deep copy of in.
func (in *SandboxIngressAllowlist) DeepCopy() *SandboxIngressAllowlist {
	if in == nil {
		return nil
	}
	out := new(SandboxIngressAllowlist)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *SandboxIngressAllowlist) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *SandboxIngressAllowlistList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(SandboxIngressAllowlistList)
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]SandboxIngressAllowlist, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// DeepCopyInto copies in into out.
func (in *SandboxTemplateNetwork) DeepCopyInto(out *SandboxTemplateNetwork) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Ingress = cloneSlice(in.Spec.Ingress)
	out.Spec.Egress = cloneSlice(in.Spec.Egress)
}

// DeepCopy returns a deep copy of in.
func (in *SandboxTemplateNetwork) DeepCopy() *SandboxTemplateNetwork {
	if in == nil {
		return nil
	}
	out := new(SandboxTemplateNetwork)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *SandboxTemplateNetwork) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *SandboxTemplateNetworkList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(SandboxTemplateNetworkList)
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]SandboxTemplateNetwork, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// DeepCopyInto copies in into out.
func (in *CNIQualification) DeepCopyInto(out *CNIQualification) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Status.Observed != nil {
		o := *in.Status.Observed
		out.Status.Observed = &o
	}
	if in.Status.Record != nil {
		r := *in.Status.Record
		out.Status.Record = &r
	}
	if in.Status.CheckedAt != nil {
		out.Status.CheckedAt = in.Status.CheckedAt.DeepCopy()
	}
	if in.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(in.Status.Conditions))
		for i := range in.Status.Conditions {
			in.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
}

// DeepCopy returns a deep copy of in.
func (in *CNIQualification) DeepCopy() *CNIQualification {
	if in == nil {
		return nil
	}
	out := new(CNIQualification)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *CNIQualification) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *CNIQualificationList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(CNIQualificationList)
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]CNIQualification, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// cloneSlice copies a slice of plain values, keeping nil as nil.
func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}
