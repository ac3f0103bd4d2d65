package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/keypair/keypairtest"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

// edgeRenewalCaddyfile is the gateway of TestEdgeCertificateRenewal: the
// tls-caddy component's tls.caddyfile (imported as the base Caddyfile
// imports it) and a data plane listener importing its listener_tls, on
// loopback. {{ADDR}} is the harness's plain readiness site.
const edgeRenewalCaddyfile = `{
	admin {{ADMIN}}
	persist_config off
	auto_https off
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{FIXED_ENTRY}}
	}
}

import {{TLS_CADDYFILE}}

:{{DATAPLANE_PORT}} {
	bind 127.0.0.1
	import listener_tls
	e2b_dataplane
}

http://{{ADDR}} {
	bind 127.0.0.1
	e2b_dataplane
}
`

// handshake is one client connection of TestEdgeCertificateRenewal.
type handshake struct {
	start, end time.Time
	serial     *big.Int // of the certificate the gateway presented
	err        error
}

// dialEdge opens a new TLS connection (a full handshake: no session cache)
// to addr trusting ca, sends one HTTP/1.1 request on it and reads the
// response's status line; it returns the connection's record.
func dialEdge(addr string, ca *keypairtest.CA) (h handshake) {
	h.start = time.Now()
	defer func() { h.end = time.Now() }()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second},
		Config: &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		h.err = err
		return h
	}
	defer c.Close()
	tc := c.(*tls.Conn)
	h.serial = tc.ConnectionState().PeerCertificates[0].SerialNumber
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(tc, "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"); err != nil {
		h.err = err
		return h
	}
	line, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 ") {
		h.err = fmt.Errorf("no HTTP answer over the connection: %q, %v", line, err)
	}
	return h
}

