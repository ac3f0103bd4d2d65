package releasestore

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/node/release"
)

// writeRelease writes a release directory with the given artifact bytes
// and its manifest, and returns the directory and the manifest bytes.
func writeRelease(t *testing.T, source string, image, spec, seccomp []byte) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	files := map[release.Kind]string{release.KindImage: "image.tar", release.KindProviderSpec: "provider.json"}
	must(t, os.WriteFile(filepath.Join(dir, "image.tar"), image, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "provider.json"), spec, 0o644))
	if seccomp != nil {
		files[release.KindSeccomp] = "seccomp.json"
		must(t, os.WriteFile(filepath.Join(dir, "seccomp.json"), seccomp, 0o644))
	}
	raw, err := release.Build(source, dir, files)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, release.ManifestName), raw, 0o644))
	return dir, raw
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var spec = []byte(`{"provider": "docker", "image_ref": "sandgate-test/busybox:1"}`)

// snapshot returns every file under dir (relative path → bytes), and the
// inode of every file, to show that nothing was written.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	must(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		if rel == lockName {
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	}))
	return out
}

func TestPublishAndServe(t *testing.T) {
	s, err := OpenStore(filepath.Join(t.TempDir(), "store"))
	must(t, err)
	src, raw := writeRelease(t, "rel-1", []byte("image bytes"), spec, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`))
	res, err := s.Publish(src)
	must(t, err)
	if !res.Created || res.Source != "rel-1" || res.Digest != release.Digest(raw) || len(res.Added) != 0 {
		t.Fatalf("%+v", res)
	}
	p, err := s.Release("rel-1")
	must(t, err)
	if !bytes.Equal(p.Raw, raw) || p.Digest != release.Digest(raw) || len(p.Manifest.Artifacts) != 3 {
		t.Fatalf("%+v", p)
	}
	f, a, err := s.OpenArtifact("rel-1", "image.tar")
	must(t, err)
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "image bytes" || a.Kind != release.KindImage {
		t.Fatalf("%q %+v", b, a)
	}
	if srcs, _ := s.Sources(); !reflect.DeepEqual(srcs, []string{"rel-1"}) {
		t.Fatalf("sources %v", srcs)
	}
	// Only declared artifacts are served.
	must(t, os.WriteFile(filepath.Join(s.Dir(), "rel-1", "extra"), []byte("x"), 0o644))
	for _, name := range []string{"extra", "manifest.json", "../rel-1/image.tar", ""} {
		if _, _, err := s.OpenArtifact("rel-1", name); !errors.Is(err, release.ErrNotFound) {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, src := range []string{"rel-2", "..", ".lock", "REL-1"} {
		if _, err := s.Release(src); !errors.Is(err, release.ErrNotFound) {
			t.Errorf("release %q: %v", src, err)
		}
	}
	// No temporary directory is left behind.
	ents, _ := os.ReadDir(s.Dir())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("left %s", e.Name())
		}
	}
}

func TestRepublishIdenticalIsANoOp(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	src, _ := writeRelease(t, "rel-1", []byte("image"), spec, nil)
	_, err := s.Publish(src)
	must(t, err)
	before := snapshot(t, s.Dir())
	ino := inode(t, filepath.Join(s.Dir(), "rel-1", "image.tar"))
	res, err := s.Publish(src)
	must(t, err)
	if res.Created || len(res.Added) != 0 || len(res.Missing) != 0 {
		t.Fatalf("%+v", res)
	}
	if !reflect.DeepEqual(before, snapshot(t, s.Dir())) || inode(t, filepath.Join(s.Dir(), "rel-1", "image.tar")) != ino {
		t.Fatal("an identical re-publish changed the store")
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	must(t, err)
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestRepublishAddsOnlyMissingArtifacts(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	src, raw := writeRelease(t, "rel-1", []byte("image"), spec, []byte("seccomp"))
	_, err := s.Publish(src)
	must(t, err)
	// The seccomp profile is lost from the store (e.g. removed by hand).
	must(t, os.Remove(filepath.Join(s.Dir(), "rel-1", "seccomp.json")))
	if _, _, err := s.OpenArtifact("rel-1", "seccomp.json"); !errors.Is(err, release.ErrNotFound) {
		t.Fatalf("missing artifact: %v", err)
	}
	// A re-publish from a directory holding only the manifest adds nothing
	// and reports what is missing.
	only := t.TempDir()
	must(t, os.WriteFile(filepath.Join(only, release.ManifestName), raw, 0o644))
	res, err := s.Publish(only)
	must(t, err)
	if len(res.Added) != 0 || !reflect.DeepEqual(res.Missing, []string{"seccomp.json"}) {
		t.Fatalf("%+v", res)
	}
	imageIno := inode(t, filepath.Join(s.Dir(), "rel-1", "image.tar"))
	res, err = s.Publish(src)
	must(t, err)
	if !reflect.DeepEqual(res.Added, []string{"seccomp.json"}) || len(res.Missing) != 0 {
		t.Fatalf("%+v", res)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir(), "rel-1", "seccomp.json"))
	if err != nil || string(b) != "seccomp" {
		t.Fatalf("%q %v", b, err)
	}
	// The existing artifacts are the same files (hard links), not copies.
	if inode(t, filepath.Join(s.Dir(), "rel-1", "image.tar")) != imageIno {
		t.Fatal("the existing image was rewritten")
	}
	if _, _, err := s.OpenArtifact("rel-1", "seccomp.json"); err != nil {
		t.Fatal(err)
	}
}

func TestPublishRefusalsWriteNothing(t *testing.T) {
	type setup func(t *testing.T, s *Store) string
	published := func(t *testing.T, s *Store) {
		src, _ := writeRelease(t, "rel-1", []byte("image"), spec, []byte("seccomp"))
		_, err := s.Publish(src)
		must(t, err)
	}
	for name, tc := range map[string]struct {
		setup setup
		want  error
		text  string
	}{
		"new release, artifact bytes differ": {func(t *testing.T, s *Store) string {
			src, _ := writeRelease(t, "rel-2", []byte("image"), spec, nil)
			must(t, os.WriteFile(filepath.Join(src, "image.tar"), []byte("imagE"), 0o644))
			return src
		}, release.ErrChecksum, "SHA-256 differs"},
		"new release, artifact missing": {func(t *testing.T, s *Store) string {
			src, _ := writeRelease(t, "rel-2", []byte("image"), spec, []byte("sec"))
			must(t, os.Remove(filepath.Join(src, "seccomp.json")))
			return src
		}, release.ErrChecksum, "missing from the source directory"},
		"new release, artifact longer": {func(t *testing.T, s *Store) string {
			src, _ := writeRelease(t, "rel-2", []byte("image"), spec, nil)
			must(t, os.WriteFile(filepath.Join(src, "image.tar"), []byte("image+"), 0o644))
			return src
		}, release.ErrChecksum, "size differs"},
		"malformed manifest": {func(t *testing.T, s *Store) string {
			src := t.TempDir()
			must(t, os.WriteFile(filepath.Join(src, release.ManifestName), []byte(`{"schema": 1}`), 0o644))
			return src
		}, release.ErrInvalid, "missing member"},
		"no manifest": {func(t *testing.T, s *Store) string { return t.TempDir() }, os.ErrNotExist, "manifest.json"},
		"re-publish with another manifest": {func(t *testing.T, s *Store) string {
			published(t, s)
			src, _ := writeRelease(t, "rel-1", []byte("other image"), spec, []byte("seccomp"))
			return src
		}, release.ErrConflict, "manifest differs"},
		"re-publish, stored artifact damaged": {func(t *testing.T, s *Store) string {
			published(t, s)
			// Remove the seccomp profile (so there is something to add)
			// and damage the image: nothing may be added.
			must(t, os.Remove(filepath.Join(s.Dir(), "rel-1", "seccomp.json")))
			must(t, os.WriteFile(filepath.Join(s.Dir(), "rel-1", "image.tar"), []byte("IMAGE"), 0o644))
			src, _ := writeRelease(t, "rel-1", []byte("image"), spec, []byte("seccomp"))
			return src
		}, release.ErrConflict, "stored artifact image.tar does not match"},
		"re-publish, source artifact differs": {func(t *testing.T, s *Store) string {
			published(t, s)
			must(t, os.Remove(filepath.Join(s.Dir(), "rel-1", "seccomp.json")))
			src, _ := writeRelease(t, "rel-1", []byte("image"), spec, []byte("seccomp"))
			must(t, os.WriteFile(filepath.Join(src, "image.tar"), []byte("imagE"), 0o644))
			return src
		}, release.ErrChecksum, "image.tar: SHA-256 differs"},
		"re-publish, the artifact to add differs": {func(t *testing.T, s *Store) string {
			published(t, s)
			must(t, os.Remove(filepath.Join(s.Dir(), "rel-1", "seccomp.json")))
			src, _ := writeRelease(t, "rel-1", []byte("image"), spec, []byte("seccomp"))
			must(t, os.WriteFile(filepath.Join(src, "seccomp.json"), []byte("seccomP"), 0o644))
			return src
		}, release.ErrChecksum, "seccomp.json: SHA-256 differs"},
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := OpenStore(t.TempDir())
			src := tc.setup(t, s)
			before := snapshot(t, s.Dir())
			_, err := s.Publish(src)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v, want %v with %q", err, tc.want, tc.text)
			}
			if after := snapshot(t, s.Dir()); !reflect.DeepEqual(before, after) {
				t.Fatalf("the refused publish changed the store:\nbefore %v\nafter  %v", keys(before), keys(after))
			}
		})
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestStaleTemporaryDirectoriesAreRemoved(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	stale := filepath.Join(s.Dir(), tempPrefix+"deadbeef")
	must(t, os.Mkdir(stale, 0o755))
	must(t, os.WriteFile(filepath.Join(stale, "image.tar"), []byte("half"), 0o644))
	src, _ := writeRelease(t, "rel-1", []byte("image"), spec, nil)
	_, err := s.Publish(src)
	must(t, err)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temporary directory kept: %v", err)
	}
}

func TestOpenArtifactDamagedSize(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	src, _ := writeRelease(t, "rel-1", []byte("image"), spec, nil)
	_, err := s.Publish(src)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(s.Dir(), "rel-1", "image.tar"), []byte("imag"), 0o644))
	if _, _, err := s.OpenArtifact("rel-1", "image.tar"); !errors.Is(err, release.ErrChecksum) {
		t.Fatalf("%v", err)
	}
	// A symlink in place of an artifact is not followed.
	p := filepath.Join(s.Dir(), "rel-1", "image.tar")
	must(t, os.Remove(p))
	must(t, os.Symlink("/etc/passwd", p))
	if _, _, err := s.OpenArtifact("rel-1", "image.tar"); err == nil {
		t.Fatal("a symlinked artifact was opened")
	}
}

func TestConcurrentPublishOfOneRelease(t *testing.T) {
	dir := t.TempDir()
	src, _ := writeRelease(t, "rel-1", bytes.Repeat([]byte("i"), 1<<20), spec, nil)
	errs := make(chan error, 4)
	created := make(chan bool, 4)
	for range 4 {
		go func() {
			s, err := OpenStore(dir) // separate Store values, like separate processes
			if err == nil {
				var res *PublishResult
				res, err = s.Publish(src)
				if err == nil {
					created <- res.Created
				}
			}
			errs <- err
		}()
	}
	n := 0
	for range 4 {
		must(t, <-errs)
	}
	close(created)
	for c := range created {
		if c {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d publishes created the release", n)
	}
}
