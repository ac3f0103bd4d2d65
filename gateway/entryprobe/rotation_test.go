package entryprobe

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/gateway/execdtoken"
)

// TestPingTriesEachExecdTokenSecret: with two secrets (a rotation) a
// readiness ping is sent with the first secret's token, and again with the
// second's only after execd refused the first (401); an execd started with
// the first secret gets one ping. An echo probe carries no token and is
// sent once whatever it answers.
func TestPingTriesEachExecdTokenSecret(t *testing.T) {
	oldSecret, newSecret := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	accepted := map[string]string{ // sandbox → the token its execd was started with
		"sbx-old": execdtoken.Derive(oldSecret, "sbx-old"),
		"sbx-new": execdtoken.Derive(newSecret, "sbx-new"),
	}
	var mu sync.Mutex
	var sent []string // "path token"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get(execdAccessTokenHeader)
		mu.Lock()
		sent = append(sent, r.URL.Path+" "+tok)
		mu.Unlock()
		id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if want, ok := accepted[id]; ok && tok != want {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"Unauthorized"}`))
			return
		}
		_, _ = w.Write([]byte("pong"))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	d := Direct{FixedEntry: u, ExecdTokenSecrets: [][]byte{oldSecret, newSecret}}
	echo := EchoPathPrefix + strings.Repeat("ab", 16)
	for _, c := range []struct {
		path   string
		status int
		sent   []string
	}{
		{"/sbx-old/44772/ping", http.StatusOK, []string{"/sbx-old/44772/ping " + accepted["sbx-old"]}},
		{"/sbx-new/44772/ping", http.StatusOK, []string{"/sbx-new/44772/ping " + execdtoken.Derive(oldSecret, "sbx-new"), "/sbx-new/44772/ping " + accepted["sbx-new"]}},
		{"/sbx-other/44772/ping", http.StatusOK, []string{"/sbx-other/44772/ping " + execdtoken.Derive(oldSecret, "sbx-other")}},
		{echo, http.StatusOK, []string{echo + " "}},
	} {
		mu.Lock()
		sent = nil
		mu.Unlock()
		a, err := d.Probe(t.Context(), c.path)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		mu.Lock()
		got := sent
		mu.Unlock()
		if a.Status != c.status || strings.Join(got, "\n") != strings.Join(c.sent, "\n") {
			t.Errorf("%s: answered %d after sending\n%s\nwant %d after\n%s", c.path, a.Status, strings.Join(got, "\n"), c.status, strings.Join(c.sent, "\n"))
		}
	}
	// Neither secret accepted: every token is tried and the last 401 is
	// the answer.
	accepted["sbx-neither"] = "some-other-token"
	sent = nil
	a, err := d.Probe(t.Context(), "/sbx-neither/44772/ping")
	if err != nil || a.Status != http.StatusUnauthorized || len(sent) != 2 {
		t.Errorf("a ping no secret opens: %+v, %v after %d pings; want 401 after 2", a, err, len(sent))
	}
}
