package daemon_test

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/kubetest"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestEventsAtShutdown: a replica that shuts down releases the cluster's
// Lease, and the "stopped leading" Event its leader election records on
// the way out reaches the apiserver (the Events broadcaster outlives the
// managers and is flushed before Run returns, not cut off with the
// Event in flight); once Run has returned, no goroutine of the Events
// broadcaster is left.
func TestEventsAtShutdown(t *testing.T) {
	s := newSetup(t, "c-events-shutdown")
	d, err := daemon.New(daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0",
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 250 * time.Millisecond,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(c) }()
	r := &replica{d: d}
	kubetest.Eventually(t, 30*time.Second, "leadership", func() (bool, error) { return elected(r, s.id), nil })
	leaseEvent(t, s, s.id)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// What Run left: the Event is in the apiserver or never will be.
	var evs eventsv1.EventList
	if err := env.Client.List(ctx, &evs, client.InNamespace(s.leaseNS)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		if e.Regarding.Name == daemon.LeaseName(s.id) && strings.HasSuffix(e.Note, "stopped leading") {
			found = true
		}
	}
	if !found {
		t.Error(`the Lease's "stopped leading" Event was not recorded by the time Run returned`)
	}
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "k8s.io/client-go/tools/events.") || strings.Contains(g, "k8s.io/apimachinery/pkg/watch.(*Broadcaster)") {
			t.Errorf("an Events broadcaster goroutine left after Run returned:\n%s", g)
		}
	}
}
