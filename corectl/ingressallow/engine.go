package ingressallow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EventRecorder is the part of k8s.io/client-go/tools/events.EventRecorder
// the engine uses; events go on the SandboxIngressAllowlist.
type EventRecorder interface {
	// Eventf records a Kubernetes Event (eventtype Normal or Warning)
	// on regarding; note is a format for args.
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// Engine runs the ingress allowlist flows of one compute cluster.
type Engine struct {
	// Client reads and writes the cluster's apiserver; not cache-backed
	// (every read is a read-back).
	Client client.Client
	// Cluster is the cluster's configuration (ingress carrier).
	Cluster *cluster.Cluster
	// Events, if not nil, receives an Event on the allowlist object for
	// every completed cycle.
	Events EventRecorder
	// Probe, if not nil, returns the control-plane probe sources P merged
	// into every restricted carrier the engine writes (spec §5.2.2); an
	// error fails the cycle closed with CodeProbeSourceUnknown. nil writes
	// the user set alone.
	Probe func(ctx context.Context) ([]string, error)

	locksMu sync.Mutex
	locks   map[string]*sandboxLock
}

// sandboxLock serialises the cycles and the removal of one sandbox's
// carrier; refs counts its holders and waiters.
type sandboxLock struct {
	mu   sync.Mutex
	refs int
}

// Lock serialises work on sandbox namespace/id's carrier within this
// process: Reconcile holds it for a whole cycle, and a caller that removes
// the carrier and the desired state (create compensation, delete) holds it
// across both, so no cycle that read the desired state before the removal
// can write the carrier again after it. It returns the unlock function.
func (e *Engine) Lock(namespace, id string) (unlock func()) {
	key := namespace + "/" + id
	e.locksMu.Lock()
	if e.locks == nil {
		e.locks = map[string]*sandboxLock{}
	}
	l := e.locks[key]
	if l == nil {
		l = &sandboxLock{}
		e.locks[key] = l
	}
	l.refs++
	e.locksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		e.locksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(e.locks, key)
		}
		e.locksMu.Unlock()
	}
}

// Condition types on SandboxIngressAllowlist.status.conditions.
const (
	// ConditionVerified: the managed Ingress carries the desired set and
	// passed every check of spec §5.2.
	ConditionVerified = "Verified"
	// ConditionReady: Verified for the current desired version.
	ConditionReady = "Ready"
)

// Outcome is how a Reconcile cycle ended.
type Outcome string

// Outcomes of Reconcile.
const (
	// OutcomeNoChange: nothing to do (already verified, or a settled
	// failure).
	OutcomeNoChange Outcome = "NoChange"
	// OutcomeVerified: desired applied, read back and verified; it is the
	// new LKG.
	OutcomeVerified Outcome = "Verified"
	// OutcomeLKGRestored: the update failed; the carrier holds the
	// previous LKG again, read back.
	OutcomeLKGRestored Outcome = "LKGRestored"
	// OutcomeCarrierDeleted: the update failed and there was no LKG; the
	// carrier this cycle wrote is deleted and confirmed gone.
	OutcomeCarrierDeleted Outcome = "CarrierDeleted"
	// OutcomeKept: the update failed before anything was written (foreign
	// carrier, invalid desired, missing sandbox); nothing changed.
	OutcomeKept Outcome = "Kept"
	// OutcomeStateUncertain: the rollback could not be written or
	// confirmed.
	OutcomeStateUncertain Outcome = "StateUncertain"
	// OutcomeSuperseded: another writer (in practice another replica's
	// cycle) changed the carrier after this cycle read or wrote it: this
	// cycle's write failed on the resourceVersion, or its read-back found
	// another version. Nothing is rolled back (the version there is not
	// this cycle's) and the cycle is retried (CodeConcurrentUpdate,
	// ErrTransient).
	OutcomeSuperseded Outcome = "Superseded"
)

// ErrTransient wraps the error Reconcile returns after a failure that a
// retry may fix (apiserver unavailable, write conflicts, uncertain
// rollback): the caller should retry with backoff.
var ErrTransient = errors.New("ingressallow: transient failure, retry")

// Result is what a Reconcile cycle did.
type Result struct {
	// Outcome says how the cycle ended.
	Outcome Outcome
	// Code is the failure code ("" on success or no change).
	Code string
	// Message explains the failure.
	Message string
}

// SetDesired persists the desired allowlist rules (normalised, non-empty;
// see wire.DecodeIngressPut) of sandbox namespace/id in its SandboxIngressAllowlist,
// creating it (owned by the BatchSandbox) when missing. It is a full
// replacement, and every call is a new desired version (spec.revision is
// incremented), so the reconciler runs a cycle for it even when the rules
// are unchanged.
// Conflicting concurrent writers are retried a few times; the last write
// wins. It returns the object as written. Errors: the sandbox package's
// errors (not found, deleting, invalid ID, unavailable);
// ErrClusterMismatch; ErrUnavailable.
func (e *Engine) SetDesired(ctx context.Context, namespace, id string, rules []v1alpha1.IngressRule) (*v1alpha1.SandboxIngressAllowlist, error) {
	sb, err := sandbox.Get(ctx, e.Client, namespace, id, e.Cluster.AllocationLabelKey())
	if err != nil && !errors.Is(err, sandbox.ErrNoAllocation) {
		return nil, err
	}
	return e.setDesired(ctx, sb, namespace, id, rules)
}

