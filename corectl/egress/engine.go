package egress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EventRecorder is the part of k8s.io/client-go/tools/events.EventRecorder
// the engine uses; events go on the BatchSandbox.
type EventRecorder interface {
	// Eventf records a Kubernetes Event (eventtype Normal or Warning)
	// on regarding; note is a format for args.
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// Engine runs the egress flows of one compute cluster.
type Engine struct {
	// Client reads and writes the cluster's apiserver. It must not be a
	// cache-backed client: every read is a read-back.
	Client client.Client
	// Cluster is the cluster's configuration (DNS selectors, allocation
	// label, CNI gate).
	Cluster *cluster.Cluster
	// Events, if not nil, receives an Event on the BatchSandbox for every
	// PUT outcome.
	Events EventRecorder
	// Now returns the current time (nil: time.Now).
	Now func() time.Time
	// Policies, if not nil, lists the namespace's NetworkPolicies for
	// the conflict checks (the PUT's and the GET view's) and decodes of
	// each only what Conflicts judges (PolicyLister). nil: Client lists
	// them, every policy decoded in full. The answer is the same.
	Policies *PolicyLister
}

// Result is the answer of Put when the flow reached the write step.
type Result struct {
	// Outcome says how the PUT ended.
	Outcome Outcome
	// Code is the failure code (Code* constants), "" when Verified.
	Code string
	// Message explains the failure for people: "update failed, LKG
	// restored: <reason>" and so on.
	Message string
	// Conflicts names the conflicting policies when Code is
	// CodePolicyConflict.
	Conflicts []string
	// PolicyName is the NetworkPolicy the PUT wrote.
	PolicyName string
}

// failure is a step's failure inside Put.
type failure struct {
	code      string
	reason    string
	conflicts []string
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// prior is the policy as it was before a PUT.
type prior struct {
	obj  *networkingv1.NetworkPolicy // nil: no policy existed
	lkg  *networkingv1.NetworkPolicySpec
	lkgV string
}

// Put replaces the egress allowlist of sandbox namespace/id with set
// (normalised: masked, sorted, deduplicated IPv4 prefixes, as
// wire.DecodeEgressPut returns them) following spec §3.1.1 III:
//
//  1. read the BatchSandbox (allocation identity, template labels) and the
//     current policy (the LKG);
//  2. compile the policy and write it with verification-state Verifying
//     (create, or update at the read resourceVersion);
//  3. read it back and compare canonical specs;
//  4. check the podSelector against the template labels and every
//     current pod of the sandbox;
//  5. enumerate the namespace's NetworkPolicies for conflicts;
//  6. check the cluster's CNI gate;
//  7. write last-verified-spec, Verified and an empty error code; read
//     back.
//
// Any failure in 2–7 rolls back: with an LKG, the LKG spec is written back
// and read back (OutcomeLKGRestored, or OutcomeStateUncertain when that
// cannot be written or confirmed); with no earlier policy, the new one is
// deleted and its absence confirmed (OutcomeNewPolicyDeleted, or
// OutcomeStateUncertain). The Result then carries the failure code.
//
// Errors (nothing written): the sandbox package's errors for the
// BatchSandbox; ErrIndeterminate when a policy of that name exists but is
// not corectl's, or has no decodable LKG (the recovery reconciler or an
// admin must settle it first); ErrUnavailable when a first read fails.
// The PUT is allowed whether or not the sandbox has a pod.
func (e *Engine) Put(ctx context.Context, namespace, id string, prefixes []netip.Prefix) (*Result, error) {
	return e.PutAllowlist(ctx, namespace, id, Allowlist{Allow: prefixes})
}

// PutAllowlist is Put for an allowlist with carve-outs (E2B's PUT
// /sandboxes/{id}/network body: allowOut, denyOut, allow_internet_access);
// list must be in Carve's normal form. The flow, the read-back, the LKG
// and the conflict rules are Put's; a non-platform policy that allows a
// carved-out range is a conflict (Subtract).
func (e *Engine) PutAllowlist(ctx context.Context, namespace, id string, list Allowlist) (*Result, error) {
	set := cidr.Strings(Subtract(list))
	sb, err := sandbox.Get(ctx, e.Client, namespace, id, e.Cluster.AllocationLabelKey())
	if err != nil {
		return nil, err
	}
	name := PolicyName(sb.AllocationID)
	pr, err := e.readPrior(ctx, sb, name)
	if err != nil {
		return nil, err
	}
	desired := CompileExcept(e.Cluster, sb.AllocationLabel, sb.AllocationID, list)

	obj := e.build(sb, name, pr, &desired)
	var werr error
	if pr.obj == nil {
		werr = e.Client.Create(ctx, obj)
	} else {
		obj.ResourceVersion = pr.obj.ResourceVersion
		werr = e.Client.Update(ctx, obj)
	}
	if werr != nil && pr.obj != nil && apierrors.IsConflict(werr) {
		// The resourceVersion precondition refused the write: nothing of
		// this PUT reached the object, which is now another writer's.
		// Restoring our prior LKG over it would undo (and may widen) an
		// update that writer has already verified and answered.
		res := &Result{Outcome: OutcomeLKGRestored, Code: CodeConcurrentUpdate, PolicyName: name,
			Message: "update failed, not written: another update changed the policy meanwhile: " + werr.Error()}
		e.event(sb, corev1.EventTypeWarning, "EgressUpdateFailed", "Put", "egress policy %s: %s (%s)", name, res.Message, res.Code)
		return res, nil
	}
	if werr != nil {
		return e.rollback(ctx, sb, name, pr, "", failure{code: writeCode(werr), reason: "write the policy: " + werr.Error()}), nil
	}
	written := obj.ResourceVersion

	rb, f := e.verify(ctx, sb, name, &desired, set)
	if f != nil {
		return e.rollback(ctx, sb, name, pr, written, *f), nil
	}
	if f := e.commit(ctx, rb, &desired, &written); f != nil {
		return e.rollback(ctx, sb, name, pr, written, *f), nil
	}
	e.event(sb, corev1.EventTypeNormal, "EgressVerified", "Put", "egress policy %s verified: %d CIDRs, %d excepted", name, len(list.Allow), len(list.Except))
	return &Result{Outcome: OutcomeVerified, PolicyName: name}, nil
}

// readPrior reads the current policy and its LKG.
func (e *Engine) readPrior(ctx context.Context, sb *sandbox.Sandbox, name string) (prior, error) {
	cur := &networkingv1.NetworkPolicy{}
	err := e.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: name}, cur)
	if apierrors.IsNotFound(err) {
		return prior{}, nil
	}
	if err != nil {
		return prior{}, fmt.Errorf("%w: read policy %s/%s: %s", ErrUnavailable, sb.Namespace, name, err.Error())
	}
	if !e.ours(cur, sb) {
		return prior{}, fmt.Errorf("%w: policy %s/%s exists but is not corectl's policy for sandbox %s", ErrIndeterminate, sb.Namespace, name, sb.ID)
	}
	v, ok := cur.Annotations[AnnotationLastVerifiedSpec]
	if !ok {
		return prior{}, fmt.Errorf("%w: policy %s/%s has no %s annotation (an unfinished first write)", ErrIndeterminate, sb.Namespace, name, AnnotationLastVerifiedSpec)
	}
	lkg, _, err := ParseLKG(v)
	if err != nil {
		return prior{}, fmt.Errorf("%w: policy %s/%s: %s", ErrIndeterminate, sb.Namespace, name, err.Error())
	}
	return prior{obj: cur, lkg: lkg, lkgV: v}, nil
}

