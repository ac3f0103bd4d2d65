package ttlcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGetCachesUntil: a value is served until its time, then loaded again;
// a value with a past time is not cached.
func TestGetCachesUntil(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New[int](10)
	c.SetClock(func() time.Time { return now })
	var loads int
	load := func(until time.Duration) Load[int] {
		return func(context.Context) (int, time.Time) { loads++; return loads, now.Add(until) }
	}
	ctx := context.Background()
	if v, _ := c.Get(ctx, "k", load(time.Second)); v != 1 {
		t.Fatalf("first Get = %d", v)
	}
	now = now.Add(999 * time.Millisecond)
	if v, _ := c.Get(ctx, "k", load(time.Second)); v != 1 {
		t.Fatalf("Get before expiry = %d, want the cached 1", v)
	}
	now = now.Add(time.Millisecond)
	if v, _ := c.Get(ctx, "k", load(0)); v != 2 {
		t.Fatalf("Get at expiry = %d, want a new load", v)
	}
	if v, _ := c.Get(ctx, "k", load(0)); v != 3 || c.Len() != 0 {
		t.Fatalf("an uncacheable value was cached (%d, len %d)", v, c.Len())
	}
}

// TestBounded: a full cache sweeps expired entries, and stores nothing
// when every entry is live; it never holds more than max.
func TestBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New[string](2)
	c.SetClock(func() time.Time { return now })
	ctx := context.Background()
	val := func(s string, d time.Duration) Load[string] {
		return func(context.Context) (string, time.Time) { return s, now.Add(d) }
	}
	c.Get(ctx, "a", val("a", time.Second))
	c.Get(ctx, "b", val("b", time.Hour))
	c.Get(ctx, "c", val("c", time.Hour)) // full, nothing expired: not stored
	if c.Len() != 2 {
		t.Fatalf("len %d", c.Len())
	}
	if v, _ := c.Get(ctx, "c", val("c2", time.Hour)); v != "c2" {
		t.Fatalf("c was cached while full: %q", v)
	}
	now = now.Add(2 * time.Second) // a expires
	c.Get(ctx, "d", val("d", time.Hour))
	if v, _ := c.Get(ctx, "d", val("other", time.Hour)); v != "d" || c.Len() != 2 {
		t.Fatalf("d after the sweep: %q, len %d", v, c.Len())
	}
}

// TestOneLoadInFlight: concurrent Gets of one key share a single load; a
// caller whose context ends gets its error while the load goes on.
func TestOneLoadInFlight(t *testing.T) {
	c := New[int](10)
	release := make(chan struct{})
	var loads atomic.Int32
	load := func(context.Context) (int, time.Time) {
		loads.Add(1)
		<-release
		return 7, time.Now().Add(time.Minute)
	}
	var joins sync.WaitGroup
	joins.Add(21)
	c.joined = joins.Done
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.Get(context.Background(), "k", load); v != 7 || err != nil {
				t.Errorf("Get = %d, %v", v, err)
			}
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Get(ctx, "k", load); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Get = %v", err)
	}
	joins.Wait() // every Get has joined the one load before it ends
	close(release)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads, want 1", n)
	}
}

// TestRefresh: Refresh loads even while a value is cached, and what it
// loads is what the next Get serves.
func TestRefresh(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New[string](10)
	c.SetClock(func() time.Time { return now })
	ctx := context.Background()
	val := func(s string) Load[string] {
		return func(context.Context) (string, time.Time) { return s, now.Add(time.Second) }
	}
	c.Get(ctx, "k", val("old"))
	if v, _ := c.Get(ctx, "k", val("ignored")); v != "old" {
		t.Fatalf("Get = %q, want the cached old", v)
	}
	if v, _ := c.Refresh(ctx, "k", val("new")); v != "new" {
		t.Fatalf("Refresh = %q, want a new load", v)
	}
	if v, _ := c.Get(ctx, "k", val("ignored")); v != "new" {
		t.Fatalf("Get after Refresh = %q, want new", v)
	}
	// An uncacheable refresh drops the cached value.
	c.Refresh(ctx, "k", func(context.Context) (string, time.Time) { return "err", time.Time{} })
	if v, _ := c.Get(ctx, "k", val("reloaded")); v != "reloaded" || c.Len() != 1 {
		t.Fatalf("Get after an uncacheable Refresh = %q (len %d), want a new load", v, c.Len())
	}
}

// TestRefreshDoesNotJoinGet: a Refresh while a Get's load is in flight
// runs its own load (the Get's may predate the change the caller wants).
func TestRefreshDoesNotJoinGet(t *testing.T) {
	c := New[int](10)
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan int)
	go func() {
		v, _ := c.Get(context.Background(), "k", func(context.Context) (int, time.Time) {
			close(started)
			<-release
			return 1, time.Now().Add(time.Minute)
		})
		done <- v
	}()
	<-started
	if v, _ := c.Refresh(context.Background(), "k", func(context.Context) (int, time.Time) {
		return 2, time.Now().Add(time.Minute)
	}); v != 2 {
		t.Fatalf("Refresh joined the Get's load: %d", v)
	}
	close(release)
	if v := <-done; v != 1 {
		t.Fatalf("Get = %d", v)
	}
}
