package lifecycle_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/internal/memtest"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestV1ListGrowsLinearly: E2B's v1 list (GET /sandboxes) answers every
// sandbox the caller sees in one call. With 300 and then 3,000 sandboxes
// of one credential (copies of one created by the API, written straight
// to the apiserver), the least the whole process allocates while one v1
// list is answered (of 3) grows at most 13 times for 10 times the
// sandboxes: the list is one pass over the credential's sandboxes.
// Before, it was one pass per 100 (the v2 pages, each filtering and
// sorting the whole set again), which grows with the square of the
// count: 1.4 MB and 33.9 MB, 24.8 times; now 1.0 MB and 9.9 MB.
func TestV1ListGrowsLinearly(t *testing.T) {
	w := start(t)
	id := w.create(`{"templateID":"base"}`).SandboxID
	proto := &unstructured.Unstructured{}
	proto.SetGroupVersionKind(sandbox.GVK)
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: w.nsA, Name: id}, proto); err != nil {
		t.Fatal(err)
	}
	made := 0
	grow := func(to int) {
		t.Helper()
		var wg sync.WaitGroup
		ch := make(chan int)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range ch {
					u := proto.DeepCopy()
					u.SetName(fmt.Sprintf("sbc%019d", i))
					u.SetResourceVersion("")
					u.SetUID("")
					u.SetOwnerReferences(nil)
					if err := env.Client.Create(t.Context(), u); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		for ; made < to-1; made++ {
			ch <- made
		}
		close(ch)
		wg.Wait()
		deadline := time.Now().Add(60 * time.Second)
		for {
			st, h, _ := w.call("GET", "/v2/sandboxes?limit=1", "key-a", "")
			if st == http.StatusOK && h.Get("X-Total-Running") == strconv.Itoa(to) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cache shows %s sandboxes after 60 s, want %d", h.Get("X-Total-Running"), to)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	least := func(n int) uint64 {
		t.Helper()
		var min uint64
		for i := range 3 {
			var st int
			a := memtest.AllocatedDuring(func() { st, _, _ = w.call("GET", "/sandboxes", "key-a", "") })
			if st != http.StatusOK {
				t.Fatalf("v1 list = %d", st)
			}
			if i == 0 || a < min {
				min = a
			}
		}
		t.Logf("v1 list of %d sandboxes: %d bytes", n, min)
		return min
	}
	grow(300)
	small := least(300)
	grow(3000)
	large := least(3000)
	if float64(large) > 13*float64(small) {
		t.Errorf("the v1 list of 3,000 allocated %.1f times what the list of 300 did (%d against %d bytes), over 13", float64(large)/float64(small), large, small)
	}
}
