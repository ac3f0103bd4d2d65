package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/token"
)

// plainEdgeValues are the members' values at the edges of what the plain
// path takes, each once inside and once outside it where there is an
// outside: the fuzzers' mutations of a few seeds rarely build a whole
// entry of such values, and never a nesting thousands deep.
var plainEdgeValues = map[string][]string{
	"path": {`"a"`, `"/."`, `".."`, `"/a/.."`, `"//x"`, `"/home/user/a b"`, `" "`, `"~"`, "\"\x7f\"", `"'` + "`" + `=+%2F;:?*"`,
		`"/` + strings.Repeat("p", 1000) + `"`, `"//"`, `"/"`, `""`, `"a\/b"`, `"a<b"`, `"a&b"`, `"a>b"`, `"\u0041"`, `"é"`, `null`},
	"type": {`"file"`, `"directory"`, `"symlink"`, `"other"`, `""`, `"File"`, `"x"`, `null`},
	"size": {`0`, `1`, `999999999999999999`, `100000000000000000`, `1000000000000000000`, `9223372036854775807`,
		`9223372036854775808`, `-1`, `-0`, `01`, `1.0`, `1e2`, `null`, `"1"`},
	"mode": {`0`, `7`, `644`, `4755`, `7777`, `17777`, `777777777`, `37777777777`, `40000000000`, `77777777777`,
		`777777777777777777`, `8`, `648`, `-644`, `null`},
	"modified_at": {`"0001-01-01T00:00:00Z"`, `"0001-01-01T00:00:00.000000001Z"`, `"0001-01-01T00:00:00.5Z"`,
		`"0000-01-01T00:00:00Z"`, `"0000-02-29T12:00:00Z"`, `"1900-02-29T00:00:00Z"`, `"2000-02-29T23:59:59.999999999Z"`,
		`"2024-02-29T00:00:00.123456Z"`, `"9999-12-31T23:59:59.1Z"`, `"2026-12-06T17:26:02.100Z"`, `"2026-12-06T17:26:02.000Z"`,
		`"2026-12-06T17:26:02.0Z"`, `"2026-12-06T17:26:02.Z"`, `"2026-12-06T17:26:02.0000000000Z"`, `"2026-12-06T24:00:00Z"`,
		`"2026-12-06T23:59:60Z"`, `"2026-12-06T17:26:02+00:00"`, `"2026-12-06T17:26:02z"`, `"2026-12-06 17:26:02Z"`, `null`, `0`},
	"created_at": {`"2026-12-06T17:26:02.397661013Z"`, `"not a time"`, `null`, `0`, `{}`, `[1,"x",{"y":null}]`, `"\u00e9\n"`,
		`"\x"`, `"` + "\x01" + `"`, strings.Repeat("[", 9998) + strings.Repeat("]", 9998), strings.Repeat("[", 9999) + strings.Repeat("]", 9999),
		`{"a":` + strings.Repeat("[", 9997) + strings.Repeat("]", 9997) + `}`}, // the nesting at encoding/json's 10,000 and one past it
	"owner": {`"root"`, `""`, `"1000"`, `"` + strings.Repeat("o", 40) + `"`, `"a b"`, `"a<b"`, `null`},
	"group": {`"root"`, `""`, `"0"`, `"` + strings.Repeat("g", 40) + `"`, `"g&"`, `null`},
}

// plainEdgeNames are the members in execd HEAD's order.
var plainEdgeNames = []string{"path", "type", "size", "modified_at", "created_at", "owner", "group", "mode"}

// TestPlainListingEdges: listings built of the members' edge values, in
// execd's order and shuffled, with members left out and repeated, whole
// and cut, with whitespace and trailing bytes around the array: every one
// the plain path takes is answered byte for byte as its decoded list is.
// Enough of them are taken (the values inside the plain form) that the
// comparison is not empty.
func TestPlainListingEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 3))
	entry := func() string {
		names := plainEdgeNames
		if r.IntN(4) == 0 {
			names = append([]string(nil), names...)
			r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		}
		var members []string
		for _, n := range names {
			if n != "path" && r.IntN(4) == 0 {
				continue // left out
			}
			vs := plainEdgeValues[n]
			v := vs[r.IntN(len(vs))]
			if r.IntN(3) > 0 && n != "created_at" {
				v = vs[r.IntN(min(len(vs), 4))] // mostly values the plain form holds
			}
			members = append(members, strconv.Quote(n)+":"+v)
			if r.IntN(40) == 0 {
				members = append(members, strconv.Quote(n)+":"+vs[r.IntN(len(vs))]) // repeated
			}
		}
		return "{" + strings.Join(members, ",") + "}"
	}
	taken := 0
	const listings = 3000
	for i := range listings {
		entries := make([]string, r.IntN(4))
		for j := range entries {
			entries[j] = entry()
		}
		body := "[" + strings.Join(entries, ",") + "]"
		switch r.IntN(10) {
		case 0:
			body = " \n\t\r" + body
		case 1:
			body += " \n"
		case 2:
			body += `,{"path":"/trailing"}]x`
		case 3:
			body = body[:r.IntN(len(body)+1)] // cut
		}
		if samePlainAnswer(t, body) {
			taken++
		}
		if t.Failed() {
			t.Fatalf("listing %d", i)
		}
	}
	t.Logf("%d of %d listings taken by the plain path", taken, listings)
	if taken < listings/20 {
		t.Fatalf("only %d of %d listings taken by the plain path: the test compares too little", taken, listings)
	}
}