// ours reports whether np is corectl's policy for sb.
func (e *Engine) ours(np *networkingv1.NetworkPolicy, sb *sandbox.Sandbox) bool {
	return np.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue &&
		np.Labels[v1alpha1.LabelSandboxID] == sb.ID &&
		np.Labels[v1alpha1.LabelClusterID] == e.Cluster.ID
}

// build returns the policy object to write for desired, in state
// Verifying, keeping the prior LKG annotation.
func (e *Engine) build(sb *sandbox.Sandbox, name string, pr prior, desired *networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	lbl := sb.IdentityLabels(e.Cluster.ID)
	lbl[v1alpha1.LabelAllocationID] = sb.AllocationID
	ann := map[string]string{
		AnnotationVerificationState:       v1alpha1.StateVerifying,
		AnnotationVerificationErrorCode:   "",
		v1alpha1.AnnotationVerifyingSince: e.now().UTC().Format(time.RFC3339Nano),
		v1alpha1.AnnotationOwner:          sb.OwnerAnnotation(),
	}
	if pr.lkgV != "" {
		ann[AnnotationLastVerifiedSpec] = pr.lkgV
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       sb.Namespace,
			Labels:          lbl,
			Annotations:     ann,
			OwnerReferences: []metav1.OwnerReference{sb.OwnerReference()},
		},
		Spec: *desired.DeepCopy(),
	}
	if pr.obj != nil {
		// Keep what others added (labels, annotations, other owners).
		np.Labels = mergeMaps(pr.obj.Labels, lbl)
		np.Annotations = mergeMaps(pr.obj.Annotations, ann)
		np.OwnerReferences = mergeOwner(pr.obj.OwnerReferences, sb)
	}
	sb.MarkOwner(np)
	return np
}

