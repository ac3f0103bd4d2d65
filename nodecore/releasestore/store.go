// Package releasestore is Core's immutable release store (spec
// node-protocol.md "Exact-match new installation"): a directory of
// published releases, each its manifest.json (package node/release, the
// format both ends speak) and the artifact files it declares. The gateway
// publishes into it (caddy sandgate-release, the admin routes) and serves
// it over the machine API; nodes never import it.
//
// The reference is docs/node-machine-api.md.
package releasestore

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/node/release"
)

// Store is the gateway's release store: a directory holding one
// subdirectory per published release, <dir>/<source>/manifest.json and the
// artifact files it declares. Published bytes are never changed: Publish
// only creates a release or adds declared artifacts that are missing, and
// refuses anything else (spec "Exact-match new installation": "nothing is
// overwritten"). Its methods are safe for concurrent use, and several
// processes may publish into one store (they serialise on a lock file).
type Store struct {
	dir string

	mu    sync.Mutex
	cache map[string]*Published // manifests read so far; immutable once published
}

// Published is a release as the store holds it.
type Published struct {
	// Manifest is the parsed manifest.
	Manifest *release.Manifest
	// Raw is manifest.json's exact bytes.
	Raw []byte
	// Digest is the specification digest (Digest(Raw)).
	Digest string
}

// lockName and tempPrefix are the store's own entries; neither is a valid
// source name, so no release can collide with them.
const (
	lockName   = ".lock"
	tempPrefix = ".tmp-"
)

// OpenStore opens the release store at dir, creating the directory (mode
// 0755) when it does not exist. Errors: dir is not a directory, or the os
// error.
func OpenStore(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("release store: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("release store: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("release store: %s is not a directory", abs)
	}
	return &Store{dir: abs, cache: map[string]*Published{}}, nil
}

// Dir returns the store's absolute directory.
func (s *Store) Dir() string { return s.dir }

// Release returns the published release source. Errors: ErrNotFound
// (wrapped, with the source) when the store has no such release or source
// is not a valid source name; ErrInvalid when the stored manifest is
// malformed or names another source; the os error otherwise. A release,
// once read, is served from memory (it cannot change).
func (s *Store) Release(source string) (*Published, error) {
	if !release.IsSource(source) {
		return nil, fmt.Errorf("%w: release %q", release.ErrNotFound, source)
	}
	s.mu.Lock()
	p := s.cache[source]
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	raw, err := readLimited(filepath.Join(s.dir, source, release.ManifestName), release.MaxManifestSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: release %q", release.ErrNotFound, source)
	}
	if err != nil {
		return nil, fmt.Errorf("release %q: %w", source, err)
	}
	m, err := release.ParseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("release %q: stored manifest: %w", source, err)
	}
	if m.Source != source {
		return nil, fmt.Errorf("%w: release %q: the stored manifest names another source", release.ErrInvalid, source)
	}
	p = &Published{Manifest: m, Raw: raw, Digest: release.Digest(raw)}
	s.mu.Lock()
	s.cache[source] = p
	s.mu.Unlock()
	return p, nil
}

// OpenArtifact opens the artifact name of release source for reading and
// returns it with its declaration. Only artifacts the manifest declares
// are served. Errors: ErrNotFound when the release does not exist, does
// not declare name, or the declared file is missing; ErrChecksum when the
// file's size is not the declared size (a damaged store); the os error
// otherwise. The caller closes the file.
func (s *Store) OpenArtifact(source, name string) (*os.File, release.Artifact, error) {
	p, err := s.Release(source)
	if err != nil {
		return nil, release.Artifact{}, err
	}
	a, ok := p.Manifest.Artifact(name)
	if !ok {
		return nil, release.Artifact{}, fmt.Errorf("%w: release %q declares no artifact %q", release.ErrNotFound, source, name)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, source, name), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, release.Artifact{}, fmt.Errorf("%w: release %q: artifact %q is missing from the store", release.ErrNotFound, source, name)
	}
	if err != nil {
		return nil, release.Artifact{}, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != a.Size {
		f.Close()
		if err != nil {
			return nil, release.Artifact{}, err
		}
		return nil, release.Artifact{}, fmt.Errorf("%w: release %q: stored artifact %q is not a regular file of the declared size", release.ErrChecksum, source, name)
	}
	return f, a, nil
}

