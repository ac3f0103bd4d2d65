package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// cannedExecd is an http.RoundTripper that answers every request with
// 200 and body, as execd answers a listing.
type cannedExecd string

func (c cannedExecd) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		ContentLength: int64(len(c)), Body: io.NopCloser(strings.NewReader(string(c))), Request: r}, nil
}

// decodedAnswer is ListDir's answer to body as the gateway writes it for
// a decoded list (entryInfo, envd.ListDirResponse), or ok false where
// that list or an entry of it is refused.
func decodedAnswer(t *testing.T, body string) (answer []byte, ok bool) {
	t.Helper()
	return decodedAnswerWith(t, &execd.Client{Transport: cannedExecd(body)})
}

// decodedAnswerWith is decodedAnswer of what c's execd answers.
func decodedAnswerWith(t *testing.T, c *execd.Client) (answer []byte, ok bool) {
	t.Helper()
	list, err := c.ListDirectory(context.Background(), testTarget, "/d", 1)
	if err != nil {
		return nil, false
	}
	resp := envd.ListDirResponse{Entries: make([]envd.EntryInfo, 0, len(list))}
	times := make([]envd.Timestamp, len(list))
	for i, fi := range list {
		ent, err := entryInfo(fi, &times[i])
		if err != nil {
			return nil, false
		}
		resp.Entries = append(resp.Entries, ent)
	}
	w := httptest.NewRecorder()
	if err := connect.WriteUnary(w, resp); err != nil {
		t.Fatal(err)
	}
	return w.Body.Bytes(), true
}

// plainAnswer is ListDir's answer to body through the plain listing's
// copy (writePlainListing), or viewed false when body is not a plain
// listing.
func plainAnswer(t *testing.T, body string) (answer []byte, viewed bool) {
	t.Helper()
	w := httptest.NewRecorder()
	_, viewed, err := (&execd.Client{Transport: cannedExecd(body)}).ListDirectoryView(context.Background(), testTarget, "/d", 1,
		func(views []execd.FileInfoView) { writePlainListing(w, views) })
	if viewed && err != nil {
		t.Fatalf("body %q: viewed, and error %v", body, err)
	}
	return w.Body.Bytes(), viewed
}

// samePlainAnswer fails unless a body taken as a plain listing is answered
// with exactly the bytes its decoded list is answered with (and is one
// the decoded path answers). It reports whether body was plain.
func samePlainAnswer(t *testing.T, body string) bool {
	t.Helper()
	got, viewed := plainAnswer(t, body)
	if !viewed {
		return false
	}
	want, ok := decodedAnswer(t, body)
	if !ok {
		t.Fatalf("body %q: taken as a plain listing, refused when decoded", body)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("body %q:\nplain   %s\ndecoded %s", body, got, want)
	}
	return true
}

// execdEntry is one entry as execd HEAD writes it (v1.0.18's listing
// built by the gateway has no type).
func execdEntry(path, typ string, size, mode int, modified string) string {
	return fmt.Sprintf(`{"path":%q,"type":%q,"size":%d,"modified_at":%q,"created_at":%q,"owner":"root","group":"root","mode":%d}`,
		path, typ, size, modified, modified, mode)
}

