package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/nodecore/hub"
)

// TestGatewayTimersKeepTheDefaultRatios: at the default heartbeat
// interval gatewayTimers gives the gateway's own defaults, so its fixed
// ratios are those of nodecore/hub.
func TestGatewayTimersKeepTheDefaultRatios(t *testing.T) {
	idle, online := gatewayTimers(hub.DefaultHeartbeatInterval)
	if idle != hub.DefaultIdleTimeout || online != hub.DefaultOnlineWindow {
		t.Fatalf("gatewayTimers(%s) = %s, %s; want the defaults %s, %s",
			hub.DefaultHeartbeatInterval, idle, online, hub.DefaultIdleTimeout, hub.DefaultOnlineWindow)
	}
}

// memStatsTail is the end of a /debug/pprof/heap?debug=1 answer as
// runtime/pprof writes it: the runtime.MemStats lines after the records.
const memStatsTail = "\n# runtime.MemStats\n# Alloc = 1\n# HeapAlloc = 2\n# HeapInuse = 8192\n# HeapReleased = 0\n" +
	"# Stack = 4096 / 65536\n# MSpan = 1 / 2\n# NumGC = 3\n"

// serveHeap serves body with status at /debug/pprof/heap on a loopback
// test server and returns its base URL.
func serveHeap(t *testing.T, status int, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/heap" || r.URL.Query().Get("debug") != "1" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestRuntimeMemory: the StackInuse and HeapInuse of the MemStats lines
// are read; a missing or malformed line, an answer over the 4 MiB read
// limit before those lines, and a status other than 200 each give an
// error that says which, and nothing panics.
func TestRuntimeMemory(t *testing.T) {
	records := "heap profile: 1: 2 [3: 4] @ heap/1048576\n1: 2 [3: 4] @ 0x1 0x2\n#\t0x1\tmain.f+0x1\t/x.go:1\n"
	stack, heap, err := runtimeMemory(serveHeap(t, http.StatusOK, records+memStatsTail))
	if err != nil || stack != 4096 || heap != 8192 {
		t.Fatalf("stack %d, heap %d, %v; want 4096, 8192", stack, heap, err)
	}
	big := strings.Repeat("#\t0x1\tmain.f+0x1\t/x.go:1\n", (4<<20)/24+1)
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"stack value missing", strings.Replace(memStatsTail, "4096 / 65536", "", 1), http.StatusOK, `malformed "# Stack = " line`},
		{"stack value not a number", strings.Replace(memStatsTail, "4096 / 65536", "x / 1", 1), http.StatusOK, `malformed "# Stack = " line`},
		{"heap value not a number", strings.Replace(memStatsTail, "8192", "-1", 1), http.StatusOK, `malformed "# HeapInuse = " line`},
		{"no HeapInuse line", strings.Replace(memStatsTail, "# HeapInuse = 8192\n", "", 1), http.StatusOK, `no "# HeapInuse = " line`},
		{"no MemStats lines", records, http.StatusOK, `no "# Stack = " line, no "# HeapInuse = " line`},
		{"over 4 MiB before the lines", records + big + memStatsTail, http.StatusOK, "over 4 MiB"},
		{"status 500", "boom", http.StatusInternalServerError, "500"},
	} {
		_, _, err := runtimeMemory(serveHeap(t, tc.status, tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestWithGODEBUGKeepsTheVariantsSettings: -gctrace's setting joins a
// GODEBUG the variant's environment already sets instead of replacing it.
func TestWithGODEBUGKeepsTheVariantsSettings(t *testing.T) {
	for _, c := range []struct{ env, want []string }{
		{nil, []string{"GODEBUG=gctrace=1"}},
		{[]string{"GOGC=100"}, []string{"GOGC=100", "GODEBUG=gctrace=1"}},
		{[]string{"GODEBUG=schedtrace=86400000", "GOGC=100"}, []string{"GODEBUG=schedtrace=86400000,gctrace=1", "GOGC=100"}},
		{[]string{"GODEBUG=a=1", "GODEBUG=b=2"}, []string{"GODEBUG=a=1", "GODEBUG=b=2,gctrace=1"}},
		{[]string{"GODEBUG="}, []string{"GODEBUG=gctrace=1"}},
	} {
		in := slices.Clone(c.env)
		if got := withGODEBUG(c.env, "gctrace=1"); !slices.Equal(got, c.want) {
			t.Errorf("withGODEBUG(%q) = %q; want %q", c.env, got, c.want)
		}
		if !slices.Equal(c.env, in) {
			t.Errorf("withGODEBUG changed its argument %q to %q", in, c.env)
		}
	}
}
