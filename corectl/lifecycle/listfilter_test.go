package lifecycle_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/memtest"
)

// TestListMetadataFilterBounded: a list whose metadata filter names
// 100,000 pairs of distinct keys (a URL of about 800 KB, under the
// server's header limit) is refused 400 bad_request (no sandbox can have
// more than 64 metadata entries, lifecycle.MaxMetadataEntries), and the
// whole process allocates at most 2 MiB more while it is answered than
// for a list with a template filter of the same length (what net/http and
// the query parsing cost for any URL that long, about 9 MB): the pairs are
// counted before they are split into a map. Before, the filter's list was
// answered 200 [] after 24.9 MB.
func TestListMetadataFilterBounded(t *testing.T) {
	w := start(t)
	w.create(restricted)
	var b strings.Builder
	for i := range 100_000 {
		b.WriteString(strconv.FormatInt(int64(i), 36) + "=%26")
	}
	filter := b.String() + "last="
	measure := func(path string) (int, []byte, uint64) {
		var st int
		var body []byte
		alloc := memtest.AllocatedDuring(func() {
			st, body = w.do("GET", path, "key-a", "", nil)
		})
		return st, body, alloc
	}
	st, body, base := measure("/v2/sandboxes?template=" + strings.Repeat("x", len(filter)))
	if st != http.StatusOK {
		t.Fatalf("the template filter's list = %d %.200s", st, body)
	}
	st, body, alloc := measure("/v2/sandboxes?metadata=" + filter)
	t.Logf("template filter: %d bytes allocated; metadata filter: %d %.200s, %d bytes allocated", base, st, body, alloc)
	if st != http.StatusBadRequest || !strings.Contains(string(body), "metadata") {
		t.Errorf("answer = %d %.200s, want 400 naming metadata", st, body)
	}
	if alloc > base+2<<20 {
		t.Errorf("the metadata filter's list allocated %d bytes, over %d (the template filter's) + 2 MiB", alloc, base)
	}
}
