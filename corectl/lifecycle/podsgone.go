package lifecycle

// The egress policy outlives the sandbox's pods (spec §5.3, issue 29 item
// 7): a delete removes the BatchSandbox first, waits for the pods the
// policy selects to be gone, and only then removes the policy.

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultPodGoneWait is Orchestrator.PodGoneWait's default: Kubernetes'
// default terminationGracePeriodSeconds, the time a pod of the deleted
// BatchSandbox may take to stop once the garbage collector deleted it.
const DefaultPodGoneWait = 30 * time.Second

// errPodsRemain: pods the egress policy selects still exist, so the policy
// is kept; the orphan scan removes it once they are gone.
var errPodsRemain = errors.New("pods the egress policy selects still exist; the policy is kept until they are gone")

func (o *Orchestrator) podGoneWait() time.Duration {
	if o.PodGoneWait > 0 {
		return o.PodGoneWait
	}
	return DefaultPodGoneWait
}

// podsGone waits until no pod in namespace ns carries the allocation label
// alloc (what the egress policy sandbox-egress-<alloc> selects), for at
// most wait (0: one look). A pod that is terminating still counts: it runs
// until the kubelet has stopped it. The pauses between looks start at
// 20 ms and double up to 1 s. Errors: errPodsRemain (wrapped, naming the
// pods' count) when some are still there at the end, ctx's error, or the
// List's.
func (o *Orchestrator) podsGone(ctx context.Context, ns, alloc string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	pause := 20 * time.Millisecond
	for {
		var pods corev1.PodList
		if err := o.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{o.Cluster.AllocationLabelKey(): alloc}); err != nil {
			return fmt.Errorf("list the pods of allocation %s in %s: %w", alloc, ns, err)
		}
		left := time.Until(deadline)
		if len(pods.Items) == 0 {
			return nil
		}
		if left <= 0 {
			return fmt.Errorf("%w (%d in %s with %s=%s)", errPodsRemain, len(pods.Items), ns, o.Cluster.AllocationLabelKey(), alloc)
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the pods of allocation %s in %s: %w", alloc, ns, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}