// verify runs steps 3–6 on the written policy and returns the read-back
// object.
func (e *Engine) verify(ctx context.Context, sb *sandbox.Sandbox, name string, desired *networkingv1.NetworkPolicySpec, set []string) (*networkingv1.NetworkPolicy, *failure) {
	rb := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: name}, rb); err != nil {
		return nil, &failure{code: CodeReadFailed, reason: "read back the policy: " + err.Error()}
	}
	if Canonical(&rb.Spec) != Canonical(desired) {
		return nil, &failure{code: CodeReadBackMismatch, reason: "the policy read back differs from the policy written"}
	}
	if rb.Annotations[AnnotationVerificationState] != v1alpha1.StateVerifying || !e.ours(rb, sb) {
		return nil, &failure{code: CodeReadBackMismatch, reason: "the policy read back lost its Verifying state or identity labels"}
	}
	sets, f := e.labelSets(ctx, sb, &rb.Spec)
	if f != nil {
		return nil, f
	}
	list, err := e.policies(ctx, sb.Namespace)
	if err != nil {
		return nil, &failure{code: CodeReadFailed, reason: "list NetworkPolicies: " + err.Error()}
	}
	c, err := list.conflicts(name, sets, set, DNSRule(e.Cluster))
	list.release()
	if err != nil {
		return nil, &failure{code: CodeReadFailed, reason: "list NetworkPolicies: " + err.Error()}
	}
	if len(c) > 0 {
		return nil, &failure{code: CodePolicyConflict, reason: "non-platform NetworkPolicies widen the sandbox's egress: " + strings.Join(c, ", "), conflicts: c}
	}
	if err := e.Cluster.CNIGate(); err != nil {
		return nil, &failure{code: CodeCNIUnqualified, reason: err.Error()}
	}
	return rb, nil
}

// policies lists every NetworkPolicy of the namespace, the
// platform-labelled ones included: the managed-by label is no proof of
// origin (a tenant can set it), so Conflicts judges every policy but the
// sandbox's own by its selector and rules. The list is a consistent
// read, through e.Policies when set, else through e.Client. The caller
// releases the set.
func (e *Engine) policies(ctx context.Context, namespace string) (*policySet, error) {
	if e.Policies != nil {
		return e.Policies.list(ctx, namespace)
	}
	var list networkingv1.NetworkPolicyList
	if err := e.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	return &policySet{items: list.Items}, nil
}

// labelSets checks the selector statically against the template labels
// and against every current pod (step 4), and returns the label sets the
// conflict enumeration must consider: the template's and each pod's.
// podOpts are further options of the pods list (sandbox.PodsMetadata:
// the pods' metadata only, all the check reads).
func (e *Engine) labelSets(ctx context.Context, sb *sandbox.Sandbox, spec *networkingv1.NetworkPolicySpec, podOpts ...client.ListOption) ([]labels.Set, *failure) {
	if !selectorIsAllocation(spec.PodSelector, sb.AllocationLabel, sb.AllocationID) {
		return nil, &failure{code: CodeSelectorMismatch, reason: "podSelector is not the allocation label"}
	}
	sel, err := metav1.LabelSelectorAsSelector(&spec.PodSelector)
	if err != nil {
		return nil, &failure{code: CodeSelectorMismatch, reason: "podSelector: " + err.Error()}
	}
	if !sel.Matches(labels.Set(sb.TemplateLabels)) {
		return nil, &failure{code: CodeSelectorMismatch, reason: "podSelector does not select the BatchSandbox template labels"}
	}
	pods, err := sb.PodsMetadata(ctx, e.Client, podOpts...)
	if err != nil {
		return nil, &failure{code: CodeReadFailed, reason: err.Error()}
	}
	sets := []labels.Set{labels.Set(sb.TemplateLabels)}
	for _, p := range pods {
		if !sel.Matches(labels.Set(p.Labels)) {
			return nil, &failure{code: CodeSelectorMismatch, reason: "podSelector does not select the sandbox's pod " + p.Name}
		}
		sets = append(sets, labels.Set(p.Labels))
	}
	return sets, nil
}

