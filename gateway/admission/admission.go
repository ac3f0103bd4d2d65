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
	"context"
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
	// freed is closed (and replaced) whenever a slot is given back, to
	// wake the waiters of Acquire.
	freed chan struct{}
}

// New returns a Limiter of global slots, at most perKey under one key.
// A value below 1 is taken as 1.
func New(global, perKey int) *Limiter {
	return &Limiter{global: max(global, 1), perKey: max(perKey, 1), byKey: map[string]int{}, freed: make(chan struct{})}
}

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

// Acquire is TryAcquire that waits, up to wait and while ctx lasts, for a
// slot under key to be given back when both bounds refuse one. It returns
// the bound that still refused when the wait ended (or ctx was done).
// Waiters hold no slot and no memory beyond their goroutine; which waiter
// gets a freed slot is not ordered.
func (l *Limiter) Acquire(ctx context.Context, key string, wait time.Duration) (release func(), why Reason) {
	var timeout <-chan time.Time
	for {
		l.mu.Lock()
		release, why = l.tryLocked(key)
		freed := l.freed
		l.mu.Unlock()
		if why == Admitted || wait <= 0 {
			return release, why
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-freed:
		case <-timeout:
			return nil, why
		case <-ctx.Done():
			return nil, why
		}
	}
}

func (l *Limiter) tryLocked(key string) (release func(), why Reason) {
	switch {
	case l.byKey[key] >= l.perKey:
		return nil, KeyFull
	case l.held >= l.global:
		return nil, GlobalFull
	}
	l.held++
	l.byKey[key]++
	var once sync.Once
	return func() { once.Do(func() { l.release(key) }) }, Admitted
}

func (l *Limiter) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held--
	if l.byKey[key]--; l.byKey[key] <= 0 {
		delete(l.byKey, key)
	}
	close(l.freed)
	l.freed = make(chan struct{})
}

// Held returns the slots held in all, and under key.
func (l *Limiter) Held(key string) (all, underKey int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held, l.byKey[key]
}
