// +kubebuilder:object:generate=true
// +groupName=network.sandgate.io

// Package v1alpha1 holds corectl's own Kubernetes resources, group
// network.sandgate.io, version v1alpha1, for the state the spec leaves
// storage open for (spec §3.2, §5.2; issue 5 "Kubernetes is the store"):
//
//   - SandboxIngressAllowlist (namespaced, one per sandbox, in the sandbox's
//     project namespace, named after the sandbox ID): the instance ingress
//     allowlist's desired state in spec and its applied/verified state in
//     status;
//   - SandboxTemplateNetwork (namespaced, in corectl's template namespace,
//     named after the template ID): a template's default ingress and egress
//     allowlists;
//   - CNIQualification (namespaced, in corectl's own namespace of each
//     compute cluster, one per cluster): the CNI facts corectl reads from
//     the cluster, the qualification record they are checked against, and
//     the Qualified condition (spec §5.3 CNI capability gate).
//
// It also names the labels and annotations corectl puts on the objects it
// manages.
//
// The DeepCopy functions (zz_generated.deepcopy.go) and the CRD manifests
// in deploy/compute/crds/ (embedded by package deploy: deploy.CRDs) are
// generated from these types and their +kubebuilder markers by
// controller-gen (`make generate`, docs/deploy.md "Generated files"); edit
// the types and regenerate, never the generated files.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of corectl's resources.
const Group = "network.sandgate.io"

// Version is the API version of corectl's resources.
const Version = "v1alpha1"

// GroupVersion is Group/Version.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Labels and annotations on the objects corectl manages.
const (
	// LabelManagedBy marks an object as written by corectl; its value is
	// ManagedByValue. Objects without it are "non-platform" (spec §5.3).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy.
	ManagedByValue = "corectl"
	// LabelClusterID is the compute cluster ID (the credential's
	// clusterId) the object belongs to.
	LabelClusterID = "network.sandgate.io/cluster-id"
	// LabelSandboxID is the sandbox ID (the BatchSandbox name).
	LabelSandboxID = "network.sandgate.io/sandbox-id"
	// LabelSandboxNamespace is the sandbox's project namespace (the managed
	// Ingress may live in another namespace, next to the OpenSandbox
	// ingress Service).
	LabelSandboxNamespace = "network.sandgate.io/sandbox-namespace"
	// LabelAllocationID is the allocation ID a NetworkPolicy is for.
	LabelAllocationID = "network.sandgate.io/allocation-id"
	// AnnotationOwner names the BatchSandbox that owns a managed object, as
	// "<namespace>/<name>/<uid>". It is written on every managed object,
	// including those in another namespace, where an ownerReference is not
	// possible.
	AnnotationOwner = "network.sandgate.io/owner"
	// AnnotationVerifyingSince is the RFC 3339 time (with nanoseconds, so the
	// grace is measured from the write and not from its second; a value
	// without a fraction still parses) a NetworkPolicy entered
	// the Verifying state; the recovery reconciler finishes cycles older
	// than its grace period (an interrupted corectl).
	AnnotationVerifyingSince = "network.sandgate.io/verifying-since"
	// AnnotationLifecycle is the sandbox lifecycle state corectl's create
	// and delete orchestration (package lifecycle) records on the
	// BatchSandbox: Creating, Ready, Deleting or CleanupFailed (spec §5.3,
	// §5.2 deletion). Absent on BatchSandboxes corectl did not create.
	AnnotationLifecycle = "network.sandgate.io/lifecycle"
	// AnnotationCredential is the ID of the resource credential that
	// created the sandbox (spec §2.2 "tenant isolation"): written on the
	// BatchSandbox at create and copied to its managed Ingress, egress
	// NetworkPolicy and SandboxIngressAllowlist. Every sandbox route and
	// the data-plane authorizer compare it with the caller's credential
	// (credential.Credential.Sees); it is never changed after create.
	AnnotationCredential = "network.sandgate.io/credential-id"
	// LabelCredential selects the sandboxes of one creating credential
	// (the list routes): the value is sandbox.CredentialLabelValue of
	// AnnotationCredential, because a credential ID may be longer than a
	// label value or use characters a label value cannot.
	LabelCredential = "network.sandgate.io/credential"
	// AnnotationEndAt is the sandbox's end time (RFC 3339, UTC), set by
	// create from its timeout and moved by the timeout, refresh and
	// connect routes; when it passes, the leader deletes the sandbox
	// (package lifecycle, docs/corectl.md "Lifetime"). A BatchSandbox
	// without it never expires.
	AnnotationEndAt = "network.sandgate.io/end-at"
	// AnnotationMetadata is the E2B metadata of a sandbox's create
	// request (a JSON object of strings) on its BatchSandbox; GET and the
	// list routes report it and the lists filter on it.
	AnnotationMetadata = "network.sandgate.io/metadata"
	// LabelProbeEcho marks a temporary probe-source echo Ingress (spec
	// §5.2.2 III); the orphan scan deletes leftovers.
	LabelProbeEcho = "network.sandgate.io/probe-echo"
)

