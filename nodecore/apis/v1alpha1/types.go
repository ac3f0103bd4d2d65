// +kubebuilder:object:generate=true
// +groupName=nodes.sandgate.io

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
// The DeepCopy functions (zz_generated.deepcopy.go) and the CRD manifests
// in deploy/portal/crds/ (embedded by package deploy: deploy.NodeCRDs) are
// generated from these types and their +kubebuilder markers by
// controller-gen (`make generate`, docs/deploy.md "Generated files"); edit
// the types and regenerate, never the generated files. Each CRD carries
// CEL rules (the XValidation markers) that keep kubectl edits within the
// rules the gateway keeps (a binding never changes, a token's hash and
// pool never change, an enrolled node's identity never changes).
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

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=nodepools,singular=nodepool,scope=Namespaced
// +kubebuilder:printcolumn:name=Target,type=integer,JSONPath=`.spec.target`
// +kubebuilder:printcolumn:name=Serving,type=integer,JSONPath=`.spec.serving`
// +kubebuilder:printcolumn:name=Age,type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$')",message="a pool name is 1..63 characters of [a-z0-9-], starting and ending with a letter or digit"

// NodePool is one node pool's deployment state. Written by the gateway:
// its config creates and updates it (Caddyfile pool blocks), its admin API
// changes the deployment at run time (PUT /sandgate/pools/<name>/deployment).
// Every replica follows it through a watch; `kubectl get nodepools` shows
// each pool's target and serving generation.
type NodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the pool's bound generations and deployment.
	Spec NodePoolSpec `json:"spec"`
	// Status is the gateway's bookkeeping of the configuration.
	Status NodePoolStatus `json:"status,omitempty"`
}

// NodePoolSpec is a pool's generations and deployment.
// +kubebuilder:validation:XValidation:rule="!has(self.target) || (has(self.generations) && string(self.target) in self.generations)",message="the target generation must be bound in generations"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.generations) || (has(self.generations) && oldSelf.generations.all(k, k in self.generations))",message="a bound generation is never removed"
type NodePoolSpec struct {
	// Target is the target deployment generation, which must be bound in
	// Generations; 0 (absent): the pool has no deployment.
	// +kubebuilder:validation:Minimum=1
	Target int64 `json:"target,omitempty"`
	// Serving is the serving generation; 0 (absent) is null.
	// +kubebuilder:validation:Minimum=1
	Serving int64 `json:"serving,omitempty"`
	// Generations binds deployment generations, by their decimal number,
	// to a specification digest (and, for a release of the release store,
	// the release's source name). A binding is never changed or removed
	// (the CRD's CEL rules refuse it).
	// +kubebuilder:validation:MaxProperties=1024
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 19 && k.matches('^[1-9][0-9]*$'))",message="a generation key is a positive decimal integer"
	Generations map[string]GenerationBinding `json:"generations,omitempty"`
}

// GenerationBinding is one generation's binding.
// +kubebuilder:validation:XValidation:rule="self.specificationDigest == oldSelf.specificationDigest",message="a generation's specification digest never changes"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.release) || (has(self.release) && self.release == oldSelf.release)",message="a generation's release never changes once set"
type GenerationBinding struct {
	// SpecificationDigest is the lowercase hex SHA-256 specification
	// digest.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	SpecificationDigest string `json:"specificationDigest"`
	// Release is the release's source name; empty when the generation was
	// bound by digest only.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]{0,62}$`
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
	// +kubebuilder:validation:Minimum=0
	Target int64 `json:"target"`
	// Serving is the config's serving generation, 0 for null.
	// +kubebuilder:validation:Minimum=0
	Serving int64 `json:"serving"`
}

// +kubebuilder:object:root=true

// NodePoolList is a list of NodePools.
type NodePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []NodePool `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=nodeenrolmenttokens,singular=nodeenrolmenttoken,scope=Namespaced
// +kubebuilder:printcolumn:name=Pool,type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name=Expires,type=date,JSONPath=`.spec.expiresAt`
// +kubebuilder:printcolumn:name=Used,type=date,JSONPath=`.status.usedAt`
// +kubebuilder:printcolumn:name=Node,type=string,JSONPath=`.status.nodeID`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[0-9a-f]{64}$')",message="the name is the token's lowercase hex SHA-256"

// NodeEnrolmentToken is one one-time enrolment token, named after the
// lowercase hex SHA-256 of the token (64 characters). The token is shown
// once when issued (POST /sandgate/enrolment-tokens) and never stored.
// The gateway deletes tokens once they have expired.
type NodeEnrolmentToken struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is what the token enrols into, and until when.
	Spec NodeEnrolmentTokenSpec `json:"spec"`
	// Status records the token's single use.
	Status NodeEnrolmentTokenStatus `json:"status,omitempty"`
}

// NodeEnrolmentTokenSpec is a token's pool and expiry (immutable).
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a token's pool and expiry never change"
type NodeEnrolmentTokenSpec struct {
	// Pool is the pool a node enrolled with the token joins.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
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
	// +kubebuilder:validation:MaxLength=36
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`
	NodeID string `json:"nodeID,omitempty"`
}

// +kubebuilder:object:root=true

