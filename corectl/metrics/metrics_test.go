package metrics

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/internal/filewatch"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

func scrapeOf(t *testing.T, m *Metrics) scrapetest.Samples {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	s, err := scrapetest.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNilRecordsNothing(t *testing.T) {
	var m *Metrics
	m.Reconciled("c", "ingress", "Verified")
	m.Step("c", OperationCreate, "policy", time.Second, nil)
	m.OrphanScan("c", ScanFailed)
	m.Authorized(time.Millisecond)
	if err := m.WatchCNIGate("c", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) })
	rec := httptest.NewRecorder()
	m.Instrument("GET /x", h).ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
	if rec.Code != 204 || m.Registerer() != nil {
		t.Fatalf("nil Metrics: %d %v", rec.Code, m.Registerer())
	}
}

func TestCollectors(t *testing.T) {
	m := New()
	h := m.Instrument("PUT /a/{id}", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(409) }))
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("PUT", "/a/1", nil))
	}
	m.Reconciled("c1", "ingress", "LKGRestored")
	m.Step("c1", OperationDelete, "delete-ingress", 20*time.Millisecond, errors.New("x"))
	m.OrphanScan("c1", ScanOK)
	m.OrphanScan("c1", ScanIncomplete)
	m.OrphanScan("c1", ScanIncomplete)
	m.Authorized(40 * time.Microsecond)
	m.Authorized(3 * time.Millisecond)
	open := true
	if err := m.WatchCNIGate("c1", func() error {
		if open {
			return nil
		}
		return errors.New("unqualified")
	}); err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if err := m.WatchCNIGate("c1", func() error { return nil }); !errors.As(err, &are) {
		t.Fatalf("second gate for c1: %v", err)
	}
	s := scrapeOf(t, m)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"corectl_http_requests_total", []string{"route", "PUT /a/{id}", "code", "409"}, 3},
		{"corectl_http_request_duration_seconds_count", []string{"route", "PUT /a/{id}"}, 3},
		{"corectl_reconcile_total", []string{"cluster", "c1", "controller", "ingress", "outcome", "LKGRestored"}, 1},
		{"corectl_lifecycle_steps_total", []string{"operation", "delete", "step", "delete-ingress", "outcome", "failed"}, 1},
		{"corectl_lifecycle_step_duration_seconds_sum", []string{"step", "delete-ingress"}, 0.02},
		{"corectl_cni_gate_open", []string{"cluster", "c1"}, 1},
		{"corectl_orphan_scans_total", []string{"cluster", "c1", "outcome", "ok"}, 1},
		{"corectl_orphan_scans_total", []string{"cluster", "c1", "outcome", "incomplete"}, 2},
		{"corectl_authorize_duration_seconds_count", nil, 2},
		{"corectl_authorize_duration_seconds_sum", nil, 0.00304},
	} {
		if got := s.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
	open = false
	if got := scrapeOf(t, m).Value("corectl_cni_gate_open", "cluster", "c1"); got != 0 {
		t.Fatalf("closed gate = %g", got)
	}
}

// TestRefusalsAndKeyFile: refusals are counted by reason; the key file
// gauges read the file's state at every scrape (stale while reloads
// fail, 0 once one succeeds).
func TestRefusalsAndKeyFile(t *testing.T) {
	m := New()
	m.Refused(RefusalUnknownKey)
	m.Refused(RefusalUnknownKey)
	m.Refused(RefusalOwnerUnchecked)
	st := filewatch.Stats{Entries: 3, LastLoad: time.Unix(1700000000, 0), FailingSince: time.Now().Add(-time.Minute)}
	if err := m.WatchKeyFile(func() filewatch.Stats { return st }); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchKeyFile(func() filewatch.Stats { return st }); err == nil {
		t.Fatal("a second key file registered")
	}
	s := scrapeOf(t, m)
	if s.Value("corectl_api_refusals_total", "reason", "unknown_key") != 2 || s.Value("corectl_api_refusals_total", "reason", "owner_unchecked") != 1 {
		t.Fatalf("refusals: %v", s)
	}
	if s.Value("corectl_api_key_file_entries") != 3 || s.Value("corectl_api_key_file_last_load_timestamp_seconds") != 1700000000 ||
		s.Value("corectl_api_key_file_stale_seconds") < 60 {
		t.Fatalf("key file gauges: %v", s)
	}
	st.FailingSince = time.Time{}
	if got := scrapeOf(t, m).Value("corectl_api_key_file_stale_seconds"); got != 0 {
		t.Fatalf("stale after a good reload = %g", got)
	}
	var nilM *Metrics
	nilM.Refused(RefusalMissingKey)
	if err := nilM.WatchKeyFile(func() filewatch.Stats { return st }); err != nil {
		t.Fatal(err)
	}
}

// TestInstrumentCountsStatuses: a request is counted under the status its
// handler wrote first (200 when it only wrote a body or wrote nothing, as
// promhttp counted it), every request is timed, and the handler's
// ResponseWriter unwraps to the server's (http.ResponseController).
func TestInstrumentCountsStatuses(t *testing.T) {
	m := New()
	var unwrapped bool
	h := m.Instrument("GET /s", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("do") {
		case "404":
			w.WriteHeader(404)
			w.WriteHeader(500) // a second status is the handler's bug: not counted
			_, _ = w.Write([]byte("x"))
		case "body":
			_, _ = w.Write([]byte("x"))
		case "flush":
			unwrapped = http.NewResponseController(w).Flush() == nil
		}
	}))
	for _, do := range []string{"404", "body", "nothing", "404", "flush"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/s?do="+do, nil))
	}
	s := scrapeOf(t, m)
	for code, want := range map[string]float64{"404": 2, "200": 3, "500": 0} {
		if got := s.Value("corectl_http_requests_total", "route", "GET /s", "code", code); got != want {
			t.Errorf("code %s: %g, want %g", code, got, want)
		}
	}
	if got := s.Value("corectl_http_request_duration_seconds_count", "route", "GET /s"); got != 5 {
		t.Errorf("timed %g requests, want 5", got)
	}
	if !unwrapped {
		t.Error("the handler's ResponseWriter does not reach the recorder's Flush")
	}
}
