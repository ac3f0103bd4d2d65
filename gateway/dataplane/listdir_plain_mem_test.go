package dataplane

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/internal/memtest"
)

// heldWriter is a ResponseWriter that, at the answer's first write, reads
// the live heap (after a collection): what the call holds while a client
// reads its answer, for as long as that client takes.
type heldWriter struct {
	header http.Header
	body   bytes.Buffer
	status int
	held   uint64 // HeapAlloc at the first write
}

func (w *heldWriter) Header() http.Header { return w.header }

func (w *heldWriter) WriteHeader(code int) { w.status = code }

func (w *heldWriter) Write(b []byte) (int, error) {
	if w.held == 0 {
		w.held = liveHeap()
	}
	return w.body.Write(b)
}

// liveHeap is the heap's live bytes after two collections: the first
// moves what the sync.Pools hold to their victim caches, the second drops
// those, so what the pools keep for the next call (the pooled body blocks,
// buffers) is not counted, whenever the runtime's own collections ran.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestPlainListingMemory: the largest listing the gateway takes (16,384
// entries in nearly 4 MiB, max_listing_entries and max_listing_size), as
// execd HEAD writes it, costs the plain path no more than decoding it: it
// allocates less, and what the call holds while its client reads the
// answer is at most what the decoded answer holds, plus 24 bytes an entry
// (an envd.PlainEntry is 176 bytes, an envd.EntryInfo and its Timestamp
// 152) and 16 KiB. Both hold a buffer of the body's size (the plain path
// the body, the decoded one its paths' buffer); the views are not held
// while the answer is written. The decoded path is taken for the same
// entries by a space after the array's bracket, which execd does not
// write; both answers must be the same bytes. Two forms: long paths (the
// bytes the decoded list keeps too), and short paths with the bytes in
// created_at (which it skips). It runs in a process of its own: the live
// heap is the process's, and goroutines other tests leave behind change it.
func TestPlainListingMemory(t *testing.T) {
	if !memtest.InOwnProcess(t) {
		return
	}
	n := execd.DefaultMaxListingEntries
	per := int(execd.DefaultMaxListingBytes-64<<10)/n - 200
	for name, entry := range map[string]func(i int) string{
		"long paths": func(i int) string {
			return execdEntry("/home/user/"+strconv.Itoa(i)+strings.Repeat("n", per), "file", 1, 644, "2026-12-01T06:31:43Z")
		},
		"long created_at": func(i int) string {
			return `{"path":"/home/user/` + strconv.Itoa(i) + `","type":"file","size":1,"modified_at":"2026-12-01T06:31:43Z","created_at":"` +
				strings.Repeat("c", per) + `","owner":"root","group":"root","mode":644}`
		},
	} {
		entries := make([]string, n)
		for i := range entries {
			entries[i] = entry(i)
		}
		plain := "[" + strings.Join(entries, ",") + "]"
		decoded := "[ " + plain[1:]
		if int64(len(decoded)) > execd.DefaultMaxListingBytes {
			t.Fatalf("%s: %d bytes, over max_listing_size", name, len(decoded))
		}
		type cost struct {
			allocated, held uint64
			answer          []byte
		}
		measure := func(body string) cost {
			h, tok := listingHandler(t, body)
			req := func() *http.Request { return listDirRequest(tok) }
			h.ServeHTTP(httptest.NewRecorder(), req()) // the pools' first use
			var c cost
			w := &heldWriter{header: http.Header{}}
			r := req()
			liveHeap()         // the pools' primaries to their victim caches,
			base := liveHeap() // and out
			c.allocated = memtest.AllocatedDuring(func() { h.ServeHTTP(w, r) })
			if w.status != http.StatusOK || w.held == 0 {
				t.Fatalf("%s: status %d: %.200s", name, w.status, w.body.Bytes())
			}
			c.held, c.answer = w.held-min(base, w.held), w.body.Bytes()
			return c
		}
		p, d := measure(plain), measure(decoded)
		if !bytes.Equal(p.answer, d.answer) {
			t.Fatalf("%s: the plain path's answer is not the decoded path's", name)
		}
		t.Logf("%s: the plain path allocated %d KiB and held %d KiB while writing; the decoded path %d KiB and %d KiB",
			name, p.allocated>>10, p.held>>10, d.allocated>>10, d.held>>10)
		if p.allocated > d.allocated {
			t.Errorf("%s: the plain path allocated %d bytes, more than decoding's %d", name, p.allocated, d.allocated)
		}
		if extra := uint64(24*n + 16<<10); p.held > d.held+extra {
			t.Errorf("%s: the plain path held %d bytes while writing, more than decoding's %d and %d for its entries",
				name, p.held, d.held, extra)
		}
	}
}

// listingHandler is a Handler whose execd answers every listing with body,
// and a token of cred-a for testSandbox.
func listingHandler(t *testing.T, body string) (*Handler, string) {
	t.Helper()
	e := newTestEnv(t) // for its key and credentials
	verifier, err := token.NewVerifier([]token.Key{e.key.Public()}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{}, Deps{Tokens: verifier, Credentials: e.creds,
		Clusters: fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: testTarget.FixedEntry}},
		Execd:    &execd.Client{Transport: cannedExecd(body)}})
	if err != nil {
		t.Fatal(err)
	}
	return h, e.mint("cred-a", testSandbox)
}

// listDirRequest is a ListDir call of /home/user to testSandbox with tok.
func listDirRequest(tok string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set(HeaderSandboxID, testSandbox)
	req.Header.Set(HeaderSandboxPort, "49983")
	req.Header.Set(HeaderAccessToken, tok)
	return req
}
