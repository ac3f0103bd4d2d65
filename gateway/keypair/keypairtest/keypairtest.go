// Package keypairtest makes certificates and updates a directory the way
// the kubelet updates a mounted Secret, for the tests of package keypair
// and of the gateway that serves its pair.
package keypairtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA is a certificate authority that signs server certificates for tests.
type CA struct {
	// Cert is the CA's certificate; Pool trusts it alone.
	Cert *x509.Certificate
	// PEM is Cert in PEM, for a client's trust file (NODE_EXTRA_CA_CERTS).
	PEM  []byte
	Pool *x509.CertPool
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

// NewCA makes a CA valid from an hour ago for a day. Errors come from key
// generation or signing.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "sandgate test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Pool: pool, key: key}, nil
}

// Leaf is a server certificate and its key, in PEM (a kubernetes.io/tls
// Secret's tls.crt and tls.key).
type Leaf struct {
	CertPEM, KeyPEM []byte
	// Serial is the certificate's serial number, unique in the process:
	// what a test compares to tell two certificates apart.
	Serial *big.Int
	// NotAfter is the certificate's expiry.
	NotAfter time.Time
}

// Issue signs a certificate for localhost and 127.0.0.1 with a new P-256
// key, valid from an hour ago until notAfter.
func (ca *CA) Issue(notAfter time.Time) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	sn := big.NewInt(serial.Add(1))
	tmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter.Truncate(time.Second),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Leaf{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), Serial: sn, NotAfter: tmpl.NotAfter}, nil
}

// SecretDir is a directory laid out and updated as the kubelet lays out and
// updates a Secret volume (Kubernetes' AtomicWriter): the files live in a
// timestamped directory "..<time>", the symlink "..data" points at it, and
// each file name is a symlink "<name> -> ..data/<name>".
type SecretDir struct {
	// Dir is the mount point.
	Dir string
	n   int
}

// Update writes files (name → content) as the kubelet does: into a new
// timestamped directory, then a symlink "..data_tmp" to it renamed over
// "..data" (the one atomic step: every name resolves to the old files
// before it and to the new ones after it), then the per-name symlinks that
// are missing, then the old directory is removed.
func (s *SecretDir) Update(files map[string][]byte) error {
	s.n++
	ts := fmt.Sprintf("..%s.%d", time.Now().UTC().Format("2006_01_02_15_04_05"), s.n)
	if err := os.Mkdir(filepath.Join(s.Dir, ts), 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, ts, name), b, 0o644); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(s.Dir, "..data"))
	tmp := filepath.Join(s.Dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "..data")); err != nil {
		return err
	}
	for name := range files {
		link := filepath.Join(s.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(s.Dir, old))
	}
	return nil
}

// UpdateLeaf writes l as tls.crt and tls.key.
func (s *SecretDir) UpdateLeaf(l Leaf) error {
	return s.Update(map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM})
}
