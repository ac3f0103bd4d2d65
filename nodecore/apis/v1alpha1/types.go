// Package v1alpha1 holds the gateway's own Kubernetes resources, group
// nodes.sandgate.io, version v1alpha1: Core's durable node state when
// several gateway replicas share it through the Portal cluster's
// kube-apiserver (package nodecore/kubestore; docs/scale-out.md "Node
// state"). All four are namespaced and live in the gateway's namespace,
// beside the node presence Leases:
//
//   - NodePool, named after the pool: its deployment generations, each
//     bound once and for all to a specification digest, and the pool's
//     target and serving generations (package nodecore/pool);
//   - NodeEnrolmentToken, named after the lowercase hex SHA-256 of a
//     one-time enrolment token (the token itself is never stored): its
//     pool, expiry and use (package nodecore/enrolment);
//   - EnrolledNode, named after the node ID: an enrolled node's identity
//     with only the SHA-256 of its node credential (package
//     nodecore/credential);
//   - NodePlacements, named after the node ID: the allocations Core placed
//     on the node's deployment generations (package nodecore/placement).
//
// The CRD manifests live in deploy/portal/crds/ (embedded by package
// deploy: deploy.NodeCRDs); each carries CEL rules that keep kubectl
// edits within the rules the gateway keeps (a binding never changes, a
// token's hash and pool never change, an enrolled node's identity never
// changes).
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of the gateway's node resources.
const Group = "nodes.sandgate.io"

// Version is their API version.
const Version = "v1alpha1"

// GroupVersion is Group/Version.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Labels on the objects the gateway writes.
const (
	// LabelManagedBy is app.kubernetes.io/managed-by; its value is
	// ManagedByValue (the same as on the presence Leases).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is LabelManagedBy's value.
	ManagedByValue = "sandgate-gateway"
	// LabelPool is the pool of a NodeEnrolmentToken or an EnrolledNode
	// (kubectl get enrollednodes -l nodes.sandgate.io/pool=gpu).
	LabelPool = "nodes.sandgate.io/pool"
)

// NodePool is one node pool's deployment state. Written by the gateway:
// its config creates and updates it (Caddyfile pool blocks), its admin API
// changes the deployment at run time (PUT /sandgate/pools/<name>/deployment).
type NodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the pool's bound generations and deployment.
	Spec NodePoolSpec `json:"spec"`
	// Status is the gateway's bookkeeping of the configuration.
	Status NodePoolStatus `json:"status,omitempty"`
}

// NodePoolSpec is a pool's generations and deployment.
type NodePoolSpec struct {
	// Target is the target deployment generation, which must be bound in
	// Generations; 0 (absent): the pool has no deployment.
	Target int64 `json:"target,omitempty"`
	// Serving is the serving generation; 0 (absent) is null.
	Serving int64 `json:"serving,omitempty"`
	// Generations binds deployment generations, by their decimal number,
	// to a specification digest (and, for a release of the release store,
	// the release's source name). A binding is never changed or removed
	// (the CRD's CEL rules refuse it).
	Generations map[string]GenerationBinding `json:"generations,omitempty"`
}

// GenerationBinding is one generation's binding.
type GenerationBinding struct {
	// SpecificationDigest is the lowercase hex SHA-256 specification
	// digest.
	SpecificationDigest string `json:"specificationDigest"`
	// Release is the release's source name; empty when the generation was
	// bound by digest only.
	Release string `json:"release,omitempty"`
}

// NodePoolStatus is the gateway's bookkeeping.
type NodePoolStatus struct {
	// Configured is the target and serving of the last gateway config
	// that applied its own (nodecore/pool's rule "the latest change wins": a
	// config with the same values keeps a run-time change). Absent: no
	// config has applied one.
	Configured *ConfiguredDeployment `json:"configured,omitempty"`
}

// ConfiguredDeployment is a config's target and serving (0: none).
type ConfiguredDeployment struct {
	// Target is the config's target generation, 0 for none.
	Target int64 `json:"target"`
	// Serving is the config's serving generation, 0 for null.
	Serving int64 `json:"serving"`
}

// NodePoolList is a list of NodePools.
type NodePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []NodePool `json:"items"`
}