// commit runs step 7 on the read-back object rb; after its write *written
// is the new resourceVersion.
func (e *Engine) commit(ctx context.Context, rb *networkingv1.NetworkPolicy, desired *networkingv1.NetworkPolicySpec, written *string) *failure {
	lkg := Canonical(desired)
	rb.Annotations[AnnotationLastVerifiedSpec] = lkg
	rb.Annotations[AnnotationVerificationState] = v1alpha1.StateVerified
	rb.Annotations[AnnotationVerificationErrorCode] = ""
	delete(rb.Annotations, v1alpha1.AnnotationVerifyingSince)
	if err := e.Client.Update(ctx, rb); err != nil {
		return &failure{code: writeCode(err), reason: "write last-verified-spec: " + err.Error()}
	}
	*written = rb.ResourceVersion
	got := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(rb), got); err != nil {
		return &failure{code: CodeReadFailed, reason: "read back after verification: " + err.Error()}
	}
	if Canonical(&got.Spec) != lkg || got.Annotations[AnnotationLastVerifiedSpec] != lkg ||
		got.Annotations[AnnotationVerificationState] != v1alpha1.StateVerified || got.Annotations[AnnotationVerificationErrorCode] != "" {
		return &failure{code: CodeReadBackMismatch, reason: "the verified policy read back differs from what was written"}
	}
	return nil
}

// rollback undoes a failed PUT. written is the resourceVersion of this
// PUT's last successful write ("" when none succeeded).
func (e *Engine) rollback(ctx context.Context, sb *sandbox.Sandbox, name string, pr prior, written string, f failure) *Result {
	res := &Result{Code: f.code, Conflicts: f.conflicts, PolicyName: name}
	if pr.lkg == nil {
		if err := e.deleteNew(ctx, sb, name, written); err != nil {
			res.Outcome = OutcomeStateUncertain
			res.Message = "update failed, state uncertain: " + f.reason + "; deleting the new policy: " + err.Error()
		} else {
			res.Outcome = OutcomeNewPolicyDeleted
			res.Message = "update failed, new policy deleted: " + f.reason
		}
	} else if err := e.restore(ctx, sb, name, pr, written, f.code); errors.Is(err, errSuperseded) {
		// Another writer verified a newer policy meanwhile: writing our
		// prior LKG over it would undo an update already answered.
		res.Outcome = OutcomeLKGRestored
		res.Message = "update failed, not restored: another update verified the policy meanwhile: " + f.reason
	} else if err != nil {
		res.Outcome = OutcomeStateUncertain
		res.Message = "update failed, state uncertain: " + f.reason + "; restoring the LKG: " + err.Error()
	} else {
		res.Outcome = OutcomeLKGRestored
		res.Message = "update failed, LKG restored: " + f.reason
	}
	e.event(sb, corev1.EventTypeWarning, "EgressUpdateFailed", "Put", "egress policy %s: %s (%s)", name, res.Message, f.code)
	return res
}