// CreateDesired writes the create's initial rules (normalised, non-empty)
// into the SandboxIngressAllowlist of sandbox sb, which the caller has just
// created and read back (with its UID), without reading the BatchSandbox
// or the allowlist first. It only ever creates: when the allowlist already
// exists, a PUT /network/ingress made it after the BatchSandbox appeared
// (the PUT is allowed while the sandbox is Creating, spec §5.3). That PUT
// is the later writer, was answered for its own rules, and its rules
// stand: CreateDesired writes nothing and returns the allowlist as read
// (one more request, on that path only).
//
// Errors: ErrUnavailable (the write or the read failed);
// sandbox.ErrDeleting (the existing allowlist is being deleted);
// ErrClusterMismatch; ErrNotOwned (the existing allowlist belongs to
// another BatchSandbox of that name: never adopted).
func (e *Engine) CreateDesired(ctx context.Context, sb *sandbox.Sandbox, rules []v1alpha1.IngressRule) (*v1alpha1.SandboxIngressAllowlist, error) {
	al := newAllowlist(e.Cluster.ID, sb, rules)
	err := e.Client.Create(ctx, al)
	if err == nil {
		return al, nil
	}
	key := client.ObjectKey{Namespace: sb.Namespace, Name: sb.ID}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("%w: write SandboxIngressAllowlist %s: %s", ErrUnavailable, key, err.Error())
	}
	al = &v1alpha1.SandboxIngressAllowlist{}
	if err := e.Client.Get(ctx, key, al); err != nil {
		return nil, fmt.Errorf("%w: read SandboxIngressAllowlist %s: %s", ErrUnavailable, key, err.Error())
	}
	if err := e.writable(al); err != nil {
		return nil, err
	}
	if !sb.HasOwnerReference(al.OwnerReferences) {
		return nil, fmt.Errorf("%w: SandboxIngressAllowlist %s has no owner reference to BatchSandbox UID %s", ErrNotOwned, key, sb.UID)
	}
	return al, nil
}

// writable reports why an existing allowlist al may not be written for
// this cluster: sandbox.ErrDeleting when it is being deleted,
// ErrClusterMismatch when it is another cluster's; nil otherwise.
func (e *Engine) writable(al *v1alpha1.SandboxIngressAllowlist) error {
	switch {
	case al.DeletionTimestamp != nil:
		return fmt.Errorf("%w: SandboxIngressAllowlist %s/%s", sandbox.ErrDeleting, al.Namespace, al.Name)
	case al.Spec.ClusterID != e.Cluster.ID:
		return fmt.Errorf("%w: %s/%s is for cluster %q", ErrClusterMismatch, al.Namespace, al.Name, al.Spec.ClusterID)
	}
	return nil
}

// newAllowlist is the SandboxIngressAllowlist of sandbox sb in cluster
// clusterID holding rules, at revision 1, owned by the BatchSandbox.
func newAllowlist(clusterID string, sb *sandbox.Sandbox, rules []v1alpha1.IngressRule) *v1alpha1.SandboxIngressAllowlist {
	al := &v1alpha1.SandboxIngressAllowlist{
		ObjectMeta: metav1.ObjectMeta{
			Name: sb.ID, Namespace: sb.Namespace, Labels: sb.IdentityLabels(clusterID),
			Annotations:     map[string]string{v1alpha1.AnnotationOwner: sb.OwnerAnnotation()},
			OwnerReferences: []metav1.OwnerReference{sb.OwnerReference()},
		},
		Spec: v1alpha1.SandboxIngressAllowlistSpec{ClusterID: clusterID, Desired: slices.Clone(rules), Revision: 1},
	}
	sb.MarkOwner(al)
	return al
}

func (e *Engine) setDesired(ctx context.Context, sb *sandbox.Sandbox, namespace, id string, rules []v1alpha1.IngressRule) (*v1alpha1.SandboxIngressAllowlist, error) {
	for attempt := 0; ; attempt++ {
		al := &v1alpha1.SandboxIngressAllowlist{}
		err := e.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: id}, al)
		switch {
		case apierrors.IsNotFound(err):
			al = newAllowlist(e.Cluster.ID, sb, rules)
			err = e.Client.Create(ctx, al)
		case err != nil:
			return nil, fmt.Errorf("%w: read SandboxIngressAllowlist %s/%s: %s", ErrUnavailable, namespace, id, err.Error())
		default:
			if err := e.writable(al); err != nil {
				return nil, err
			}
			al.Spec.Desired = slices.Clone(rules)
			al.Spec.Revision++
			err = e.Client.Update(ctx, al)
		}
		if err == nil {
			return al, nil
		}
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 4 {
			continue
		}
		return nil, fmt.Errorf("%w: write SandboxIngressAllowlist %s/%s: %s", ErrUnavailable, namespace, id, err.Error())
	}
}

// transient reports whether a failure code may go away on retry.
func transient(code string) bool {
	return code == CodeWriteFailed || code == CodeReadFailed || code == CodeConcurrentUpdate
}

// Settled reports whether a cycle finds nothing to do for allowlist al of
// a sandbox sb that exists, whose managed carrier is cur (nil: none): the
// desired version was observed, no cycle is in flight (Verifying), the
// state is not Indeterminate and the last failure was not transient; and
// either the state is a settled failure (not Verified), or it is Verified
// and the carrier still passes CheckCarrier with the verified set. A cycle
// ends with OutcomeNoChange exactly then (ReconcileFrom); the reconciler
// asks it of its informer cache first (controller.IngressReconciler).
func Settled(c *cluster.Cluster, al *v1alpha1.SandboxIngressAllowlist, sb *sandbox.Sandbox, cur *networkingv1.Ingress) bool {
	st := &al.Status
	if st.ObservedGeneration != al.Generation || st.VerificationState == v1alpha1.StateVerifying ||
		st.VerificationState == v1alpha1.StateIndeterminate || transient(st.LastErrorCode) {
		return false
	}
	if st.VerificationState != v1alpha1.StateVerified {
		return true
	}
	if cur == nil {
		return false
	}
	code, _ := CheckCarrier(c, sb, cur, st.LastVerified)
	return code == ""
}

