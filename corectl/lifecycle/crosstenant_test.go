package lifecycle_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/pagetoken"
)

// TestCrossTenantIDVariants: credential a2 (a's namespace, not
// project-wide) and b (another namespace) try to reach a's sandbox by
// spellings of its ID that are not its ID (upper case, a full-width
// letter, percent-encoded, a trailing slash or dot, a NUL, path segments)
// on the sandbox routes, by a forged nextToken that names a's sandbox,
// by metadata filters in label-selector syntax, and by naming it in
// GET /sandboxes/metrics. None of their answers is a 2xx or a 5xx, none
// names a's sandbox unless the caller wrote its ID, none of the writes
// reaches it (its end time is unchanged and
// it is still served to a), and a forged cursor pages only the caller's
// own list.
func TestCrossTenantIDVariants(t *testing.T) {
	w := start(t)
	id := w.create(`{"templateID":"base","metadata":{"team":"a"}}`).SandboxID
	var before struct {
		EndAt string `json:"endAt"`
	}
	if st, raw := w.do("GET", "/sandboxes/"+id, "key-a", "", &before); st != http.StatusOK {
		t.Fatalf("a's GET = %d %s", st, raw)
	}
	variants := []string{
		strings.ToUpper(id), "%73" + id[1:], strings.Replace(id, "b", "ｂ", 1), url.PathEscape(id + "\x00"),
		id + "%2F", id + ".", id + "%2e", "..%2F" + id, "x%2F..%2F" + id, id + "%20", " " + id,
	}
	routes := []struct{ method, suffix, body string }{
		{"GET", "", ""}, {"DELETE", "", ""}, {"POST", "/connect", "{}"}, {"POST", "/timeout", `{"timeout":1}`},
		{"POST", "/refreshes", `{"duration":3600}`}, {"GET", "/metrics", ""}, {"GET", "/logs", ""},
		{"PUT", "/network", `{"allowOut":["1.1.1.1"]}`}, {"GET", "/network/ingress", ""}, {"POST", "/pause", ""},
	}
	for _, key := range []string{"key-a2", "key-b"} {
		for _, v := range variants {
			for _, r := range routes {
				st, raw := w.do(r.method, "/sandboxes/"+v+r.suffix, key, r.body, nil)
				// Not served, and not a server error either: a caller's
				// malformed ID is its own mistake, never corectl's 5xx
				// (which the operator's CorectlAPIServerErrors alert counts).
				if st/100 == 2 || st/100 == 5 {
					t.Errorf("%s %s %s%s = %d %.200s", key, r.method, v, r.suffix, st, raw)
				}
			}
		}
		// A cursor naming a's sandbox, one second after its start and
		// before it: the list is the caller's own (empty) either way.
		for _, d := range []time.Duration{-time.Hour, time.Second, time.Hour} {
			tok := pagetoken.Encode(time.Now().Add(d), id)
			st, raw := w.do("GET", "/v2/sandboxes?nextToken="+url.QueryEscape(tok), key, "", nil)
			if st != http.StatusOK || strings.TrimSpace(string(raw)) != "[]" {
				t.Errorf("%s list after a forged cursor = %d %s", key, st, raw)
			}
		}
		for _, m := range []string{"team=a", "team%3Da%2Cteam%21%3Db", "team+in+(a)", "team%3D%3Da", "team!%3Da"} {
			st, raw := w.do("GET", "/v2/sandboxes?metadata="+m, key, "", nil)
			if strings.Contains(string(raw), id) || st != http.StatusOK && st != http.StatusBadRequest {
				t.Errorf("%s list metadata=%s = %d %s", key, m, st, raw)
			}
		}
		if st, raw := w.do("GET", "/sandboxes/metrics?sandbox_ids="+id, key, "", nil); st != http.StatusOK || strings.Contains(string(raw), id) {
			t.Errorf("%s metrics of a's sandbox = %d %s", key, st, raw)
		}
	}
	var after struct {
		EndAt string `json:"endAt"`
	}
	if st, raw := w.do("GET", "/sandboxes/"+id, "key-a", "", &after); st != http.StatusOK || after.EndAt != before.EndAt {
		t.Fatalf("a's sandbox after the attempts = %d %s (endAt was %s)", st, raw, before.EndAt)
	}
}
