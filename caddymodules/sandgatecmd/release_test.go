package sandgatecmd

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/node/release"
)

// caddyBinary returns the built gateway (make build).
func caddyBinary(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", "caddy"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make build` first (make test does): %v", bin, err)
	}
	return bin
}

func runCaddy(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(caddyBinary(t), args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// treeOf returns every file under dir with its bytes.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && fi.Name() != ".lock" {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

// TestBinaryReleasePublish drives `bin/caddy sandgate-release` as an
// operator would: write a manifest, publish, re-publish identical, a
// conflicting re-publish (refused, exit 1, nothing added), and the repair
// of a lost artifact.
func TestBinaryReleasePublish(t *testing.T) {
	base := t.TempDir()
	rel, store := filepath.Join(base, "rel"), filepath.Join(base, "store")
	if err := os.Mkdir(rel, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(rel, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("image.tar", "image bytes")
	write("seccomp.json", `{"defaultAction": "SCMP_ACT_ALLOW"}`)
	write("provider.json", `{"provider": "docker", "image_ref": "sandgate-test/busybox:1"}`)

	out, errOut, code := runCaddy(t, "sandgate-release", "manifest", "--source", "busybox-1", "--image", "image.tar",
		"--provider-spec", "provider.json", "--seccomp", "seccomp.json", rel)
	if code != 0 {
		t.Fatalf("manifest: exit %d: %s", code, errOut)
	}
	raw, err := os.ReadFile(filepath.Join(rel, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	digest := release.Digest(raw)
	if !strings.Contains(out, "specification digest "+digest) {
		t.Fatalf("manifest output %q lacks the digest %s", out, digest)
	}
	// A second manifest run refuses to replace the manifest.
	if _, _, code := runCaddy(t, "sandgate-release", "manifest", "--source", "busybox-1", "--image", "image.tar",
		"--provider-spec", "provider.json", rel); code == 0 {
		t.Fatal("manifest replaced an existing manifest.json")
	}

	out, errOut, code = runCaddy(t, "sandgate-release", "publish", "--store", store, rel)
	if code != 0 || !strings.Contains(out, "published busybox-1 (new)") || !strings.Contains(out, digest) {
		t.Fatalf("publish: exit %d: %s %s", code, out, errOut)
	}
	want := map[string]string{}
	for _, n := range []string{"manifest.json", "image.tar", "seccomp.json", "provider.json"} {
		b, _ := os.ReadFile(filepath.Join(rel, n))
		want[filepath.Join("busybox-1", n)] = string(b)
	}
	if got := treeOf(t, store); !reflect.DeepEqual(got, want) {
		t.Fatalf("store holds %v", got)
	}

	out, _, code = runCaddy(t, "sandgate-release", "publish", "--store", store, rel)
	if code != 0 || !strings.Contains(out, "nothing added") {
		t.Fatalf("identical re-publish: exit %d: %s", code, out)
	}

	// Conflicting bytes: refused, exit 1, the store unchanged.
	write("image.tar", "image byteS")
	out, errOut, code = runCaddy(t, "sandgate-release", "publish", "--store", store, rel)
	if code != 1 || !strings.Contains(errOut, "publish refused, nothing was added") || !strings.Contains(errOut, "image.tar: SHA-256 differs") {
		t.Fatalf("conflict: exit %d: %s %s", code, out, errOut)
	}
	if got := treeOf(t, store); !reflect.DeepEqual(got, want) {
		t.Fatalf("a refused publish changed the store: %v", got)
	}
	write("image.tar", "image bytes")

	// A lost artifact is added back, and only it.
	if err := os.Remove(filepath.Join(store, "busybox-1", "seccomp.json")); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCaddy(t, "sandgate-release", "publish", "--store", store, rel)
	if code != 0 || !strings.Contains(out, "added seccomp.json") {
		t.Fatalf("repair: exit %d: %s %s", code, out, errOut)
	}
	if got := treeOf(t, store); !reflect.DeepEqual(got, want) {
		t.Fatalf("store after repair: %v", got)
	}

	// Missing flags.
	if _, errOut, code := runCaddy(t, "sandgate-release", "publish", rel); code != 1 || !strings.Contains(errOut, "--store is required") {
		t.Fatalf("no --store: exit %d: %s", code, errOut)
	}
}