// TestPlainListingSameAnswer: execd's listings as execd HEAD writes them
// are copied (the plain path), and answered byte for byte as their
// decoded lists are, from none to a listing large enough to be written in
// parts; what is not a plain listing, and a listing with a symlink, takes
// the decoded path.
func TestPlainListingSameAnswer(t *testing.T) {
	many := make([]string, 4000) // about 0.9 MB of answer: written in parts
	for i := range many {
		many[i] = execdEntry(fmt.Sprintf("/home/user/big/f-%05d.txt", i), "file", i*7, 644, "2026-12-01T06:31:43.1234Z")
	}
	plain := []string{
		`[]`,
		" \n[]",
		`[` + execdEntry("/home/user/a.txt", "file", 10, 644, "2026-12-06T17:26:02.397661013Z") + `]`,
		`[` + execdEntry("/home/user/d", "directory", 4096, 755, "2026-12-06T17:26:02Z") + `,` +
			execdEntry("/home/user/s", "other", 0, 777, "2026-12-06T17:26:02.5Z") + `,` +
			execdEntry("/home/user/p", "other", 0, 0, "0001-01-01T00:00:00Z") + `,` +
			execdEntry("rel", "file", 1, 4755, "2026-12-06T17:26:02.000001Z") + `]`,
		// No type, as execd v1.0.18; members in another order.
		`[{"mode":600,"path":"/tmp/x","size":0,"owner":"","group":"1000","modified_at":"2000-02-29T23:59:59.120Z"}]`,
		`[{"path":"/a"}]`,
		`[` + strings.Join(many, ",") + `]`,
	}
	for _, body := range plain {
		if !samePlainAnswer(t, body) {
			t.Errorf("body %.80q: not taken as a plain listing", body)
		}
	}
	notPlain := []string{
		`null`,
		`[null]`,
		`[ ]`, // whitespace inside, which execd does not write
		`[{"path": "/a"}]`,
		`[{"path":"/a"} ,{"path":"/b"}]`,
		`[{"path":"/a\/b"}]`,                         // an escape
		`[{"path":"/a<b"}]`,                          // escaped on the way out
		`[{"path":"/\u00e9"}]`,                       // not ASCII
		"[{\"path\":\"/é\"}]",                        // not ASCII
		`[{"Path":"/a"}]`,                            // a name written otherwise
		`[{"path":"/a","path":"/b"}]`,                // a repeated member
		`[{"path":"/a","type":null}]`,                // null
		`[{"path":"/a","x":1}]`,                      // another member
		`[{"type":"file"}]`,                          // no path
		`[{"path":""}]`,                              // an empty path
		`[{"path":"/a/"}]`,                           // ends in '/'
		`[{"path":"/a","mode":648}]`,                 // not octal digits
		`[{"path":"/a","size":-1}]`,                  // negative
		`[{"path":"/a","size":1.0}]`,                 // a fraction
		`[{"path":"/a","size":1e3}]`,                 // an exponent
		`[{"path":"/a","size":0123}]`,                // a leading zero
		`[{"path":"/a","size":1234567890123456789}]`, // 19 digits
		`[{"path":"/a","modified_at":"2026-12-06T17:26:02+01:00"}]`,
		`[{"path":"/a","modified_at":"2026-02-30T17:26:02Z"}]`,
		`[{"path":"/a"},]`,
		`[{"path":"/a"}`,
		`{"path":"/a"}`,
		// A symlink: decoded, and resolved by one more request (resolveLinks).
		`[` + execdEntry("/home/user/l", "symlink", 5, 777, "2026-12-06T17:26:02.5Z") + `]`,
		`[` + execdEntry("/home/user/a", "file", 0, 644, "2026-12-06T17:26:02Z") + `,` +
			execdEntry("/home/user/l", "symlink", 5, 777, "2026-12-06T17:26:02.5Z") + `]`,
	}
	for _, body := range notPlain {
		if _, viewed := plainAnswer(t, body); viewed {
			t.Errorf("body %q: taken as a plain listing", body)
		}
	}
}

// FuzzPlainListingSameAnswer: whatever execd (or code in the sandbox
// answering for it) sends, a body taken as a plain listing gets the
// answer its decoded list gets, byte for byte.
func FuzzPlainListingSameAnswer(f *testing.F) {
	f.Add(`[` + execdEntry("/home/user/a.txt", "file", 10, 644, "2026-12-06T17:26:02.397661013Z") + `]`)
	f.Add(`[{"path":"/a","modified_at":"0001-01-01T00:00:00.000Z","mode":0,"size":0,"owner":"","group":"g"}]`)
	f.Add(`[{"path":"a","type":"directory","mode":7777,"created_at":{"x":[1,"y",null]}}]`)
	f.Add(`[{"path":"/a&b","size":9223372036854775807}]`)
	f.Fuzz(func(t *testing.T, body string) {
		samePlainAnswer(t, body)
	})
}

// testTarget is the sandbox the canned answers come from.
var testTarget = execd.Target{FixedEntry: &url.URL{Scheme: "http", Host: "fixed-entry"}, SandboxID: testSandbox}
