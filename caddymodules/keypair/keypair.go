// Package keypair holds the Caddy module tls.get_certificate.key_pair_files:
// a certificate manager (certmagic.Manager) that serves a certificate and
// key from two PEM files and re-reads them when they change, so that a
// renewed Kubernetes Secret (cert-manager's) is served without a restart
// (docs/deploy.md "Certificate renewal"). The logic is plain Go in
// gateway/keypair.
//
// Caddy's own `tls <cert> <key>` (the load_files loader) reads the files
// once, when the configuration is loaded; this module is used through the
// tls directive's get_certificate subdirective instead:
//
//	tls {
//		get_certificate key_pair_files <cert_file> <key_file> {
//			check_interval <duration>
//		}
//	}
//
// check_interval is how often both files are checked for a change with a
// stat (default 1s, between 100ms and 1h; gateway/keypair). The pair is
// served for every handshake of the sites using it, whatever name the
// client asks for (SNI). Caddy asks a certificate manager during each
// handshake that finds no certificate in its cache, through an automation
// policy with on-demand TLS enabled for the managers only: without an
// on-demand permission module Caddy never issues a certificate for such a
// policy (it logs once, at start, that on-demand TLS "can only get
// certificates from the configured external manager(s)").
//
// The running pair is kept in a caddy.UsagePool keyed by the two paths and
// the interval: the sites that import the same tls block, and the next
// configuration after a reload, share one pair and one check loop. The
// served certificate's expiry and the time reloads have been failing are
// metrics (metrics.go).
package keypair

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/certmagic"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/gateway/keypair"
)

func init() {
	caddy.RegisterModule(Files{})
}

// pool holds the running pairs across the sites that share them and across
// config reloads.
var pool = caddy.NewUsagePool()

// pooled is a running pair in the pool; Destruct stops its checks when the
// last configuration using it is cleaned up.
type pooled struct{ *keypair.Pair }

// Destruct stops the pair's checks and its metrics.
func (p pooled) Destruct() error {
	untrack(p.Pair)
	p.Close()
	return nil
}

// Files is the certificate manager tls.get_certificate.key_pair_files.
type Files struct {
	// Certificate is the PEM file of the certificate chain, leaf first
	// (a kubernetes.io/tls Secret's tls.crt). Required.
	Certificate string `json:"certificate"`
	// Key is the PEM file of the leaf's private key (tls.key). Required.
	Key string `json:"key"`
	// CheckInterval is how often the files are checked for a change;
	// default 1s, between 100ms and 1h.
	CheckInterval caddy.Duration `json:"check_interval,omitempty"`

	key  string
	pair *keypair.Pair
}

// CaddyModule returns the Caddy module information.
func (Files) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "tls.get_certificate.key_pair_files", New: func() caddy.Module { return new(Files) }}
}

// Provision opens the pair, or takes the running one from the pool. It
// fails when the files do not hold a good pair (gateway/keypair.Open: the
// error names the paths, never the contents) or the interval is out of
// range.
func (f *Files) Provision(ctx caddy.Context) error {
	f.key = fmt.Sprintf("%s\x00%s\x00%d", f.Certificate, f.Key, f.CheckInterval)
	v, _, err := pool.LoadOrNew(f.key, func() (caddy.Destructor, error) {
		p, err := keypair.Open(keypair.Options{CertFile: f.Certificate, KeyFile: f.Key,
			CheckInterval: time.Duration(f.CheckInterval), Logger: ctx.Logger()})
		if err != nil {
			return nil, err
		}
		track(p)
		return pooled{p}, nil
	})
	if err != nil {
		return fmt.Errorf("key_pair_files: %w", err)
	}
	f.pair = v.(pooled).Pair
	registerMetrics(ctx.GetMetricsRegistry())
	return nil
}

// Cleanup releases the pair; the pool stops it when no configuration uses
// it any more.
func (f *Files) Cleanup() error {
	if f.pair == nil {
		return nil
	}
	_, err := pool.Delete(f.key)
	return err
}

// GetCertificate returns the served pair for every handshake (an atomic
// load; the files are read by the pair's checks, never here).
func (f *Files) GetCertificate(context.Context, *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.pair.Certificate(), nil
}

// UnmarshalCaddyfile parses the syntax in the package comment:
//
//	key_pair_files <cert_file> <key_file> {
//		check_interval <duration>
//	}
func (f *Files) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the manager's name
	if err := argcount.Check(d, "key_pair_files", 2, 2, "<cert_file> <key_file>"); err != nil {
		return err
	}
	d.AllArgs(&f.Certificate, &f.Key)
	for d.NextBlock(0) {
		switch d.Val() {
		case "check_interval":
			if err := argcount.Check(d, "check_interval", 1, 1, "<duration>"); err != nil {
				return err
			}
			d.NextArg()
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("key_pair_files: check_interval %q: %v", d.Val(), err)
			}
			if dur < keypair.MinCheckInterval || dur > keypair.MaxCheckInterval {
				return d.Errf("key_pair_files: check_interval %s is out of range [%v, %v]", d.Val(), keypair.MinCheckInterval, keypair.MaxCheckInterval)
			}
			f.CheckInterval = caddy.Duration(dur)
		default:
			return d.Errf("key_pair_files: unknown subdirective %q", d.Val())
		}
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner     = (*Files)(nil)
	_ caddy.CleanerUpper    = (*Files)(nil)
	_ caddyfile.Unmarshaler = (*Files)(nil)
	_ certmagic.Manager     = (*Files)(nil)
)