// TestEdgeCertificateRenewal runs the built gateway with the tls-caddy
// component's tls.caddyfile as shipped (its certificate directory pointed
// at a directory laid out as the kubelet lays out the Secret
// sandgate-edge-tls) while clients open new TLS connections to the data
// plane listener continuously. The Secret is updated the kubelet's way
// (new timestamped directory, "..data" renamed over): every handshake that
// starts after a client first saw the renewed certificate gets the renewed
// certificate, and no handshake fails; a connection opened before the
// renewal keeps serving requests. Then a broken pair (a certificate with
// another certificate's key) is written: the gateway logs it without the
// key, the renewed certificate stays served, and the stale metric rises;
// a good pair after it is served and clears it. The served certificate's
// expiry is the metric sandgate_tls_certificate_not_after_timestamp_seconds
// throughout.
func TestEdgeCertificateRenewal(t *testing.T) {
	root := repoRoot(t)
	if _, err := os.Stat(harness.CaddyBinary(root)); err != nil {
		t.Fatalf("the gateway binary bin/caddy is missing (%v): run make build", err)
	}
	ca, err := keypairtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	secret := &keypairtest.SecretDir{Dir: filepath.Join(dir, "edge-tls")}
	if err := os.Mkdir(secret.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	issue := func(d time.Duration) keypairtest.Leaf {
		t.Helper()
		l, err := ca.Issue(time.Now().Add(d))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	first, renewed, broken, last := issue(24*time.Hour), issue(48*time.Hour), issue(60*time.Hour), issue(72*time.Hour)
	if err := secret.UpdateLeaf(first); err != nil {
		t.Fatal(err)
	}

	// The shipped file serves its certificate through key_pair_files, what
	// this test is about (harness.EdgeTLSCaddyfile checks the rest).
	shipped, err := os.ReadFile(filepath.Join(root, "deploy/components/tls-caddy/tls.caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "get_certificate key_pair_files /etc/sandgate/edge-tls/"; !strings.Contains(string(shipped), want) {
		t.Fatalf("the component's tls.caddyfile no longer holds %q; this test rewrites it", want)
	}
	// corectl, the API site's upstream, is not run: the test asks the API
	// site nothing. Its address refuses connections for the whole test.
	corectlAddr, held, err := freeport.Refusing()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// The API and data plane sites' ports are bound by the gateway: picked
	// for each start attempt, again when one was taken before the gateway
	// listened (harness.ErrBindRace).
	var (
		ports map[string]string
		env   *harness.Env
		logs  *logBuffer
	)
	for attempt := 1; ; attempt++ {
		ports = map[string]string{}
		for _, name := range []string{"api", "dataplane"} {
			p, err := freeport.Port()
			if err != nil {
				t.Fatal(err)
			}
			ports[name] = p
		}
		tlsPath, err := harness.EdgeTLSCaddyfile(root, dir, secret.Dir, corectlAddr, ports["api"])
		if err != nil {
			t.Fatal(err)
		}
		logs = newLogBuffer()
		env, err = harness.Start(harness.Config{RepoRoot: root, Stderr: logs, Credentials: credentialsYAML("enabled"),
			Caddyfile: strings.NewReplacer("{{TLS_CADDYFILE}}", tlsPath, "{{DATAPLANE_PORT}}", ports["dataplane"]).Replace(edgeRenewalCaddyfile),
			Listens:   []string{"127.0.0.1:" + ports["api"], "127.0.0.1:" + ports["dataplane"]}})
		if err == nil {
			break
		}
		if !errors.Is(err, harness.ErrBindRace) || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("gateway start attempt %d: %v; again with new ports", attempt, err)
	}
	defer env.Close()
	dataplane := "127.0.0.1:" + ports["dataplane"]
	certFile := filepath.Join(secret.Dir, "tls.crt")

	metric := func(name string) float64 {
		t.Helper()
		s, err := scrapetest.Get(testClient, "http://"+env.Admin+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return s.Value(name, "cert_file", certFile)
	}
	notAfter := func() float64 { return metric("sandgate_tls_certificate_not_after_timestamp_seconds") }
	if got := notAfter(); got != float64(first.NotAfter.Unix()) {
		t.Fatalf("not_after metric = %v, want the first certificate's %d", got, first.NotAfter.Unix())
	}

	// A connection opened before the renewal, kept open across it.
	d := &tls.Dialer{Config: &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}}}
	kept, err := d.DialContext(context.Background(), "tcp", dataplane)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	keptReader := bufio.NewReader(kept)
	request := func() {
		t.Helper()
		_ = kept.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(kept, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
			t.Fatalf("a request on the connection opened before the renewal: %v", err)
		}
		resp, err := http.ReadResponse(keptReader, nil)
		if err != nil {
			t.Fatalf("a response on the connection opened before the renewal: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	request()

	// Clients: each opens connection after connection until stopped, at
	// most 20,000 each and for at most 3 minutes.
	var (
		mu    sync.Mutex
		all   []handshake
		wg    sync.WaitGroup
		stop  = make(chan struct{})
		limit = time.Now().Add(3 * time.Minute)
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20000 && time.Now().Before(limit); i++ {
				select {
				case <-stop:
					return
				default:
				}
				h := dialEdge(dataplane, ca)
				mu.Lock()
				all = append(all, h)
				mu.Unlock()
			}
		}()
	}
	stopped := false
	stopClients := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopClients()
	// waitServed waits until a handshake completed with serial and returns
	// when the first did.
	waitServed := func(serial *big.Int, what string) time.Time {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			var at time.Time
			for _, h := range all {
				if h.serial != nil && h.serial.Cmp(serial) == 0 && (at.IsZero() || h.end.Before(at)) {
					at = h.end
				}
			}
			n := len(all)
			var lastErr error
			if n > 0 {
				lastErr = all[n-1].err
			}
			mu.Unlock()
			if !at.IsZero() {
				return at
			}
			if time.Now().After(deadline) {
				t.Fatalf("no handshake got %s within 30 s (%d handshakes so far, the last: %v)", what, n, lastErr)
			}
			time.Sleep(20 * time.Millisecond) // polling the clients' records
		}
	}
	// countAfter waits until at least n handshakes started after from.
	countAfter := func(from time.Time, n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			c := 0
			for _, h := range all {
				if h.start.After(from) {
					c++
				}
			}
			mu.Unlock()
			if c >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d handshakes started in 30 s", c)
			}
			time.Sleep(20 * time.Millisecond) // polling the clients' records
		}
	}

	waitServed(first.Serial, "the first certificate")
	if err := secret.UpdateLeaf(renewed); err != nil {
		t.Fatal(err)
	}
	renewedAt := waitServed(renewed.Serial, "the renewed certificate")
	countAfter(renewedAt, 50)
	request() // the connection opened before the renewal still serves

	// A broken pair: the gateway logs it and keeps the renewed one.
	from := len(logs.String())
	if err := secret.Update(map[string][]byte{"tls.crt": broken.CertPEM, "tls.key": renewed.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := logs.waitFor(ctx, from, "the TLS certificate files failed to load"); err != nil {
		t.Fatalf("no warning for the broken pair: %v\n%s", err, logs.String()[from:])
	}
	brokenSeen := time.Now()
	countAfter(brokenSeen, 50)
	if warning := logs.String()[from:]; strings.Contains(warning, "PRIVATE KEY") || strings.Contains(warning, strings.Split(string(renewed.KeyPEM), "\n")[1]) ||
		!strings.Contains(warning, "private key does not match public key") {
		t.Errorf("the broken pair's warning holds key material or not the reason:\n%s", warning)
	}
	if stale := metric("sandgate_tls_certificate_stale_seconds"); stale <= 0 {
		t.Errorf("stale metric = %v while the broken pair is on disk, want > 0", stale)
	}
	if got := notAfter(); got != float64(renewed.NotAfter.Unix()) {
		t.Errorf("not_after metric = %v with the broken pair on disk, want the renewed certificate's %d", got, renewed.NotAfter.Unix())
	}

	// A good pair again.
	if err := secret.UpdateLeaf(last); err != nil {
		t.Fatal(err)
	}
	lastAt := waitServed(last.Serial, "the pair after the broken one")
	countAfter(lastAt, 50)
	stopClients()
	if stale := metric("sandgate_tls_certificate_stale_seconds"); stale != 0 {
		t.Errorf("stale metric = %v after a good pair, want 0", stale)
	}
	if got := notAfter(); got != float64(last.NotAfter.Unix()) {
		t.Errorf("not_after metric = %v, want the last certificate's %d", got, last.NotAfter.Unix())
	}

	// Every handshake succeeded, and each got the certificate on disk when
	// it started: one that started after a client saw the renewed (or the
	// last) certificate got it; none got the broken one.
	mu.Lock()
	defer mu.Unlock()
	counts := map[string]int{}
	for _, h := range all {
		if h.err != nil {
			t.Errorf("a handshake started %v failed: %v", h.start.Format(time.RFC3339Nano), h.err)
			continue
		}
		counts[h.serial.String()]++
		// What was on disk, or being swapped in, while it ran.
		allowed := []*big.Int{first.Serial, renewed.Serial}
		switch {
		case h.start.After(lastAt):
			allowed = []*big.Int{last.Serial}
		case h.start.After(renewedAt):
			allowed = []*big.Int{renewed.Serial, last.Serial}
		}
		ok := false
		for _, a := range allowed {
			ok = ok || h.serial.Cmp(a) == 0
		}
		if !ok {
			t.Errorf("a handshake started %v got serial %v, want one of %v", h.start.Format(time.RFC3339Nano), h.serial, allowed)
		}
	}
	t.Logf("%d handshakes by serial: first %d, renewed %d, last %d", len(all),
		counts[first.Serial.String()], counts[renewed.Serial.String()], counts[last.Serial.String()])
	request() // and the connection from before the renewal still serves
}

// BenchmarkEdgeHandshake measures full TLS handshakes with the built
// gateway (a new connection each, no session resumption; TLS 1.3, a P-256
// certificate; one client per GOMAXPROCS, in this process) when the
// certificate is loaded once by Caddy's `tls <cert> <key>` (load_files)
// and when it is served by the key_pair_files certificate manager, which
// Caddy asks during each handshake. docs/benchmarks.md "Edge TLS
// handshakes" has the figures and the command.
func BenchmarkEdgeHandshake(b *testing.B) {
	root := repoRoot(b)
	ca, err := keypairtest.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	secret := &keypairtest.SecretDir{Dir: b.TempDir()}
	leaf, err := ca.Issue(time.Now().Add(24 * time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	if err := secret.UpdateLeaf(leaf); err != nil {
		b.Fatal(err)
	}
	cert, key := filepath.Join(secret.Dir, "tls.crt"), filepath.Join(secret.Dir, "tls.key")
	for _, c := range []struct{ name, tls string }{
		{"load_files", "tls " + cert + " " + key + " {\n\t\tprotocols tls1.2\n\t}"},
		{"key_pair_files", "tls {\n\t\tget_certificate key_pair_files " + cert + " " + key + "\n\t\tprotocols tls1.2\n\t}"},
	} {
		b.Run(c.name, func(b *testing.B) {
			// The TLS site's port is bound by the gateway: picked again
			// when it was taken before the gateway listened.
			var (
				port string
				env  *harness.Env
			)
			for attempt := 1; ; attempt++ {
				var err error
				if port, err = freeport.Port(); err != nil {
					b.Fatal(err)
				}
				cf := "{\n\tadmin {{ADMIN}}\n\tpersist_config off\n\tauto_https off\n}\n\n:" + port + " {\n\tbind 127.0.0.1\n\t" + c.tls +
					"\n\trespond ok\n}\n\nhttp://{{ADDR}} {\n\tbind 127.0.0.1\n\trespond ok\n}\n"
				if env, err = harness.Start(harness.Config{RepoRoot: root, Caddyfile: cf, Listens: []string{"127.0.0.1:" + port}}); err == nil {
					break
				}
				if !errors.Is(err, harness.ErrBindRace) || attempt == 5 {
					b.Fatal(err)
				}
			}
			defer env.Close()
			addr := "127.0.0.1:" + port
			if _, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}); err != nil {
				b.Fatalf("a first handshake: %v", err)
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"})
					if err != nil {
						b.Error(err)
						return
					}
					conn.Close()
				}
			})
		})
	}
}
