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
		md, err := metadataFilter(m)
		if err != nil {
			return lq, err
		}
		lq.Metadata = md
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

// metadataFilter decodes the metadata query parameter (already decoded
// once from the URL) as E2B's API does: the whole value is URL-unescaped,
// split into pairs on "&" and each pair on "=", and each key and value
// unescaped again. That undoes what the SDKs send: JS and Python escape
// every key and value, join the pairs as a query string (which escapes the
// escapes) and put that in the URL (a third time), so {"user id": "a b/c"}
// arrives as user%252520id%3Da%252520b%25252Fc. A plain user=abc&app=prod
// reads the same. A pair without exactly one "=", an empty key, a key
// given twice, more pairs than lifecycle.MaxMetadataEntries or bad
// escaping is an error naming the parameter.
func metadataFilter(m string) (map[string]string, error) {
	bad := errors.New("metadata must be a URL-encoded query of key=value pairs such as user=abc&app=prod")
	all, err := url.QueryUnescape(m)
	if err != nil {
		return nil, bad
	}
	// No sandbox has more metadata entries than a create accepts, so a
	// filter of more pairs matches nothing: refused before its pairs are
	// split and kept (a URL of up to 1 MB could name 100,000 of them).
	if n := strings.Count(all, "&") + 1; n > lifecycle.MaxMetadataEntries {
		return nil, fmt.Errorf("metadata names %d pairs, more than a sandbox can have (%d)", n, lifecycle.MaxMetadataEntries)
	}
	md := map[string]string{}
	for _, pair := range strings.Split(all, "&") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 {
			return nil, bad
		}
		k, err1 := url.QueryUnescape(kv[0])
		v, err2 := url.QueryUnescape(kv[1])
		if err1 != nil || err2 != nil || k == "" {
			return nil, bad
		}
		if _, ok := md[k]; ok {
			return nil, fmt.Errorf("metadata key %q is repeated", k)
		}
		md[k] = v
	}
	return md, nil
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
	// v1 answers every sandbox at once: one pass (ListQuery.All), not
	// one per page of 100.
	q.All = !v2
	page, err := ch.Lifecycle.List(ctx, cred, cred.ProjectNamespace, q)
	if err != nil {
		if errors.Is(err, lifecycle.ErrBadToken) {
			s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
			return
		}
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		return
	}
	items := page.Items
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
