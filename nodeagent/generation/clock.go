package generation

import "time"

// Clock is the manager's time source, injectable so that backoff and
// deadlines are tested without waiting.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// systemClock is the real clock.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Backoff is the wait before the next attempt after failures consecutive
// failed attempts (spec node-protocol.md "Restart recovery": 1, 2, 5 and
// 10 minutes, then at most 30); 0 for no failure.
func Backoff(failures int) time.Duration {
	steps := []time.Duration{0, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute}
	if failures < len(steps) {
		return steps[max(failures, 0)]
	}
	return 30 * time.Minute
}

// AttemptDeadline bounds one preparation, repair or reclamation attempt
// (spec "Restart recovery": a 30-minute deadline per attempt).
const AttemptDeadline = 30 * time.Minute

// BusyRetry is the wait before trying again a job whose lease or
// installation lock another helper, reclaimer or repair holds; it is not
// a failure and does not grow the backoff.
const BusyRetry = time.Minute
