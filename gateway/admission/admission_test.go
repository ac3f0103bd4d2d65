package admission

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := New(3, 2)
	r1, why := l.TryAcquire("a")
	if why != Admitted {
		t.Fatal(why)
	}
	r2, _ := l.TryAcquire("a")
	if _, why := l.TryAcquire("a"); why != KeyFull {
		t.Fatalf("third slot of a: %v", why)
	}
	r3, why := l.TryAcquire("b")
	if why != Admitted {
		t.Fatal(why)
	}
	if _, why := l.TryAcquire("c"); why != GlobalFull {
		t.Fatalf("fourth slot: %v", why)
	}
	r1()
	r1() // a second call gives nothing back twice
	if all, a := l.Held("a"); all != 2 || a != 1 {
		t.Fatalf("held %d, under a %d", all, a)
	}
	r4, why := l.TryAcquire("c")
	if why != Admitted {
		t.Fatal(why)
	}
	r2()
	r3()
	r4()
	if all, _ := l.Held(""); all != 0 || len(l.byKey) != 0 {
		t.Fatalf("left %d slots, %d keys", all, len(l.byKey))
	}
}

// TestLimiterConcurrent: under contention no more than the bounds are
// ever held (run with -race).
func TestLimiterConcurrent(t *testing.T) {
	l := New(4, 2)
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := 0
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				rel, why := l.TryAcquire(string(rune('a' + i%3)))
				if why != Admitted {
					continue
				}
				all, k := l.Held(string(rune('a' + i%3)))
				mu.Lock()
				peak = max(peak, all)
				mu.Unlock()
				if all > 4 || k > 2 {
					t.Errorf("held %d, %d under one key", all, k)
				}
				rel()
			}
		}()
	}
	wg.Wait()
	if all, _ := l.Held(""); all != 0 {
		t.Fatalf("left %d", all)
	}
}

// TestAcquireWaits: Acquire takes a slot given back while it waits, and
// gives up with the refusing bound when its wait ends or its context is
// done.
func TestAcquireWaits(t *testing.T) {
	l := New(1, 1)
	rel, _ := l.TryAcquire("a")
	got := make(chan Reason)
	go func() {
		r, why := l.Acquire(context.Background(), "b", time.Hour)
		if r != nil {
			defer r()
		}
		got <- why
	}()
	// The waiter holds nothing while it waits; give the slot back.
	rel()
	if why := <-got; why != Admitted {
		t.Fatalf("the waiter: %v", why)
	}
	rel, _ = l.TryAcquire("a")
	defer rel()
	if _, why := l.Acquire(context.Background(), "a", time.Millisecond); why != KeyFull {
		t.Fatalf("a bounded wait: %v", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, why := l.Acquire(ctx, "b", time.Hour); why != GlobalFull {
		t.Fatalf("a done context: %v", why)
	}
}
