// Package sandbox reads OpenSandbox BatchSandbox objects
// (sandbox.opensandbox.io/v1alpha1, OpenSandbox server/v0.2.2) the way
// corectl needs them: a sandbox is the BatchSandbox named after the sandbox
// ID in the credential's project namespace, and its allocation identity is
// the allocation label of spec.template.metadata.labels (spec §1.5
// "allocation identity", §3.1.1 III).
//
// BatchSandbox is read as unstructured data, or as the small Cached type
// that holds only what corectl's cached readers interpret, so corectl
// does not depend on OpenSandbox's Go types; only the fields named here
// are interpreted.
package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// GVK is the BatchSandbox kind.
var GVK = schema.GroupVersionKind{Group: "sandbox.opensandbox.io", Version: "v1alpha1", Kind: "BatchSandbox"}

// Sentinel errors of Get and ValidateID.
var (
	// ErrInvalidID: the sandbox ID is not a DNS-1123 label (1–63 bytes of
	// a-z, 0-9 and '-', starting and ending alphanumeric).
	ErrInvalidID = errors.New("sandbox: invalid sandbox ID")
	// ErrNotFound: no BatchSandbox of that name in that namespace.
	ErrNotFound = errors.New("sandbox: not found")
	// ErrDeleting: the BatchSandbox has a deletion timestamp, or corectl's
	// delete orchestration marked it Deleting or CleanupFailed
	// (v1alpha1.AnnotationLifecycle; spec §5.2: a sandbox whose ingress
	// rule is being revoked refuses normal access).
	ErrDeleting = errors.New("sandbox: being deleted")
	// ErrNoAllocation: spec.template.metadata.labels has no allocation
	// label, or its value cannot name a NetworkPolicy
	// (sandbox-egress-<allocationID> must be a DNS-1123 subdomain and the
	// ID a label value).
	ErrNoAllocation = errors.New("sandbox: no usable allocation label in the pod template")
	// ErrUnavailable: the apiserver could not answer, or the object is not
	// shaped as a BatchSandbox (for example labels that are not strings).
	ErrUnavailable = errors.New("sandbox: cannot read the BatchSandbox")
)

// Sandbox is what corectl knows about one BatchSandbox.
type Sandbox struct {
	// ID is the sandbox ID (the object name).
	ID string
	// Namespace is the project namespace.
	Namespace string
	// UID is the object UID, for owner references.
	UID types.UID
	// TemplateLabels is spec.template.metadata.labels (never nil).
	TemplateLabels map[string]string
	// AllocationLabel is the label key the allocation ID was read from.
	AllocationLabel string
	// AllocationID is TemplateLabels[AllocationLabel].
	AllocationID string
	// Start is the BatchSandbox's creation time (the sandbox's start, in
	// whole seconds as the apiserver records it).
	Start time.Time
	// Owner is the ID of the resource credential that created the sandbox
	// (v1alpha1.AnnotationCredential); "" when none is recorded (a
	// BatchSandbox corectl did not create, or one from before ownership
	// was recorded: only project-wide credentials see those).
	Owner string
}

// CredentialLabelValue is the v1alpha1.LabelCredential value for a
// credential ID: "c" and the first 20 bytes of its SHA-256 in lowercase
// hex (41 characters, a valid label value for any ID).
func CredentialLabelValue(credentialID string) string {
	sum := sha256.Sum256([]byte(credentialID))
	return "c" + hex.EncodeToString(sum[:20])
}

// OwnerOf returns the creating credential recorded on a BatchSandbox (or
// on any object corectl copied it to); "" when none.
func OwnerOf(obj metav1.Object) string {
	v, _ := Annotation(obj, v1alpha1.AnnotationCredential)
	return v
}

// Annotation returns annotation key of obj and whether obj has it as a
// string. An *unstructured.Unstructured's map is read in place:
// u.GetAnnotations copies every annotation into a new map on each call,
// which the cached readers (the authorizer answers each question from
// several annotations) cannot afford per read; a typed object (a *Cached)
// hands out its map without a copy. A value that is not a string counts
// as absent (the apiserver stores only strings).
func Annotation(obj metav1.Object, key string) (string, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		v, ok := obj.GetAnnotations()[key]
		return v, ok
	}
	md, ok := u.Object["metadata"].(map[string]any)
	if !ok {
		return "", false
	}
	ann, ok := md["annotations"].(map[string]any)
	if !ok {
		return "", false
	}
	v, ok := ann[key].(string)
	return v, ok
}

// ValidateID checks that id is a DNS-1123 label; the error wraps
// ErrInvalidID.
func ValidateID(id string) error {
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidID, strings.Join(errs, "; "))
	}
	return nil
}