// deleteNew deletes the policy this PUT created and confirms it is gone.
// When the PUT's own write failed the object may still exist (an
// ambiguous failure): whatever Verifying policy of this sandbox is there
// is deleted at the resourceVersion read.
func (e *Engine) deleteNew(ctx context.Context, sb *sandbox.Sandbox, name, written string) error {
	key := client.ObjectKey{Namespace: sb.Namespace, Name: name}
	cur := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, key, cur); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("read: %w", err)
	}
	if !e.ours(cur, sb) {
		if written == "" {
			// Our create failed and someone else's policy holds the name:
			// nothing of ours to delete.
			return nil
		}
		return fmt.Errorf("policy %s is no longer corectl's", name)
	}
	rv := cur.ResourceVersion
	if _, ok := cur.Annotations[AnnotationLastVerifiedSpec]; ok && rv != written {
		return fmt.Errorf("policy %s was verified by another writer meanwhile", name)
	}
	uid := cur.UID
	pre := metav1.Preconditions{UID: &uid, ResourceVersion: &rv}
	if err := e.Client.Delete(ctx, cur, &client.DeleteOptions{Preconditions: &pre}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete: %w", err)
	}
	err := e.Client.Get(ctx, key, &networkingv1.NetworkPolicy{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("confirm deletion: %w", err)
	}
	return errors.New("the policy still exists after deletion")
}

// errSuperseded: restore found the policy verified by another writer
// after this PUT's last write; it leaves it alone.
var errSuperseded = errors.New("the policy was verified by another update meanwhile")

// restore writes the prior LKG back and reads it back. written is the
// resourceVersion of this PUT's last successful write ("" when none): a
// policy at another version that is Verified with another LKG was
// committed by a concurrent PUT and is not overwritten (errSuperseded).
func (e *Engine) restore(ctx context.Context, sb *sandbox.Sandbox, name string, pr prior, written, code string) error {
	key := client.ObjectKey{Namespace: sb.Namespace, Name: name}
	state := v1alpha1.StateVerified
	if code == CodePolicyConflict {
		state = v1alpha1.StatePolicyConflict
	}
	cur := &networkingv1.NetworkPolicy{}
	err := e.Client.Get(ctx, key, cur)
	switch {
	case apierrors.IsNotFound(err):
		np := pr.obj.DeepCopy()
		np.ResourceVersion, np.UID, np.Generation, np.CreationTimestamp, np.ManagedFields = "", types.UID(""), 0, metav1.Time{}, nil
		np.Spec = *pr.lkg.DeepCopy()
		setRestored(np, pr.lkgV, state, code)
		if err := e.Client.Create(ctx, np); err != nil {
			return fmt.Errorf("re-create: %w", err)
		}
	case err != nil:
		return fmt.Errorf("read: %w", err)
	default:
		if !e.ours(cur, sb) {
			return fmt.Errorf("policy %s is no longer corectl's", name)
		}
		if cur.ResourceVersion != written && cur.Annotations[AnnotationVerificationState] == v1alpha1.StateVerified &&
			cur.Annotations[AnnotationLastVerifiedSpec] != pr.lkgV {
			return errSuperseded
		}
		cur.Spec = *pr.lkg.DeepCopy()
		setRestored(cur, pr.lkgV, state, code)
		cur.Labels = mergeMaps(cur.Labels, pr.obj.Labels)
		if err := e.Client.Update(ctx, cur); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	got := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, key, got); err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if Canonical(&got.Spec) != pr.lkgV || got.Annotations[AnnotationLastVerifiedSpec] != pr.lkgV ||
		got.Annotations[AnnotationVerificationState] != state || got.Annotations[AnnotationVerificationErrorCode] != code {
		return errors.New("the restored policy read back differs from the LKG")
	}
	return nil
}

func setRestored(np *networkingv1.NetworkPolicy, lkg, state, code string) {
	if np.Annotations == nil {
		np.Annotations = map[string]string{}
	}
	np.Annotations[AnnotationLastVerifiedSpec] = lkg
	np.Annotations[AnnotationVerificationState] = state
	np.Annotations[AnnotationVerificationErrorCode] = code
	delete(np.Annotations, v1alpha1.AnnotationVerifyingSince)
}

// writeCode classifies a write error.
func writeCode(err error) string {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return CodeConcurrentUpdate
	}
	return CodeWriteFailed
}

func (e *Engine) event(sb *sandbox.Sandbox, typ, reason, action, format string, args ...any) {
	if e.Events == nil {
		return
	}
	ref := &corev1.ObjectReference{
		APIVersion: sandbox.GVK.GroupVersion().String(), Kind: sandbox.GVK.Kind,
		Namespace: sb.Namespace, Name: sb.ID, UID: sb.UID,
	}
	e.Events.Eventf(ref, nil, typ, reason, action, format, args...)
}

func mergeMaps(base, over map[string]string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, over)
	return out
}

