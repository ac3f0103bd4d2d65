package fairshare_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandgate/sandgate/corectl/fairshare"
)

// TestShareDebt: a share of 3 requests with no refill worth counting
// admits a call, lets that call's requests take it below zero (nothing
// admitted is cut off), then refuses the credential's calls; another
// credential's share is its own; requests without an admitted tag are
// not counted; a nil Shares admits everything.
func TestShareDebt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	hc := &http.Client{Transport: fairshare.Transport(http.DefaultTransport)}
	get := func(ctx context.Context) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	s := fairshare.New(fairshare.Config{Rate: 1e-9, Burst: 3})
	ctx, done := fairshare.Tag(context.Background())
	defer done()
	if !s.Admit(ctx, "a") {
		t.Fatal("a's first call refused")
	}
	for range 5 {
		get(ctx) // 1 + 5 requests of a share of 3: all sent
	}
	if s.Admit(context.Background(), "a") {
		t.Fatal("a admitted with its share in debt")
	}
	if !s.Admit(context.Background(), "b") {
		t.Fatal("b refused for a's debt")
	}
	// Requests of an untagged context, or of a tag no call was admitted
	// on, are not counted: b keeps the two requests its share has left.
	get(context.Background())
	other, otherDone := fairshare.Tag(context.Background())
	defer otherDone()
	get(other)
	if !s.Admit(context.Background(), "b") || !s.Admit(context.Background(), "b") || s.Admit(context.Background(), "b") {
		t.Fatal("b's share was charged for requests that named no credential")
	}
	var none *fairshare.Shares
	if !none.Admit(ctx, "a") || fairshare.New(fairshare.Config{Rate: -1}) != nil {
		t.Fatal("a nil Shares refused, or a negative rate did not turn the shares off")
	}
}

// TestCallsInProgress: with 2 calls in progress allowed, a third tagged
// call of the same credential is refused whatever its share holds, and
// takes nothing from the share; another credential is admitted; once a
// call is done, the credential is admitted again. Untagged calls are
// admitted by the share alone.
func TestCallsInProgress(t *testing.T) {
	s := fairshare.New(fairshare.Config{Rate: 1e-9, Burst: 10, InProgress: 2})
	call := func(id string) (bool, func()) {
		ctx, done := fairshare.Tag(context.Background())
		return s.Admit(ctx, id), done
	}
	ok1, done1 := call("a")
	ok2, done2 := call("a")
	defer done2()
	ok3, done3 := call("a")
	done3()
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("admitted %v %v %v, want the third refused", ok1, ok2, ok3)
	}
	if ok, done := call("b"); !ok {
		t.Fatal("b refused for a's calls in progress")
	} else {
		done()
	}
	done1()
	done1() // a second call does nothing
	if ok, done := call("a"); !ok {
		t.Fatal("a refused once one of its calls was done")
	} else {
		done()
	}
	// a took 3 of its 10 (the refused call took none); untagged calls
	// are not bounded by calls in progress.
	for i := range 7 {
		if !s.Admit(context.Background(), "a") {
			t.Fatalf("untagged call %d refused", i)
		}
	}
	if s.Admit(context.Background(), "a") {
		t.Fatal("a admitted past its share")
	}
}

// TestTagged: a call's context and what derives from it are tagged; a
// context that never went through Tag is not.
func TestTagged(t *testing.T) {
	if fairshare.Tagged(context.Background()) {
		t.Fatal("an untagged context reads as tagged")
	}
	ctx, done := fairshare.Tag(context.Background())
	defer done()
	sub, cancel := context.WithCancel(ctx)
	defer cancel()
	if !fairshare.Tagged(ctx) || !fairshare.Tagged(sub) {
		t.Fatal("a call's context (or one derived from it) reads as untagged")
	}
}