// Reconcile runs one cycle for the SandboxIngressAllowlist namespace/id
// (spec §5.2): when the desired version is new, an earlier cycle was
// interrupted (Verifying), the last failure was transient or left the
// state Indeterminate, or the verified carrier drifted, it sets
// Verifying, writes the managed Ingress, reads it back, checks every
// condition (CheckCarrier, and no other Ingress claims the path), and then
// records Applied, AppliedVersion, the LKG and Verified. On failure it
// keeps the previous applied state and LKG: it writes the LKG back to the
// carrier and reads it back (UnverifiedSpec, or Indeterminate when that
// cannot be confirmed), or, with no LKG, deletes the carrier it wrote
// (never widening, never falling back to a template). Events and
// conditions record the result on the object.
//
// Cycles for one sandbox may run at once in several replicas (the lock
// is per process). Every write is conditional, so their results cannot
// interleave into a wrong record: status writes on the allowlist's
// resourceVersion (Verifying first, with a new status.cycle, so it
// always changes the object), carrier writes on the carrier version the
// cycle read or wrote (a rollback never lands over another cycle's later
// write), and a cycle records a carrier version only as read back from
// its own write, or, writing nothing, only when no other cycle can still
// write over that version (settledOn). A cycle that finds another
// writer's version (OutcomeSuperseded) rolls nothing back and is
// retried.
//
// The error wraps ErrTransient when a retry is due, or is an apiserver
// error reading the allowlist itself.
func (e *Engine) Reconcile(ctx context.Context, namespace, id string) (*Result, error) {
	defer e.Lock(namespace, id)()
	return e.ReconcileLocked(ctx, namespace, id)
}

// ReconcileLocked is Reconcile for a caller that holds Lock(namespace, id)
// (the create orchestration holds it from writing the desired state to
// the end of the first cycle, so the reconciler's cycle, woken by that
// write, finds the work done).
func (e *Engine) ReconcileLocked(ctx context.Context, namespace, id string) (*Result, error) {
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: id}, al); err != nil {
		if apierrors.IsNotFound(err) {
			return &Result{Outcome: OutcomeNoChange}, nil
		}
		return nil, fmt.Errorf("%w: read SandboxIngressAllowlist: %s", ErrTransient, err.Error())
	}
	return e.ReconcileFrom(ctx, al)
}

// ReconcileFrom is ReconcileLocked for a caller that also holds al as the
// apiserver just answered it (CreateDesired's result): the cycle starts
// from al instead of reading it again. Its status writes are conditional
// on al's resourceVersion, so a newer desired version written meanwhile
// fails them (ErrTransient) rather than being overwritten.
func (e *Engine) ReconcileFrom(ctx context.Context, al *v1alpha1.SandboxIngressAllowlist) (*Result, error) {
	return e.reconcileFrom(ctx, al, nil)
}