// Sources returns the names of the published releases, sorted.
func (s *Store) Sources() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && release.IsSource(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// PublishResult says what Publish did.
type PublishResult struct {
	// Source is the release's source name.
	Source string
	// Digest is its specification digest.
	Digest string
	// Created: the release did not exist and was published whole.
	Created bool
	// Added are the artifacts added to an existing release.
	Added []string
	// Missing are declared artifacts that neither the store nor the
	// source directory holds (a re-publish may add them later).
	Missing []string
}

// Publish publishes the release in srcDir: srcDir/manifest.json and the
// artifact files it declares.
//
// A new release must be complete: every declared artifact is copied
// while its size and SHA-256 are checked, into a temporary directory of
// the store that is fsync'd and then renamed into place (never over an
// existing directory); the store directory is fsync'd after.
//
// An existing release is re-published: the stored manifest must equal
// srcDir's byte for byte, and every declared artifact the store holds is
// read and checked against the manifest, and every declared artifact in
// srcDir too; only then are the declared artifacts the store lacks and
// srcDir holds added, all at once (a new directory of hard links to the
// existing files plus the new ones replaces the old one with one
// renameat2(RENAME_EXCHANGE)). Any conflict adds nothing.
//
// Errors (nothing is written to the store on any of them):
// ErrInvalid (malformed manifest, or an undeclared source name);
// ErrChecksum (a file of srcDir has other bytes than declared, or a
// declared artifact is missing from srcDir for a new release); ErrConflict
// (the stored manifest differs, or a stored artifact's bytes do not match
// the manifest); the os error.
func (s *Store) Publish(srcDir string) (*PublishResult, error) {
	raw, err := readLimited(filepath.Join(srcDir, release.ManifestName), release.MaxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", release.ManifestName, err)
	}
	m, err := release.ParseManifest(raw)
	if err != nil {
		return nil, err
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.removeStaleTemps()
	res := &PublishResult{Source: m.Source, Digest: release.Digest(raw)}
	dst := filepath.Join(s.dir, m.Source)
	if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
		if err := s.create(srcDir, dst, raw, m); err != nil {
			return nil, err
		}
		res.Created = true
		return res, nil
	} else if err != nil {
		return nil, err
	}
	added, missing, err := s.republish(srcDir, dst, raw, m)
	if err != nil {
		return nil, err
	}
	res.Added, res.Missing = added, missing
	return res, nil
}

// create publishes a new release.
func (s *Store) create(srcDir, dst string, raw []byte, m *release.Manifest) error {
	tmp, err := s.tempDir()
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	for _, a := range m.Artifacts {
		if err := copyVerified(filepath.Join(srcDir, a.Name), filepath.Join(tmp, a.Name), a); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w: %s: declared artifact missing from the source directory", release.ErrChecksum, a.Name)
			}
			return err
		}
	}
	if err := writeSynced(filepath.Join(tmp, release.ManifestName), raw); err != nil {
		return err
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: release %q appeared while publishing", release.ErrConflict, m.Source)
		}
		return fmt.Errorf("publishing %q: %w", m.Source, err)
	}
	ok = true
	return syncDir(s.dir)
}

