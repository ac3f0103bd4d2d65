package agent

import (
	"testing"
	"time"
)

func TestBackoffIsBoundedJitteredAndResets(t *testing.T) {
	b := backoff{min: time.Second, max: time.Minute}
	for attempt := range 70 {
		ceiling := time.Second
		for i := 0; i < attempt && ceiling < time.Minute; i++ {
			ceiling *= 2
		}
		ceiling = min(ceiling, time.Minute)
		d := b.next()
		if d < ceiling/2 || d > ceiling {
			t.Fatalf("attempt %d: wait %v outside [%v, %v]", attempt, d, ceiling/2, ceiling)
		}
	}
	b.reset()
	if d := b.next(); d < 500*time.Millisecond || d > time.Second {
		t.Fatalf("after reset: %v", d)
	}
	// Jitter: waits of one attempt are not all equal.
	seen := map[time.Duration]bool{}
	for range 20 {
		b := backoff{min: time.Second, max: time.Minute}
		b.attempt = 5
		seen[b.next()] = true
	}
	if len(seen) < 2 {
		t.Fatal("no jitter")
	}
}
