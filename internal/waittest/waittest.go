// Package waittest is how tests wait for asynchronous work: they poll a
// condition until it holds, with a bound after which the test fails,
// instead of sleeping for a guessed time.
package waittest

import (
	"testing"
	"time"
)

// Tick is how often Until asks its condition again: 2 ms.
const Tick = 2 * time.Millisecond

// Until asks cond at once and then every Tick until it returns true, and
// fails the test with t.Fatalf ("not within <limit>: <what>") once limit
// has passed without it. limit is the bound the behaviour promises, or a
// safety net where nothing promises one; it is never how long the work is
// expected to take. cond runs on the calling goroutine, so it may use t.
func Until(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", limit, what)
		}
		<-tick.C
	}
}
