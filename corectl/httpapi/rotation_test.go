package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
)

// rotationPhase counts the authorize requests each (gateway replica,
// corectl replica) pair served since the phase began, and the traffic
// workers that finished a request they began in it (with the gateway as
// it was after the step); done closes once every pair served perPair and
// every one of workers finished one. A worker that picked its gateway
// before a step may still be sending the token the step replaced: the
// next step waits for it, as an operator waits for every gateway
// replica's requests in flight before retiring a token.
type rotationPhase struct {
	mu       sync.Mutex
	served   map[[2]string]int
	finished map[int]bool
	perPair  int
	workers  int
	done     chan struct{}
	closed   bool
}

func newRotationPhase(perPair, workers int) *rotationPhase {
	return &rotationPhase{served: map[[2]string]int{}, finished: map[int]bool{}, perPair: perPair, workers: workers, done: make(chan struct{})}
}

func (p *rotationPhase) record(gw, replica string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.served[[2]string{gw, replica}]++
	p.check()
}

// finish records that worker ended a request it began in this phase.
func (p *rotationPhase) finish(worker int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished[worker] = true
	p.check()
}

func (p *rotationPhase) check() {
	if p.closed || len(p.finished) < p.workers {
		return
	}
	for _, g := range []string{"g1", "g2"} {
		for _, r := range []string{"r1", "r2"} {
			if p.served[[2]string{g, r}] < p.perPair {
				return
			}
		}
	}
	p.closed = true
	close(p.done)
}

// TestInternalTokenRotationUnderTraffic rotates corectl's internal token
// the way docs/runbook.md says, one replica at a time, while two gateway
// replicas' authorizers (gateway/authorizer.HTTP, no cache) keep asking
// two corectl replicas behind one Service: corectl accepts old and new,
// the gateways switch to the new one, corectl drops the old one. After
// each step every gateway/corectl pair is exercised, and no request is
// refused. A gateway still sending the retired token is refused at the
// end, so a wrong order would have shown.
func TestInternalTokenRotationUnderTraffic(t *testing.T) {
	const oldTok, newTok = "old-internal-token-0123456789abcdef", "new-internal-token-fedcba9876543210"
	const workers = 4 // the traffic's goroutines, two per gateway replica
	creds := credential.Static{"a": {ID: "a", Enabled: true, ProjectNamespace: "ns-a", ClusterID: "c1"}}
	corectl := func(tokens ...string) http.Handler {
		return (&httpapi.Server{Credentials: creds, Clusters: map[string]*httpapi.ClusterHandle{}, InternalTokens: tokens}).Handler()
	}
	var phase atomic.Pointer[rotationPhase]
	phase.Store(newRotationPhase(5, workers))
	replicas := map[string]*atomic.Pointer[http.Handler]{"r1": {}, "r2": {}}
	setReplica := func(name string, h http.Handler) { replicas[name].Store(&h) }
	setReplica("r1", corectl(oldTok))
	setReplica("r2", corectl(oldTok))
	// The Service: each request goes to a replica picked at random.
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := []string{"r1", "r2"}[rand.IntN(2)]
		p := phase.Load() // the step this request started in
		(*replicas[name].Load()).ServeHTTP(w, r)
		p.record(r.Header.Get("X-Test-Gateway"), name)
	}))
	defer svc.Close()
	gateway := func(name, tok string) *authorizer.HTTP {
		h, err := authorizer.NewHTTP(authorizer.HTTPConfig{BaseURL: svc.URL, CacheTTL: 1,
			Header: http.Header{"Authorization": {"Bearer " + tok}, "X-Test-Gateway": {name}}})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	gateways := map[string]*atomic.Pointer[authorizer.HTTP]{"g1": {}, "g2": {}}
	gateways["g1"].Store(gateway("g1", oldTok))
	gateways["g2"].Store(gateway("g2", oldTok))

	ctx, cancel := context.WithCancel(context.Background())
	refused := make(chan error, 1)
	var wg sync.WaitGroup
	var asked atomic.Int64
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := gateways[[]string{"g1", "g2"}[i%2]]
			for n := 0; ctx.Err() == nil; n++ {
				p := phase.Load() // before the gateway: a step's gateway is stored before its phase
				d, err := g.Load().Authorize(ctx, "a", fmt.Sprintf("sb%d-%d", i, n))
				if ctx.Err() != nil {
					return
				}
				p.finish(i)
				asked.Add(1)
				if err == nil && d.Reason != authorizer.ReasonNotFound {
					err = fmt.Errorf("answer %+v, want not_found", d)
				}
				if err != nil {
					select {
					case refused <- err:
					default:
					}
					return
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	steps := []struct {
		name string
		do   func()
	}{
		{"traffic with the old token", func() {}},
		{"corectl r1 accepts old and new", func() { setReplica("r1", corectl(oldTok, newTok)) }},
		{"corectl r2 accepts old and new", func() { setReplica("r2", corectl(newTok, oldTok)) }},
		{"gateway g1 sends the new token", func() { gateways["g1"].Store(gateway("g1", newTok)) }},
		{"gateway g2 sends the new token", func() { gateways["g2"].Store(gateway("g2", newTok)) }},
		{"corectl r1 accepts only the new token", func() { setReplica("r1", corectl(newTok)) }},
		{"corectl r2 accepts only the new token", func() { setReplica("r2", corectl(newTok)) }},
	}
	for _, s := range steps {
		s.do()
		p := newRotationPhase(5, workers)
		phase.Store(p)
		select {
		case <-p.done:
		case err := <-refused:
			t.Fatalf("during %q: a request was refused: %v", s.name, err)
		}
	}
	cancel()
	wg.Wait()
	select {
	case err := <-refused:
		t.Fatalf("a request was refused: %v", err)
	default:
	}
	t.Logf("%d authorize requests, none refused", asked.Load())

	// The control: the retired token is refused by every replica.
	stale := gateway("g1", oldTok)
	for range 8 {
		if _, err := stale.Authorize(context.Background(), "a", "sb-stale"); !errors.Is(err, authorizer.ErrUnavailable) {
			t.Fatalf("the retired token: %v, want ErrUnavailable", err)
		}
	}
}
