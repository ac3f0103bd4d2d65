package apikey

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/keypair/keypairtest"
	"github.com/sandgate/sandgate/internal/waittest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// replace writes content to a temporary file beside path and renames it
// over path, as editors and the Kubernetes Secret volume do.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".next")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func isUnknown(f *File, key string) bool {
	_, err := f.Lookup(key)
	return errors.Is(err, ErrUnknown)
}

// TestFileReloads: a key removed from the file, or whose digest changed,
// is refused within 2 s without reopening; a new key is accepted; a file
// that does not parse keeps the last good version, logs why (never a
// digest) and reports it in LastError and Stats.
func TestFileReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	lineA := "  - {name: a, sha256: " + Digest("secret-a") + ", credentialId: cred-a}"
	lineB := "  - {name: b, sha256: " + Digest("secret-b") + ", credentialId: cred-b}"
	if err := os.WriteFile(path, file(lineA, lineB), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	f, err := OpenFile(path, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	for _, k := range []string{"secret-a", "secret-b"} {
		if e, err := f.Lookup(k); err != nil || e.CredentialID != "cred-"+k[len(k)-1:] {
			t.Fatalf("Lookup(%s) = %+v, %v", k, e, err)
		}
	}
	if _, err := f.Lookup(""); !errors.Is(err, ErrMissing) {
		t.Fatalf("empty key: %v", err)
	}

	// b removed, a's key rotated to a new secret.
	opened := f.Version()
	replace(t, path, string(file("  - {name: a, sha256: "+Digest("secret-a2")+", credentialId: cred-a}")))
	// The version is counted last, after the keys are served: served below
	// is this version's number only once it is counted.
	waittest.Until(t, 2*time.Second, "the removed and the rotated key refused", func() bool {
		return f.Version() > opened && isUnknown(f, "secret-b") && isUnknown(f, "secret-a")
	})
	if e, err := f.Lookup("secret-a2"); err != nil || e.Name != "a" {
		t.Fatalf("rotated key: %+v, %v", e, err)
	}
	served := f.Version()

	// A malformed version (the digest of "secret-b" under a repeated
	// name) keeps what was served.
	bad := string(file("  - {name: a, sha256: "+Digest("secret-a2")+", credentialId: cred-a}",
		"  - {name: a, sha256: "+Digest("secret-b")+", credentialId: cred-b}"))
	replace(t, path, bad)
	waittest.Until(t, 2*time.Second, "the malformed version reported", func() bool { return f.LastError() != nil })
	if !errors.Is(f.LastError(), ErrInvalid) || f.Version() != served || f.Stats().FailingSince.IsZero() {
		t.Fatalf("after a malformed version: %v, version %d (served %d), %+v", f.LastError(), f.Version(), served, f.Stats())
	}
	if _, err := f.Lookup("secret-a2"); err != nil || !isUnknown(f, "secret-b") {
		t.Fatalf("the last good version is not served: %v", err)
	}
	warned := false
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += " " + k + "=" + strings.TrimSpace(toString(v))
		}
		if strings.Contains(line, Digest("secret-b")) || strings.Contains(line, Digest("secret-a2")) {
			t.Fatalf("a log line carries a digest: %s", line)
		}
		warned = warned || (e.Level == zapcore.WarnLevel && strings.Contains(line, "name empty or repeated"))
	}
	if !warned {
		t.Fatalf("no warning says why the version was refused: %v", logs.All())
	}

	// Fixed again: the new key works, the failure is over.
	replace(t, path, string(file("  - {name: a, sha256: "+Digest("secret-a2")+", credentialId: cred-a}", lineB)))
	// The version is counted last, after LastError is cleared (the keys
	// are served before that).
	waittest.Until(t, 2*time.Second, "the fixed file served", func() bool { return f.Version() > served && !isUnknown(f, "secret-b") })
	if f.LastError() != nil || !f.Stats().FailingSince.IsZero() {
		t.Fatalf("after the fix: %v %+v", f.LastError(), f.Stats())
	}
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}

// TestOpenFileRefusesBadFile: the first version must exist and parse.
func TestOpenFileRefusesBadFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenFile(filepath.Join(dir, "absent.yaml"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent file: %v", err)
	}
	path := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(path, []byte("keys: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(path, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("malformed file: %v", err)
	}
	big := make([]byte, MaxFileSize+10)
	for i := range big {
		big[i] = ' '
	}
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(path, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized file: %v", err)
	}
}

// TestKeyInBothVersionsNeverRefused: a key listed before and after a
// rotation's edits is never refused while the file changes under a
// reader that looks it up without pause: the rotation's steps (a new key
// beside it, then the old one removed, as an operator rotates) arrive as
// Kubernetes Secret "..data" swaps, each followed by the removal of the
// old data directory. The rotation test's API clients call at an SDK
// user's pace, a few calls in each edit's moment; this reader covers the
// moment itself.
func TestKeyInBothVersionsNeverRefused(t *testing.T) {
	dir := t.TempDir()
	entry := func(name, secret string) string {
		return "  - {name: " + name + ", sha256: " + Digest(secret) + ", credentialId: cred-" + name + "}"
	}
	versions := [][]byte{file(entry("kept", "secret-kept"), entry("old", "secret-old"))}
	for i := range 10 {
		n := strconv.Itoa(i)
		versions = append(versions, file(entry("kept", "secret-kept"), entry("old", "secret-old"), entry("new"+n, "secret-new"+n)),
			file(entry("kept", "secret-kept"), entry("new"+n, "secret-new"+n)))
	}
	secret := &keypairtest.SecretDir{Dir: dir}
	if err := secret.Update(map[string][]byte{"keys.yaml": versions[0]}); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(filepath.Join(dir, "keys.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })

	stop := make(chan struct{})
	var lookups, refused atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			lookups.Add(1)
			if _, err := f.Lookup("secret-kept"); err != nil {
				refused.Add(1)
			}
		}
	}()
	for i := 1; i < len(versions); i++ {
		if err := secret.Update(map[string][]byte{"keys.yaml": versions[i]}); err != nil {
			t.Fatal(err)
		}
		n := strconv.Itoa((i - 1) / 2)
		waittest.Until(t, 5*time.Second, "version "+strconv.Itoa(i)+" served", func() bool {
			_, err := f.Lookup("secret-new" + n)
			return err == nil && isUnknown(f, "secret-old") == (i%2 == 0)
		})
	}
	close(stop)
	<-done
	if n := refused.Load(); n != 0 {
		t.Fatalf("the key listed in every version was refused %d times in %d lookups", n, lookups.Load())
	}
	t.Logf("%d lookups across %d versions, none refused", lookups.Load(), len(versions))
}
