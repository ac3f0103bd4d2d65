package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Sandbox lifetime (E2B's timeout model, infra packages/api
// sandbox_create.go, sandbox_timeout.go, sandbox_refresh.go,
// sandbox_connect.go and orchestrator/keep_alive.go): every sandbox has an
// end time, stored on its BatchSandbox (v1alpha1.AnnotationEndAt); create
// sets it, POST /sandboxes/{id}/timeout sets it (shorter or longer),
// refreshes and connect only extend it; no end time lies beyond the
// sandbox's start plus MaxTimeout (E2B's "max instance length"). When it
// passes, the leader's expiry reconciler deletes the sandbox through the
// fail-closed Delete, and every lifecycle route but DELETE answers as for a
// deleted sandbox.
const (
	// DefaultTimeout is a create's timeout when the request names none:
	// 300 s, what the E2B SDKs send by default.
	DefaultTimeout = 300 * time.Second
	// DefaultMaxTimeout is Orchestrator.MaxTimeout's default: 1 h, E2B's
	// limit for its base tier (maxLengthHours).
	DefaultMaxTimeout = time.Hour
	// DefaultTokenGrace is Orchestrator.TokenGrace's default.
	DefaultTokenGrace = 30 * time.Second
	// DefaultRefresh is the duration of a refresh without one, and the
	// shortest refresh (E2B's SandboxTimeoutDefault, 15 s).
	DefaultRefresh = 15 * time.Second
	// MaxRefresh is the longest refresh duration E2B's
	// SandboxRefreshRequest allows (3600 s).
	MaxRefresh = time.Hour
)

// Errors of the lifetime operations.
var (
	// ErrTimeoutInvalid: a timeout is not greater than zero, or longer
	// than MaxTimeout (the error text says which).
	ErrTimeoutInvalid = errors.New("lifecycle: invalid timeout")
	// ErrMaxLifetime: the sandbox has lived MaxTimeout since its start;
	// its end time can no longer move (E2B: "Max instance length
	// exceeded").
	ErrMaxLifetime = errors.New("lifecycle: max instance length exceeded")
)

// maxTimeout returns MaxTimeout or its default.
func (o *Orchestrator) maxTimeout() time.Duration {
	if o.MaxTimeout > 0 {
		return o.MaxTimeout
	}
	return DefaultMaxTimeout
}

// MaxTimeoutValue is the longest timeout a create, connect or setTimeout
// may ask for, and the longest a sandbox lives from its start.
func (o *Orchestrator) MaxTimeoutValue() time.Duration { return o.maxTimeout() }

// CheckTimeout validates the timeout of a create or a connect: greater
// than zero and at most MaxTimeout. The error wraps ErrTimeoutInvalid.
func (o *Orchestrator) CheckTimeout(d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%w: Timeout must be greater than 0", ErrTimeoutInvalid)
	case d > o.maxTimeout():
		return fmt.Errorf("%w: Timeout cannot be greater than %s (%d seconds)", ErrTimeoutInvalid, o.maxTimeout(), int64(o.maxTimeout()/time.Second))
	}
	return nil
}

// tokenExpiry is when a token for a sandbox started at start expires: the
// latest the sandbox can end (start + MaxTimeout, since no timeout,
// refresh or connect moves its end beyond that) plus TokenGrace. A token
// thus never outlives its sandbox by more than the grace, yet stays valid
// however often the sandbox's timeout is extended; the gateway's
// authorizer refuses it as soon as the sandbox actually ends (docs/corectl.md
// "Lifetime").
func (o *Orchestrator) tokenExpiry(start time.Time) time.Time {
	grace := o.TokenGrace
	if grace <= 0 {
		grace = DefaultTokenGrace
	}
	return start.Add(o.maxTimeout() + grace)
}

