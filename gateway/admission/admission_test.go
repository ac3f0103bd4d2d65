package admission

import (
	"context"
	"runtime"
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
	type acquired struct {
		release func()
		why     Reason
	}
	got := make(chan acquired)
	go func() {
		r, why := l.Acquire(context.Background(), "b", time.Hour)
		got <- acquired{r, why}
	}()
	// The waiter holds nothing while it waits; give the slot back once it
	// waits (else it may find the slot free and never wait).
	waitersQueued(l, 1)
	rel()
	w := <-got
	if w.why != Admitted {
		t.Fatalf("the waiter: %v", w.why)
	}
	// Given back here, not in the waiter's goroutine after its send: the
	// test would otherwise go on while "b" may still hold the one slot.
	w.release()
	rel, why := l.TryAcquire("a")
	if why != Admitted {
		t.Fatalf("a's slot once the waiter gave its back: %v", why)
	}
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

// waitersQueued returns when n callers of Acquire wait in l. It polls the
// queue's length (no timing): the test's own timeout bounds it.
func waitersQueued(l *Limiter, n int) {
	for {
		l.mu.Lock()
		got := l.waiting.Len()
		l.mu.Unlock()
		if got == n {
			return
		}
		runtime.Gosched()
	}
}

// acquireAsync starts Acquire(key) in a goroutine; its result arrives on
// the channel.
func acquireAsync(l *Limiter, key string) chan func() {
	got := make(chan func(), 1)
	go func() {
		r, why := l.Acquire(context.Background(), key, time.Hour)
		if why != Admitted {
			r = nil
		}
		got <- r
	}()
	return got
}

// TestAcquireFirstComeOneWoken: a slot given back goes to the longest
// waiting caller, and only to it; the others keep waiting.
func TestAcquireFirstComeOneWoken(t *testing.T) {
	l := New(1, 1)
	rel, _ := l.TryAcquire("a")
	first := acquireAsync(l, "a")
	waitersQueued(l, 1)
	second := acquireAsync(l, "a")
	waitersQueued(l, 2)
	rel()
	r1 := <-first
	if r1 == nil {
		t.Fatal("the first waiter was not admitted")
	}
	if all, under := l.Held("a"); all != 1 || under != 1 {
		t.Fatalf("held %d, %d under the key; want 1, 1", all, under)
	}
	waitersQueued(l, 1) // the second still waits
	r1()
	r2 := <-second
	if r2 == nil {
		t.Fatal("the second waiter was not admitted")
	}
	r2()
	if all, _ := l.Held("a"); all != 0 {
		t.Fatalf("held %d after both gave back", all)
	}
}

// TestAcquireSkipsAFullKey: a freed global slot goes to the first waiter
// whose own key has room, past one whose key is full.
func TestAcquireSkipsAFullKey(t *testing.T) {
	l := New(2, 1)
	relA, _ := l.TryAcquire("a")
	relB, _ := l.TryAcquire("b")
	onA := acquireAsync(l, "a") // its key is full
	waitersQueued(l, 1)
	onC := acquireAsync(l, "c") // the global bound is full
	waitersQueued(l, 2)
	relB()
	rc := <-onC
	if rc == nil {
		t.Fatal("the waiter on c was not admitted")
	}
	waitersQueued(l, 1) // the waiter on a still waits
	relA()
	ra := <-onA
	if ra == nil {
		t.Fatal("the waiter on a was not admitted")
	}
	ra()
	rc()
	if all, _ := l.Held("a"); all != 0 {
		t.Fatalf("held %d at the end", all)
	}
}

// BenchmarkAcquireContended: 64 callers on one key of 4 slots, each
// holding its slot briefly, as 64 concurrent SDK calls to one sandbox
// meet max_upstream_calls_per_sandbox.
func BenchmarkAcquireContended(b *testing.B) {
	l := New(16, 4)
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, why := l.Acquire(context.Background(), "sbx", time.Minute)
			if why != Admitted {
				b.Error(why)
				return
			}
			runtime.Gosched()
			r()
		}
	})
}

// TestTryAcquireWithin: the call's bounds decide, not the Limiter's, and
// the slots are the Limiter's either way.
func TestTryAcquireWithin(t *testing.T) {
	l := New(1, 1)
	r1, why := l.TryAcquireWithin("k", 3, 2)
	if why != Admitted {
		t.Fatalf("first: %v", why)
	}
	r2, why := l.TryAcquireWithin("k", 3, 2)
	if why != Admitted {
		t.Fatalf("second under key k within 2: %v", why)
	}
	if _, why := l.TryAcquireWithin("k", 3, 2); why != KeyFull {
		t.Fatalf("third under k: %v, want KeyFull", why)
	}
	if _, why := l.TryAcquire("j"); why != GlobalFull {
		t.Fatalf("TryAcquire with the Limiter's bound 1 while 2 are held: %v, want GlobalFull", why)
	}
	r3, why := l.TryAcquireWithin("j", 3, 2)
	if why != Admitted {
		t.Fatalf("third in all within 3: %v", why)
	}
	if _, why := l.TryAcquireWithin("i", 3, 2); why != GlobalFull {
		t.Fatalf("fourth in all: %v, want GlobalFull", why)
	}
	if _, why := l.TryAcquireWithin("i", 0, 0); why != GlobalFull {
		t.Fatalf("bounds below 1 are 1: %v, want GlobalFull", why)
	}
	r1()
	r2()
	r3()
	if all, k := l.Held("k"); all != 0 || k != 0 || l.Keys() != 0 {
		t.Fatalf("after every release: %d held, %d under k, %d keys", all, k, l.Keys())
	}
}
