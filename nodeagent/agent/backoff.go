package agent

import (
	"math/rand/v2"
	"time"
)

// backoff is a bounded, jittered exponential backoff: attempt n (from 0)
// waits a random duration in [d/2, d] where d = min(Min·2ⁿ, Max).
type backoff struct {
	min, max time.Duration
	attempt  int
}

// next returns the wait before the next attempt and advances.
func (b *backoff) next() time.Duration {
	d := b.min
	for i := 0; i < b.attempt && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	b.attempt++
	half := d / 2
	return half + rand.N(d-half+1)
}

// reset starts the sequence again from Min.
func (b *backoff) reset() { b.attempt = 0 }
