package quota

import (
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/credential"
)

func refusal(t *testing.T, err error) *Refusal {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a *Refusal", err)
	}
	return r
}

func TestConcurrentCountsCreatesInFlight(t *testing.T) {
	var g Gate
	lim := &credential.Limits{ConcurrentSandboxes: 2}
	rel1, err := g.Admit("a", lim, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	// 1 running + 1 in flight = 2: refused until the create ends.
	if r := refusal(t, second(g.Admit("a", lim, 1, 0))); r.Reason != ReasonConcurrent || !r.RateLimited ||
		r.Message != "you have reached the maximum number of concurrent sandboxes (2) for this credential" {
		t.Fatalf("refusal %+v", r)
	}
	if _, err := g.Admit("b", lim, 0, 0); err != nil {
		t.Fatalf("another credential: %v", err)
	}
	rel1()
	rel1() // idempotent
	if _, err := g.Admit("a", lim, 1, 0); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func second(_ func(), err error) error { return err }

func TestCreatesPerMinute(t *testing.T) {
	now := time.Unix(1000, 0)
	g := Gate{Now: func() time.Time { return now }}
	lim := &credential.Limits{CreatesPerMinute: 2}
	for i := 0; i < 2; i++ {
		rel, err := g.Admit("a", lim, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		rel()
	}
	if r := refusal(t, second(g.Admit("a", lim, 0, 0))); r.Reason != ReasonRate || !r.RateLimited {
		t.Fatalf("refusal %+v", r)
	}
	now = now.Add(Window)
	if _, err := g.Admit("a", lim, 0, 0); err != nil {
		t.Fatalf("a minute later: %v", err)
	}
	if len(g.starts["a"]) != 1 {
		t.Fatalf("kept %d admission times, want 1", len(g.starts["a"]))
	}
}

func TestMaxTimeoutAndNoLimits(t *testing.T) {
	var g Gate
	if r := refusal(t, second(g.Admit("a", &credential.Limits{MaxTimeoutSeconds: 60}, 0, 61*time.Second))); r.Reason != ReasonTimeout || r.RateLimited {
		t.Fatalf("refusal %+v", r)
	}
	if _, err := g.Admit("a", &credential.Limits{MaxTimeoutSeconds: 60}, 0, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Admit("a", nil, 1000, time.Hour); err != nil {
		t.Fatal(err)
	}
	if len(g.inflight) != 1 {
		t.Fatalf("inflight %v: a create without limits is not tracked", g.inflight)
	}
}

func TestCheckTimeout(t *testing.T) {
	lim := &credential.Limits{MaxTimeoutSeconds: 60}
	if CheckTimeout(lim, time.Minute) != nil || CheckTimeout(nil, time.Hour) != nil || CheckTimeout(&credential.Limits{}, time.Hour) != nil {
		t.Fatal("refused within the limit")
	}
	if r := refusal(t, CheckTimeout(lim, time.Minute+time.Second)); r.Reason != ReasonTimeout || r.Message != "timeout cannot be greater than 60 seconds for this credential" {
		t.Fatalf("refusal %+v", r)
	}
}