// republish verifies an existing release and adds missing artifacts.
func (s *Store) republish(srcDir, dst string, raw []byte, m *release.Manifest) (added, missing []string, err error) {
	stored, err := readLimited(filepath.Join(dst, release.ManifestName), release.MaxManifestSize)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: release %q: reading the stored manifest: %v", release.ErrConflict, m.Source, err)
	}
	if !bytes.Equal(stored, raw) {
		return nil, nil, fmt.Errorf("%w: release %q: the manifest differs from the published one", release.ErrConflict, m.Source)
	}
	var toAdd, present []release.Artifact
	for _, a := range m.Artifacts {
		err := verifyFile(filepath.Join(dst, a.Name), a)
		switch {
		case err == nil:
			present = append(present, a)
		case errors.Is(err, fs.ErrNotExist):
			toAdd = append(toAdd, a)
		case errors.Is(err, release.ErrChecksum):
			return nil, nil, fmt.Errorf("%w: release %q: stored artifact %s does not match the manifest", release.ErrConflict, m.Source, a.Name)
		default:
			return nil, nil, err
		}
		// Every declared file of the source directory must match too:
		// a re-publish with other bytes is a conflict even when the store
		// already has the artifact.
		if err := verifyFile(filepath.Join(srcDir, a.Name), a); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
	}
	var adding []release.Artifact
	for _, a := range toAdd {
		if _, err := os.Stat(filepath.Join(srcDir, a.Name)); err == nil {
			adding = append(adding, a)
		} else {
			missing = append(missing, a.Name)
		}
	}
	if len(adding) == 0 {
		return nil, missing, nil
	}
	tmp, err := s.tempDir()
	if err != nil {
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	for _, a := range present {
		if err := os.Link(filepath.Join(dst, a.Name), filepath.Join(tmp, a.Name)); err != nil {
			return nil, nil, err
		}
	}
	if err := os.Link(filepath.Join(dst, release.ManifestName), filepath.Join(tmp, release.ManifestName)); err != nil {
		return nil, nil, err
	}
	for _, a := range adding {
		if err := copyVerified(filepath.Join(srcDir, a.Name), filepath.Join(tmp, a.Name), a); err != nil {
			return nil, nil, err
		}
		added = append(added, a.Name)
	}
	if err := syncDir(tmp); err != nil {
		return nil, nil, err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE); err != nil {
		return nil, nil, fmt.Errorf("publishing %q: %w", m.Source, err)
	}
	ok = true
	// tmp now holds the previous directory: hard links only.
	_ = os.RemoveAll(tmp)
	return added, missing, syncDir(s.dir)
}

// lock takes the store's exclusive lock file.
func (s *Store) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, lockName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("release store lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("release store lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// removeStaleTemps removes temporary directories of interrupted publishes;
// the lock is held.
func (s *Store) removeStaleTemps() {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			_ = os.RemoveAll(filepath.Join(s.dir, e.Name()))
		}
	}
}

func (s *Store) tempDir() (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	p := filepath.Join(s.dir, tempPrefix+hex.EncodeToString(b[:]))
	if err := os.Mkdir(p, 0o755); err != nil {
		return "", err
	}
	return p, nil
}

// copyVerified copies src to dst (created exclusively, mode 0644) while
// checking its size and SHA-256 against a, and fsyncs dst. On a mismatch
// dst is removed and the error wraps ErrChecksum.
func copyVerified(src, dst string, a release.Artifact) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", release.ErrChecksum, a.Name)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = a.Verify(io.TeeReader(in, out))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

// verifyFile checks the file at p against a. Errors: fs.ErrNotExist,
// ErrChecksum (also for a non-regular file), or the read error.
func verifyFile(p string, a release.Artifact) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", release.ErrChecksum, a.Name)
	}
	return a.Verify(f)
}

// writeSynced writes b to a new file p (mode 0644) and fsyncs it.
func writeSynced(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(p string) error {
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readLimited reads the regular file p, refusing one over limit bytes
// (ErrInvalid) without reading past limit+1 bytes.
func readLimited(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", release.ErrInvalid, filepath.Base(p), limit)
	}
	return b, nil
}