// NodeEnrolmentToken is one one-time enrolment token, named after the
// lowercase hex SHA-256 of the token (64 characters). The token is shown
// once when issued (POST /sandgate/enrolment-tokens) and never stored.
type NodeEnrolmentToken struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is what the token enrols into, and until when.
	Spec NodeEnrolmentTokenSpec `json:"spec"`
	// Status records the token's single use.
	Status NodeEnrolmentTokenStatus `json:"status,omitempty"`
}

// NodeEnrolmentTokenSpec is a token's pool and expiry (immutable).
type NodeEnrolmentTokenSpec struct {
	// Pool is the pool a node enrolled with the token joins.
	Pool string `json:"pool"`
	// ExpiresAt is when the token stops being accepted (whole seconds).
	ExpiresAt metav1.Time `json:"expiresAt"`
}

// NodeEnrolmentTokenStatus is a token's use. The single use is an update
// of the object conditional on the resourceVersion read (exactly one of
// two replicas racing with the same token wins).
type NodeEnrolmentTokenStatus struct {
	// UsedAt is when the token was used; absent while unused.
	UsedAt *metav1.Time `json:"usedAt,omitempty"`
	// NodeID is the node enrolled with it.
	NodeID string `json:"nodeID,omitempty"`
}

// NodeEnrolmentTokenList is a list of NodeEnrolmentTokens.
type NodeEnrolmentTokenList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []NodeEnrolmentToken `json:"items"`
}

// EnrolledNode is one node enrolled through the machine API, named after
// its node ID.
type EnrolledNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the node's enrolled identity.
	Spec EnrolledNodeSpec `json:"spec"`
}

// EnrolledNodeSpec is an enrolled node's identity (everything but Enabled
// is immutable).
type EnrolledNodeSpec struct {
	// Enabled: a disabled node is refused at connect and closed at its
	// next heartbeat (close code 4003).
	Enabled bool `json:"enabled"`
	// Pool is the node's pool.
	Pool string `json:"pool"`
	// CredentialSHA256 is the lowercase hex SHA-256 of the node
	// credential (the credential itself is never stored).
	CredentialSHA256 string `json:"credentialSHA256"`
	// InstallationID, Provider and BackendFingerprint are what the node's
	// hello must state.
	InstallationID     string `json:"installationID"`
	Provider           string `json:"provider"`
	BackendFingerprint string `json:"backendFingerprint"`
	// DeploymentGeneration and SpecificationDigest are the generation the
	// node enrolled with.
	DeploymentGeneration int64  `json:"deploymentGeneration"`
	SpecificationDigest  string `json:"specificationDigest"`
	// GenerationManagement is hello's generation_management.
	GenerationManagement bool `json:"generationManagement"`
	// MaxActive and MaxRetained are what the node stated at enrolment.
	MaxActive   int `json:"maxActive"`
	MaxRetained int `json:"maxRetained"`
	// EnrolledAt is when the node enrolled (whole seconds).
	EnrolledAt metav1.Time `json:"enrolledAt"`
}

// EnrolledNodeList is a list of EnrolledNodes.
type EnrolledNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []EnrolledNode `json:"items"`
}

// NodePlacements is the placements of one node, named after the node ID:
// every allocation Core placed on one of the node's deployment
// generations, recorded before the first request naming it was sent, kept
// until a successful kill or an operator's release. Deleted when empty.
type NodePlacements struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec holds the placements.
	Spec NodePlacementsSpec `json:"spec"`
}

// NodePlacementsSpec holds one node's placements.
type NodePlacementsSpec struct {
	// Placements are the node's placements, at most MaxPlacements.
	Placements []PlacedAllocation `json:"placements,omitempty"`
}

// MaxPlacements bounds the placements of one node (one object must stay
// well under etcd's request size limit).
const MaxPlacements = 2048

// PlacedAllocation is one allocation placed on one generation.
type PlacedAllocation struct {
	// Generation is the deployment generation, > 0.
	Generation int64 `json:"generation"`
	// TenantID, EnvironmentID and AllocationID are the allocation's
	// reference.
	TenantID      string `json:"tenantID"`
	EnvironmentID string `json:"environmentID"`
	AllocationID  string `json:"allocationID"`
}

// NodePlacementsList is a list of NodePlacements.
type NodePlacementsList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []NodePlacements `json:"items"`
}

// AddToScheme registers the types of this package in a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&NodePool{}, &NodePoolList{},
		&NodeEnrolmentToken{}, &NodeEnrolmentTokenList{},
		&EnrolledNode{}, &EnrolledNodeList{},
		&NodePlacements{}, &NodePlacementsList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
