package ingressallow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The create's three steps on a restricted sandbox's ingress objects
// (spec §5.2.1): CreateCarrier before the BatchSandbox exists (the carrier
// itself records the create's set U until then), AdoptOwner once it
// exists, and Settle, which writes the desired state (it needs the
// BatchSandbox as owner) and runs the first cycle. Each write's answer is
// its read-back: the apiserver answers a create or an update with the
// object as it stored it (after admission), which is what a GET right
// after would return unless someone wrote in between, and a write in
// between is what the next conditional write (at this answer's
// resourceVersion) fails on. So the answer is checked here, as every
// cycle's read-back is, without a second round trip.

// carrierKey is the managed Ingress of sandbox id.
func (e *Engine) carrierKey(id string) client.ObjectKey {
	return client.ObjectKey{Namespace: e.Cluster.Ingress.Namespace, Name: IngressName(id)}
}

// CreateCarrier creates the managed Ingress of a restricted sandbox being
// created: prov is the sandbox as provisioned (no UID yet: the BatchSandbox
// is written after the carrier), set the resolved ingress allowlist U
// (normalised, non-empty). The carrier carries U merged with the probe
// sources (Engine.Probe, when set; its failure fails closed with
// CodeProbeSourceUnknown and writes nothing). The create's answer is its
// read-back and must pass CheckCarrier for U. It returns that object, which
// AdoptOwner writes over, and whether the create was written (so the
// caller knows to remove it on failure). Errors: probe discovery, the
// write, the read-back, or CheckCarrier's code and reason.
func (e *Engine) CreateCarrier(ctx context.Context, prov *sandbox.Sandbox, set []string) (ing *networkingv1.Ingress, written bool, err error) {
	var probe []string
	if e.Probe != nil {
		p, err := e.Probe(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", CodeProbeSourceUnknown, err)
		}
		probe = p
	}
	want := CarrierWithProbe(e.Cluster, prov, set, probe)
	if err := e.Client.Create(ctx, want); err != nil {
		return nil, false, fmt.Errorf("create Ingress %s: %w", e.carrierKey(prov.ID), err)
	}
	if err := e.checkAnswer(prov, want, set, "as created"); err != nil {
		return nil, true, err
	}
	return want, true, nil
}

// checkAnswer checks rb, the managed Ingress of sb as the apiserver
// answered a write of it, as sb's carrier of set (CheckCarrier); after
// names the moment in the error ("as created", "after the owner
// back-fill").
func (e *Engine) checkAnswer(sb *sandbox.Sandbox, rb *networkingv1.Ingress, set []string, after string) error {
	if code, reason := CheckCarrier(e.Cluster, sb, rb, set); code != "" {
		return fmt.Errorf("Ingress %s %s: %s: %s", e.carrierKey(sb.ID), after, code, reason)
	}
	return nil
}

// AdoptOwner makes the BatchSandbox sb (as created, with its UID) the
// owner of created, the carrier of set as CreateCarrier read it back: it
// sets the owner annotation and adds the owner reference, writes over
// created at its resourceVersion (a write by anyone since then makes the
// update fail); the update's answer, the carrier as stored, must pass
// CheckCarrier for set as sb's. It returns that answer (the version a
// cycle that follows may start from). Errors: the write, or
// CheckCarrier's code and reason.
func (e *Engine) AdoptOwner(ctx context.Context, sb *sandbox.Sandbox, created *networkingv1.Ingress, set []string) (*networkingv1.Ingress, error) {
	ing := created.DeepCopy()
	want := Carrier(e.Cluster, sb, set)
	ing.Annotations[v1alpha1.AnnotationOwner] = sb.OwnerAnnotation()
	if len(want.OwnerReferences) > 0 && !sb.HasOwnerReference(ing.OwnerReferences) {
		ing.OwnerReferences = append(ing.OwnerReferences, want.OwnerReferences...)
	}
	if err := e.Client.Update(ctx, ing); err != nil {
		return nil, fmt.Errorf("back-fill the owner of Ingress %s: %w", e.carrierKey(sb.ID), err)
	}
	if err := e.checkAnswer(sb, ing, set, "after the owner back-fill"); err != nil {
		return nil, err
	}
	return ing, nil
}

// settleAttempts bounds Settle's cycles.
const settleAttempts = 8

// Settle persists the create's desired state and brings it to Verified:
// sb is the BatchSandbox as created, rules the create's initial rules
// (normalised, non-empty). Under Lock(sb), it writes the allowlist with
// CreateDesired (so a PUT /network/ingress made since the BatchSandbox
// appeared is the later writer and its rules stand: the cycle then
// verifies the PUT's rules instead of the create's) and runs a cycle from
// the allowlist as written; a transient failure (ErrTransient, e.g. a
// status conflict with another replica's cycle of the same version) is
// retried up to 8 cycles in all, the pauses from 10 ms doubling with
// jitter. It returns nil once a cycle ends Verified for the version
// written, or the GET view reads Verified and Ready. The lock keeps this
// process's reconciler (woken by the write) out until Settle is done.
// pre (nil: none) is the create's path-claim lists (StartClaims), which
// the first cycle uses when it finds the carrier at pre.Carrier.
// Errors: the write (CreateDesired's errors), a cycle's non-transient
// error, a settled state other than Verified, ctx ending, or the attempts
// running out; the allowlist may exist after an error (it is the
// sandbox's either way: the caller's compensation removes it).
func (e *Engine) Settle(ctx context.Context, sb *sandbox.Sandbox, rules []v1alpha1.IngressRule, pre *Claims) error {
	unlock := e.Lock(sb.Namespace, sb.ID)
	defer unlock()
	al, err := e.CreateDesired(ctx, sb, rules)
	if err != nil {
		return fmt.Errorf("persist the ingress desired state: %w", err)
	}
	var last string
	backoff := wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: settleAttempts}
	for attempt := 0; attempt < settleAttempts; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(backoff.Step())
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("ingress allowlist not verified: %w (last: %s)", ctx.Err(), last)
			case <-t.C:
			}
		}
		var res *Result
		if attempt == 0 {
			res, err = e.reconcileFrom(ctx, al, pre)
		} else {
			res, err = e.ReconcileLocked(ctx, sb.Namespace, sb.ID)
		}
		if err != nil {
			if !errors.Is(err, ErrTransient) {
				return fmt.Errorf("apply the ingress allowlist: %w", err)
			}
			last = err.Error()
			continue
		}
		if res.Outcome == OutcomeVerified {
			// This cycle read the carrier back, checked it and the path
			// claims, and recorded Verified for the desired version just
			// written (its status write was conditional on the
			// allowlist's resourceVersion).
			return nil
		}
		st, err := e.Get(ctx, sb.Namespace, sb.ID)
		if err != nil {
			return fmt.Errorf("read the ingress state: %w", err)
		}
		switch st.VerificationState {
		case v1alpha1.StateVerified:
			if st.Ready {
				return nil
			}
			last = "verified but not ready: " + st.NotReadyReason
		case v1alpha1.StateVerifying, v1alpha1.StatePending:
			last = st.VerificationState
		default:
			return fmt.Errorf("ingress allowlist not verified: %s %s", st.VerificationState, st.LastErrorCode)
		}
	}
	return fmt.Errorf("ingress allowlist not verified: %s", last)
}
