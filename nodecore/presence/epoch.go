package presence

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// counter allocates owner epochs from the EpochLeaseName Lease. Calls made
// while an allocation is being written wait for the next one and share
// it (group commit): a replica writes the counter at most once at a time,
// however many nodes connect at once, and every waiter's epoch comes from
// a write that began after the waiter asked.
type counter struct {
	l *Leases

	mu      sync.Mutex
	waiting []*epochWaiter
	running bool
}

type epochWaiter struct {
	min  int64
	done chan struct{}
	// set before done is closed
	epoch int64
	err   error
}

// maxCounterAttempts bounds the conflicts of one allocation (other
// replicas allocating at the same moment).
const maxCounterAttempts = 50

// next returns a new epoch: greater than every epoch allocated before
// this call began, by any replica, and at least min. Errors: the
// apiserver's, an unreadable counter, or ctx's.
func (c *counter) next(ctx context.Context, min int64) (int64, error) {
	w := &epochWaiter{min: min, done: make(chan struct{})}
	c.mu.Lock()
	c.waiting = append(c.waiting, w)
	if !c.running {
		c.running = true
		go c.run()
	}
	c.mu.Unlock()
	select {
	case <-w.done:
		return w.epoch, w.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run writes allocations until nobody waits.
func (c *counter) run() {
	for {
		c.mu.Lock()
		batch := c.waiting
		c.waiting = nil
		if len(batch) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		min := int64(1)
		for _, w := range batch {
			min = max(min, w.min)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		epoch, err := c.increment(ctx, min)
		cancel()
		for _, w := range batch {
			w.epoch, w.err = epoch, err
			close(w.done)
		}
	}
}

// increment sets the counter to max(counter+1, min) with a
// resourceVersion precondition, re-reading after conflicts, and returns
// the new value. A missing counter is created from the highest epoch
// found on the node Leases (so deleting it cannot make epochs go back).
func (c *counter) increment(ctx context.Context, min int64) (int64, error) {
	cl := c.l.client()
	for range maxCounterAttempts {
		cur, err := cl.Get(ctx, EpochLeaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			seen, err := c.highestOnNodes(ctx)
			if err != nil {
				return 0, err
			}
			epoch := max(seen+1, min)
			obj := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: EpochLeaseName, Namespace: c.l.cfg.Namespace,
				Labels:      map[string]string{LabelKind: KindEpoch, LabelManagedBy: ManagedByValue},
				Annotations: map[string]string{AnnotationEpoch: strconv.FormatInt(epoch, 10)}}}
			id := c.l.cfg.ReplicaID
			obj.Spec.HolderIdentity = &id
			_, err = cl.Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("presence: create the owner-epoch counter: %w", err)
			}
			return epoch, nil
		}
		if err != nil {
			return 0, fmt.Errorf("presence: read the owner-epoch counter: %w", err)
		}
		last, err := epochOf(cur)
		if err != nil {
			return 0, err
		}
		epoch := max(last+1, min)
		want := cur.DeepCopy()
		if want.Annotations == nil {
			want.Annotations = map[string]string{}
		}
		want.Annotations[AnnotationEpoch] = strconv.FormatInt(epoch, 10)
		id := c.l.cfg.ReplicaID
		want.Spec.HolderIdentity = &id
		_, err = cl.Update(ctx, want, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("presence: write the owner-epoch counter: %w", err)
		}
		return epoch, nil
	}
	return 0, fmt.Errorf("presence: the owner-epoch counter changed %d times in a row while this replica wrote it", maxCounterAttempts)
}

// highestOnNodes returns the highest epoch annotated on a node Lease (0
// when there is none).
func (c *counter) highestOnNodes(ctx context.Context) (int64, error) {
	list, err := c.l.client().List(ctx, metav1.ListOptions{LabelSelector: labels.Set{LabelKind: KindNode}.String()})
	if err != nil {
		return 0, fmt.Errorf("presence: list node Leases: %w", err)
	}
	var top int64
	for i := range list.Items {
		e, err := epochOf(&list.Items[i])
		if err != nil {
			return 0, err
		}
		top = max(top, e)
	}
	return top, nil
}
