package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
)

// MaxMetricsSandboxes is the most sandbox IDs one GET /sandboxes/metrics
// may name (E2B's maxItems of sandbox_ids).
const MaxMetricsSandboxes = 100

// SandboxesWithMetrics is E2B's SandboxesWithMetrics: the latest sample of
// each sandbox, by sandbox ID.
type SandboxesWithMetrics struct {
	// Sandboxes maps a sandbox ID to its latest sample.
	Sandboxes map[string]lifecycle.Metric `json:"sandboxes"`
}

// metricsSandboxIDs reads the sandbox_ids query parameter of GET
// /sandboxes/metrics: required, given once, 1 to MaxMetricsSandboxes
// distinct sandbox IDs separated by commas (E2B's array with explode:
// false and uniqueItems).
func metricsSandboxIDs(r *http.Request) ([]string, error) {
	vals := r.URL.Query()["sandbox_ids"]
	switch {
	case len(vals) == 0 || vals[0] == "":
		return nil, errors.New("sandbox_ids is required: a comma-separated list of sandbox IDs")
	case len(vals) > 1:
		return nil, errors.New("query parameter sandbox_ids is repeated")
	}
	ids := strings.Split(vals[0], ",")
	if len(ids) > MaxMetricsSandboxes {
		return nil, fmt.Errorf("too many sandboxes requested, maximum is %d", MaxMetricsSandboxes)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if err := sandbox.ValidateID(id); err != nil {
			return nil, fmt.Errorf("sandbox_ids: invalid sandbox ID %q", id)
		}
		if seen[id] {
			return nil, fmt.Errorf("sandbox_ids: %q is given twice", id)
		}
		seen[id] = true
	}
	return ids, nil
}

// sandboxesMetrics is GET /sandboxes/metrics?sandbox_ids=<id>,<id>,…:
// E2B's SandboxesWithMetrics with the latest sample (lifecycle's Usage) of
// each named sandbox the caller's list shows (its own, not expired, not
// being deleted). A named sandbox that does not exist, is another
// credential's, is being deleted or has no sample yet is left out, as E2B
// leaves out what it has no metrics for; so another owner's IDs are not
// revealed.
func (s *Server) sandboxesMetrics(w http.ResponseWriter, r *http.Request) {
	ch, cred, ok := s.lifecycleScope(w, r)
	if !ok {
		return
	}
	ids, err := metricsSandboxIDs(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	// One pass over the caller's list (ListQuery.All), not one per page.
	page, err := ch.Lifecycle.List(ctx, cred, cred.ProjectNamespace, lifecycle.ListQuery{All: true})
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		return
	}
	listed := make(map[string]bool, len(page.Items))
	for _, it := range page.Items {
		listed[it.SandboxID] = true
	}
	out := SandboxesWithMetrics{Sandboxes: map[string]lifecycle.Metric{}}
	for _, id := range ids {
		if !listed[id] {
			continue
		}
		samples, err := ch.Lifecycle.Usage(ctx, cred.ProjectNamespace, id, nil)
		switch {
		case errors.Is(err, lifecycle.ErrNotFound):
			continue // deleted since the list
		case err != nil:
			s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
			return
		}
		for i, m := range samples {
			if i == 0 || m.TimestampUnix > out.Sandboxes[id].TimestampUnix {
				out.Sandboxes[id] = m
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}
