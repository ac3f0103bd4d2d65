package authzwire

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/authorizer"
)

// asParseQuery is what the authorizer read of raw before ParseQuery:
// r.URL.Query(), which ignores url.ParseQuery's error.
func asParseQuery(raw string) Query {
	v, _ := url.ParseQuery(raw)
	return Query{Credential: v.Get("credential"), Sandbox: v.Get("sandbox"),
		Credentials: len(v["credential"]), Sandboxes: len(v["sandbox"])}
}

// writeJSON is how corectl's handlers write a JSON answer
// (httpapi.writeJSON), the reference WriteAnswer is held to.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// TestParseQueryAsURLParseQuery: the authorizer's query reader reads
// every query as url.ParseQuery does (the first value and the count of
// each parameter), escapes, semicolons, repeats, empty pairs and the
// parameter limit included.
func TestParseQueryAsURLParseQuery(t *testing.T) {
	for _, raw := range []string{
		"", "credential=own&sandbox=sb-1", "sandbox=sb-1", "credential=&sandbox=", "credential&sandbox",
		"credential=a&credential=b&sandbox=s", "sandbox=s&sandbox=t&credential=c", "&&credential=c&&sandbox=s&",
		"credential=c;x&sandbox=s", "credential=c&sandbox=s;", "cred%65ntial=c&sandbox=s%2D1", "credential=a+b&sandbox=%41",
		"credential=%zz&sandbox=s", "credential=c&sandbox=%", "credential=c&%zz=1&sandbox=s", "credential=c&sandbox=s=t",
		"credential=c&other=1&sandbox=s", "sandbox=&sandbox=s", "=c&sandbox=s",
		"credential=c&sandbox=s" + strings.Repeat("&x=1", MaxQueryParams-2),
		"credential=c&sandbox=s" + strings.Repeat("&x=1", MaxQueryParams-1),
		"credential=c&sandbox=s" + strings.Repeat("&", MaxQueryParams),
	} {
		if got, want := ParseQuery(raw), asParseQuery(raw); got != want {
			name := raw
			if len(name) > 80 {
				name = name[:80] + "…"
			}
			t.Errorf("%q: %+v, url.ParseQuery %+v", name, got, want)
		}
	}
}

// FuzzParseQuery: ParseQuery reads any query as url.ParseQuery does.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"credential=own&sandbox=sb-1", "credential=a&credential=b", "sandbox=%41;", "credential=a+b&sandbox=%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if got, want := ParseQuery(raw), asParseQuery(raw); got != want {
			t.Fatalf("%q: %+v, url.ParseQuery %+v", raw, got, want)
		}
	})
}

// TestWriteAnswerAsWriteJSON: WriteAnswer writes the bytes, status and
// Content-Type writeJSON writes for the same answer (its endAt formatted
// as the authorizer formatted it, RFC 3339 with nanoseconds in UTC), for
// every reason, with and without an end time, and for strings that need
// escaping (written by the Encoder itself).
func TestWriteAnswerAsWriteJSON(t *testing.T) {
	zone := time.FixedZone("x", 5*3600+1800)
	ends := []time.Time{
		time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC), time.Date(2026, 12, 6, 4, 0, 0, 120_000_000, time.UTC),
		time.Date(2026, 12, 6, 4, 0, 0, 123_456_789, zone), time.Date(1999, 1, 2, 3, 4, 5, 6, time.Local),
	}
	var cases []struct {
		a      authorizer.Answer
		end    time.Time
		hasEnd bool
	}
	add := func(a authorizer.Answer, end time.Time, hasEnd bool) {
		cases = append(cases, struct {
			a      authorizer.Answer
			end    time.Time
			hasEnd bool
		}{a, end, hasEnd})
	}
	for _, r := range []authorizer.Reason{"", authorizer.ReasonNotFound, authorizer.ReasonDeleting, authorizer.ReasonExpired,
		authorizer.ReasonNotReady, `needs "escaping" <&>`, "naïve"} {
		for _, e := range ends {
			add(authorizer.Answer{Reason: r}, e, true)
			add(authorizer.Answer{Allowed: r == "", Reason: r}, e, true)
		}
		add(authorizer.Answer{Allowed: r == "", Reason: r}, time.Time{}, false)
	}
	add(authorizer.Answer{Allowed: true, Cluster: "c1", TrafficTokenRequired: true}, ends[1], true)
	add(authorizer.Answer{Allowed: true, Cluster: "c<1>"}, ends[1], false)
	for _, c := range cases {
		want := c.a
		if want.Allowed && c.hasEnd {
			want.EndAt = c.end.UTC().Format(time.RFC3339Nano)
		}
		exp := httptest.NewRecorder()
		writeJSON(exp, 200, want)
		got := httptest.NewRecorder()
		WriteAnswer(got, c.a, c.end, c.hasEnd)
		if got.Code != exp.Code || got.Body.String() != exp.Body.String() || got.Header().Get("Content-Type") != exp.Header().Get("Content-Type") ||
			len(got.Header()) != len(exp.Header()) {
			t.Errorf("%+v end %v: %d %q %v, writeJSON %d %q %v", c.a, c.end, got.Code, got.Body.String(), got.Header(),
				exp.Code, exp.Body.String(), exp.Header())
		}
	}
}
