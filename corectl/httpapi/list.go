package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/lifecycle"
)

// listQuery reads the query parameters of E2B's GET /v2/sandboxes
// (metadata, state, order, startedAfter, template, limit, nextToken); v1
// reads metadata only. Every malformed parameter is an error naming it.
func listQuery(q url.Values, v2 bool) (lifecycle.ListQuery, error) {
	var lq lifecycle.ListQuery
	for k, vs := range q {
		if len(vs) > 1 && k != "state" {
			return lq, fmt.Errorf("query parameter %s is repeated", k)
		}
	}
	if m := q.Get("metadata"); m != "" {
		pairs, err := url.ParseQuery(m)
		if err != nil {
			return lq, errors.New("metadata must be a URL-encoded query such as user=abc&app=prod")
		}
		lq.Metadata = map[string]string{}
		for k, vs := range pairs {
			if len(vs) != 1 {
				return lq, fmt.Errorf("metadata key %q is repeated", k)
			}
			lq.Metadata[k] = vs[0]
		}
	}
	if !v2 {
		return lq, nil
	}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			if st != "running" && st != "paused" {
				return lq, fmt.Errorf("state must be running or paused, not %q", st)
			}
			lq.States = append(lq.States, st)
		}
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		lq.Ascending = true
	default:
		return lq, errors.New("order must be asc or desc")
	}
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return lq, errors.New("startedAfter must be an RFC 3339 date-time")
		}
		lq.StartedAfter = t
	}
	lq.Template = q.Get("template")
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > lifecycle.MaxListLimit {
			return lq, fmt.Errorf("limit must be a whole number from 1 to %d", lifecycle.MaxListLimit)
		}
		lq.Limit = n
	}
	lq.NextToken = q.Get("nextToken")
	return lq, nil
}

// listSandboxes is GET /sandboxes (E2B v1, deprecated there: every running
// sandbox the caller sees, metadata filter only) and GET /v2/sandboxes
// (filters and pages; X-Next-Token when there is a next page,
// X-Total-Running when running sandboxes were asked for). Both answer a
// JSON array of E2B ListedSandbox objects.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	v2 := strings.HasPrefix(r.URL.Path, "/v2/")
	ch, cred, ok := s.lifecycleScope(w, r)
	if !ok {
		return
	}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		err = errors.New("the query string is not valid URL encoding")
	}
	var q lifecycle.ListQuery
	if err == nil {
		q, err = listQuery(vals, v2)
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	var items []lifecycle.Listed
	var page *lifecycle.ListPage
	for {
		page, err = ch.Lifecycle.List(ctx, cred, cred.ProjectNamespace, q)
		if err != nil {
			if errors.Is(err, lifecycle.ErrBadToken) {
				s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
				return
			}
			s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
			return
		}
		items = append(items, page.Items...)
		if v2 || page.NextToken == "" {
			break
		}
		q.NextToken = page.NextToken
	}
	if v2 {
		if page.NextToken != "" {
			w.Header().Set("X-Next-Token", page.NextToken)
		}
		if len(q.States) == 0 || slices.Contains(q.States, "running") {
			w.Header().Set("X-Total-Running", strconv.Itoa(page.Total))
		}
	}
	if items == nil {
		items = []lifecycle.Listed{}
	}
	writeJSON(w, http.StatusOK, items)
}