// reconcileFrom is ReconcileFrom with pre, the path-claim lists a create
// asked for when it created the carrier (nil: none). The cycle uses them
// only when it reads the carrier at pre.Carrier, the version the create
// last wrote; otherwise it asks for its own.
func (e *Engine) reconcileFrom(ctx context.Context, al *v1alpha1.SandboxIngressAllowlist, pre *Claims) (*Result, error) {
	namespace, id := al.Namespace, al.Name
	if al.DeletionTimestamp != nil || al.Spec.ClusterID != e.Cluster.ID {
		return &Result{Outcome: OutcomeNoChange}, nil
	}
	st := &al.Status
	sb, serr := sandbox.Get(ctx, e.Client, namespace, id, e.Cluster.AllocationLabelKey())
	if serr != nil && !errors.Is(serr, sandbox.ErrNoAllocation) {
		if errors.Is(serr, sandbox.ErrUnavailable) {
			return nil, fmt.Errorf("%w: %s", ErrTransient, serr.Error())
		}
		if st.ObservedGeneration == al.Generation && st.LastErrorCode == CodeSandboxNotFound {
			return &Result{Outcome: OutcomeNoChange}, nil
		}
		return e.finish(ctx, al, nil, &Result{Outcome: OutcomeKept, Code: CodeSandboxNotFound, Message: serr.Error()})
	}
	key := client.ObjectKey{Namespace: e.Cluster.Ingress.Namespace, Name: IngressName(id)}
	cur := &networkingv1.Ingress{}
	if err := e.Client.Get(ctx, key, cur); apierrors.IsNotFound(err) {
		cur = nil
	} else if err != nil {
		return nil, fmt.Errorf("%w: read Ingress %s: %s", ErrTransient, key, err.Error())
	}
	if Settled(e.Cluster, al, sb, cur) {
		return &Result{Outcome: OutcomeNoChange}, nil
	}
	// Otherwise a new desired version, an interrupted or transiently
	// failed cycle, or a verified carrier that drifted or vanished: apply
	// desired again.
	set, err := desiredSet(al)
	if err != nil {
		return e.finish(ctx, al, sb, &Result{Outcome: OutcomeKept, Code: CodeDesiredInvalid, Message: err.Error()})
	}
	if cur != nil && !isOurs(e.Cluster, sb, cur) && awaitsBackfill(e.Cluster, sb, cur) {
		// A PUT made while the create is between its BatchSandbox and its
		// owner back-fill: the carrier is the create's, not foreign.
		// Nothing is written or recorded in the status (a settled
		// CarrierForeign would fail the create's own cycle); the retry
		// after the back-fill, or the create's cycle, applies the PUT's
		// rules. A Normal Event tells whoever reads `kubectl describe` of
		// the allowlist meanwhile (it stays Pending) why.
		if e.Events != nil {
			e.Events.Eventf(al, nil, corev1.EventTypeNormal, "AwaitingOwnerBackfill", "Reconcile",
				"managed Ingress %s was written by the sandbox's create, which has not yet recorded the BatchSandbox as its owner; retried after that", key)
		}
		return nil, fmt.Errorf("%w: Ingress %s awaits its create's owner back-fill", ErrTransient, key)
	}
	if cur != nil && !isOurs(e.Cluster, sb, cur) {
		return e.finish(ctx, al, sb, &Result{Outcome: OutcomeKept, Code: CodeCarrierForeign,
			Message: fmt.Sprintf("Ingress %s exists and is not corectl's carrier for this sandbox", key)})
	}

	// The path-claim lists are consistent reads, which wait for the
	// apiserver's watch cache (see candidates). They must be asked once
	// the carrier claims the sandbox path, so that they show every Ingress
	// written before the claim. A carrier of ours that already claims it
	// (host, class, path) was read just above: a create's lists asked when
	// it created this carrier serve (pre, when the carrier is still at the
	// version the create wrote, whose writes never move the path), or they
	// are asked now and their wait runs beside this cycle's writes.
	// Otherwise they are asked once the cycle's write has landed.
	var claims func() ([]networkingv1.Ingress, error)
	if cur != nil && claimsOwnPath(e.Cluster, cur, id) {
		if pre != nil && pre.Carrier != "" && pre.Carrier == cur.ResourceVersion {
			claims = pre.wait
		} else {
			claims = e.startCandidates(ctx, id)
		}
	}

	// Verifying is the cycle's first write, conditional on al's
	// resourceVersion: no carrier write (the update, or a rollback's
	// restore or delete) comes before it, so a cycle whose view of the
	// allowlist is stale (a newer LKG recorded meanwhile by another
	// replica's cycle) fails there instead of rolling the carrier back to
	// its old LKG.
	verifying := false
	setVerifying := func() error {
		if verifying {
			return nil
		}
		st.VerificationState = v1alpha1.StateVerifying
		st.CarrierRef = Ref(e.Cluster, sb)
		st.Cycle++
		if err := e.Client.Status().Update(ctx, al); err != nil {
			return fmt.Errorf("%w: set Verifying: %s", ErrTransient, err.Error())
		}
		verifying = true
		return nil
	}
	// fail rolls back over base, the carrier version this cycle may
	// write over (see rollback).
	fail := func(base *networkingv1.Ingress, code, reason string) (*Result, error) {
		if err := setVerifying(); err != nil {
			return nil, err
		}
		return e.fail(ctx, al, sb, base, code, reason)
	}
	superseded := func(reason string) (*Result, error) {
		return e.finish(ctx, al, sb, &Result{Outcome: OutcomeSuperseded, Code: CodeConcurrentUpdate,
			Message: "update superseded, not rolled back: " + reason})
	}
	var probe []string
	if e.Probe != nil && len(set) > 0 {
		p, err := e.Probe(ctx)
		if err != nil {
			return fail(cur, CodeProbeSourceUnknown, "discover the probe source: "+err.Error())
		}
		probe = p
	}
	want := CarrierWithProbe(e.Cluster, sb, set, probe)
	rb := cur
	if cur == nil || !holds(cur, want, sb) || !settledOn(st, cur) {
		// Verifying, then write, then read back. Every write is
		// conditional: an update on the version read above, a create on
		// there being none.
		if err := setVerifying(); err != nil {
			return nil, err
		}
		mark := cycleMark(st.Cycle, false)
		written, werr := e.writeMarked(ctx, sb, cur, want, mark)
		if apierrors.IsAlreadyExists(werr) {
			// Created meanwhile by someone else: never ours to overwrite.
			if got := (&networkingv1.Ingress{}); e.Client.Get(ctx, key, got) == nil && !isOurs(e.Cluster, sb, got) {
				return e.finish(ctx, al, sb, &Result{Outcome: OutcomeKept, Code: CodeCarrierForeign,
					Message: fmt.Sprintf("Ingress %s was created meanwhile and is not corectl's carrier for this sandbox", key)})
			}
		}
		if apierrors.IsConflict(werr) || apierrors.IsAlreadyExists(werr) {
			// Another writer changed the carrier after this cycle read
			// it: nothing of this cycle's is on it, so there is nothing
			// to roll back, and the version there is not this cycle's to
			// overwrite. The next cycle starts from it.
			return superseded("write the Ingress: " + werr.Error())
		}
		if werr != nil {
			// The write may or may not have applied (a timeout): roll
			// back only a carrier that is the version read above or
			// carries this cycle's mark.
			now := &networkingv1.Ingress{}
			if gerr := e.Client.Get(ctx, key, now); apierrors.IsNotFound(gerr) {
				now = nil
			} else if gerr != nil {
				return e.finish(ctx, al, sb, &Result{Outcome: OutcomeStateUncertain, Code: writeCode(werr),
					Message: "update failed, state uncertain: write the Ingress: " + werr.Error() + "; read it: " + gerr.Error()})
			}
			if !sameVersion(now, cur) && (now == nil || now.Annotations[AnnotationCycle] != mark) {
				return superseded("write the Ingress: " + werr.Error() + "; another writer changed it meanwhile")
			}
			return fail(now, writeCode(werr), "write the Ingress: "+werr.Error())
		}
		// Asked once the write has landed when the carrier did not claim
		// the path before it; they wait beside the read-back.
		if claims == nil {
			claims = e.startCandidates(ctx, id)
		}
		rb = &networkingv1.Ingress{}
		if err := e.Client.Get(ctx, key, rb); err != nil {
			return fail(written, CodeReadFailed, "read back the Ingress: "+err.Error())
		}
		if rb.ResourceVersion != written.ResourceVersion {
			// Another writer's version: verifying or recording it as
			// this cycle's would describe someone else's write.
			return superseded(fmt.Sprintf("the Ingress changed after this cycle's write (version %s, read back %s)",
				written.ResourceVersion, rb.ResourceVersion))
		}
	}
	if code, reason := CheckCarrier(e.Cluster, sb, rb, set); code != "" {
		return fail(rb, code, reason)
	}
	if claims == nil {
		claims = e.startCandidates(ctx, id)
	}
	list, err := claims()
	if err != nil {
		return fail(rb, CodeReadFailed, "list Ingresses: "+err.Error())
	}
	if c := Claimants(list, key.String(), e.Cluster.Ingress.Host, e.Cluster.Ingress.ClassName, Path(id)); len(c) > 0 {
		return fail(rb, CodePathClaimed, "other Ingresses claim "+Path(id)+": "+strings.Join(c, ", "))
	}
	st.Applied, st.AppliedVersion = set, rb.ResourceVersion
	st.LastVerified, st.LastVerifiedGeneration = slices.Clone(set), al.Generation
	return e.finish(ctx, al, sb, &Result{Outcome: OutcomeVerified})
}