// Verification states (spec §5.2 "verificationState").
const (
	StatePending        = "Pending"
	StateVerifying      = "Verifying"
	StateVerified       = "Verified"
	StateUnverifiedSpec = "UnverifiedSpec"
	StateIndeterminate  = "Indeterminate"
	StatePolicyConflict = "PolicyConflict"
	StateDeleting       = "Deleting"
	StateCleanupFailed  = "CleanupFailed"
)

// IngressRule is one source CIDR of an ingress allowlist.
type IngressRule struct {
	// CIDR is a normalised IPv4 CIDR ("a.b.c.d/n", see package cidr).
	// +kubebuilder:validation:MaxLength=18
	CIDR string `json:"cidr"`
	// Description is free text for people (at most 256 bytes); it does not
	// reach the Ingress.
	// +kubebuilder:validation:MaxLength=256
	Description string `json:"description,omitempty"`
}

// EgressRule is one destination CIDR of an egress allowlist.
type EgressRule struct {
	// CIDR is a normalised IPv4 CIDR ("a.b.c.d/n", see package cidr).
	// +kubebuilder:validation:MaxLength=18
	CIDR string `json:"cidr"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=sandboxingressallowlists,singular=sandboxingressallowlist,scope=Namespaced,shortName=sia
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name=State,type=string,JSONPath=`.status.verificationState`
// +kubebuilder:printcolumn:name=Error,type=string,JSONPath=`.status.lastErrorCode`
// +kubebuilder:printcolumn:name=Desired,type=integer,JSONPath=`.metadata.generation`
// +kubebuilder:printcolumn:name=Observed,type=integer,JSONPath=`.status.observedGeneration`
// +kubebuilder:printcolumn:name=Age,type=date,JSONPath=`.metadata.creationTimestamp`

// SandboxIngressAllowlist is a sandbox's instance ingress allowlist: the
// desired source CIDRs (spec) and what corectl applied and verified on the
// managed Ingress (status). metadata.generation is the desired version.
// One per sandbox, in the sandbox's project namespace, named after the
// sandbox ID; written by corectl. `kubectl describe sia <sandboxID>` shows
// its state, conditions and Events.
type SandboxIngressAllowlist struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired allowlist (written by the API).
	Spec SandboxIngressAllowlistSpec `json:"spec,omitempty"`
	// Status is what corectl applied and verified (written by the
	// reconciler through the status subresource).
	Status SandboxIngressAllowlistStatus `json:"status,omitempty"`
}

// SandboxIngressAllowlistSpec is the desired instance ingress allowlist.
type SandboxIngressAllowlistSpec struct {
	// ClusterID is the compute cluster of the sandbox (the credential's
	// clusterId).
	// +kubebuilder:validation:MaxLength=253
	ClusterID string `json:"clusterID"`
	// Desired is the normalised, non-empty set of allowed source CIDRs,
	// sorted by CIDR (spec §5.2 desiredIngress).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=512
	Desired []IngressRule `json:"desired"`
	// Revision counts PUTs: every PUT increments it, so every PUT is a new
	// desired version (metadata.generation) and gets its own apply cycle,
	// even when the rules are unchanged.
	// +kubebuilder:validation:Minimum=0
	Revision int64 `json:"revision,omitempty"`
}

// CarrierRef identifies the managed Ingress that carries the allowlist
// (spec §5.2 carrierRef).
type CarrierRef struct {
	// Namespace of the managed Ingress.
	// +optional
	Namespace string `json:"namespace"`
	// Name of the managed Ingress (sandbox-ingress-<sandboxID>).
	// +optional
	Name string `json:"name"`
	// Host is the host rule it claims ("" = all hosts).
	// +optional
	Host string `json:"host"`
	// Path is the path prefix it claims, /<sandboxID>/.
	// +optional
	Path string `json:"path"`
	// IngressClass is its spec.ingressClassName.
	// +optional
	IngressClass string `json:"ingressClass"`
	// BackendService is the OpenSandbox ingress Service it routes to.
	// +optional
	BackendService string `json:"backendService"`
	// BackendPort is that Service's port, a number or a name.
	// +optional
	BackendPort string `json:"backendPort"`
}

// SandboxIngressAllowlistStatus is what corectl last applied and verified.
type SandboxIngressAllowlistStatus struct {
	// ObservedGeneration is the desired version the last completed cycle
	// worked on.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// VerificationState is one of the State* constants.
	// +kubebuilder:validation:MaxLength=64
	VerificationState string `json:"verificationState,omitempty"`
	// LastErrorCode classifies the last failure ("" after a success).
	// +kubebuilder:validation:MaxLength=64
	LastErrorCode string `json:"lastErrorCode,omitempty"`
	// LastErrorMessage explains LastErrorCode for people.
	// +kubebuilder:validation:MaxLength=1024
	LastErrorMessage string `json:"lastErrorMessage,omitempty"`
	// Applied is the normalised set read back from the managed Ingress
	// after the last successful write (spec §5.2 appliedIngress); nil when
	// no carrier exists.
	// +kubebuilder:validation:MaxItems=512
	// +kubebuilder:validation:items:MaxLength=18
	Applied []string `json:"applied,omitempty"`
	// AppliedVersion is the managed Ingress's resourceVersion at that read
	// back (spec §5.2 appliedVersion).
	// +kubebuilder:validation:MaxLength=64
	AppliedVersion string `json:"appliedVersion,omitempty"`
	// LastVerified is the LKG: the last Applied that passed every check of
	// spec §5.2 (lastVerifiedIngress).
	// +kubebuilder:validation:MaxItems=512
	// +kubebuilder:validation:items:MaxLength=18
	LastVerified []string `json:"lastVerified,omitempty"`
	// LastVerifiedGeneration is the desired version LastVerified came from.
	LastVerifiedGeneration int64 `json:"lastVerifiedGeneration,omitempty"`
	// Cycle numbers the reconcile cycle that last set Verifying: each
	// cycle adds one, in a write conditional on the allowlist's
	// resourceVersion, so setting Verifying always changes the object
	// (and its resourceVersion) even over a Verifying state left by
	// another cycle, and no two cycles of one allowlist share a number.
	// The managed Ingress's network.sandgate.io/cycle annotation names
	// the cycle that last wrote it (package ingressallow, AnnotationCycle).
	// 0: no cycle has set Verifying yet.
	// +kubebuilder:validation:Minimum=0
	Cycle int64 `json:"cycle,omitempty"`
	// CarrierRef names the managed Ingress.
	CarrierRef *CarrierRef `json:"carrierRef,omitempty"`
	// Conditions: "Verified" (the carrier equals desired and passed every
	// check) and "Ready" (Verified and nothing pending).
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// SandboxIngressAllowlistList is a list of SandboxIngressAllowlist.
type SandboxIngressAllowlistList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []SandboxIngressAllowlist `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=sandboxtemplatenetworks,singular=sandboxtemplatenetwork,scope=Namespaced,shortName=stn
// +kubebuilder:printcolumn:name=Template,type=string,JSONPath=`.spec.templateID`
// +kubebuilder:printcolumn:name=Version,type=integer,JSONPath=`.metadata.generation`
// +kubebuilder:printcolumn:name=Age,type=date,JSONPath=`.metadata.creationTimestamp`

// SandboxTemplateNetwork is a sandbox template's default network policy
// (spec §3.2): the ingress and egress allowlists a sandbox created from the
// template starts with. metadata.generation is its version. In corectl's
// template namespace, named after the template ID; written through PUT
// /sandbox-templates/{templateId}/network.
type SandboxTemplateNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the defaults.
	Spec SandboxTemplateNetworkSpec `json:"spec,omitempty"`
}

