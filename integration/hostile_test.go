package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
)

// hostileCeiling is the built gateway's documented peak memory (VmHWM)
// under hostile sandboxes that keep every upstream slot they may hold busy
// with the largest answers: docs/dataplane.md "Bounded cost per request
// and per tenant".
const hostileCeiling = 512 << 10 // KiB

// TestHostileExecdBoundedMemory: code in sandboxes answering in execd's
// place (the stand-in's hostile mode: 64 MiB answers to every JSON read, or
// the largest listing the gateway accepts) cannot take the built gateway's
// peak memory past the documented ceiling, however many requests their
// tenants send at once, while an honest sandbox's calls keep being served.
// Before the bounds one Stat cost about 190 MiB and eight concurrent Stat
// calls took the gateway past 1 GiB.
func TestHostileExecdBoundedMemory(t *testing.T) {
	huge := []string{"sbxevil0"}
	listings := []string{"sbxevil1", "sbxevil2"}
	e := startEnv(t, func(c *harness.Config) {
		c.Caddyfile = strings.Replace(harness.DefaultCaddyfile, "user root 0 0 /root", "user root 0 0 /root\n\t\textended_operations", 1)
		for _, id := range append(huge, listings...) {
			c.Grants[id] = harness.Grant{CredentialID: credOK}
		}
	})
	e.mkdir("/home/user")
	serve := func(h *execdstub.Hostile) string {
		x := execdstub.New(execdstub.Config{Root: t.TempDir(), GracefulShutdown: -1, Hostile: h})
		srv := httptest.NewServer(x)
		t.Cleanup(func() { srv.Close(); x.Close() })
		return srv.Listener.Addr().String()
	}
	sb := func(addr string) fixedentry.Sandbox {
		return fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default", Ports: map[int]string{44772: addr}}
	}
	for _, id := range huge {
		e.Ingress.SetSandbox(id, sb(serve(&execdstub.Hostile{})))
	}
	for _, id := range listings {
		e.Ingress.SetSandbox(id, sb(serve(&execdstub.Hostile{ListingEntries: execd.DefaultMaxListingEntries,
			ListingBytes: execd.DefaultMaxListingBytes - 64<<10})))
	}

	ctx := context.Background()
	_, before, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct{ path, body string }{
		{"/filesystem.Filesystem/ListDir", `{"path":"/home/user"}`},
		{"/filesystem.Filesystem/Stat", `{"path":"/home/user"}`},
		{"/process.Process/List", `{}`},
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for _, id := range append(huge, listings...) {
		tok := e.mint(id, harness.Grant{CredentialID: credOK})
		for w := range 8 { // twice the per-sandbox bound
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 6 {
					c := calls[(w+i)%len(calls)]
					r, err := e.do(ctx, envdRequest{method: http.MethodPost, path: c.path, contentType: "application/json",
						body: []byte(c.body), sandboxID: id, port: envdPort, token: tok})
					mu.Lock()
					if err != nil {
						outcomes["error"]++
					} else {
						outcomes[fmt.Sprint(r.status, " ", r.errorCode())]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	honestTok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	honest := 0
	for running := true; running || honest < 5; honest++ {
		select {
		case <-done:
			running = false
		default:
		}
		r, err := e.listDir(ctx, honestTok)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("the honest sandbox's ListDir #%d while hostile sandboxes load the gateway: %v %d %s %.200s",
				honest, err, r.status, r.errorCode(), r.body)
		}
	}
	_, peak, err := gatewayproc.Memory(e.PID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway VmHWM %d MiB before the hostile load, %d MiB after; %d honest ListDir calls served; hostile outcomes %v",
		before>>10, peak>>10, honest, outcomes)
	if peak > hostileCeiling {
		t.Fatalf("the gateway's peak memory reached %d MiB, over the documented ceiling of %d MiB", peak>>10, hostileCeiling>>10)
	}
}