// AnnotationCycle marks every carrier write of a Reconcile cycle with
// the cycle's number (status.cycle, one more for every cycle that sets
// Verifying): "<n>" on the write of the desired set and "<n>-rollback"
// on the rollback, so the value differs from one write to the next. Each
// cycle write therefore changes the carrier even when the rules are the
// same (it moves the resourceVersion any other cycle's conditional write
// was based on), and the reconciler can tell a cycle's write apart from
// anyone else's edit (IsCycleWrite): since every cycle write is
// conditional on the carrier version that cycle read or wrote, the marks
// on one carrier only ever grow.
const AnnotationCycle = "network.sandgate.io/cycle"

// cycleMark is the AnnotationCycle value of cycle n's write: "<n>", or
// "<n>-rollback" for its rollback.
func cycleMark(n int64, rollback bool) string {
	m := strconv.FormatInt(n, 10)
	if rollback {
		m += "-rollback"
	}
	return m
}

// parseCycleMark is cycleMark's inverse, ordered for comparison: the
// rollback of cycle n is after its write (2n+1 against 2n). ok is false
// for an absent or malformed mark.
func parseCycleMark(m string) (order uint64, ok bool) {
	num, rollback := strings.CutSuffix(m, "-rollback")
	n, err := strconv.ParseUint(num, 10, 62)
	if err != nil || num != strconv.FormatUint(n, 10) {
		return 0, false
	}
	order = 2 * n
	if rollback {
		order++
	}
	return order, true
}

// IsCycleWrite reports whether an update of a managed carrier from old to
// cur was a Reconcile cycle's write: cur carries a well-formed
// AnnotationCycle mark later than old's (old unmarked, or an earlier
// cycle's or write's). The cycle that wrote it records its own result, so
// the write needs no further cycle at once: the reconciler only looks at
// the allowlist again after a while (controller.IngressReconciler.
// CycleWriteRecheck), which keeps a carrier that an admission webhook
// alters on every write from waking a new cycle with each write (the
// failed cycle is retried with the reconciler's rate-limited backoff
// instead). An edit that puts back an earlier mark (e.g. a kubectl apply
// of a saved copy of the carrier) or drops the mark is not a cycle's
// write and wakes a cycle at once, which repairs the carrier; an edit
// that forges a later mark, or one the informer only sees folded into one
// update with a later cycle write (its re-list after a broken watch hands
// over the versions in between as one update), waits for that recheck.
func IsCycleWrite(old, cur *networkingv1.Ingress) bool {
	c, ok := parseCycleMark(cur.Annotations[AnnotationCycle])
	if !ok {
		return false
	}
	o, ok := parseCycleMark(old.Annotations[AnnotationCycle])
	return !ok || c > o
}

// settledOn reports whether the cycle may take the live carrier cur,
// which already holds what it would write, as its read-back without
// writing: only when no other cycle can still write over that version.
// A cycle writes over the version it read or wrote (its writes are
// conditional on it); so cur must carry no cycle's mark (the create
// orchestration or an admin wrote it) or be the applied version a
// finished cycle recorded, and no cycle may be in flight (Verifying: it
// may have written cur, or read it, and still roll back over it).
// Otherwise the cycle writes the carrier (with its own mark), which makes
// every such write fail on its resourceVersion.
func settledOn(st *v1alpha1.SandboxIngressAllowlistStatus, cur *networkingv1.Ingress) bool {
	if st.VerificationState == v1alpha1.StateVerifying {
		return false
	}
	_, marked := cur.Annotations[AnnotationCycle]
	return !marked || st.AppliedVersion == cur.ResourceVersion
}

// sameVersion reports whether a and b (nil: no carrier) are the same
// version of the carrier.
func sameVersion(a, b *networkingv1.Ingress) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.UID == b.UID && a.ResourceVersion == b.ResourceVersion
}

// writeMarked writes want, sb's carrier, with the cycle mark mark
// (AnnotationCycle): over base, the carrier version this cycle read or
// wrote, as overwrite makes it (an update conditional on base's
// resourceVersion), or, with base nil, as a create (conditional on there
// being none). It returns the object as written (its resourceVersion the
// write's) and the apiserver's error. want may be modified.
func (e *Engine) writeMarked(ctx context.Context, sb *sandbox.Sandbox, base, want *networkingv1.Ingress, mark string) (*networkingv1.Ingress, error) {
	if base == nil {
		want.Annotations[AnnotationCycle] = mark
		return want, e.Client.Create(ctx, want)
	}
	written := overwrite(base, want, sb)
	written.Annotations[AnnotationCycle] = mark
	return written, e.Client.Update(ctx, written)
}