// Get reads the BatchSandbox namespace/id with r and extracts its
// allocation identity from allocationLabel. Errors wrap ErrInvalidID,
// ErrNotFound, ErrDeleting, ErrNoAllocation or ErrUnavailable.
func Get(ctx context.Context, r client.Reader, namespace, id, allocationLabel string) (*Sandbox, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GVK)
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: id}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: BatchSandbox %s/%s", ErrNotFound, namespace, id)
		}
		return nil, fmt.Errorf("%w: BatchSandbox %s/%s: %s", ErrUnavailable, namespace, id, err.Error())
	}
	return From(u, allocationLabel)
}

// GetCached reads the BatchSandbox namespace/id as a *Cached with r
// (the informer cache, which holds BatchSandboxes as Cached) and extracts
// its allocation identity, as Get does. Errors as Get's.
func GetCached(ctx context.Context, r client.Reader, namespace, id, allocationLabel string) (*Sandbox, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	c := NewCached()
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: id}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: BatchSandbox %s/%s", ErrNotFound, namespace, id)
		}
		return nil, fmt.Errorf("%w: BatchSandbox %s/%s: %s", ErrUnavailable, namespace, id, err.Error())
	}
	return From(c, allocationLabel)
}

// From extracts the sandbox of a BatchSandbox object obj, read whole as
// an *unstructured.Unstructured (a read, or a create's answer, which is
// the object as stored) or as a *Cached, as Get does. The Sandbox's
// TemplateLabels is a map of its own. Errors wrap ErrDeleting,
// ErrNoAllocation or ErrUnavailable (a malformed template, or an object
// of another type).
func From(obj client.Object, allocationLabel string) (*Sandbox, error) {
	tl, alloc, err := allocation(obj, allocationLabel)
	if err != nil && !errors.Is(err, ErrNoAllocation) {
		return nil, err
	}
	labels := tl
	if _, shared := obj.(*Cached); shared || labels == nil {
		labels = make(map[string]string, len(tl))
		for k, v := range tl {
			labels[k] = v
		}
	}
	return &Sandbox{ID: obj.GetName(), Namespace: obj.GetNamespace(), UID: obj.GetUID(), TemplateLabels: labels, AllocationLabel: allocationLabel,
		AllocationID: alloc, Owner: OwnerOf(obj), Start: obj.GetCreationTimestamp().Time}, err
}

// AllocationID is the allocation ID From gives for obj, with From's
// errors, without building the Sandbox (From copies the template labels
// of a *Cached).
func AllocationID(obj client.Object, allocationLabel string) (string, error) {
	_, alloc, err := allocation(obj, allocationLabel)
	return alloc, err
}

// allocation reads obj's template labels (tl, the object's own map) and
// allocation ID for From: the ID is "" with any error.
func allocation(obj client.Object, allocationLabel string) (tl map[string]string, alloc string, err error) {
	namespace, id := obj.GetNamespace(), obj.GetName()
	if st, _ := Annotation(obj, v1alpha1.AnnotationLifecycle); obj.GetDeletionTimestamp() != nil ||
		st == v1alpha1.StateDeleting || st == v1alpha1.StateCleanupFailed {
		return nil, "", fmt.Errorf("%w: BatchSandbox %s/%s", ErrDeleting, namespace, id)
	}
	tl, err = TemplateLabels(obj)
	if err != nil {
		return nil, "", fmt.Errorf("%w: BatchSandbox %s/%s spec.template.metadata.labels: %s", ErrUnavailable, namespace, id, err.Error())
	}
	alloc, ok := tl[allocationLabel]
	if !ok || alloc == "" {
		return tl, "", fmt.Errorf("%w: BatchSandbox %s/%s has no %q template label", ErrNoAllocation, namespace, id, allocationLabel)
	}
	if errs := validation.IsDNS1123Label(alloc); len(errs) > 0 {
		return tl, "", fmt.Errorf("%w: allocation ID of BatchSandbox %s/%s: %s", ErrNoAllocation, namespace, id, strings.Join(errs, "; "))
	}
	return tl, alloc, nil
}

