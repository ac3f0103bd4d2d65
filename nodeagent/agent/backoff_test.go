package agent

import (
	"net/http"
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

// TestRetryAfter: only a 409's or a 429's Retry-After in 1 to 3600
// seconds counts;
// the wait adds at most a quarter as jitter and stays within the limit.
func TestRetryAfter(t *testing.T) {
	for _, c := range []struct {
		status int
		value  string
		want   time.Duration
		ok     bool
	}{
		{409, "7", 7 * time.Second, true},
		{409, " 30 ", 30 * time.Second, true},
		{409, "3600", time.Hour, true},
		{409, "0", 0, false},
		{409, "3601", 0, false},
		{409, "-1", 0, false},
		{409, "1.5", 0, false},
		{409, "Wed, 21 Oct 2015 07:28:00 GMT", 0, false},
		{409, "", 0, false},
		{429, "3", 3 * time.Second, true},
		{429, "Wed, 21 Oct 2015 07:28:00 GMT", 0, false},
		{503, "7", 0, false},
	} {
		resp := &http.Response{StatusCode: c.status, Header: http.Header{}}
		if c.value != "" {
			resp.Header.Set("Retry-After", c.value)
		}
		got, ok := retryAfter(resp)
		if got != c.want || ok != c.ok {
			t.Errorf("%d Retry-After %q: %v %v, want %v %v", c.status, c.value, got, ok, c.want, c.ok)
		}
	}
	e := &retryAfterError{after: 8 * time.Second}
	for range 100 {
		if d := e.wait(time.Minute); d < 8*time.Second || d > 10*time.Second {
			t.Fatalf("wait %v outside [8s, 10s]", d)
		}
	}
	if d := e.wait(5 * time.Second); d != 5*time.Second {
		t.Fatalf("wait %v above the 5s limit", d)
	}
}
