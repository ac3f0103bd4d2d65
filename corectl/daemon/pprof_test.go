package daemon_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"k8s.io/client-go/rest"
)

// TestProfilingOnlyWhenAsked: the probe handler serves Go's heap profile
// under /debug/pprof/ with Options.Profiling and answers 404 there
// without it; /healthz is served either way.
func TestProfilingOnlyWhenAsked(t *testing.T) {
	s := newSetup(t, "c-pprof")
	for _, on := range []bool{false, true} {
		d, err := daemon.New(daemon.Options{
			Config: s.cfg, Keys: s.keys, Credentials: s.src, Listen: "127.0.0.1:0", Profiling: on,
			LeaderElection: true, LeaderElectionNamespace: s.leaseNS,
			RESTConfig: func(*cluster.Cluster) (*rest.Config, error) { return rest.CopyConfig(env.Config), nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			d.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			return rec
		}
		heap := get("/debug/pprof/heap?debug=1")
		switch {
		case on && (heap.Code != http.StatusOK || !strings.Contains(heap.Body.String(), "heap profile")):
			t.Fatalf("Profiling on: heap %d %.80q", heap.Code, heap.Body.String())
		case !on && heap.Code != http.StatusNotFound:
			t.Fatalf("Profiling off: heap answered %d", heap.Code)
		}
		if h := get("/healthz"); h.Code != http.StatusOK {
			t.Fatalf("healthz %d", h.Code)
		}
	}
}
