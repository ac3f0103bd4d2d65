package harness

import (
	"strings"
	"testing"
)

// TestCorectlServingAddrs: both addresses of the first "corectl serving"
// line, with the lines before it skipped; the probe address is empty on a
// line without one.
func TestCorectlServingAddrs(t *testing.T) {
	for _, c := range []struct {
		name, log string
		want      CorectlServing
	}{
		{"both", `{"msg":"starting"}` + "\n" + `not json` + "\n" +
			`{"msg":"corectl serving","addr":"127.0.0.1:4001","probeAddr":"127.0.0.1:4002"}` + "\n" +
			`{"msg":"corectl serving","addr":"127.0.0.1:9","probeAddr":"127.0.0.1:9"}` + "\n",
			CorectlServing{Addr: "127.0.0.1:4001", ProbeAddr: "127.0.0.1:4002"}},
		{"no probe", `{"msg":"corectl serving","addr":"127.0.0.1:4001","probeAddr":""}` + "\n",
			CorectlServing{Addr: "127.0.0.1:4001"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := <-CorectlServingAddrs(strings.NewReader(c.log)); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			if got := <-CorectlServingAddr(strings.NewReader(c.log)); got != c.want.Addr {
				t.Fatalf("CorectlServingAddr: got %q, want %q", got, c.want.Addr)
			}
		})
	}
}