// EndAt returns the end time recorded on a BatchSandbox; false when it has
// none (not created by corectl, or created before lifetimes were recorded:
// such a sandbox never expires) or it does not parse.
func EndAt(u metav1.Object) (time.Time, bool) {
	v, ok := sandbox.Annotation(u, v1alpha1.AnnotationEndAt)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// formatEndAt is the AnnotationEndAt value for t.
func formatEndAt(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// expired reports whether u's end time has passed.
func (o *Orchestrator) expired(u metav1.Object) bool {
	end, ok := EndAt(u)
	return ok && !o.now().Before(end)
}

// ExpiryDue tells the expiry reconciler what to do with u: due when its
// end time has passed and it is neither being deleted nor a create in
// flight (a Creating sandbox younger than OrphanGrace is left to its
// create, which finishes or compensates); otherwise wait is how long until
// it should look again (0: never, the sandbox has no end time or is being
// deleted).
func (o *Orchestrator) ExpiryDue(u metav1.Object) (due bool, wait time.Duration) {
	end, ok := EndAt(u)
	st, _ := sandbox.Annotation(u, v1alpha1.AnnotationLifecycle)
	if !ok || u.GetDeletionTimestamp() != nil || st == StateDeleting || st == StateCleanupFailed {
		return false, 0
	}
	now := o.now()
	if now.Before(end) {
		return false, end.Sub(now)
	}
	if st == StateCreating || st == "" {
		if left := o.orphanGrace() - now.Sub(u.GetCreationTimestamp().Time); left > 0 {
			return false, left
		}
	}
	return true, 0
}

func (o *Orchestrator) orphanGrace() time.Duration {
	if o.OrphanGrace > 0 {
		return o.OrphanGrace
	}
	return defaultOrphanGrace
}

// Expire deletes sandbox ns/id through the fail-closed Delete when it is
// due (ExpiryDue on an uncached read, so a timeout moved meanwhile is
// honoured). It reports whether it deleted. Errors: ErrUnavailable,
// *DeleteError.
func (o *Orchestrator) Expire(ctx context.Context, ns, id string) (bool, error) {
	u := batchSandboxRef(ns, id)
	if err := o.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
	}
	if due, _ := o.ExpiryDue(u); !due {
		return false, nil
	}
	if err := o.deleteSandbox(ctx, u, o.podGoneWait()); err != nil {
		return false, err
	}
	return true, nil
}

// TimeoutMode is how SetTimeout moves the end time.
type TimeoutMode int

const (
	// SetEnd sets the end to now + d, shorter or longer (POST
	// /sandboxes/{id}/timeout).
	SetEnd TimeoutMode = iota
	// ExtendEnd moves the end to now + d only when that is later
	// (refreshes, connect).
	ExtendEnd
)

// SetTimeout moves the end time of sandbox ns/id to now + d (d < 0 counts
// as 0), capped at the sandbox's start + MaxTimeout, as E2B's KeepAliveFor
// does; with ExtendEnd an earlier end is left alone. It returns the end
// time in force afterwards. The write is a merge patch with a
// resourceVersion precondition, retried on conflict. read, when not nil,
// is BatchSandbox ns/id as the caller has read it whole from the
// apiserver within this call (as for Status): the first attempt takes it
// instead of reading, and the precondition makes a read that is no
// longer current a conflict, after which SetTimeout reads again. Errors:
// ErrNotFound (absent or already expired), ErrConflict (being deleted),
// ErrMaxLifetime, ErrUnavailable.
func (o *Orchestrator) SetTimeout(ctx context.Context, ns, id string, read *unstructured.Unstructured, d time.Duration, mode TimeoutMode) (time.Time, error) {
	if d < 0 {
		d = 0
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			read = nil
		}
		u, err := o.readLive(ctx, ns, id, read)
		if err != nil {
			return time.Time{}, err
		}
		if st := u.GetAnnotations()[v1alpha1.AnnotationLifecycle]; u.GetDeletionTimestamp() != nil || st == StateDeleting || st == StateCleanupFailed {
			return time.Time{}, fmt.Errorf("%w: sandbox %s is %s", ErrConflict, id, StateDeleting)
		}
		now := o.now()
		left := o.maxTimeout() - now.Sub(u.GetCreationTimestamp().Time)
		if left <= 0 {
			return time.Time{}, fmt.Errorf("%w: sandbox %s started more than %s ago", ErrMaxLifetime, id, o.maxTimeout())
		}
		end := now.Add(min(d, left))
		if cur, ok := EndAt(u); ok && mode == ExtendEnd && !end.After(cur) {
			return cur, nil
		}
		patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%q}}}`, u.GetResourceVersion(), v1alpha1.AnnotationEndAt, formatEndAt(end))
		err = o.Client.Patch(ctx, u, client.RawPatch("application/merge-patch+json", []byte(patch)))
		switch {
		case err == nil:
			return end, nil
		case apierrors.IsConflict(err) && attempt < 8:
			continue
		case apierrors.IsNotFound(err):
			return time.Time{}, fmt.Errorf("%w: %s/%s", ErrNotFound, ns, id)
		default:
			return time.Time{}, fmt.Errorf("%w: set the end time of %s/%s: %s", ErrUnavailable, ns, id, err.Error())
		}
	}
}