// SandboxTemplateNetworkSpec is a template's default allowlists; each is a
// normalised set sorted by CIDR; empty means "no default" (an empty ingress
// default means an unrestricted entry, spec §5.2.1).
type SandboxTemplateNetworkSpec struct {
	// TemplateID is the template ID as the API caller wrote it.
	// +kubebuilder:validation:MaxLength=253
	TemplateID string `json:"templateID"`
	// Ingress is the default ingress allowlist.
	// +optional
	// +kubebuilder:validation:MaxItems=512
	Ingress []IngressRule `json:"ingress"`
	// Egress is the default egress allowlist.
	// +optional
	// +kubebuilder:validation:MaxItems=512
	Egress []EgressRule `json:"egress"`
}

// +kubebuilder:object:root=true

// SandboxTemplateNetworkList is a list of SandboxTemplateNetwork.
type SandboxTemplateNetworkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []SandboxTemplateNetwork `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=cniqualifications,singular=cniqualification,scope=Namespaced,shortName=cniq
// +kubebuilder:printcolumn:name=Cluster,type=string,JSONPath=`.status.clusterId`
// +kubebuilder:printcolumn:name=Qualified,type=string,JSONPath=`.status.conditions[?(@.type=="Qualified")].status`
// +kubebuilder:printcolumn:name=Reason,type=string,JSONPath=`.status.conditions[?(@.type=="Qualified")].reason`
// +kubebuilder:printcolumn:name=Version,type=string,JSONPath=`.status.observed.version`
// +kubebuilder:printcolumn:name=Checked,type=date,JSONPath=`.status.checkedAt`

// CNIQualification is the state of one compute cluster's CNI gate (spec
// §5.3): what CNI the cluster runs now (read from its DaemonSet and
// configuration object), the qualification record of corectl's
// configuration, and the condition Qualified. corectl's leader writes it;
// every replica enforces the gate from its own reading. In corectl's own
// namespace (the leader-election namespace), named after the cluster:
// `kubectl get cniq -n corectl-system` shows whether new enforced creates
// and PUTs are allowed, `kubectl describe` the Events of every change.
type CNIQualification struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is written by corectl's leader.
	Status CNIQualificationStatus `json:"status,omitempty"`
}

// CNIFacts identifies a CNI deployment.
type CNIFacts struct {
	// Implementation is the CNI, e.g. "calico".
	// +kubebuilder:validation:MaxLength=253
	Implementation string `json:"implementation,omitempty"`
	// Version is its version (the DaemonSet container's image tag).
	// +kubebuilder:validation:MaxLength=253
	Version string `json:"version,omitempty"`
	// Fingerprint is "sha256:<hex>" of its configuration object.
	// +kubebuilder:validation:MaxLength=256
	Fingerprint string `json:"fingerprint,omitempty"`
}

// CNIQualificationStatus is a CNIQualification's state.
type CNIQualificationStatus struct {
	// ClusterID is the compute cluster.
	// +kubebuilder:validation:MaxLength=63
	ClusterID string `json:"clusterId,omitempty"`
	// Observed is what the cluster runs now (absent when it could not be
	// read).
	Observed *CNIFacts `json:"observed,omitempty"`
	// Record is the qualification record of corectl's configuration
	// (absent when there is none).
	Record *CNIFacts `json:"record,omitempty"`
	// CheckedAt is the last reading of the cluster's CNI.
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
	// Conditions: "Qualified" (True: new enforced creates and PUTs are
	// allowed; False with the reason RecordMissing, ClusterMismatch,
	// ImplementationChanged, VersionChanged, FingerprintChanged or
	// FactsUnreadable).
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// CNIQualificationList is a list of CNIQualification.
type CNIQualificationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects.
	Items []CNIQualification `json:"items"`
}

// AddToScheme registers the types of this package in a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&SandboxIngressAllowlist{}, &SandboxIngressAllowlistList{},
		&SandboxTemplateNetwork{}, &SandboxTemplateNetworkList{},
		&CNIQualification{}, &CNIQualificationList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
