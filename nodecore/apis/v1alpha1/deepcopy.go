package v1alpha1

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// DeepCopyInto copies in into out.
func (in *NodePool) DeepCopyInto(out *NodePool) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Generations = maps.Clone(in.Spec.Generations)
	if in.Status.Configured != nil {
		c := *in.Status.Configured
		out.Status.Configured = &c
	}
}

// DeepCopy returns a deep copy of in.
func (in *NodePool) DeepCopy() *NodePool {
	if in == nil {
		return nil
	}
	out := new(NodePool)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *NodePool) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *NodePoolList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := &NodePoolList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]NodePool, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// DeepCopyInto copies in into out.
func (in *NodeEnrolmentToken) DeepCopyInto(out *NodeEnrolmentToken) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.ExpiresAt.DeepCopyInto(&out.Spec.ExpiresAt)
	if in.Status.UsedAt != nil {
		out.Status.UsedAt = in.Status.UsedAt.DeepCopy()
	}
}

// DeepCopy returns a deep copy of in.
func (in *NodeEnrolmentToken) DeepCopy() *NodeEnrolmentToken {
	if in == nil {
		return nil
	}
	out := new(NodeEnrolmentToken)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *NodeEnrolmentToken) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *NodeEnrolmentTokenList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := &NodeEnrolmentTokenList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]NodeEnrolmentToken, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// DeepCopyInto copies in into out.
func (in *EnrolledNode) DeepCopyInto(out *EnrolledNode) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.EnrolledAt.DeepCopyInto(&out.Spec.EnrolledAt)
}

// DeepCopy returns a deep copy of in.
func (in *EnrolledNode) DeepCopy() *EnrolledNode {
	if in == nil {
		return nil
	}
	out := new(EnrolledNode)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *EnrolledNode) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *EnrolledNodeList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := &EnrolledNodeList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]EnrolledNode, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// DeepCopyInto copies in into out.
func (in *NodePlacements) DeepCopyInto(out *NodePlacements) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Placements = slices.Clone(in.Spec.Placements)
}

// DeepCopy returns a deep copy of in.
func (in *NodePlacements) DeepCopy() *NodePlacements {
	if in == nil {
		return nil
	}
	out := new(NodePlacements)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *NodePlacements) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *NodePlacementsList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := &NodePlacementsList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]NodePlacements, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
