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
// credential's share is its own; requests without a charged tag are not
// counted; a nil Shares admits everything.
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
	ctx := fairshare.Tag(context.Background())
	if !s.Admit("a") {
		t.Fatal("a's first call refused")
	}
	s.Charge(ctx, "a")
	for range 5 {
		get(ctx) // 1 + 5 requests of a share of 3: all sent
	}
	if s.Admit("a") {
		t.Fatal("a admitted with its share in debt")
	}
	if !s.Admit("b") {
		t.Fatal("b refused for a's debt")
	}
	// Requests of an untagged context, or of a tag no call charged, are
	// not counted: b keeps the two requests its share has left.
	get(context.Background())
	get(fairshare.Tag(context.Background()))
	if !s.Admit("b") || !s.Admit("b") || s.Admit("b") {
		t.Fatal("b's share was charged for requests that named no credential")
	}
	var none *fairshare.Shares
	none.Charge(ctx, "a")
	if !none.Admit("a") || fairshare.New(fairshare.Config{Rate: -1}) != nil {
		t.Fatal("a nil Shares refused, or a negative rate did not turn the shares off")
	}
}