// NodeEnrolmentTokenList is a list of NodeEnrolmentTokens.
type NodeEnrolmentTokenList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []NodeEnrolmentToken `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=enrollednodes,singular=enrollednode,scope=Namespaced
// +kubebuilder:printcolumn:name=Pool,type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name=Enabled,type=boolean,JSONPath=`.spec.enabled`
// +kubebuilder:printcolumn:name=Provider,type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name=Generation,type=integer,JSONPath=`.spec.deploymentGeneration`
// +kubebuilder:printcolumn:name=Age,type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')",message="the name is the node ID, a lowercase UUID"

// EnrolledNode is one node enrolled through the machine API, named after
// its node ID. Only the SHA-256 of the node credential is stored. The admin
// API's disable, enable and DELETE change it, and every replica refuses a
// disabled or removed node at its next heartbeat once its watch has
// delivered the change.
type EnrolledNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the node's enrolled identity.
	Spec EnrolledNodeSpec `json:"spec"`
}

// EnrolledNodeSpec is an enrolled node's identity (everything but Enabled
// is immutable).
// +kubebuilder:validation:XValidation:rule="self.pool == oldSelf.pool && self.credentialSHA256 == oldSelf.credentialSHA256 && self.installationID == oldSelf.installationID && self.provider == oldSelf.provider && self.backendFingerprint == oldSelf.backendFingerprint && self.deploymentGeneration == oldSelf.deploymentGeneration && self.specificationDigest == oldSelf.specificationDigest && self.generationManagement == oldSelf.generationManagement && self.maxActive == oldSelf.maxActive && self.maxRetained == oldSelf.maxRetained && self.enrolledAt == oldSelf.enrolledAt",message="only spec.enabled of an enrolled node may change"
type EnrolledNodeSpec struct {
	// Enabled: a disabled node is refused at connect and closed at its
	// next heartbeat (close code 4003).
	Enabled bool `json:"enabled"`
	// Pool is the node's pool.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	Pool string `json:"pool"`
	// CredentialSHA256 is the lowercase hex SHA-256 of the node
	// credential (the credential itself is never stored).
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	CredentialSHA256 string `json:"credentialSHA256"`
	// InstallationID is the installation ID the node's hello must state,
	// a lowercase UUID.
	// +kubebuilder:validation:MaxLength=36
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`
	InstallationID string `json:"installationID"`
	// Provider is the backend provider the node's hello must state.
	// +kubebuilder:validation:Enum=docker;microsandbox
	Provider string `json:"provider"`
	// BackendFingerprint is the lowercase hex backend fingerprint the
	// node's hello must state.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	BackendFingerprint string `json:"backendFingerprint"`
	// DeploymentGeneration is the deployment generation the node enrolled
	// with.
	// +kubebuilder:validation:Minimum=1
	DeploymentGeneration int64 `json:"deploymentGeneration"`
	// SpecificationDigest is the lowercase hex SHA-256 specification
	// digest of that generation.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	SpecificationDigest string `json:"specificationDigest"`
	// GenerationManagement is hello's generation_management.
	GenerationManagement bool `json:"generationManagement"`
	// MaxActive is the most active allocations the node stated at
	// enrolment.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	MaxActive int `json:"maxActive"`
	// MaxRetained is the most retained generations the node stated at
	// enrolment.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	MaxRetained int `json:"maxRetained"`
	// EnrolledAt is when the node enrolled (whole seconds).
	EnrolledAt metav1.Time `json:"enrolledAt"`
}

// +kubebuilder:object:root=true

// EnrolledNodeList is a list of EnrolledNodes.
type EnrolledNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []EnrolledNode `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=nodeplacements,singular=nodeplacements,scope=Namespaced
// +kubebuilder:printcolumn:name=Age,type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')",message="the name is the node ID, a lowercase UUID"

// NodePlacements is the placements of one node, named after the node ID:
// every allocation Core placed on one of the node's deployment
// generations, recorded before the first request naming it was sent, kept
// until a successful kill or an operator's release. Deleted when empty.
// Core keeps every generation listed here when the node asks which
// generations it may reclaim.
type NodePlacements struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec holds the placements.
	Spec NodePlacementsSpec `json:"spec"`
}

// NodePlacementsSpec holds one node's placements.
type NodePlacementsSpec struct {
	// Placements are the node's placements, at most MaxPlacements.
	// +kubebuilder:validation:MaxItems=2048
	Placements []PlacedAllocation `json:"placements,omitempty"`
}

// MaxPlacements bounds the placements of one node (one object must stay
// well under etcd's request size limit). The MaxItems marker on
// NodePlacementsSpec.Placements repeats the number, since a marker cannot
// name a Go constant; package deploy's TestCRDBoundsMatchGo holds the two
// equal.
const MaxPlacements = 2048

// PlacedAllocation is one allocation placed on one generation.
type PlacedAllocation struct {
	// Generation is the deployment generation, > 0.
	// +kubebuilder:validation:Minimum=1
	Generation int64 `json:"generation"`
	// TenantID is the allocation reference's tenant.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	TenantID string `json:"tenantID"`
	// EnvironmentID is the allocation reference's environment.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	EnvironmentID string `json:"environmentID"`
	// AllocationID is the allocation reference's allocation.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	AllocationID string `json:"allocationID"`
}

// +kubebuilder:object:root=true

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
