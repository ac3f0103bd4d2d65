// Package admission bounds how much of the gateway's work one tenant can
// hold at once: concurrent slots counted globally and per key (a sandbox
// ID, a credential ID), taken at once or after a bounded wait. Code in a sandbox can answer
// in execd's place with the largest answer each operation accepts, so the
// data plane's memory under hostile sandboxes is at most the global number
// of slots times the cost of one answer (docs/dataplane.md "Bounded cost
// per request and per tenant"); the per-key bound keeps one sandbox (or
// credential) from taking every global slot.
package admission

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"
)

// Limiter counts slots: at most Global held at once, and at most PerKey of
// them under one key. The zero value admits nothing; use New.
type Limiter struct {
	global, perKey int

	mu    sync.Mutex
	held  int
	byKey map[string]int // only keys holding a slot: at most Global entries
	// waiting are the callers of Acquire waiting for a slot, first come
	// first; a slot given back goes straight to the first of them its
	// bounds allow, so a release wakes one waiter, not all of them.
	waiting list.List // of *waiter
}

// waiter is one Acquire waiting for a slot under key. granted is closed
// when the slot is given to it (release then set), with the Limiter's mu
// held.
type waiter struct {
	key     string
	granted chan struct{}
	release func()
}

// New returns a Limiter of global slots, at most perKey under one key.
// A value below 1 is taken as 1.
func New(global, perKey int) *Limiter {
	return &Limiter{global: max(global, 1), perKey: max(perKey, 1), byKey: map[string]int{}}
}

// NewCounts returns a Limiter used only as a count: its own bounds are
// never reached, every caller checking bounds of its own with
// TryAcquireWithin, and nothing waits on it. Several configurations share
// one across a Caddy reload (the port requests of package portroute, the
// data plane's requests in progress), each with its own bounds.
func NewCounts() *Limiter { return New(math.MaxInt, math.MaxInt) }

// Reason says which bound refused a slot.
type Reason int

// Why TryAcquire refused.
const (
	// Admitted: a slot was taken.
	Admitted Reason = iota
	// GlobalFull: Global slots are held.
	GlobalFull
	// KeyFull: PerKey slots are held under the key.
	KeyFull
)

// TryAcquire takes a slot under key when both bounds allow, without
// waiting. It returns the function that gives the slot back (call it
// once; later calls do nothing) and Admitted, or nil and the bound that
// refused.
func (l *Limiter) TryAcquire(key string) (release func(), why Reason) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tryLocked(key)
}

// TryAcquireWithin is TryAcquire checked against the bounds global and
// perKey given with the call instead of the Limiter's own (a value below
// 1 is taken as 1): for a Limiter whose counts several configurations
// share, each with bounds of its own (the port requests of a gateway
// process across a Caddy reload, package portroute). A slot it gives back
// is offered to Acquire's waiters under the Limiter's own bounds.
func (l *Limiter) TryAcquireWithin(key string, global, perKey int) (release func(), why Reason) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.byKey[key] >= max(perKey, 1):
		return nil, KeyFull
	case l.held >= max(global, 1):
		return nil, GlobalFull
	}
	return l.takeLocked(key), Admitted
}

// Acquire is TryAcquire that waits, up to wait and while ctx lasts, for a
// slot under key to be given back when both bounds refuse one. It returns
// the bound that refused when the wait ended (or ctx was done).
// Waiters hold no slot and no memory beyond their goroutine and a list
// entry; a slot given back goes to the longest waiting caller whose
// bounds allow it (first come, first served within what the bounds
// allow).
func (l *Limiter) Acquire(ctx context.Context, key string, wait time.Duration) (release func(), why Reason) {
	l.mu.Lock()
	release, why = l.tryLocked(key)
	if why == Admitted || wait <= 0 {
		l.mu.Unlock()
		return release, why
	}
	w := &waiter{key: key, granted: make(chan struct{})}
	e := l.waiting.PushBack(w)
	l.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.granted:
		return w.release, Admitted
	case <-t.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	select {
	case <-w.granted:
		// Given a slot as the wait ended: give it back, so the next
		// waiter gets it.
		l.mu.Unlock()
		w.release()
		return nil, why
	default:
	}
	l.waiting.Remove(e)
	l.mu.Unlock()
	return nil, why
}

func (l *Limiter) tryLocked(key string) (release func(), why Reason) {
	switch {
	case l.byKey[key] >= l.perKey:
		return nil, KeyFull
	case l.held >= l.global:
		return nil, GlobalFull
	}
	return l.takeLocked(key), Admitted
}

// takeLocked takes a slot under key, which the bounds allow, and returns
// the function that gives it back.
func (l *Limiter) takeLocked(key string) func() {
	l.held++
	l.byKey[key]++
	var once sync.Once
	return func() { once.Do(func() { l.release(key) }) }
}

func (l *Limiter) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held--
	if l.byKey[key]--; l.byKey[key] <= 0 {
		delete(l.byKey, key)
	}
	// One slot was given back: at most one waiter can take it, the first
	// whose key is under its bound.
	if l.held >= l.global {
		return
	}
	for e := l.waiting.Front(); e != nil; e = e.Next() {
		w := e.Value.(*waiter)
		if l.byKey[w.key] >= l.perKey {
			continue
		}
		l.waiting.Remove(e)
		w.release = l.takeLocked(w.key)
		close(w.granted)
		return
	}
}

// Held returns the slots held in all, and under key.
func (l *Limiter) Held(key string) (all, underKey int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held, l.byKey[key]
}

// Keys returns how many keys hold a slot now: a key whose slots were all
// given back is not kept.
func (l *Limiter) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byKey)
}
