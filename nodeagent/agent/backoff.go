package agent

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
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

// goingAwayJitter bounds the random wait before reconnecting after Core
// closed the connection with 1001 (going away), which spreads the nodes of
// a replica that shuts down over half a second rather than having them
// all dial the other replicas in the same instant.
const goingAwayJitter = 500 * time.Millisecond

// goingAway reports whether err is Core's close frame 1001.
func goingAway(err error) bool {
	var ce *websocket.CloseError
	return errors.As(err, &ce) && ce.Code == websocket.CloseGoingAway
}

// goingAwayWait is the wait after Core's 1001: random in [0, j], j the
// smaller of goingAwayJitter and backoffMin.
func goingAwayWait(backoffMin time.Duration) time.Duration {
	return rand.N(min(goingAwayJitter, backoffMin) + 1)
}

// maxRetryAfter bounds the Retry-After the agent honours, in seconds; a
// larger value (or an HTTP date) is ignored and the backoff applies.
const maxRetryAfter = 3600

// retryAfter reads the Retry-After of a 409 (another gateway replica still
// holds the node's claim) or a 429 (the hub's connect budget of this node
// is spent, docs/node-connect.md) in delay-seconds (RFC 9110 §10.2.3): 1 to
// maxRetryAfter digits' worth of seconds. Any other status or form gives
// false.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusTooManyRequests {
		return 0, false
	}
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if v == "" || len(v) > 4 || strings.Trim(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxRetryAfter {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// retryAfterError is a refused connect whose answer said when to try
// again.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string {
	return e.err.Error() + " (retry after " + e.after.String() + ")"
}

func (e *retryAfterError) Unwrap() error { return e.err }

// wait is the Retry-After plus a random jitter of up to a quarter of it
// (nodes of one dead replica do not all come back at once), at most limit.
func (e *retryAfterError) wait(limit time.Duration) time.Duration {
	return min(e.after+rand.N(e.after/4+1), limit)
}