// TestPlainListingEntryBound: a plain listing of exactly
// max_listing_entries entries is taken and answered as its decoded list;
// one more entry is refused with the decoded path's error. An entry that
// names "path" twice (once inside created_at) reaches the bound at half
// as many entries, on both paths.
func TestPlainListingEntryBound(t *testing.T) {
	for _, c := range []struct {
		max   int
		entry string
		taken bool // the listing of max entries
	}{
		{execd.DefaultMaxListingEntries, `{"path":"/a"}`, true},
		{8, `{"path":"/a","type":"file","modified_at":"2026-12-06T17:26:02Z"}`, true},
		{8, `{"path":"/a","created_at":{"path":[]}}`, false},
	} {
		list := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat(c.entry+",", n), ",") + "]" }
		client := func(body string) *execd.Client {
			return &execd.Client{Transport: cannedExecd(body), MaxListingEntries: c.max}
		}
		at := list(c.max)
		w := httptest.NewRecorder()
		_, viewed, err := client(at).ListDirectoryView(context.Background(), testTarget, "/d", 1,
			func(v []execd.FileInfoView) { writePlainListing(w, v) })
		_, derr := client(at).ListDirectory(context.Background(), testTarget, "/d", 1)
		if c.taken {
			want, ok := decodedAnswerWith(t, client(at))
			if !viewed || err != nil || !ok || !bytes.Equal(w.Body.Bytes(), want) {
				t.Fatalf("max %d, entry %s, %d entries: viewed %v, error %v, decoded %v; answered as decoded: %v",
					c.max, c.entry, c.max, viewed, err, ok, bytes.Equal(w.Body.Bytes(), want))
			}
		} else if viewed || err == nil || derr == nil || err.Error() != derr.Error() {
			t.Fatalf("max %d, entry %s, %d entries: viewed %v, error %v; decoded error %v", c.max, c.entry, c.max, viewed, err, derr)
		}
		over := list(c.max + 1)
		called := false
		_, viewed, err = client(over).ListDirectoryView(context.Background(), testTarget, "/d", 1,
			func([]execd.FileInfoView) { called = true })
		_, derr = client(over).ListDirectory(context.Background(), testTarget, "/d", 1)
		if viewed || called || err == nil || derr == nil || err.Error() != derr.Error() {
			t.Fatalf("max %d, entry %s, %d entries: viewed %v, called %v, error %v; decoded error %v", c.max, c.entry, c.max+1, viewed, called, err, derr)
		}
	}
}

// TestPlainListingsConcurrent: concurrent ListDirs of different sandboxes
// through the handler, each sandbox's execd answering a plain listing of
// its own (of 1 to 1,500 entries: some within the pools' kept sizes,
// maxPooledViews and maxPooledPlainEntries, some over them), each get
// their own listing's answer, byte for byte the decoded list's, never
// another's bytes. Run under -race it also checks the pooled body
// buffers, views and entries for data races.
func TestPlainListingsConcurrent(t *testing.T) {
	sizes := []int{1, 16, 1500, 3, 200, 1025}
	bodies := map[string]string{}
	want := map[string][]byte{}
	for i, n := range sizes {
		id := "sbxplain" + strconv.Itoa(i)
		entries := make([]string, n)
		for j := range entries {
			entries[j] = execdEntry("/home/"+id+"/"+strings.Repeat(string(rune('a'+i)), 1+j%40)+strconv.Itoa(j), []string{"file", "directory", "other"}[j%3],
				j*(i+1), []int{644, 755, 4711}[(i+j)%3], "2026-12-0"+strconv.Itoa(1+i)+"T06:31:43."+strconv.Itoa(1+j%9)+"Z")
		}
		body := "[" + strings.Join(entries, ",") + "]"
		bodies[id] = body
		if !samePlainAnswer(t, body) {
			t.Fatalf("%s: not a plain listing", id)
		}
		want[id], _ = decodedAnswer(t, body)
	}
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, bodies[id])
	})
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	fe, _ := url.Parse(up.URL)
	e := newTestEnv(t) // for its key and credentials
	verifier, err := token.NewVerifier([]token.Key{e.key.Public()}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{}, Deps{Tokens: verifier, Credentials: e.creds,
		Clusters: fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: fe}}, Execd: &execd.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(h)
	t.Cleanup(gw.Close)
	var wg sync.WaitGroup
	errs := make(chan string, len(sizes)*4)
	for id := range bodies {
		tok := e.mint("cred-a", id)
		for range 4 {
			wg.Go(func() {
				for range 10 {
					req, err := http.NewRequest(http.MethodPost, gw.URL+"/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
					if err != nil {
						errs <- err.Error()
						return
					}
					req.Header.Set(HeaderSandboxID, id)
					req.Header.Set(HeaderSandboxPort, "49983")
					req.Header.Set(HeaderAccessToken, tok)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Connect-Protocol-Version", "1")
					resp, err := testClient.Do(req)
					if err != nil {
						errs <- err.Error()
						return
					}
					got, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, want[id]) {
						errs <- fmt.Sprintf("%s: status %d, error %v, answer of %d bytes (%.120s), its own listing's is %d bytes",
							id, resp.StatusCode, err, len(got), got, len(want[id]))
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