// overwrite returns the live carrier cur as a write of want (sb's carrier,
// CarrierWithProbe) over it sets it: the labels merged, the annotations
// carrierAnnotations makes (corectl's laid over the live ones, every
// refused annotation dropped), the owner reference to the BatchSandbox
// added when want has one, and want's spec; cur's resourceVersion, so the
// update fails on a write made since cur was read. Every write over a live
// carrier (a cycle's, an LKG restore, RewriteProbeSources) goes through
// it; a cycle's write and its restore (writeMarked) then set
// AnnotationCycle. cur is not modified.
func overwrite(cur, want *networkingv1.Ingress, sb *sandbox.Sandbox) *networkingv1.Ingress {
	upd := cur.DeepCopy()
	upd.Labels = mergeMaps(cur.Labels, want.Labels)
	upd.Annotations = carrierAnnotations(cur.Annotations, want.Annotations)
	if len(want.OwnerReferences) > 0 && !sb.HasOwnerReference(upd.OwnerReferences) {
		upd.OwnerReferences = append(upd.OwnerReferences, want.OwnerReferences...)
	}
	upd.Spec = want.Spec
	return upd
}

// RewriteProbeSources writes the managed carrier of sandbox namespace/id
// again with the probe sources probe (just rediscovered after the fixed
// entry answered a readiness probe 403: the control-plane source may have
// moved, spec §5.2.2 IV) merged into the user set it was last verified
// with (the allowlist's status.lastVerified, so a PUT verified since the
// create began stands), reads it back (CheckCarrier against that set) and
// records the read-back in status (applied: that set, appliedVersion: the
// carrier's resourceVersion read back, as a verified cycle does).
// The write is overwrite's, as every cycle's: conditional on the carrier
// as read, and it drops every annotation a carrier may not carry; before
// it, a status write conditional on the allowlist as read fences it
// against another replica's cycle (see Reconcile). It holds
// Lock(namespace, id), so no cycle of this process runs in between.
// Errors: the allowlist or the BatchSandbox cannot be read, the allowlist
// has no verified set, the carrier is missing or not corectl's, the
// allowlist changed since it was read or the write fails (a conflict
// included), the read-back does not verify, or its record fails (the
// allowlist changed since the mark).
func (e *Engine) RewriteProbeSources(ctx context.Context, namespace, id string, probe []string) error {
	defer e.Lock(namespace, id)()
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: id}, al); err != nil {
		return fmt.Errorf("read SandboxIngressAllowlist %s/%s: %w", namespace, id, err)
	}
	set := al.Status.LastVerified
	if len(set) == 0 || !cidr.IsNormalized(set) {
		return fmt.Errorf("SandboxIngressAllowlist %s/%s has no verified allowlist to rewrite", namespace, id)
	}
	sb, err := sandbox.Get(ctx, e.Client, namespace, id, e.Cluster.AllocationLabelKey())
	if err != nil && !errors.Is(err, sandbox.ErrNoAllocation) {
		return err
	}
	key := client.ObjectKey{Namespace: e.Cluster.Ingress.Namespace, Name: IngressName(id)}
	cur := &networkingv1.Ingress{}
	if err := e.Client.Get(ctx, key, cur); err != nil {
		return fmt.Errorf("read Ingress %s: %w", key, err)
	}
	if !isOurs(e.Cluster, sb, cur) {
		return fmt.Errorf("%s: Ingress %s is not corectl's carrier for this sandbox", CodeCarrierForeign, key)
	}
	// As a cycle's Verifying does, a status write conditional on the
	// allowlist as read (a new status.cycle, so it changes the object)
	// comes after the carrier is read and before it is written: a cycle
	// in another replica that recorded a result since the allowlist was
	// read makes it fail, so the set read above is never written under a
	// newer record; a carrier write since the carrier was read makes the
	// update below fail.
	al.Status.Cycle++
	if err := e.Client.Status().Update(ctx, al); err != nil {
		return fmt.Errorf("mark SandboxIngressAllowlist %s/%s before the rewrite: %w", namespace, id, err)
	}
	if err := e.Client.Update(ctx, overwrite(cur, CarrierWithProbe(e.Cluster, sb, set, probe), sb)); err != nil {
		return fmt.Errorf("rewrite Ingress %s: %w", key, err)
	}
	rb := &networkingv1.Ingress{}
	if err := e.Client.Get(ctx, key, rb); err != nil {
		return fmt.Errorf("read back Ingress %s: %w", key, err)
	}
	if code, reason := CheckCarrier(e.Cluster, sb, rb, set); code != "" {
		return fmt.Errorf("Ingress %s after the rewrite: %s: %s", key, code, reason)
	}
	// The read-back verified: it is the carrier's applied version now
	// (status.appliedVersion is the version of the last successful
	// read-back, spec §5.2), recorded conditional on the mark above, so a
	// cycle that ran since keeps its own record.
	al.Status.Applied, al.Status.AppliedVersion = slices.Clone(set), rb.ResourceVersion
	if err := e.Client.Status().Update(ctx, al); err != nil {
		return fmt.Errorf("record the rewritten Ingress %s in SandboxIngressAllowlist %s/%s: %w", key, namespace, id, err)
	}
	return nil
}

