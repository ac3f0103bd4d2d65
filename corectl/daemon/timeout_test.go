package daemon_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// freezer is a TCP proxy on 127.0.0.1 in front of the test apiserver that
// can be frozen: from then on it forwards nothing, on the connections it
// holds and on new ones, and never answers (the apiserver stopped with
// SIGSTOP, as its clients see it). TLS passes through it unchanged.
type freezer struct {
	l      net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// newFreezer starts a freezer in front of the apiserver of cfg and
// returns it with cfg pointed at it.
func newFreezer(t *testing.T, cfg *rest.Config) (*freezer, *rest.Config) {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{l: l, target: u.Host}
	f.wg.Go(f.accept)
	t.Cleanup(func() {
		l.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	pc := rest.CopyConfig(cfg)
	pc.Host = u.Scheme + "://" + l.Addr().String()
	return f, pc
}

// hold keeps c to be closed at the end.
func (f *freezer) hold(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns = append(f.conns, c)
}

func (f *freezer) accept() {
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		f.hold(c)
		if f.frozen.Load() {
			continue
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.hold(s)
		f.wg.Go(func() {
			// Client to apiserver: dropped once frozen.
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 && !f.frozen.Load() {
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		f.wg.Go(func() { _, _ = io.Copy(c, s) })
	}
}

// isTimeout reports whether err is the client's request timeout
// (rest.Config.Timeout, http.Client's Timeout) for a call whose context
// has no deadline: net/http's error then is context.DeadlineExceeded,
// which a lost connection or a TLS handshake timeout is not.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded)
}

// hungCall runs call and returns its error; a call still running after
// a minute fails the test (a client without a request timeout), so that
// the test ends instead of hanging. The minute is a guard, not a measure.
func hungCall(t *testing.T, name string, call func() error) (error, bool) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- call() }()
	select {
	case err := <-errc:
		return err, true
	case <-time.After(time.Minute):
		t.Errorf("%s against a hung apiserver: still waiting after a minute (no request timeout)", name)
		return nil, false
	}
}

// TestClientsHaveTheRequestTimeout: once the cluster's apiserver hangs
// (accepts, never answers), every single-request client the daemon built
// for it (the Events sink, the SelfSubjectAccessReviews of the
// namespace-rights check, pods/log, the uncached client) fails with a
// client timeout error, although the caller's context has no deadline:
// the cluster's client.requestTimeout bounds each request.
func TestClientsHaveTheRequestTimeout(t *testing.T) {
	s := newSetup(t, "c-hung")
	s.cfg.Clusters[0].Client.RequestTimeout = metav1.Duration{Duration: 500 * time.Millisecond}
	f, cfg := newFreezer(t, env.Config)
	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0",
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(cfg), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := daemon.SingleRequestCalls(d, 0)
	if len(calls) != 4 {
		t.Fatalf("%d clients to check, want 4", len(calls))
	}
	f.frozen.Store(true)
	for name, call := range calls {
		// No deadline: only the client's own timeout ends the call.
		if err, ok := hungCall(t, name, func() error { return call(context.Background()) }); ok && !isTimeout(err) {
			t.Errorf("%s against a hung apiserver: %v, want the client's request timeout (context.DeadlineExceeded)", name, err)
		}
	}
}

// TestNewAgainstAHungAPIServer: New makes no request to a cluster's
// apiserver (each cluster's manager, whose build reads the API discovery
// within the request timeout, is built by Run in the cluster's own
// goroutine: TestAClusterHungFromTheStartCostsTheOthersNothing), so
// against an apiserver that hung with a connection open (the process's
// connections to it are pooled) New returns, without an error.
func TestNewAgainstAHungAPIServer(t *testing.T) {
	s := newSetup(t, "c-hung-new")
	s.cfg.Clusters[0].Client.RequestTimeout = metav1.Duration{Duration: 500 * time.Millisecond}
	f, cfg := newFreezer(t, env.Config)
	// A connection to the apiserver is open before it hangs, as in a
	// running corectl (client-go shares it between the clients).
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	f.frozen.Store(true)
	err, ok := hungCall(t, "New", func() error {
		_, err := daemon.New(daemon.Options{
			Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0",
			RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(cfg), nil },
		})
		return err
	})
	if ok && err != nil {
		t.Fatalf("New against a hung apiserver: %v, want no error (New asks the apiserver nothing)", err)
	}
}
