package keypair

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/gateway/keypair/keypairtest"
)

func newCtx(t *testing.T) caddy.Context {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	return ctx
}

func secretDir(t *testing.T) (*keypairtest.SecretDir, keypairtest.Leaf, keypairtest.Leaf) {
	t.Helper()
	ca, err := keypairtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	a, err := ca.Issue(time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.Issue(time.Now().Add(2 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	s := &keypairtest.SecretDir{Dir: t.TempDir()}
	if err := s.UpdateLeaf(a); err != nil {
		t.Fatal(err)
	}
	return s, a, b
}

// Two managers of the same files (two sites importing one tls block, or
// the next configuration after a reload) share one running pair; it is
// stopped when the last one is cleaned up.
func TestManagersShareOnePair(t *testing.T) {
	s, a, _ := secretDir(t)
	cert, key := filepath.Join(s.Dir, "tls.crt"), filepath.Join(s.Dir, "tls.key")
	f1 := &Files{Certificate: cert, Key: key}
	f2 := &Files{Certificate: cert, Key: key}
	for _, f := range []*Files{f1, f2} {
		if err := f.Provision(newCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if f1.pair != f2.pair {
		t.Fatal("two managers of the same files run two pairs")
	}
	got, err := f1.GetCertificate(context.Background(), nil)
	if err != nil || got.Leaf.SerialNumber.Cmp(a.Serial) != 0 {
		t.Fatalf("GetCertificate = %v, %v; want serial %v", got, err, a.Serial)
	}
	if err := f1.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, ok := pool.References(f2.key); !ok {
		t.Fatal("the pair left the pool while a manager still uses it")
	}
	if err := f2.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, ok := pool.References(f2.key); ok {
		t.Fatal("the pair stayed in the pool after the last manager was cleaned up")
	}
}

// The metrics: one series per certificate file, even when two pairs
// (different intervals) read it; the expiry of the served certificate.
func TestMetrics(t *testing.T) {
	s, a, _ := secretDir(t)
	cert, key := filepath.Join(s.Dir, "tls.crt"), filepath.Join(s.Dir, "tls.key")
	reg := prometheus.NewRegistry()
	for _, iv := range []time.Duration{time.Second, 2 * time.Second} {
		f := &Files{Certificate: cert, Key: key, CheckInterval: caddy.Duration(iv)}
		if err := f.Provision(newCtx(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Cleanup() })
	}
	registerMetrics(reg)
	registerMetrics(reg) // a reload registers again
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() != cert {
				continue
			}
			if _, dup := found[mf.GetName()]; dup {
				t.Errorf("%s has two series for %s", mf.GetName(), cert)
			}
			found[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	if got := found["sandgate_tls_certificate_not_after_timestamp_seconds"]; got != float64(a.NotAfter.Unix()) {
		t.Errorf("not_after = %v, want %d", got, a.NotAfter.Unix())
	}
	if got, ok := found["sandgate_tls_certificate_stale_seconds"]; !ok || got != 0 {
		t.Errorf("stale_seconds = %v (present %t), want 0", got, ok)
	}
}

// A bad pair fails Provision with the paths and the reason, never the key.
func TestProvisionRefusesABadPair(t *testing.T) {
	s, a, b := secretDir(t)
	if err := s.Update(map[string][]byte{"tls.crt": a.CertPEM, "tls.key": b.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	f := &Files{Certificate: filepath.Join(s.Dir, "tls.crt"), Key: filepath.Join(s.Dir, "tls.key")}
	err := f.Provision(newCtx(t))
	if err == nil {
		_ = f.Cleanup()
		t.Fatal("Provision succeeded with a key of another certificate")
	}
	msg := err.Error()
	if !strings.Contains(msg, "key_pair_files") || !strings.Contains(msg, "private key does not match") ||
		!strings.Contains(msg, f.Key) || strings.Contains(msg, strings.Split(string(b.KeyPEM), "\n")[1]) {
		t.Errorf("Provision = %q", msg)
	}
	if _, ok := pool.References(f.key); ok {
		t.Error("a failed pair stayed in the pool")
	}
}