// holds reports whether the live carrier cur already is want: the write
// Reconcile would make (mergeMaps of the labels, carrierAnnotations of the
// annotations, the owner reference added, want's spec) changes nothing
// but the cycle mark. Reconcile then writes nothing when settledOn also
// holds, so no Verifying state marks a write in flight, and cur, read
// from the apiserver in this cycle, is the read-back.
func holds(cur, want *networkingv1.Ingress, sb *sandbox.Sandbox) bool {
	return maps.Equal(mergeMaps(cur.Labels, want.Labels), cur.Labels) &&
		maps.Equal(carrierAnnotations(cur.Annotations, want.Annotations), cur.Annotations) &&
		(len(want.OwnerReferences) == 0 || sb.HasOwnerReference(cur.OwnerReferences)) &&
		apiequality.Semantic.DeepEqual(cur.Spec, want.Spec)
}

// candidates lists every Ingress, in all namespaces, that could claim the
// path of sandbox id: all Ingresses without the platform managed-by label,
// and managed ones carrying the same sandbox ID (another namespace's
// sandbox of the same ID). Managed carriers of other sandbox IDs own
// /<otherID>/ and cannot claim /<id>/, so they are not listed (this keeps
// the lists small when a cluster holds many sandboxes).
//
// The lists are consistent reads (no resourceVersion): they wait for the
// apiserver's watch cache to reach the store's current revision, which,
// when nothing of the kind was written since, is the cache's next progress
// notification, requested at most every 100 ms (kube-apiserver's
// progressRequestPeriod). They were lists "not older than" the carrier's
// read-back version, served by the watch cache once it held that version,
// without the wait; but such a list missed, now and then, an Ingress
// created before the carrier's write (kube-apiserver 1.37.2 under load:
// 2 in 200 runs of TestInterleavedCyclesRollbackOverVerified, 0 in 300
// with consistent reads), so a cycle recorded Verified over a claimed
// path. startCandidates asks for them as soon as the carrier is written,
// so the wait runs beside the read-back.
func (e *Engine) candidates(ctx context.Context, id string) ([]networkingv1.Ingress, error) {
	foreign, err := labels.Parse(v1alpha1.LabelManagedBy + " notin (" + v1alpha1.ManagedByValue + ")")
	if err != nil {
		return nil, err
	}
	// The two lists are independent reads: sent together, a cycle waits
	// for one of them instead of both in turn.
	var a, b networkingv1.IngressList
	errB := make(chan error, 1)
	go func() {
		errB <- e.Client.List(ctx, &b, client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelSandboxID: id})
	}()
	errA := e.Client.List(ctx, &a, client.MatchingLabelsSelector{Selector: foreign})
	if err := errors.Join(errA, <-errB); err != nil {
		return nil, err
	}
	return append(a.Items, b.Items...), nil
}

// Claims holds the path-claim lists of one sandbox that a create asked
// for as soon as it created the carrier (StartClaims), for the first
// cycle of that create (Settle), which they spare the wait of its own.
type Claims struct {
	// Carrier is the resourceVersion of the carrier as the create last
	// wrote it (the owner back-fill's answer): the cycle uses the lists
	// only when it reads the carrier at this version, so they were asked
	// after the carrier claimed the path and nobody has written it since.
	// Empty: the lists are not used.
	Carrier string
	wait    func() ([]networkingv1.Ingress, error)
}

// StartClaims asks at once for the path-claim lists of sandbox id (the
// cycle's two consistent lists of Ingresses, see candidates), for a
// create that has just created the carrier of id: the lists then show
// every Ingress written before the carrier claimed the path. The answer
// is kept until Settle's first cycle takes it (an error is that cycle's
// CodeReadFailed); a create that fails first drops it.
func (e *Engine) StartClaims(ctx context.Context, id string) *Claims {
	return &Claims{wait: e.startCandidates(ctx, id)}
}

// startCandidates asks for candidates(ctx, id) at once and returns the
// function that waits for the answer.
func (e *Engine) startCandidates(ctx context.Context, id string) func() ([]networkingv1.Ingress, error) {
	type answer struct {
		list []networkingv1.Ingress
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		list, err := e.candidates(ctx, id)
		ch <- answer{list, err}
	}()
	return func() ([]networkingv1.Ingress, error) {
		a := <-ch
		return a.list, a.err
	}
}

// fail rolls the carrier back after a failed write or check. base is the
// carrier version the cycle may write over: the one it read when it
// wrote nothing, its own write, or (nil) none when there was no carrier.
// Every rollback write is conditional on base (an update on its
// resourceVersion, a delete on its UID and resourceVersion, a create on
// there being none), so a rollback never lands over a write another
// cycle made after this cycle's last one.
func (e *Engine) fail(ctx context.Context, al *v1alpha1.SandboxIngressAllowlist, sb *sandbox.Sandbox, base *networkingv1.Ingress, code, reason string) (*Result, error) {
	st := &al.Status
	res := &Result{Code: code}
	key := client.ObjectKey{Namespace: e.Cluster.Ingress.Namespace, Name: IngressName(sb.ID)}
	mark := cycleMark(st.Cycle, true)
	if len(st.LastVerified) > 0 {
		rv, err := e.restore(ctx, sb, key, base, st.LastVerified, mark)
		if err != nil {
			res.Outcome, res.Message = OutcomeStateUncertain, "update failed, state uncertain: "+reason+"; restoring the LKG: "+err.Error()
		} else {
			res.Outcome, res.Message = OutcomeLKGRestored, "update failed, LKG restored: "+reason
			st.Applied, st.AppliedVersion = slices.Clone(st.LastVerified), rv
		}
	} else if err := e.deleteCarrier(ctx, sb, key, base); err != nil {
		res.Outcome, res.Message = OutcomeStateUncertain, "update failed, state uncertain: "+reason+"; deleting the new Ingress: "+err.Error()
	} else {
		res.Outcome, res.Message = OutcomeCarrierDeleted, "update failed, new Ingress deleted: "+reason
		st.Applied, st.AppliedVersion = nil, ""
	}
	return e.finish(ctx, al, sb, res)
}

