// Package keypair serves a TLS certificate and its private key from two PEM
// files and re-reads them when they change, so that a renewed certificate
// is served without restarting the process: the gateway's edge certificate,
// the Kubernetes Secret sandgate-edge-tls that cert-manager renews
// (docs/deploy.md "Certificate renewal").
//
// A Pair checks the two files every CheckInterval with a stat of each
// (following symbolic links): only when a file's identity (device, inode,
// size, modification time) differs from the last pair it read does it read
// both files (at most MaxFileSize each), parse them and publish the result.
// Handshakes never read or parse files: Certificate is an atomic load of the
// published pair. This sees every way a pair is replaced:
//   - Kubernetes updates a mounted Secret atomically: it writes the new
//     files into a new timestamped directory and renames a "..data" symlink
//     over the old one; tls.crt and tls.key are symlinks through "..data",
//     so both resolve to new inodes at the same instant;
//   - a rename over the file, or a write in place (a new size or
//     modification time).
//
// A pair that cannot be read or parsed (a missing file, a file over
// MaxFileSize, a path that is not a regular file such as a FIFO or a
// directory, PEM that is not a certificate, a key that does not match the
// certificate) keeps the last good pair served: the failure is logged once
// per version of the files, with the paths and the reason but never the
// files' contents, and Stats reports since when reloads have been failing.
// A read that raced a replacement (the files' identities changed while they
// were read, or a file vanished between the stat and the read) is not a
// failure: the next check reads the new files.
//
// The first read happens in Open, which fails when that pair is not good: a
// gateway does not start without a certificate to serve.
package keypair

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

const (
	// MaxFileSize is the largest certificate or key file read, in bytes
	// (1 MiB: a certificate chain of a few certificates is a few KiB). A
	// larger file is refused with an error naming the limit, after reading
	// at most MaxFileSize+1 bytes of it.
	MaxFileSize = 1 << 20
	// DefaultCheckInterval is how often the files are checked for a
	// change when Options.CheckInterval is 0. Kubernetes itself updates a
	// mounted Secret a minute or two after the Secret changed (the
	// kubelet's sync period and cache), so a second adds little to that,
	// and costs two stat calls.
	DefaultCheckInterval = time.Second
	// MinCheckInterval and MaxCheckInterval bound Options.CheckInterval.
	MinCheckInterval = 100 * time.Millisecond
	// MaxCheckInterval is the longest check interval: a renewed
	// certificate is served at most this long after its files changed.
	MaxCheckInterval = time.Hour
)

// Options are the settings of Open.
type Options struct {
	// CertFile is the PEM file of the certificate chain, leaf first
	// (tls.crt of a kubernetes.io/tls Secret). Required.
	CertFile string
	// KeyFile is the PEM file of the leaf's private key (tls.key).
	// Required.
	KeyFile string
	// CheckInterval is how often the files are checked for a change;
	// 0 means DefaultCheckInterval. Between MinCheckInterval and
	// MaxCheckInterval.
	CheckInterval time.Duration
	// Logger receives an info line per pair loaded (paths, subject, DNS
	// names, serial number, expiry, SHA-256 fingerprint) and a warning per
	// version of the files that fails to load (paths and reason); never
	// the files' contents. nil means no logging.
	Logger *zap.Logger
}

// Stats is the state of a Pair, for metrics.
type Stats struct {
	// CertFile and KeyFile are the watched paths, as configured.
	CertFile, KeyFile string
	// NotAfter is the expiry of the served certificate (the leaf's).
	NotAfter time.Time
	// LastLoad is when the served pair was read.
	LastLoad time.Time
	// FailingSince is when the files on disk first failed to load since
	// the served pair was read; zero while what is on disk is what is
	// served.
	FailingSince time.Time
	// LastError is why the files on disk failed to load; nil when
	// FailingSince is zero.
	LastError error
}

