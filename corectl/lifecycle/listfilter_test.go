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
// server's header limit) is
// refused 400 bad_request (no sandbox can have more than 64 metadata
// entries, lifecycle.MaxMetadataEntries), and the whole process allocates
// less than 8 MiB while it is answered: the pairs are counted before they
// are split into a map.
func TestListMetadataFilterBounded(t *testing.T) {
	w := start(t)
	w.create(restricted)
	var b strings.Builder
	for i := range 100_000 {
		b.WriteString(strconv.FormatInt(int64(i), 36) + "=%26")
	}
	filter := b.String() + "last="
	var st int
	var body []byte
	alloc := memtest.AllocatedDuring(func() {
		st, body = w.do("GET", "/v2/sandboxes?metadata="+filter, "key-a", "", nil)
	})
	t.Logf("answer %d %.200s, %d bytes allocated", st, body, alloc)
	if st != http.StatusBadRequest || !strings.Contains(string(body), "metadata") {
		t.Errorf("answer = %d %.200s, want 400 naming metadata", st, body)
	}
	if alloc > 8<<20 {
		t.Errorf("the list allocated %d bytes, over 8 MiB", alloc)
	}
}
