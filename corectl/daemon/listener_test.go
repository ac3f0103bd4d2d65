package daemon_test

import (
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/gateway/credential"
	"k8s.io/client-go/rest"
)

// closed reports whether l was closed: Accept on a closed listener fails
// with net.ErrClosed at once (on an open one it would wait for a
// connection, so l is only asked after its owner was to close it).
func closed(l net.Listener) bool {
	_, err := l.Accept()
	return errors.Is(err, net.ErrClosed)
}

// TestAGivenListenerIsServedAndClosed: a daemon given Options.Listener
// serves the API on it (Addr is its address) and closes it when Run
// returns, as it does a listener it bound itself.
func TestAGivenListenerIsServedAndClosed(t *testing.T) {
	s := newSetup(t, "c-listener")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listener: l,
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Addr() != l.Addr().String() {
		t.Fatalf("Addr = %s, the listener is on %s", d.Addr(), l.Addr())
	}
	r := run(t, d)
	c := &http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Get("http://" + l.Addr().String() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("GET /health on the given listener: %d", resp.StatusCode)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if !closed(l) {
		t.Fatal("the given listener is still open after Run returned")
	}
}

// TestListenerAndListenBothSet: giving both a listener and an address is
// refused by New, which closes the listener it was given.
func TestListenerAndListenBothSet(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := apikey.Parse([]byte("keys: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = daemon.New(daemon.Options{
		Config: &cluster.Config{}, Keys: keys, Credentials: credential.Static{},
		Listener: l, Listen: "127.0.0.1:0",
	})
	if err == nil || !strings.Contains(err.Error(), "Listener and Listen are both set") {
		t.Fatalf("New = %v, want the error naming both options", err)
	}
	if !closed(l) {
		t.Fatal("New returned an error and left the given listener open")
	}
}

// TestNewFailingClosesTheGivenListener: New failing for a reason of its
// own (here a short execd token secret) closes the listener it was given.
func TestNewFailingClosesTheGivenListener(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := apikey.Parse([]byte("keys: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = daemon.New(daemon.Options{
		Config:      &cluster.Config{Clusters: []cluster.Cluster{{ID: "c1", ExecdTokenSecretFile: file}}},
		Keys:        keys,
		Credentials: credential.Static{},
		Listener:    l,
		RESTConfig:  func(*cluster.Cluster) (*rest.Config, error) { return &rest.Config{}, nil },
	})
	if err == nil {
		t.Fatal("New accepted a short execd token secret")
	}
	if !closed(l) {
		t.Fatal("New returned an error and left the given listener open")
	}
}

// countingListener counts its Close calls.
type countingListener struct {
	net.Listener
	closes atomic.Int32
}

func (c *countingListener) Close() error {
	c.closes.Add(1)
	return c.Listener.Close()
}

// TestProbeListenFailingClosesTheGivenListenerOnce: when the probe
// address cannot be bound, New fails with "probe listener" and closes
// the listener it was given exactly once (it used to close it twice:
// once as its own and once as the given one).
func TestProbeListenFailingClosesTheGivenListenerOnce(t *testing.T) {
	s := newSetup(t, "c-probe-taken")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: inner}
	_, err = daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listener: l,
		ProbeListen: taken.Addr().String(),
		RESTConfig:  func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	})
	if err == nil || !strings.Contains(err.Error(), "probe listener") {
		t.Fatalf("New with a taken probe address: %v, want a probe listener error", err)
	}
	if n := l.closes.Load(); n != 1 {
		t.Fatalf("the given listener was closed %d times, want 1", n)
	}
	if !closed(inner) {
		t.Fatal("the given listener is still open")
	}
}