// Pair is a certificate and key pair served from two files. Create it with
// Open; Close stops its checks. Its methods are safe for concurrent use.
type Pair struct {
	opts   Options
	logger *zap.Logger
	cert   atomic.Pointer[tls.Certificate]

	// mu serialises checks and guards the fields below.
	mu           sync.Mutex
	seen         identity // of the files last read, good or not
	digest       [sha256.Size]byte
	lastLoad     time.Time
	failingSince time.Time
	lastErr      error

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Open reads the pair (an error if it is not good: a missing or unreadable
// file, a file over MaxFileSize, a path that is not a regular file, no certificate or key, a key that does not
// match the certificate; the error names the paths, never the contents)
// and then checks the files every o.CheckInterval until Close. Errors also
// for a missing path or a CheckInterval out of range.
func Open(o Options) (*Pair, error) {
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("keypair: a certificate file and a key file are required")
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.CheckInterval < MinCheckInterval || o.CheckInterval > MaxCheckInterval {
		return nil, fmt.Errorf("keypair: check interval %v is out of range [%v, %v]", o.CheckInterval, MinCheckInterval, MaxCheckInterval)
	}
	logger := o.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	p := &Pair{opts: o, logger: logger, stop: make(chan struct{}), done: make(chan struct{})}
	id, err := p.statBoth()
	if err != nil {
		return nil, err
	}
	cert, digest, after, err := p.read()
	if err != nil {
		return nil, err
	}
	if after != id {
		// Replaced while read: read once more, the replacement being done.
		id = after
		if cert, digest, after, err = p.read(); err != nil {
			return nil, err
		}
		if after != id {
			return nil, fmt.Errorf("keypair: %s and %s kept changing while being read", o.CertFile, o.KeyFile)
		}
	}
	p.publish(cert, digest, id, time.Now())
	go p.run()
	return p, nil
}

// Certificate returns the served pair, with its Leaf parsed; never nil
// after Open succeeded. It reads no file (an atomic load), so it can be
// called on every TLS handshake. The returned value must not be modified.
func (p *Pair) Certificate() *tls.Certificate { return p.cert.Load() }

// Stats returns the pair's current state.
func (p *Pair) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{CertFile: p.opts.CertFile, KeyFile: p.opts.KeyFile, NotAfter: p.cert.Load().Leaf.NotAfter,
		LastLoad: p.lastLoad, FailingSince: p.failingSince, LastError: p.lastErr}
}

// Close stops the checks and waits for a running one to end. The last
// pair stays served by Certificate. Close is idempotent.
func (p *Pair) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

func (p *Pair) run() {
	defer close(p.done)
	t := time.NewTicker(p.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.Check()
		}
	}
}

// Check checks the files once, as the periodic check does: when either
// file's identity changed since the last read, it reads and parses both and
// serves the new pair if it is good, else keeps the served one and records
// (and logs, once per version) why. Exported so that a caller (a test, a
// signal handler) need not wait for the next tick.
func (p *Pair) Check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, err := p.statBoth()
	if err != nil {
		// A file that cannot be stat'ed (removed, or its directory): the
		// Kubernetes swap never makes one missing. Reported once per state.
		if id != p.seen || p.lastErr == nil {
			p.fail(id, err)
		}
		return
	}
	if id == p.seen {
		return
	}
	cert, digest, after, err := p.read()
	if after != id || errors.Is(err, errTransient) {
		return // raced a replacement: the next check reads it whole
	}
	if err != nil {
		p.fail(id, err)
		return
	}
	if digest == p.digest {
		// Same bytes under a new identity (touched, or rewritten as it
		// was): nothing to serve anew.
		p.seen = id
		p.clearFailure()
		return
	}
	p.publish(cert, digest, id, time.Now())
}

// errTransient marks a read that raced a replacement of the files.
var errTransient = errors.New("the files changed while being read")