func mergeOwner(refs []metav1.OwnerReference, sb *sandbox.Sandbox) []metav1.OwnerReference {
	if sb.HasOwnerReference(refs) {
		return refs
	}
	out := make([]metav1.OwnerReference, 0, len(refs)+1)
	for _, r := range refs {
		if r.Controller == nil || !*r.Controller {
			out = append(out, r)
		}
	}
	return append(out, sb.OwnerReference())
}

// Resume finishes a PUT that was interrupted after its write (corectl
// stopped between steps 2 and 7): the policy namespace/name is in state
// Verifying. It re-runs steps 3–7 on the policy as it stands and rolls
// back as Put does (to the LKG in the annotation, or by deleting the
// policy when there is none). It does nothing (nil, nil) when the policy
// is gone, not corectl's, not Verifying, or its BatchSandbox is gone or
// being deleted or has moved to another allocation (the orphan scan's
// job). Errors: ErrIndeterminate when the LKG annotation is corrupt (no
// safe rollback); ErrUnavailable or the sandbox package's ErrUnavailable
// when a read fails (retry later).
func (e *Engine) Resume(ctx context.Context, namespace, name string) (*Result, error) {
	np := &networkingv1.NetworkPolicy{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, np); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: read policy %s/%s: %s", ErrUnavailable, namespace, name, err.Error())
	}
	if np.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue || np.Labels[v1alpha1.LabelClusterID] != e.Cluster.ID ||
		np.Annotations[AnnotationVerificationState] != v1alpha1.StateVerifying {
		return nil, nil
	}
	sb, err := sandbox.Get(ctx, e.Client, namespace, np.Labels[v1alpha1.LabelSandboxID], e.Cluster.AllocationLabelKey())
	switch {
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrDeleting), errors.Is(err, sandbox.ErrNoAllocation), errors.Is(err, sandbox.ErrInvalidID):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if PolicyName(sb.AllocationID) != name || !e.ours(np, sb) {
		return nil, nil
	}
	pr := prior{}
	if v, ok := np.Annotations[AnnotationLastVerifiedSpec]; ok {
		lkg, _, err := ParseLKG(v)
		if err != nil {
			return nil, fmt.Errorf("%w: policy %s/%s: %s", ErrIndeterminate, namespace, name, err.Error())
		}
		pr = prior{obj: np.DeepCopy(), lkg: lkg, lkgV: v}
	}
	written := np.ResourceVersion
	allow, except, err := DecompileExcept(&np.Spec)
	if err != nil {
		return e.rollback(ctx, sb, name, pr, written, failure{code: CodeReadBackMismatch, reason: "interrupted update: " + err.Error()}), nil
	}
	list, err := allowlistOf(allow, except)
	if err != nil {
		return e.rollback(ctx, sb, name, pr, written, failure{code: CodeReadBackMismatch, reason: "interrupted update: " + err.Error()}), nil
	}
	set := cidr.Strings(Subtract(list))
	desired := CompileExcept(e.Cluster, sb.AllocationLabel, sb.AllocationID, list)
	if Canonical(&desired) != Canonical(&np.Spec) {
		return e.rollback(ctx, sb, name, pr, written, failure{code: CodeReadBackMismatch, reason: "interrupted update: the policy is not what corectl compiles for this sandbox now"}), nil
	}
	rb, f := e.verify(ctx, sb, name, &desired, set)
	if f != nil {
		return e.rollback(ctx, sb, name, pr, written, *f), nil
	}
	if f := e.commit(ctx, rb, &desired, &written); f != nil {
		return e.rollback(ctx, sb, name, pr, written, *f), nil
	}
	e.event(sb, corev1.EventTypeNormal, "EgressVerified", "Resume", "interrupted update of egress policy %s verified: %d CIDRs", name, len(set))
	return &Result{Outcome: OutcomeVerified, PolicyName: name}, nil
}

// VerifyingSince returns when np entered Verifying (the zero time when the
// annotation is absent or unparsable: treat as long ago).
func VerifyingSince(np *networkingv1.NetworkPolicy) time.Time {
	t, err := time.Parse(time.RFC3339, np.Annotations[v1alpha1.AnnotationVerifyingSince])
	if err != nil {
		return time.Time{}
	}
	return t
}
