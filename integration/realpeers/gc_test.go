package realpeers_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// collectGarbage plays the part of kube-controller-manager's garbage
// collector for c, which the chain does not run: every interval it deletes
// the Pods whose owning BatchSandbox is gone, as the real collector does a
// moment after a BatchSandbox is deleted (kwok then finishes their
// deletion). corectl's delete waits for the sandbox's pods to go before it
// removes the egress policy, so without a collector every kill would wait
// out corectl's -pod-gone-wait. It runs until ctx ends; done is closed
// then.
func collectGarbage(ctx context.Context, c *compute, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var pods corev1.PodList
		if err := c.client.List(ctx, &pods, client.InNamespace(c.namespace)); err != nil {
			continue
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			for _, o := range p.OwnerReferences {
				if o.Kind != sandbox.GVK.Kind {
					continue
				}
				owner := &unstructured.Unstructured{}
				owner.SetGroupVersionKind(sandbox.GVK)
				err := c.client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: o.Name}, owner)
				if apierrors.IsNotFound(err) || (err == nil && owner.GetUID() != o.UID) {
					if err := c.client.Delete(ctx, p); client.IgnoreNotFound(err) != nil && ctx.Err() == nil {
						fmt.Fprintf(os.Stderr, "realpeers: %s: delete the orphaned pod %s: %v\n", c.id, p.Name, err)
					}
				}
			}
		}
	}
}