func (p *Pair) fail(id identity, err error) {
	p.seen = id
	if p.failingSince.IsZero() {
		p.failingSince = time.Now()
	}
	p.lastErr = err
	p.logger.Warn("the TLS certificate files failed to load; the previous certificate is still served",
		zap.String("cert_file", p.opts.CertFile), zap.String("key_file", p.opts.KeyFile),
		zap.Time("served_not_after", p.cert.Load().Leaf.NotAfter), zap.Error(err))
}

func (p *Pair) clearFailure() {
	p.failingSince, p.lastErr = time.Time{}, nil
}

func (p *Pair) publish(cert *tls.Certificate, digest [sha256.Size]byte, id identity, now time.Time) {
	p.cert.Store(cert)
	p.seen, p.digest, p.lastLoad = id, digest, now
	p.clearFailure()
	leaf := cert.Leaf
	fp := sha256.Sum256(leaf.Raw)
	p.logger.Info("TLS certificate loaded",
		zap.String("cert_file", p.opts.CertFile), zap.String("key_file", p.opts.KeyFile),
		zap.String("subject", leaf.Subject.String()), zap.Strings("dns_names", leaf.DNSNames),
		zap.String("serial", leaf.SerialNumber.String()), zap.Time("not_after", leaf.NotAfter),
		zap.String("sha256", hex.EncodeToString(fp[:])))
}

// fileID tells whether a file may have changed: two stats of an unchanged
// file give equal fileIDs; a file replaced by a rename (the Kubernetes
// "..data" swap included) has a new inode, one written in place a new size
// or modification time.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    int64 // Unix nanoseconds
}

// identity is the pair's: both files' fileIDs (zero for a file whose stat
// failed).
type identity struct{ cert, key fileID }

func stat(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino //nolint:unconvert // Dev's type varies by platform
	}
	return id, nil
}

// statBoth stats both files (following symbolic links).
func (p *Pair) statBoth() (identity, error) {
	var id identity
	var err error
	if id.cert, err = stat(p.opts.CertFile); err != nil {
		return id, fmt.Errorf("keypair: certificate file: %w", err)
	}
	if id.key, err = stat(p.opts.KeyFile); err != nil {
		return id, fmt.Errorf("keypair: key file: %w", err)
	}
	return id, nil
}

// read reads and parses both files and stats them again afterwards (after
// is their identity then, zero where a stat failed). A file that vanished
// during the read is errTransient.
func (p *Pair) read() (cert *tls.Certificate, digest [sha256.Size]byte, after identity, err error) {
	certPEM, err := readFile(p.opts.CertFile, "certificate file")
	if err == nil {
		var keyPEM []byte
		if keyPEM, err = readFile(p.opts.KeyFile, "key file"); err == nil {
			h := sha256.New()
			h.Write(certPEM)
			h.Write([]byte{0})
			h.Write(keyPEM)
			h.Sum(digest[:0])
			var c tls.Certificate
			if c, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
				err = fmt.Errorf("keypair: %s and %s: %w", p.opts.CertFile, p.opts.KeyFile, err)
			} else {
				cert = &c
			}
			clear(keyPEM)
		}
	}
	after, statErr := p.statBoth()
	if err != nil && errors.Is(err, os.ErrNotExist) && statErr == nil {
		// Gone while being read, yet there now: replaced.
		err = errors.Join(errTransient, err)
	}
	return cert, digest, after, err
}

// readFile reads at most MaxFileSize bytes of path; a larger file is an
// error naming the limit. path must name (through symbolic links) a
// regular file: it is opened non-blocking and checked before it is read,
// so a FIFO, device or directory put in its place is an error rather
// than a check that blocks for ever or reads without end.
func readFile(path, what string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("keypair: %s: %w", what, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("keypair: %s %s: %w", what, path, err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("keypair: %s %s is not a regular file (%v)", what, path, fi.Mode().Type())
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("keypair: %s %s: %w", what, path, err)
	}
	if n > MaxFileSize {
		return nil, fmt.Errorf("keypair: %s %s is larger than %d bytes", what, path, MaxFileSize)
	}
	return buf.Bytes(), nil
}
