package lifecycle_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/sandboxlogs"
)

// heldLogs is a sandboxlogs.Source whose streams of the pods whose names
// start with held stay open until release is closed (or the request
// ends); it counts the streams open at once. Other pods' logs are one
// line, at once.
type heldLogs struct {
	held    atomic.Value // string
	release chan struct{}
	open    atomic.Int64
	most    atomic.Int64
}

func (h *heldLogs) Stream(ctx context.Context, _, pod, _ string, _ sandboxlogs.ReadOptions) (io.ReadCloser, error) {
	line := io.NopCloser(strings.NewReader(time.Now().UTC().Format(time.RFC3339Nano) + " hello\n"))
	if p, _ := h.held.Load().(string); p == "" || !strings.HasPrefix(pod, p) {
		return line, nil
	}
	n := h.open.Add(1)
	defer h.open.Add(-1)
	for {
		m := h.most.Load()
		if n <= m || h.most.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return line, nil
}

// TestLogReadsBoundedPerCredential: credential a asks for its sandbox's
// log 12 times at once while the pods/log streams do not end (a log of
// megabytes, a slow kubelet). At most 2 of its reads are in progress at
// once (each may hold up to sandboxlogs.MaxReadBytes of log); the others
// are answered 429 rate_limited at once. Credential a2's log is read
// meanwhile, and once the streams end a's reads in progress are answered
// 200. Before, all 12 were held at once: what one tenant could make
// corectl hold in logs had no bound but the number of its connections.
func TestLogReadsBoundedPerCredential(t *testing.T) {
	logs := &heldLogs{release: make(chan struct{})}
	w := startWorld(t, env.Config, worldOptions{logs: logs})
	id := w.create(`{"templateID":"base"}`).SandboxID
	env.Pod(t, bs(w.nsA, id), id+"-0", nil)
	var other sandboxBody
	if st, raw := w.do("POST", "/v2/sandboxes", "key-a2", `{"templateID":"base"}`, &other); st != http.StatusCreated {
		t.Fatalf("a2's create = %d %s", st, raw)
	}
	env.Pod(t, bs(w.nsA, other.SandboxID), other.SandboxID+"-0", nil)
	logs.held.Store(id)

	const calls = 12
	var wg sync.WaitGroup
	var answered atomic.Int64
	statuses := make([]int, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer answered.Add(1)
			status, err := w.send("GET", "/v2/sandboxes/"+id+"/logs", "key-a", "")
			if err != nil {
				t.Errorf("log read %d: %v", i, err)
				return
			}
			statuses[i] = status
		}()
	}
	// Every read is either answered or held in a stream.
	deadline := time.Now().Add(30 * time.Second)
	for answered.Load()+logs.open.Load() < calls {
		if time.Now().After(deadline) {
			close(logs.release)
			wg.Wait()
			t.Fatalf("after 30 s, %d reads answered and %d held", answered.Load(), logs.open.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	held := logs.most.Load()
	if st, _, body := w.call("GET", "/v2/sandboxes/"+other.SandboxID+"/logs", "key-a2", ""); st != http.StatusOK {
		t.Errorf("a2's log while a's reads are held = %d %s", st, body)
	}
	close(logs.release)
	wg.Wait()
	ok, limited := 0, 0
	for _, st := range statuses {
		switch st {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
		default:
			t.Errorf("a log read = %d", st)
		}
	}
	t.Logf("%d reads held at once at most; %d answered 200, %d 429", held, ok, limited)
	if held > 2 || ok != int(held) || limited != calls-int(held) {
		t.Errorf("%d of a's log reads were held at once (%d answered 200, %d 429), want at most 2 and the rest 429", held, ok, limited)
	}
}