// restore writes the LKG set over base (nil: creates it), marked mark,
// and confirms it by read-back; it returns the carrier's resourceVersion.
func (e *Engine) restore(ctx context.Context, sb *sandbox.Sandbox, key client.ObjectKey, base *networkingv1.Ingress, lkg []string, mark string) (string, error) {
	// Keep the probe sources the carrier records (the LKG was verified
	// with them); else ask for them.
	var probe []string
	if base != nil {
		probe, _ = ProbeSources(base)
	}
	if probe == nil && e.Probe != nil {
		probe, _ = e.Probe(ctx)
	}
	if base != nil && !isOurs(e.Cluster, sb, base) {
		return "", errors.New("the Ingress is no longer corectl's carrier")
	}
	written, err := e.writeMarked(ctx, sb, base, CarrierWithProbe(e.Cluster, sb, lkg, probe), mark)
	if err != nil {
		if base == nil {
			return "", fmt.Errorf("re-create: %w", err)
		}
		return "", fmt.Errorf("write: %w", err)
	}
	rb := &networkingv1.Ingress{}
	if err := e.Client.Get(ctx, key, rb); err != nil {
		return "", fmt.Errorf("read back: %w", err)
	}
	if rb.ResourceVersion != written.ResourceVersion {
		return "", fmt.Errorf("read back: the Ingress changed after the restore (version %s, read back %s)", written.ResourceVersion, rb.ResourceVersion)
	}
	if code, reason := CheckCarrier(e.Cluster, sb, rb, lkg); code != "" {
		return "", fmt.Errorf("read back: %s", reason)
	}
	return rb.ResourceVersion, nil
}

// deleteCarrier deletes base, corectl's carrier for sb as this cycle
// last saw it (nil: there is none), on its UID and resourceVersion, and
// confirms it is gone. An Ingress of that name that is not corectl's
// carrier for sb is left alone (it is not the one this cycle wrote).
func (e *Engine) deleteCarrier(ctx context.Context, sb *sandbox.Sandbox, key client.ObjectKey, base *networkingv1.Ingress) error {
	if base == nil || !isOurs(e.Cluster, sb, base) {
		return nil
	}
	uid, rv := base.UID, base.ResourceVersion
	pre := metav1.Preconditions{UID: &uid, ResourceVersion: &rv}
	if err := e.Client.Delete(ctx, base.DeepCopy(), &client.DeleteOptions{Preconditions: &pre}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete: %w", err)
	}
	err := e.Client.Get(ctx, key, &networkingv1.Ingress{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("confirm deletion: %w", err)
	}
	return errors.New("the Ingress still exists after deletion")
}

// finish records a cycle's result in status (state, code, observed
// version, conditions) and emits an Event. sb may be nil when the sandbox
// is gone.
func (e *Engine) finish(ctx context.Context, al *v1alpha1.SandboxIngressAllowlist, sb *sandbox.Sandbox, res *Result) (*Result, error) {
	st := &al.Status
	st.ObservedGeneration = al.Generation
	st.LastErrorCode, st.LastErrorMessage = res.Code, clip(res.Message)
	switch res.Outcome {
	case OutcomeVerified:
		st.VerificationState = v1alpha1.StateVerified
	case OutcomeStateUncertain:
		st.VerificationState = v1alpha1.StateIndeterminate
	case OutcomeKept:
		if res.Code == CodeSandboxNotFound {
			st.VerificationState = v1alpha1.StateIndeterminate
		} else {
			st.VerificationState = v1alpha1.StateUnverifiedSpec
		}
	default:
		st.VerificationState = v1alpha1.StateUnverifiedSpec
	}
	if sb != nil {
		st.CarrierRef = Ref(e.Cluster, sb)
	}
	verified := metav1.Condition{Type: ConditionVerified, Status: metav1.ConditionFalse, Reason: reasonOf(res.Code), Message: clip(res.Message), ObservedGeneration: al.Generation}
	if res.Outcome == OutcomeVerified {
		verified.Status, verified.Reason, verified.Message = metav1.ConditionTrue, "Verified", "the managed Ingress carries the desired allowlist"
	}
	ready := verified
	ready.Type = ConditionReady
	meta.SetStatusCondition(&st.Conditions, verified)
	meta.SetStatusCondition(&st.Conditions, ready)
	serr := e.Client.Status().Update(ctx, al)
	if e.Events != nil {
		if res.Outcome == OutcomeVerified {
			e.Events.Eventf(al, nil, corev1.EventTypeNormal, "IngressVerified", "Reconcile", "managed Ingress %s verified: %d CIDRs (version %d)", IngressName(al.Name), len(st.LastVerified), al.Generation)
		} else {
			e.Events.Eventf(al, nil, corev1.EventTypeWarning, "IngressUpdateFailed", "Reconcile", "%s (%s)", clip(res.Message), res.Code)
		}
	}
	if serr != nil {
		return res, fmt.Errorf("%w: record status: %s", ErrTransient, serr.Error())
	}
	if res.Outcome == OutcomeStateUncertain || transient(res.Code) {
		return res, fmt.Errorf("%w: %s", ErrTransient, res.Message)
	}
	return res, nil
}

func reasonOf(code string) string {
	if code == "" {
		return "Failed"
	}
	return code
}

func clip(s string) string {
	if len(s) > 1000 {
		return s[:1000] + "…"
	}
	return s
}

func writeCode(err error) string {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return CodeConcurrentUpdate
	}
	return CodeWriteFailed
}
