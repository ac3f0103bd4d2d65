package daemon_test

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"k8s.io/client-go/rest"
)

// goroutine is one goroutine of a runtime.Stack dump: its ID, the ID of
// the goroutine that created it (0 when none is named) and its stack.
type goroutine struct {
	id, parent int
	stack      string
}

// goroutines returns every goroutine of the process by ID.
func goroutines() map[int]goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[int]goroutine{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		head, _, _ := strings.Cut(strings.TrimPrefix(s, "goroutine "), " ")
		id, err := strconv.Atoi(head)
		if err != nil {
			continue
		}
		parent := 0
		if i := strings.LastIndex(s, "created by "); i >= 0 {
			line, _, _ := strings.Cut(s[i:], "\n")
			if j := strings.LastIndex(line, " in goroutine "); j >= 0 {
				parent, _ = strconv.Atoi(line[j+len(" in goroutine "):])
			}
		}
		out[id] = goroutine{id: id, parent: parent, stack: s}
	}
	return out
}

// selfID is the calling goroutine's ID.
func selfID() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	head, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	id, _ := strconv.Atoi(head)
	return id
}

// startedBy returns the goroutines of now that are not in before and
// descend from goroutine root (created by it, or by one of them).
func startedBy(root int, before, now map[int]goroutine) []goroutine {
	mine := map[int]bool{root: true}
	for grew := true; grew; {
		grew = false
		for id, g := range now {
			if _, old := before[id]; !old && !mine[id] && mine[g.parent] {
				mine[id], grew = true, true
			}
		}
	}
	var out []goroutine
	for id, g := range now {
		if id != root && mine[id] {
			out = append(out, g)
		}
	}
	return out
}

// TestNewStartsNoGoroutine: New builds a daemon without starting
// anything: no goroutine it started is left once it has returned (the
// cluster's Events broadcaster is built and started by Run), so a Daemon
// that is never Run leaks none. A first New, not counted, opens the
// process's pooled connection to the apiserver and starts what libraries
// start once per process.
func TestNewStartsNoGoroutine(t *testing.T) {
	s := newSetup(t, "c-new-idle")
	opts := daemon.Options{
		Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0",
		LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
		RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
	}
	if _, err := daemon.New(opts); err != nil {
		t.Fatal(err)
	}
	me := selfID()
	before := goroutines()
	if _, err := daemon.New(opts); err != nil {
		t.Fatal(err)
	}
	// Goroutines New started for its own requests may take a moment to
	// end: poll until none is left, up to a deadline.
	var left []goroutine
	for deadline := time.Now().Add(10 * time.Second); ; {
		left = startedBy(me, before, goroutines())
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, g := range left {
		t.Errorf("a goroutine New started is still running:\n%s", g.stack)
	}
}
