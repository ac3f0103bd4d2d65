// Package ttlcache is a bounded in-memory cache of values that expire, with
// at most one load in flight per key (callers asking for a key being
// loaded wait for that load instead of starting another).
package ttlcache

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Cache maps string keys to values of type V. The zero value is not
// usable; use New. It is safe for concurrent use.
type Cache[V any] struct {
	max   int
	now   func() time.Time
	group singleflight.Group
	// fresh coalesces Refresh loads; apart from group, so a Refresh never
	// joins a Get's load that may have started before what the caller
	// wants to see.
	fresh singleflight.Group

	mu sync.Mutex
	m  map[string]entry[V]

	// joined, if set (tests only), runs once a Get has joined the load of
	// its key.
	joined func()
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// New returns a cache holding at most max entries (at least 1). When it is
// full, expired entries are swept on the next store; if none has expired,
// the new value is not cached (the cache never grows past max and never
// evicts a live answer early).
func New[V any](max int) *Cache[V] {
	if max < 1 {
		max = 1
	}
	return &Cache[V]{max: max, now: time.Now, m: make(map[string]entry[V])}
}

// SetClock replaces the clock (tests).
func (c *Cache[V]) SetClock(now func() time.Time) { c.now = now }

// Load is what Get calls on a miss: it returns the value and until when it
// may be served from the cache (a zero or past time: not cached, e.g. an
// error the next caller should retry).
type Load[V any] func(ctx context.Context) (v V, until time.Time)

// Get returns the cached value of key if it has not expired; otherwise it
// calls load, sharing one call among concurrent Gets of the same key. The
// shared load runs with a context that is not canceled when one caller
// gives up (load must bound itself); a caller whose ctx ends first gets
// ctx's error.
func (c *Cache[V]) Get(ctx context.Context, key string, load Load[V]) (V, error) {
	if v, ok := c.lookup(key); ok {
		return v, nil
	}
	return c.load(ctx, &c.group, key, load)
}

// Refresh is Get without the cached value: it always calls load (sharing
// one call among concurrent Refreshes of key, but never joining a Get's
// load already in flight) and stores the result as Get does, so later
// Gets see it. A Get's load that started earlier and ends later may still
// overwrite it. Errors: ctx's, as Get.
func (c *Cache[V]) Refresh(ctx context.Context, key string, load Load[V]) (V, error) {
	return c.load(ctx, &c.fresh, key, load)
}

// load runs load for key in group g and stores its value.
func (c *Cache[V]) load(ctx context.Context, g *singleflight.Group, key string, load Load[V]) (V, error) {
	detached := context.WithoutCancel(ctx)
	ch := g.DoChan(key, func() (any, error) {
		v, until := load(detached)
		c.store(key, v, until)
		return v, nil
	})
	if c.joined != nil {
		c.joined()
	}
	select {
	case r := <-ch:
		return r.Val.(V), nil
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

func (c *Cache[V]) lookup(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		var zero V
		return zero, false
	}
	if !c.now().Before(e.expires) {
		delete(c.m, key)
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *Cache[V]) store(key string, v V, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !now.Before(until) {
		delete(c.m, key)
		return
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= c.max {
			return
		}
	}
	c.m[key] = entry[V]{v: v, expires: until}
}

// Len returns the number of entries held (expired ones included until they
// are swept).
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
