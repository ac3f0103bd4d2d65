package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/node/proto"
)

// AgentConfig describes a simulated node that stays connected.
type AgentConfig struct {
	// Node is the connection's configuration; its URL is replaced by each
	// of URLs in turn, and its Answer is wrapped to record requests.
	Node Config
	// URLs are Core's origins (several gateway replicas, or one address
	// in front of them); each attempt dials the next. Required.
	URLs []string
	// BackoffMin and BackoffMax bound the wait between attempts, as
	// nodeagent's: attempt n waits a random duration in [d/2, d],
	// d = min(BackoffMin·2ⁿ, BackoffMax), and n starts again at 0 after a
	// connection Core welcomed. Defaults 1 s and 1 min (nodeagent's).
	BackoffMin, BackoffMax time.Duration
}

// Connection is one connection Core welcomed.
type Connection struct {
	// URL is the origin the agent dialed.
	URL string
	// Welcome is Core's welcome.
	Welcome proto.Welcome
	// At is when it arrived.
	At time.Time
}

// Received is one request a node received.
type Received struct {
	// Request is the request frame.
	Request proto.Request
	// At is when it arrived.
	At time.Time
}

// Agent is a simulated node that behaves like nodeagent's connection
// loop: it dials, and whenever the dial is refused or the connection ends
// it waits its backoff and dials again (the Retry-After of a 409, or
// half a second at most after Core's 1001, as nodeagent). Like nodeagent it keeps the
// highest owner epoch a welcome carried and closes a connection welcomed
// under a lower one. It records every welcome and every request.
type Agent struct {
	cfg    AgentConfig
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	cur      *Node
	conns    []Connection
	received []Received
	refused  map[int]int // dial refusals by HTTP status (0: no answer)
	lower    int         // welcomes refused for a lower epoch
	changed  chan struct{}
}

// StartAgent starts the loop; Stop ends it.
func StartAgent(cfg AgentConfig) *Agent {
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = time.Second
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(time.Minute, cfg.BackoffMin)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{cfg: cfg, cancel: cancel, done: make(chan struct{}), refused: map[int]int{}, changed: make(chan struct{})}
	answer := cfg.Node.Answer
	if answer == nil {
		answer = Success
	}
	a.cfg.Node.Answer = func(r *proto.Request) *proto.Response {
		a.mu.Lock()
		a.received = append(a.received, Received{Request: *r, At: time.Now()})
		a.mu.Unlock()
		return answer(r)
	}
	go a.loop(ctx)
	return a
}

func (a *Agent) loop(ctx context.Context) {
	defer close(a.done)
	attempt := 0
	var highest int64
	for i := 0; ; i++ {
		cfg := a.cfg.Node
		cfg.URL = a.cfg.URLs[i%len(a.cfg.URLs)]
		dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		n, err := Dial(dctx, cfg)
		cancel()
		if err == nil && n.Welcome().OwnerEpoch < highest {
			_ = n.Close()
			a.note(func() { a.lower++ })
			err = errors.New("sim: welcome with a lower owner epoch")
			n = nil
		}
		var retryAfter time.Duration
		goingAway := false
		if err != nil {
			var de *DialError
			status := -1
			if errors.As(err, &de) {
				status, retryAfter = de.Status, de.RetryAfter
			}
			if status >= 0 {
				a.note(func() { a.refused[status]++ })
			}
		} else {
			highest = n.Welcome().OwnerEpoch
			attempt = 0
			a.note(func() {
				a.cur = n
				a.conns = append(a.conns, Connection{URL: cfg.URL, Welcome: n.Welcome(), At: time.Now()})
			})
			select {
			case <-n.Done():
				var ce *websocket.CloseError
				goingAway = errors.As(n.Err(), &ce) && ce.Code == websocket.CloseGoingAway
			case <-ctx.Done():
				_ = n.Close()
			}
			a.note(func() { a.cur = nil })
		}
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch {
		case retryAfter > 0:
			// As nodeagent: the refusal's Retry-After, plus up to a
			// quarter of it, at most BackoffMax.
			wait = min(retryAfter+rand.N(retryAfter/4+1), a.cfg.BackoffMax)
		case goingAway:
			// As nodeagent: Core's 1001, reconnect at once (a jitter of
			// at most half a second).
			wait = rand.N(min(500*time.Millisecond, a.cfg.BackoffMin) + 1)
		default:
			d := a.cfg.BackoffMin
			for j := 0; j < attempt && d < a.cfg.BackoffMax; j++ {
				d *= 2
			}
			d = min(d, a.cfg.BackoffMax)
			attempt++
			half := d / 2
			wait = half + rand.N(d-half+1)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// note changes the recorded state under the lock and wakes WaitChange.
func (a *Agent) note(f func()) {
	a.mu.Lock()
	f()
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

// Changed returns a channel closed at the next change of the agent's
// connection state (connected, disconnected, refused).
func (a *Agent) Changed() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

// Current returns the live connection, nil while disconnected.
func (a *Agent) Current() *Node {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur
}

// Welcomes returns every welcome so far, in order.
func (a *Agent) Welcomes() []proto.Welcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]proto.Welcome, len(a.conns))
	for i, c := range a.conns {
		out[i] = c.Welcome
	}
	return out
}

// Connections returns every welcomed connection so far, in order.
func (a *Agent) Connections() []Connection {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Connection(nil), a.conns...)
}

// Received returns every request received so far, in order.
func (a *Agent) Received() []Received {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Received(nil), a.received...)
}

// Refused returns the dial refusals by HTTP status (0: no HTTP answer)
// and the number of welcomes refused for a lower owner epoch.
func (a *Agent) Refused() (byStatus map[int]int, lowerEpoch int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[int]int, len(a.refused))
	for k, v := range a.refused {
		out[k] = v
	}
	return out, a.lower
}

// Stop ends the loop and closes the connection.
func (a *Agent) Stop() {
	a.cancel()
	<-a.done
}
