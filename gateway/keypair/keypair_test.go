package keypair_test

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandgate/sandgate/gateway/keypair"
	"github.com/sandgate/sandgate/gateway/keypair/keypairtest"
)

type fixture struct {
	ca     *keypairtest.CA
	secret *keypairtest.SecretDir
	logs   *observer.ObservedLogs
	pair   *keypair.Pair
}

func (f *fixture) leaf(t *testing.T) keypairtest.Leaf {
	t.Helper()
	l, err := f.ca.Issue(time.Now().Add(24 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// open lays out a Secret volume with a first pair and opens it with a
// check interval of an hour, so that only the test's Check calls run.
func open(t *testing.T) (*fixture, keypairtest.Leaf) {
	t.Helper()
	ca, err := keypairtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	f := &fixture{ca: ca, secret: &keypairtest.SecretDir{Dir: t.TempDir()}, logs: logs}
	first := f.leaf(t)
	if err := f.secret.UpdateLeaf(first); err != nil {
		t.Fatal(err)
	}
	f.pair, err = keypair.Open(keypair.Options{CertFile: filepath.Join(f.secret.Dir, "tls.crt"),
		KeyFile: filepath.Join(f.secret.Dir, "tls.key"), CheckInterval: keypair.MaxCheckInterval, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pair.Close)
	return f, first
}

func serving(t *testing.T, p *keypair.Pair, want keypairtest.Leaf) {
	t.Helper()
	c := p.Certificate()
	if c == nil || c.Leaf == nil {
		t.Fatalf("Certificate() = %v, want a parsed pair", c)
	}
	if c.Leaf.SerialNumber.Cmp(want.Serial) != 0 {
		t.Fatalf("serving serial %v, want %v", c.Leaf.SerialNumber, want.Serial)
	}
}

// A Secret update as the kubelet does it (new timestamped directory,
// "..data" renamed over) is served after the next check, with its key.
func TestKubeletSwapServesTheRenewedPair(t *testing.T) {
	f, first := open(t)
	serving(t, f.pair, first)
	if !f.pair.Stats().NotAfter.Equal(first.NotAfter) {
		t.Errorf("Stats().NotAfter = %v, want %v", f.pair.Stats().NotAfter, first.NotAfter)
	}
	for range 3 {
		next := f.leaf(t)
		if err := f.secret.UpdateLeaf(next); err != nil {
			t.Fatal(err)
		}
		f.pair.Check()
		serving(t, f.pair, next)
		// The key is the new certificate's: tls.X509KeyPair checked it;
		// a handshake uses it.
		handshake(t, f.pair.Certificate(), f.ca)
		st := f.pair.Stats()
		if !st.NotAfter.Equal(next.NotAfter) || !st.FailingSince.IsZero() || st.LastError != nil {
			t.Errorf("Stats() = %+v after a good renewal", st)
		}
	}
}

// handshake runs a TLS handshake over a pipe with cert on the server side
// and a client trusting ca.
func handshake(t *testing.T, cert *tls.Certificate, ca *keypairtest.CA) {
	t.Helper()
	a, b := netPipe()
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() {
		errc <- tls.Server(a, &tls.Config{Certificates: []tls.Certificate{*cert}}).Handshake()
	}()
	if err := tls.Client(b, &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}).Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
}

// A broken pair keeps the previous one served, is logged once without the
// key, and is reported by Stats until a good pair replaces it.
func TestBrokenPairKeepsTheLastGood(t *testing.T) {
	f, first := open(t)
	other := f.leaf(t)
	third := f.leaf(t)
	cases := []struct {
		name  string
		files map[string][]byte
		want  string
	}{
		{"key of another certificate", map[string][]byte{"tls.crt": third.CertPEM, "tls.key": other.KeyPEM}, "private key does not match"},
		{"no PEM", map[string][]byte{"tls.crt": []byte("not a certificate"), "tls.key": other.KeyPEM}, "failed to find any PEM data"},
		{"empty key", map[string][]byte{"tls.crt": third.CertPEM, "tls.key": nil}, "failed to find any PEM data"},
		{"swapped files", map[string][]byte{"tls.crt": third.KeyPEM, "tls.key": third.CertPEM}, "PEM inputs may have been switched"},
		{"oversized certificate", map[string][]byte{"tls.crt": append([]byte(strings.Repeat("#", keypair.MaxFileSize)), third.CertPEM...), "tls.key": third.KeyPEM}, "larger than 1048576 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.logs.Len()
			if err := f.secret.Update(c.files); err != nil {
				t.Fatal(err)
			}
			f.pair.Check()
			f.pair.Check() // a second check of the same files logs nothing more
			serving(t, f.pair, first)
			st := f.pair.Stats()
			if st.FailingSince.IsZero() || st.LastError == nil || !strings.Contains(st.LastError.Error(), c.want) {
				t.Errorf("Stats() = %+v, want failing with %q", st, c.want)
			}
			warns := f.logs.All()[before:]
			if len(warns) != 1 || warns[0].Level != zapcore.WarnLevel {
				t.Fatalf("logged %v, want one warning", warns)
			}
			line := warns[0].Message + " " + warns[0].ContextMap()["error"].(string)
			for _, leak := range []string{"PRIVATE KEY", keyBody(other.KeyPEM), keyBody(third.KeyPEM)} {
				if strings.Contains(line, leak) {
					t.Errorf("the warning holds key material %q: %s", leak, line)
				}
			}
		})
	}
	// A good pair again: served, the failure cleared.
	good := f.leaf(t)
	if err := f.secret.UpdateLeaf(good); err != nil {
		t.Fatal(err)
	}
	f.pair.Check()
	serving(t, f.pair, good)
	if st := f.pair.Stats(); !st.FailingSince.IsZero() || st.LastError != nil {
		t.Errorf("Stats() = %+v after a good pair", st)
	}
}

// keyBody is a line of the base64 body of a PEM key.
func keyBody(p []byte) string { return strings.Split(string(p), "\n")[1] }

// Removed files keep the last pair served; files back with a new pair are
// served.
func TestMissingFilesKeepTheLastGood(t *testing.T) {
	f, first := open(t)
	if err := os.RemoveAll(f.secret.Dir); err != nil {
		t.Fatal(err)
	}
	f.pair.Check()
	serving(t, f.pair, first)
	if st := f.pair.Stats(); st.LastError == nil || !strings.Contains(st.LastError.Error(), "no such file") {
		t.Errorf("Stats() = %+v, want a missing-file error", st)
	}
	if err := os.Mkdir(f.secret.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	next := f.leaf(t)
	if err := os.WriteFile(filepath.Join(f.secret.Dir, "tls.crt"), next.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.secret.Dir, "tls.key"), next.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	f.pair.Check()
	serving(t, f.pair, next)
}

// Plain files rewritten in place (not through symlinks) are seen too.
func TestInPlaceWriteIsSeen(t *testing.T) {
	ca, err := keypairtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	write := func(l keypairtest.Leaf) {
		if err := os.WriteFile(certFile, l.CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, l.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := ca.Issue(time.Now().Add(time.Hour))
	write(first)
	p, err := keypair.Open(keypair.Options{CertFile: certFile, KeyFile: keyFile, CheckInterval: keypair.MaxCheckInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	next, _ := ca.Issue(time.Now().Add(2 * time.Hour))
	write(next)
	p.Check()
	serving(t, p, next)
}

// Without Check calls, the periodic check serves a renewed pair.
func TestPeriodicCheckServesTheRenewedPair(t *testing.T) {
	ca, err := keypairtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	s := &keypairtest.SecretDir{Dir: t.TempDir()}
	first, _ := ca.Issue(time.Now().Add(time.Hour))
	if err := s.UpdateLeaf(first); err != nil {
		t.Fatal(err)
	}
	p, err := keypair.Open(keypair.Options{CertFile: filepath.Join(s.Dir, "tls.crt"), KeyFile: filepath.Join(s.Dir, "tls.key"),
		CheckInterval: keypair.MinCheckInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	next, _ := ca.Issue(time.Now().Add(2 * time.Hour))
	if err := s.UpdateLeaf(next); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for p.Certificate().Leaf.SerialNumber.Cmp(next.Serial) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still serving serial %v 30 s after the update", p.Certificate().Leaf.SerialNumber)
		}
		time.Sleep(10 * time.Millisecond) // polling the served pair, not waiting for it
	}
}

// Handshakes reading the pair while it is swapped always get a whole pair,
// the old or the new one (run with -race).
func TestConcurrentReadsDuringSwaps(t *testing.T) {
	f, first := open(t)
	var serials sync.Map
	serials.Store(first.Serial.String(), true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := f.pair.Certificate()
				if c == nil || c.Leaf == nil || c.PrivateKey == nil {
					errs <- "a partial pair"
					return
				}
				if _, ok := serials.Load(c.Leaf.SerialNumber.String()); !ok {
					errs <- "a serial never written: " + c.Leaf.SerialNumber.String()
					return
				}
			}
		}()
	}
	for range 20 {
		next := f.leaf(t)
		serials.Store(next.Serial.String(), true)
		if err := f.secret.UpdateLeaf(next); err != nil {
			t.Fatal(err)
		}
		f.pair.Check()
		serving(t, f.pair, next)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestOpenRefusesABadPair(t *testing.T) {
	ca, err := keypairtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ca.Issue(time.Now().Add(time.Hour))
	b, _ := ca.Issue(time.Now().Add(time.Hour))
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, a.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, b.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		o    keypair.Options
		want string
	}{
		{"mismatched key", keypair.Options{CertFile: certFile, KeyFile: keyFile}, "private key does not match"},
		{"missing file", keypair.Options{CertFile: filepath.Join(dir, "none"), KeyFile: keyFile}, "no such file"},
		{"no key file", keypair.Options{CertFile: certFile}, "are required"},
		{"interval too short", keypair.Options{CertFile: certFile, KeyFile: keyFile, CheckInterval: time.Millisecond}, "out of range"},
		{"interval too long", keypair.Options{CertFile: certFile, KeyFile: keyFile, CheckInterval: 2 * time.Hour}, "out of range"},
	}
	for _, c := range cases {
		p, err := keypair.Open(c.o)
		if err == nil {
			p.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Open = %v, want %q", c.name, err, c.want)
		}
		if strings.Contains(err.Error(), keyBody(b.KeyPEM)) {
			t.Errorf("%s: the error holds the key", c.name)
		}
	}
}

func netPipe() (a, b net.Conn) { return net.Pipe() }

// A FIFO, a directory or a device in place of a file is refused at once
// (opened non-blocking, its type checked before a byte is read): Open
// fails naming it, and a check that finds one keeps serving the last
// good pair rather than blocking the checks for ever.
func TestSpecialFilesAreRefused(t *testing.T) {
	f, first := open(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(f.secret.Dir, "tls.crt"), filepath.Join(f.secret.Dir, "tls.key")
	for _, c := range []struct{ name, cert, key string }{
		{"FIFO key", certFile, fifo},
		{"FIFO certificate", fifo, keyFile},
		{"directory key", certFile, dir},
		{"device certificate", "/dev/zero", keyFile},
	} {
		p, err := keypair.Open(keypair.Options{CertFile: c.cert, KeyFile: c.key})
		if err == nil {
			p.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		if !strings.Contains(err.Error(), "is not a regular file") {
			t.Errorf("%s: Open = %v, want a not-a-regular-file error", c.name, err)
		}
	}

	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	f.pair.Check()
	serving(t, f.pair, first)
	if st := f.pair.Stats(); st.LastError == nil || !strings.Contains(st.LastError.Error(), "is not a regular file") {
		t.Errorf("Stats() = %+v, want a not-a-regular-file error", st)
	}
}
