package execdstub

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// testClient is the tests' HTTP client: http.DefaultClient's transport
// with a bound on every request, its response body read included, so a
// peer that hangs fails the request instead of holding the test until the
// package's -timeout. No request here is meant to take that long.
var testClient = &http.Client{Timeout: 2 * time.Minute}

// TestHostile: in hostile mode every JSON read is answered chunked with
// the configured number of bytes of valid JSON (a listing with the asked
// number of entries), and the other routes stay execd's.
func TestHostile(t *testing.T) {
	s := New(Config{Root: t.TempDir(), GracefulShutdown: -1, Hostile: &Hostile{Bytes: 64 << 10}})
	defer s.Close()
	ts := httptest.NewServer(s)
	defer ts.Close()
	get := func(p string) (*http.Response, []byte) {
		resp, err := testClient.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	for _, p := range []string{"/files/info?path=%2Fa&path=%2Fb", "/directories/list?path=%2F", "/files/search?path=%2F&pattern=*",
		"/command/status/" + url.PathEscape("abc")} {
		resp, b := get(p)
		if resp.StatusCode != 200 || resp.ContentLength != -1 || len(b) < 64<<10 || !json.Valid(b) {
			t.Errorf("%s: %d, length %d, %d bytes, valid JSON %v", p, resp.StatusCode, resp.ContentLength, len(b), json.Valid(b))
		}
	}
	if resp, _ := get("/ping"); resp.StatusCode != 200 {
		t.Errorf("ping: %d", resp.StatusCode)
	}

	s2 := New(Config{Root: t.TempDir(), GracefulShutdown: -1, Hostile: &Hostile{ListingEntries: 10, ListingBytes: 4 << 10}})
	defer s2.Close()
	ts2 := httptest.NewServer(s2)
	defer ts2.Close()
	resp, err := testClient.Get(ts2.URL + "/directories/list?path=%2F")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list) != 10 || !strings.HasPrefix(list[0]["path"].(string), "/home/user/0") {
		t.Fatalf("listing: %v entries, %v", len(list), err)
	}
}
