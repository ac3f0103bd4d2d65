// Package authzwire reads the question and writes the answer of
// corectl's sandbox authorizer endpoint (GET /internal/v1/authorize,
// package corectl/httpapi; the contract is package gateway/authorizer's)
// without garbage per question: the query read without building
// url.Values, the answer written from a pooled buffer. The endpoint is
// asked for every request the gateway forwards (at most once a second per
// sandbox and gateway replica, thousands a second in all), and each
// allocation is work for corectl's collector, whose collections the
// slowest answers meet (docs/benchmarks.md, "Issue 33: the authorizer's
// tail").
package authzwire

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/authorizer"
)

// MaxQueryParams is net/url's default limit on a query's parameters
// (GODEBUG urlmaxqueryparams, 10,000): url.ParseQuery refuses a query
// with more, and r.URL.Query() is then empty.
const MaxQueryParams = 10000

// Query is what the authorizer reads of its query: the first credential
// and sandbox values (empty when absent) and how many of each there are.
type Query struct {
	Credential, Sandbox    string
	Credentials, Sandboxes int
}

// ParseQuery reads raw (a URL's RawQuery) as url.ParseQuery does,
// keeping the credential and sandbox parameters only: pairs separated by
// '&', a pair holding ';' skipped, key and value query-unescaped ('+' is
// a space) and a pair that does not unescape skipped; a query of more
// than MaxQueryParams pairs reads as empty. It allocates only to unescape
// a key or value that is escaped (TestParseQueryAsURLParseQuery,
// FuzzParseQuery).
func ParseQuery(raw string) Query {
	var q Query
	if strings.Count(raw, "&")+1 > MaxQueryParams {
		return q
	}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		key, value, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(key)
		if err != nil || key != "credential" && key != "sandbox" {
			continue
		}
		if value, err = url.QueryUnescape(value); err != nil {
			continue
		}
		switch key {
		case "credential":
			if q.Credentials == 0 {
				q.Credential = value
			}
			q.Credentials++
		case "sandbox":
			if q.Sandboxes == 0 {
				q.Sandbox = value
			}
			q.Sandboxes++
		}
	}
	return q
}

// jsonContentType is the Content-Type header value of WriteAnswer, shared
// by every answer (the HTTP server only reads it).
var jsonContentType = []string{"application/json"}

// answerBuffers hold an answer's bytes while it is written.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 128); return &b }}

// WriteAnswer writes a 200 with authorizer answer a: Content-Type
// application/json and the bytes encoding/json's Encoder writes for a
// (with its trailing newline), end being its endAt (RFC 3339 with
// nanoseconds, UTC) when a is allowed and hasEnd (a.EndAt set is written
// as it is). An answer whose reason or cluster would need escaping in
// JSON (none of the authorizer's reasons do) is written by the Encoder.
func WriteAnswer(w http.ResponseWriter, a authorizer.Answer, end time.Time, hasEnd bool) {
	if !jsonPlain(string(a.Reason)) || !jsonPlain(a.Cluster) || a.EndAt != "" {
		if a.Allowed && hasEnd && a.EndAt == "" {
			a.EndAt = end.UTC().Format(time.RFC3339Nano)
		}
		w.Header()["Content-Type"] = jsonContentType
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(a)
		return
	}
	bp := answerBuffers.Get().(*[]byte)
	b := (*bp)[:0]
	if a.Allowed {
		b = append(b, `{"allowed":true`...)
	} else {
		b = append(b, `{"allowed":false`...)
	}
	if a.Reason != "" {
		b = append(b, `,"reason":"`...)
		b = append(b, a.Reason...)
		b = append(b, '"')
	}
	if a.Allowed && hasEnd {
		b = append(b, `,"endAt":"`...)
		b = end.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if a.Cluster != "" {
		b = append(b, `,"cluster":"`...)
		b = append(b, a.Cluster...)
		b = append(b, '"')
	}
	if a.TrafficTokenRequired {
		b = append(b, `,"trafficTokenRequired":true`...)
	}
	b = append(b, "}\n"...)
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	*bp = b
	answerBuffers.Put(bp)
}

// jsonPlain reports whether s is written in JSON as it is, between
// quotes, by encoding/json's default encoder: printable ASCII without
// '"', '\\' and the HTML characters '<', '>' and '&' it escapes.
func jsonPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
