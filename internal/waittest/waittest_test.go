package waittest

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestUntilReturnsOnceTheConditionHolds: the condition is asked until it
// holds, and no more.
func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var asked atomic.Int32
	Until(t, time.Minute, "the third question", func() bool { return asked.Add(1) == 3 })
	if n := asked.Load(); n != 3 {
		t.Fatalf("asked %d times, want 3", n)
	}
}

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing.T's does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestUntilFailsAtItsLimit: a condition that never holds fails the test
// with the limit and what was waited for.
func TestUntilFailsAtItsLimit(t *testing.T) {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Until(r, 20*time.Millisecond, "a condition that never holds", func() bool { return false })
	}()
	<-done
	if !strings.Contains(r.msg, "not within") || !strings.Contains(r.msg, "a condition that never holds") ||
		!strings.Contains(r.msg, "20ms") {
		t.Fatalf("message %q", r.msg)
	}
}
