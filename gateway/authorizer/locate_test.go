package authorizer

import (
	"context"
	"errors"
	"testing"
)

// TestLocate: the question names no credential; the cluster and the
// traffic-token flag come back; an answer without a cluster, or a
// credential's answer with one, fails closed; answers are cached per
// sandbox, apart from Authorize's.
func TestLocate(t *testing.T) {
	h, c, _ := start(t, fixed(200, `{"allowed":true,"cluster":"c1","trafficTokenRequired":true}`))
	d, err := h.Locate(context.Background(), "sb1")
	if err != nil || !d.Allowed || d.ClusterID != "c1" || !d.TrafficTokenRequired {
		t.Fatalf("Locate = %+v, %v", d, err)
	}
	if q := c.last.URL.Query(); q.Has("credential") || q.Get("sandbox") != "sb1" {
		t.Fatalf("query = %v", q)
	}
	if _, err := h.Locate(context.Background(), "sb1"); err != nil || c.count() != 1 {
		t.Fatalf("second Locate: %v, %d calls; want the cached answer", err, c.count())
	}
	if _, err := h.Authorize(context.Background(), "cred", "sb1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Authorize with a located answer = %v, want ErrUnavailable", err)
	}

	for _, body := range []string{`{"allowed":true}`, `{"allowed":false,"reason":"not_found","cluster":"c1"}`} {
		h, _, _ := start(t, fixed(200, body))
		if d, err := h.Locate(context.Background(), "sb1"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: Locate = %+v, %v; want ErrUnavailable", body, d, err)
		}
	}
	h, _, _ = start(t, fixed(200, `{"allowed":false,"reason":"deleting"}`))
	if d, err := h.Locate(context.Background(), "sb1"); err != nil || d.Allowed || d.Reason != ReasonDeleting {
		t.Fatalf("Locate refused = %+v, %v", d, err)
	}
}
