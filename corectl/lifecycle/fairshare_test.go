package lifecycle_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/fairshare"
	"github.com/sandgate/sandgate/corectl/lifecycle"
)

// sandboxRequests counts corectl's apiserver requests whose path names
// the sandbox in id (set once the sandbox exists).
type sandboxRequests struct {
	id atomic.Value // string
	n  atomic.Int64
}

func (c *sandboxRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if id, _ := c.id.Load().(string); id != "" && strings.Contains(r.URL.Path, id) {
			c.n.Add(1)
		}
		return rt.RoundTrip(r)
	})
}

// TestAPIShareBoundsOneCredential: credential a reads its own sandbox
// (GET /sandboxes/{id}, about a dozen apiserver requests each) again and
// again with a share (daemon.Options.APIShare) of 60 requests refilled at
// 5 a second. Before its reads have cost much more than that it is
// refused 429 rate_limited, and a refused read reaches the apiserver not
// at all; credential a2 of the same namespace and cluster is served at
// the same moment; once a's share has refilled, a is served again. Before
// the shares, a's reads were never refused: one API key could spend the
// whole cluster client's rate (cluster.DefaultClientQPS, shared by every
// tenant's creates and deletes) on its own reads.
func TestAPIShareBoundsOneCredential(t *testing.T) {
	var count sandboxRequests
	w := startWorld(t, env.Config, worldOptions{wrap: count.wrap, apiShare: fairshare.Config{Rate: 5, Burst: 60}})
	other := sandboxBody{}
	if st, raw := w.do("POST", "/v2/sandboxes", "key-a2", restricted, &other); st != http.StatusCreated {
		t.Fatalf("a2's create = %d %s", st, raw)
	}
	sb := w.create(restricted)
	count.id.Store(sb.SandboxID)
	path := "/sandboxes/" + sb.SandboxID
	refused := -1
	var body []byte
	for i := 0; i < 40; i++ {
		var st int
		st, body = w.do("GET", path, "key-a", "", nil)
		if st == http.StatusTooManyRequests {
			refused = i
			break
		}
		if st != http.StatusOK {
			t.Fatalf("read %d = %d %s", i, st, body)
		}
	}
	if refused < 0 {
		t.Fatalf("40 reads of one sandbox (%d apiserver requests) were all served: no bound on one credential", count.n.Load())
	}
	var env struct {
		Code    int    `json:"code"`
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Code != 429 || env.Error != "rate_limited" ||
		!strings.HasPrefix(env.Message, "rate_limited: ") {
		t.Fatalf("refusal = %s", body)
	}
	spent := count.n.Load()
	t.Logf("refused after %d reads, %d apiserver requests", refused, spent)
	// 60 and a read's worth past it (the read that emptied the share
	// finishes), and the refill while the reads ran.
	if spent > 60+20+5*30 {
		t.Errorf("a's reads made %d apiserver requests before the refusal", spent)
	}
	if st, raw := w.do("GET", path, "key-a", "", nil); st != http.StatusTooManyRequests {
		t.Fatalf("the next read = %d %s, want 429", st, raw)
	}
	if n := count.n.Load(); n != spent {
		t.Errorf("a refused read made %d apiserver requests", n-spent)
	}
	if st, raw := w.do("GET", "/sandboxes/"+other.SandboxID, "key-a2", "", nil); st != http.StatusOK {
		t.Fatalf("a2's read while a is refused = %d %s", st, raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		st, raw := w.do("GET", path, "key-a", "", nil)
		if st == http.StatusOK {
			break
		}
		if st != http.StatusTooManyRequests || ctx.Err() != nil {
			t.Fatalf("a's read after its share refilled = %d %s", st, raw)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestAPIShareBoundsCallsInProgress: credential a, allowed 2 calls in
// progress (fairshare.Config.InProgress), has two creates waiting at the
// readiness step; its next call is 429 rate_limited at once, whatever its
// share holds, while credential a2 is served; once the creates finish, a
// is served again. The share alone admits as many calls at once as it
// holds requests, each then making its own requests (a dozen for a read):
// the bound on calls in progress is what keeps a credential that opens
// many connections at once near its share.
func TestAPIShareBoundsCallsInProgress(t *testing.T) {
	w := startWorld(t, env.Config, worldOptions{apiShare: fairshare.Config{InProgress: 2}})
	mine := w.create(`{"templateID":"base"}`).SandboxID
	var other sandboxBody
	if st, raw := w.do("POST", "/v2/sandboxes", "key-a2", `{"templateID":"base"}`, &other); st != http.StatusCreated {
		t.Fatalf("a2's create = %d %s", st, raw)
	}
	release, held := w.hold(lifecycle.StepReadiness)
	var wg sync.WaitGroup
	created := make([]int, 2)
	for i := range created {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, err := w.send("POST", "/v2/sandboxes", "key-a", `{"templateID":"base"}`)
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			created[i] = status
		}()
	}
	for range created {
		select {
		case <-held:
		case <-time.After(60 * time.Second):
			close(release)
			wg.Wait()
			t.Fatal("the creates did not reach the readiness step within 60 s")
		}
	}
	st, body := w.do("GET", "/sandboxes/"+mine, "key-a", "", nil)
	if st != http.StatusTooManyRequests || !strings.Contains(string(body), `"rate_limited"`) {
		t.Errorf("a's read with 2 calls in progress = %d %s, want 429 rate_limited", st, body)
	}
	if st, raw := w.do("GET", "/sandboxes/"+other.SandboxID, "key-a2", "", nil); st != http.StatusOK {
		t.Errorf("a2's read while a has 2 calls in progress = %d %s", st, raw)
	}
	close(release)
	wg.Wait()
	for i, st := range created {
		if st != http.StatusCreated {
			t.Errorf("create %d = %d", i, st)
		}
	}
	if st, raw := w.do("GET", "/sandboxes/"+mine, "key-a", "", nil); st != http.StatusOK {
		t.Errorf("a's read once its creates finished = %d %s", st, raw)
	}
}
