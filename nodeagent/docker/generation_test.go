package docker

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/internal/dockertest"
	"github.com/sandgate/sandgate/nodeagent/provider"
	"github.com/sandgate/sandgate/nodeagent/state"
)

// saveTestImage writes the test image as a `docker save` tarball. Loading
// it back re-tags the same image: nothing new appears in the shared
// engine, and nothing is ever deleted.
func saveTestImage(t *testing.T, e *env) string {
	t.Helper()
	rc, err := e.cli.ImageSave(ctx(t), []string{e.image})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	path := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestImportReturnsTheImmutableImageID(t *testing.T) {
	e := newEnv(t)
	tarPath := saveTestImage(t, e)
	ins, err := e.cli.ImageInspect(ctx(t), e.image)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := TarballImageIDs(tarPath, e.image)
	if err != nil || !slices.Contains(ids, ins.ID) {
		t.Fatalf("TarballImageIDs = %v, %v; want to contain %s", ids, err, ins.ID)
	}
	id, err := e.p.Import(ctx(t), tarPath, e.image)
	if err != nil || id != ins.ID {
		t.Fatalf("Import = %q, %v; want %s", id, err, ins.ID)
	}
	if _, err := TarballImageIDs(tarPath, "sandgate-test/not-in-the-tarball:1"); !errors.Is(err, ErrImageRefNotInTarball) {
		t.Fatalf("a ref the tarball does not tag: %v", err)
	}
	if _, err := e.p.Import(ctx(t), tarPath, "sandgate-test/not-in-the-tarball:1"); !errors.Is(err, ErrImageRefNotInTarball) {
		t.Fatalf("Import of a ref the tarball does not tag: %v", err)
	}
	garbage := filepath.Join(t.TempDir(), "garbage.tar")
	os.WriteFile(garbage, []byte("not a tarball"), 0o600)
	if _, err := TarballImageIDs(garbage, e.image); !errors.Is(err, ErrImageRefNotInTarball) {
		t.Fatalf("not a tarball: %v", err)
	}
}

// boundEnv is a provider bound to a generation of the test image.
func boundEnv(t *testing.T, g *Generation) *env {
	t.Helper()
	e := newEnv(t)
	ins, err := e.cli.ImageInspect(ctx(t), e.image)
	if err != nil {
		t.Fatal(err)
	}
	if g.ImageID == "" {
		g.ImageID = ins.ID
	}
	g.ImageRef = e.image
	st, _ := state.Open(t.TempDir())
	node := uuid.NewString()
	dockertest.RemoveLabelled(t, e.cli, LabelNodeID, node)
	p, err := New(Config{Endpoint: dockertest.Host(t), NodeID: node, State: st, Generation: g})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	e.p = p
	return e
}

// denyMkdir is a seccomp profile that lets everything through except
// mkdir, which fails with EPERM: visible from inside the sandbox.
const denyMkdir = `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}`

func TestBoundProviderRunsTheGenerationsImageAndProfile(t *testing.T) {
	e := boundEnv(t, &Generation{Command: []string{"sleep", "3600"}, Env: map[string]string{"FROM_SPEC": "1", "BOTH": "spec"},
		Seccomp: []byte(denyMkdir)})
	if err := e.p.Probe(ctx(t)); err != nil {
		t.Fatalf("probe: %v", err)
	}
	c := e.call()
	// An image other than the generation's is refused; nothing is made.
	_, err := e.p.Create(ctx(t), c, proto.Bootstrap{Image: "sandgate-test/other:1"})
	wantCode(t, "create with a foreign image", err, proto.ErrInvalid)
	if _, err := e.p.GetInfo(ctx(t), c); provider.CodeOf(err) != proto.ErrNotFound {
		t.Fatalf("after the refused create: %v", err)
	}
	info := e.create(t, c, proto.Bootstrap{Image: e.image, Env: map[string]string{"BOTH": "create"}})
	if !strings.HasPrefix(info.Image, "sha256:") || info.Image != e.p.cfg.Generation.ImageID {
		t.Fatalf("the sandbox runs %q, want the generation's image ID", info.Image)
	}
	res, err := e.p.RunCommand(ctx(t), c, proto.Command{Argv: []string{"sh", "-c", `echo "$FROM_SPEC $BOTH"; mkdir /tmp/x`}, TimeoutMS: 10000, MaxOutputBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "1 create\n" {
		t.Fatalf("environment %q (result %+v), want the spec default and the create override", res.Stdout, res)
	}
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "not permitted") {
		t.Fatalf("mkdir under the generation's seccomp profile: exit %d, stderr %q; want EPERM", res.ExitCode, res.Stderr)
	}
	// A new compute keeps the profile.
	if _, err := e.p.NewCompute(ctx(t), c, 2, nil); err != nil {
		t.Fatal(err)
	}
	res, err = e.p.RunCommandCompute(ctx(t), c, proto.ComputeRef{Generation: 2}, proto.Command{Argv: []string{"mkdir", "/tmp/y"}, TimeoutMS: 10000, MaxOutputBytes: 4096})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("mkdir in the new compute: %+v, %v; want a failure", res, err)
	}
	if err := e.p.Kill(ctx(t), c); err != nil {
		t.Fatal(err)
	}
}

func TestPlaceholderWithoutSeccompBytesStartsNothing(t *testing.T) {
	e := boundEnv(t, &Generation{SeccompMissing: true})
	err := e.p.Probe(ctx(t))
	if d := e.p.Diagnose(err); d != proto.DiagSeccompProfileMissing {
		t.Fatalf("probe %v → %q, want seccomp_profile_missing", err, d)
	}
	c := e.call()
	_, err = e.p.Create(ctx(t), c, proto.Bootstrap{Image: e.image, Entrypoint: []string{"sleep", "60"}})
	wantCode(t, "create on a placeholder", err, proto.ErrUnconfirmed)
	if _, err := e.p.GetInfo(ctx(t), c); provider.CodeOf(err) != proto.ErrNotFound {
		t.Fatalf("the placeholder created something: %v", err)
	}
}

func TestProbeFindsTheGenerationsImageMissing(t *testing.T) {
	e := boundEnv(t, &Generation{ImageID: "sha256:" + strings.Repeat("0", 64)})
	err := e.p.Probe(ctx(t))
	if d := e.p.Diagnose(err); d != proto.DiagImageMissing {
		t.Fatalf("probe %v → %q, want image_missing", err, d)
	}
}
