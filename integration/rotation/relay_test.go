package rotation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/gateway/entryprobe"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

// relayProxy stands between corectl and the gateway's probe relay (as the
// headless Service does) and counts every relay answer: a 401, 403 or 5xx,
// or a relay that could not be reached, is a refusal; a connection lost by
// a request that overlapped a gateway reload (it began or failed during
// one: the reload's stand-in for a pod roll, not the rotation) is counted
// apart, as the rig counts the data plane's.
type relayProxy struct {
	rp                *httputil.ReverseProxy
	phase             func() string
	answered, dropped atomic.Int64
	refused           atomic.Int64
	refusals, drops   sync.Map
}

func newRelayProxy(relayAddr string, phase func() string) *relayProxy {
	p := &relayProxy{phase: phase}
	p.rp = httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: relayAddr})
	// One connection per request, as with the data plane: a reload closes
	// idle keep-alive connections.
	p.rp.Transport = &http.Transport{DisableKeepAlives: true}
	return p
}

func (p *relayProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	phase := p.phase()
	rp := *p.rp
	rp.ModifyResponse = func(resp *http.Response) error {
		p.answered.Add(1)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode >= 500 {
			p.refused.Add(1)
			p.refusals.Store(fmt.Sprintf("%s: %s %s: %d", phase, r.Method, r.URL.Path, resp.StatusCode), true)
		}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		switch {
		case r.Context().Err() != nil:
			// The client went away (a test client stopping): no answer
			// was wanted.
		case strings.Contains(phase, "gateway roll") || strings.Contains(p.phase(), "gateway roll"):
			p.dropped.Add(1)
			p.drops.Store(phase+": "+err.Error(), true)
		default:
			p.refused.Add(1)
			p.refusals.Store(fmt.Sprintf("%s: %s %s: %v", phase, r.Method, r.URL.Path, err), true)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	rp.ServeHTTP(w, r)
}

// TestProbeRelayTokenRotationUnderTraffic follows docs/runbook.md "Probe
// relay token" with the built programs: bin/caddy serves the probe relay
// (fixed_entry_probe with the shipped Caddyfile's two token_sha256 lines,
// the current digest and the rotation slot) and two bin/corectl replicas
// use it (-probe-relay-url, -probe-relay-token-file): each replica checks
// the gateway's clusters through the relay at start, and corectl's
// readiness pings of a new sandbox leave through it. Relay traffic runs
// the whole time (4 clients sending what corectl sends, with the token in
// corectl's token file: the cluster list and a readiness ping), beside
// data-plane traffic: step 1 puts the new token's digest in the slot (a
// gateway roll), step 2 puts the new token in corectl's file (a corectl
// roll, then a sandbox created, its pings through the relay), step 3 makes
// the new digest current and resets the slot to 64 f's (a gateway roll).
// No relay request is refused; at the end the relay refuses the old token
// and accepts the new one, and neither token is in a log.
func TestProbeRelayTokenRotationUnderTraffic(t *testing.T) {
	const oldTok, newTok = "probe-relay-token-old-0123456789abcdef0123456789", "probe-relay-token-new-0123456789abcdef0123456789"
	none := strings.Repeat("f", 64)
	// current and slot are the relay's digests at each step of the rig's
	// caddyfile: 0 before the rotation, 1 and 2 during it, 3 after.
	digests := func(step int) (current, slot string) {
		switch step {
		case 0:
			return sha256Hex(oldTok), none
		case 1, 2:
			return sha256Hex(oldTok), sha256Hex(newTok)
		default:
			return sha256Hex(newTok), none
		}
	}
	dir := t.TempDir()
	keyFile := dir + "/primary.key"
	writeFile(t, keyFile, "relay-rotation-hmac-secret-0123456789abcdef0123456789")
	relayTokenFile := dir + "/relay.token"
	writeFile(t, relayTokenFile, oldTok+"\n")
	relayAddr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	var started atomic.Pointer[rig] // the rig, once newRig returned
	proxy := newRelayProxy(relayAddr, func() string {
		if r := started.Load(); r != nil {
			return r.phase.Load().(string)
		}
		return "start"
	})
	relayURL := serve(t, proxy)
	r := newRig(t, func(*rig) []string {
		return []string{"-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", keyFile,
			"-probe-relay-url", relayURL, "-probe-relay-token-file", relayTokenFile, "-probe-relay-wait", "30s"}
	}, func(r *rig, step int) string {
		current, slot := digests(step)
		// The cluster's Host is the managed Ingresses' host, which corectl
		// checks through the relay at start.
		return strings.NewReplacer(
			"token_key primary HS256 {{KEY}}", "token_key primary HS256 "+keyFile,
			"cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}} {\n\t\t\thost sandbox.example.test\n\t\t}\n\t\t"+
				authorizerBlock(r.front, r.internal, step),
		).Replace(harness.DefaultCaddyfile) + "\nhttp://" + relayAddr + " {\n\tbind 127.0.0.1\n\tfixed_entry_probe {\n\t\ttoken_sha256 " +
			current + "\n\t\ttoken_sha256 " + slot + "\n\t}\n\trespond 404\n}\n"
	})
	started.Store(r)
	sb := r.create(600)
	r.startTraffic(func() sandbox { return sb })

	// The relay clients: what corectl sends, with the token of its file.
	ctx, stop := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	var clientErrors sync.Map
	var sent atomic.Int64
	for i := range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for ctx.Err() == nil {
				tok, err := os.ReadFile(relayTokenFile)
				if err != nil {
					clientErrors.Store(err.Error(), true)
					return
				}
				c := &entryprobe.Client{URL: relayURL, Token: strings.TrimSpace(string(tok))}
				if i%2 == 0 {
					_, err = c.Clusters(ctx)
				} else {
					_, err = c.Probe(ctx, "cluster-a", entryprobe.PingPath(sb.id))
				}
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil && !errors.Is(err, entryprobe.ErrRelay) {
					clientErrors.Store(err.Error(), true)
				}
			}
		}()
	}
	defer func() { stop(); clients.Wait() }()
	r.answered("before the rotation", 20, r.live...)

	// The runbook's steps, literally.
	r.rollGateway("step 1", 1) // 1. the slot: the new token's digest
	writeFile(t, relayTokenFile, newTok+"\n")
	r.rollCorectl("step 2") // 2. the new token in corectl's Secret: corectl rolls and sends it
	r.phase.Store("step 2 create")
	r.create(600) // corectl's readiness pings, through the relay with the new token
	r.phase.Store("step 2 done")
	r.rollGateway("step 3", 3) // 3. the new digest current, the slot 64 f's
	r.phase.Store("step 3 create")
	r.create(600)
	r.phase.Store("end")
	stop()
	clients.Wait()
	r.endTraffic()

	if n := proxy.refused.Load(); n != 0 {
		var kinds []string
		proxy.refusals.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
		t.Errorf("%d of %d relay requests refused during the rotation: %v", n, proxy.answered.Load()+proxy.refused.Load(), kinds)
	}
	clientErrors.Range(func(k, _ any) bool { t.Errorf("relay client: %s", k); return true })
	proxy.drops.Range(func(k, _ any) bool { t.Logf("relay connection lost in a reload: %s", k); return true })
	t.Logf("%d relay requests answered (%d from the test's clients), %d lost in a reload", proxy.answered.Load(), sent.Load(), proxy.dropped.Load())

	// The old token is retired: the relay refuses it, the new one passes.
	for _, tok := range []string{oldTok, newTok} {
		req, _ := http.NewRequest("GET", "http://"+relayAddr+entryprobe.Prefix, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := dataPlaneClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := tok == newTok; (resp.StatusCode == http.StatusOK) != want {
			t.Errorf("the relay with the %s token after the rotation = %d", map[bool]string{true: "new", false: "old"}[want], resp.StatusCode)
		}
	}
	logs := []string{r.gatewayLog}
	for _, p := range r.all {
		logs = append(logs, p.log)
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); strings.Contains(s, oldTok) || strings.Contains(s, newTok) {
			t.Errorf("%s contains a probe relay token", l)
		}
	}
}