// Owner reads the BatchSandbox namespace/id whole with r and returns it
// with its creating credential (OwnerOf; "" when none is recorded),
// whatever its lifecycle state. The object is the caller's own copy: the
// control API's routes hand it on to the route (lifecycle's Status,
// SetTimeout, Delete), so a call reads its sandbox once. Errors wrap
// ErrInvalidID, ErrNotFound or ErrUnavailable.
func Owner(ctx context.Context, r client.Reader, namespace, id string) (string, *unstructured.Unstructured, error) {
	if err := ValidateID(id); err != nil {
		return "", nil, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GVK)
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: id}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil, fmt.Errorf("%w: BatchSandbox %s/%s", ErrNotFound, namespace, id)
		}
		return "", nil, fmt.Errorf("%w: BatchSandbox %s/%s: %s", ErrUnavailable, namespace, id, err.Error())
	}
	return OwnerOf(u), u, nil
}

// OwnerReference is the controller owner reference to the BatchSandbox
// (spec §5.3: controller and blockOwnerDeletion set).
func (s *Sandbox) OwnerReference() metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{
		APIVersion:         GVK.GroupVersion().String(),
		Kind:               GVK.Kind,
		Name:               s.ID,
		UID:                s.UID,
		Controller:         &yes,
		BlockOwnerDeletion: &yes,
	}
}

// OwnerAnnotation is the value of v1alpha1.AnnotationOwner for objects
// owned by s: "<namespace>/<name>/<uid>".
func (s *Sandbox) OwnerAnnotation() string {
	return s.Namespace + "/" + s.ID + "/" + string(s.UID)
}

// HasOwnerReference reports whether refs contains s's controller owner
// reference (same API group, kind, name and UID).
func (s *Sandbox) HasOwnerReference(refs []metav1.OwnerReference) bool {
	for _, r := range refs {
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err == nil && gv.Group == GVK.Group && r.Kind == GVK.Kind && r.Name == s.ID && r.UID == s.UID && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

// Pods lists the sandbox's current pods: pods in its namespace whose
// controller owner reference is the BatchSandbox (by UID). opts are
// further list options (e.g. the resourceVersion the list may be served
// at). None is not an error. The error wraps ErrUnavailable.
func (s *Sandbox) Pods(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := r.List(ctx, &list, append([]client.ListOption{client.InNamespace(s.Namespace)}, opts...)...); err != nil {
		return nil, fmt.Errorf("%w: list pods in %s: %s", ErrUnavailable, s.Namespace, err.Error())
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if c := metav1.GetControllerOfNoCopy(&p); c != nil && c.UID == s.UID {
			out = append(out, p)
		}
	}
	return out, nil
}

// PodsMetadata is Pods reading only the pods' metadata (a
// PartialObjectMetadataList, which client-go asks for in protobuf): names,
// labels and owner references, what the egress selector check reads,
// without decoding the pods' specs and statuses. opts as Pods'. None is
// not an error. The error wraps ErrUnavailable.
func (s *Sandbox) PodsMetadata(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.List(ctx, list, append([]client.ListOption{client.InNamespace(s.Namespace)}, opts...)...); err != nil {
		return nil, fmt.Errorf("%w: list pods in %s: %s", ErrUnavailable, s.Namespace, err.Error())
	}
	var out []metav1.PartialObjectMetadata
	for _, p := range list.Items {
		if c := metav1.GetControllerOfNoCopy(&p); c != nil && c.UID == s.UID {
			out = append(out, p)
		}
	}
	return out, nil
}

// IdentityLabels are the labels every object corectl manages for s
// carries: managed-by, cluster ID, sandbox ID and sandbox namespace. They
// identify the object as corectl's for s; the owner marks (MarkOwner) are
// written beside them but are not part of that identity, so objects
// written before ownership was recorded stay corectl's.
func (s *Sandbox) IdentityLabels(clusterID string) map[string]string {
	return map[string]string{
		v1alpha1.LabelManagedBy:        v1alpha1.ManagedByValue,
		v1alpha1.LabelClusterID:        clusterID,
		v1alpha1.LabelSandboxID:        s.ID,
		v1alpha1.LabelSandboxNamespace: s.Namespace,
	}
}

// MarkOwner copies s's creating credential onto obj, an object corectl
// writes for s: v1alpha1.AnnotationCredential = s.Owner and
// v1alpha1.LabelCredential = CredentialLabelValue(s.Owner). It does
// nothing when s has no recorded owner.
func (s *Sandbox) MarkOwner(obj metav1.Object) {
	if s.Owner == "" {
		return
	}
	labels, anns := obj.GetLabels(), obj.GetAnnotations()
	if labels == nil {
		labels = map[string]string{}
	}
	if anns == nil {
		anns = map[string]string{}
	}
	labels[v1alpha1.LabelCredential] = CredentialLabelValue(s.Owner)
	anns[v1alpha1.AnnotationCredential] = s.Owner
	obj.SetLabels(labels)
	obj.SetAnnotations(anns)
}
