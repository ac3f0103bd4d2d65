package replicas

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/hack/gatewayproc"

	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/node/sim"
)

// TestAddRetriesSharedPortsWithOneOutput: when a port picked for a
// replica (its site, its internal node API or its admin endpoint) is held
// by another SO_REUSEPORT listener, the replica binds it with no error;
// Add stops it and starts it again on new ports (3 picks an attempt),
// the replica then alone on each of its addresses. Config.Output is asked
// once for the replica, and both attempts' output reaches that writer.
func TestAddRetriesSharedPortsWithOneOutput(t *testing.T) {
	caddy, err := filepath.Abs(filepath.Join("..", "..", "bin", "caddy"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(caddy); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("the gateway binary bin/caddy is missing (%v): run make build", err)
	}
	for _, tc := range []struct {
		name string
		pick int // the pick of the first attempt that returns the held port
	}{
		{"site", 1},
		{"node API", 2},
		{"admin", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held, err := freeport.ListenShared(t.Context(), "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			_, heldPort, _ := net.SplitHostPort(held.Addr().String())
			picks := 0
			saved := pickPort
			defer func() { pickPort = saved }()
			pickPort = func() (string, error) {
				picks++
				if picks == tc.pick {
					return heldPort, nil
				}
				return freeport.Port()
			}
			var asked []int
			out := &gatewayproc.Output{}
			c, err := Start(Config{Caddy: caddy, Replicas: 1, Admin: true, Nodes: []sim.Identity{sim.NewIdentity()}, Output: func(i int) io.Writer {
				asked = append(asked, i)
				return out
			}})
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			defer c.Close()
			if picks != 6 {
				t.Fatalf("%d picks, want 6 (a second attempt after the shared port %s)", picks, heldPort)
			}
			if len(asked) != 1 || asked[0] != 0 {
				t.Fatalf("Output asked for %v, want [0] (once)", asked)
			}
			r := c.Replicas[0]
			for _, addr := range []string{strings.TrimPrefix(r.URL, "http://"), strings.TrimPrefix(r.APIURL, "http://"), r.Admin} {
				if addr == held.Addr().String() {
					t.Fatalf("the replica kept the shared %s", addr)
				}
				if all, own, err := freeport.Listeners(r.PID, addr); all != 1 || own != 1 || err != nil {
					t.Fatalf("Listeners(replica, %s) = %d, %d, %v; want 1, 1", addr, all, own, err)
				}
			}
			if n := strings.Count(out.String(), "using config from file"); n != 2 {
				t.Fatalf("the output holds %d starts, want 2 (both attempts):\n%s", n, out)
			}
		})
	}
}
