package deploy

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// image is one program's image as the test expects it.
type image struct {
	name    string   // sandgate/<name>
	bin     string   // bin/<bin>
	version []string // arguments that print the version stamp
	cmd     []string // the image's default arguments (CMD)
}

var images = []image{
	{name: "gateway", bin: "caddy", version: []string{"sandgate-version"}, cmd: []string{"run", "--config", "/etc/caddy/Caddyfile"}},
	{name: "corectl", bin: "corectl", version: []string{"-version"}},
	{name: "nodeagent", bin: "nodeagent", version: []string{"--version"}, cmd: []string{"--config", "/etc/sandgate/nodeagent.toml"}},
}

// repoRoot returns the repository root and checks that the three binaries
// are built.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range images {
		if fi, err := os.Stat(filepath.Join(root, "bin", im.bin)); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("bin/%s is missing (%v): run make build", im.bin, err)
		}
	}
	return root
}

// dockerEngine fails the test unless DOCKER_HOST names an engine that
// answers.
func dockerEngine(t *testing.T) {
	t.Helper()
	if os.Getenv("DOCKER_HOST") == "" {
		t.Fatal("DOCKER_HOST is unset: this test builds the images with a real Docker engine; " +
			"export DOCKER_HOST=$(bash hack/docker/start.sh) (make test does this)")
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Fatalf("the Docker engine at %s does not answer: %v\n%s", os.Getenv("DOCKER_HOST"), err, out)
	}
}

// docker runs the docker CLI and returns its standard output; a failure
// fails the test with the combined output.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// testTag is the images' tag for this checkout: the build cache of the
// test, one set of images per checkout, replaced in place by each build
// (hack/images.sh removes the image a tag leaves behind).
func testTag(root string) string {
	sum := sha256.Sum256([]byte(root))
	return "test-" + hex.EncodeToString(sum[:6])
}

// buildImages runs hack/images.sh for the three images with tag and
// returns the references it printed.
func buildImages(t *testing.T, root, tag string) map[string]string {
	t.Helper()
	cmd := exec.Command("bash", "hack/images.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "IMAGE_TAG="+tag)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/images.sh: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	t.Logf("hack/images.sh (%s):\n%s", time.Since(start).Round(time.Millisecond), stdout.String())
	refs := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(stdout.String()), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("hack/images.sh printed %q, want \"<ref> <id> <size>\"", line)
		}
		refs[strings.TrimSuffix(strings.TrimPrefix(f[0], "sandgate/"), ":"+tag)] = f[0]
	}
	for _, im := range images {
		if refs[im.name] != "sandgate/"+im.name+":"+tag {
			t.Fatalf("hack/images.sh built %v, want sandgate/%s:%s", refs, im.name, tag)
		}
	}
	return refs
}

// fileFromImage returns one file of a created container, read with docker
// cp (a tar stream).
func fileFromImage(t *testing.T, container, path string) []byte {
	t.Helper()
	out := docker(t, "cp", container+":"+path, "-")
	tr := tar.NewReader(strings.NewReader(out))
	if _, err := tr.Next(); err != nil {
		t.Fatalf("docker cp %s:%s: %v", container, path, err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// logs returns a container's output (Caddy logs to standard error).
func logs(c string) string {
	out, _ := exec.Command("docker", "logs", c).CombinedOutput()
	return string(out)
}

// containerName is a name no other session's container has.
func containerName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "sandgate-deploy-test-" + hex.EncodeToString(b)
}

// TestImages builds the three images with hack/images.sh in the engine of
// DOCKER_HOST and checks each: the non-root user, the entrypoint and
// default arguments, the OCI labels of the version stamp, the CA bundle and passwd entry, and the binary inside
// printing the same version stamp as the one in bin/. The gateway in its
// image adapts the Caddyfile of the Portal base's ConfigMap. The gateway image
// then runs its default command (caddy run --config /etc/caddy/Caddyfile)
// as that user with a mounted Caddyfile until Caddy's admin API stops it,
// and its autosave shows the home directory is writable.
func TestImages(t *testing.T) {
	root := repoRoot(t)
	dockerEngine(t)
	refs := buildImages(t, root, testTag(root))
	ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range images {
		t.Run(im.name, func(t *testing.T) {
			ref := refs[im.name]
			var inspect []struct {
				Config struct {
					User       string
					Entrypoint []string
					Cmd        []string
					Labels     map[string]string
					Env        []string
				}
			}
			if err := json.Unmarshal([]byte(docker(t, "image", "inspect", ref)), &inspect); err != nil || len(inspect) != 1 {
				t.Fatalf("docker image inspect %s: %v", ref, err)
			}
			cfg := inspect[0].Config
			// The gateway's runtime setting (docs/deploy.md "Memory,
			// garbage collection and runtime settings"): every pod gets it
			// from the image.
			if im.name == "gateway" && !slices.Contains(cfg.Env, "GODEBUG=schedtrace=86400000") {
				t.Errorf("the gateway image's environment %v has no GODEBUG=schedtrace=86400000", cfg.Env)
			}
			if cfg.User != "65532:65532" {
				t.Errorf("User = %q, want 65532:65532 (sandgate)", cfg.User)
			}
			if want := []string{"/usr/bin/" + im.bin}; !slices.Equal(cfg.Entrypoint, want) {
				t.Errorf("Entrypoint = %q, want %q", cfg.Entrypoint, want)
			}
			if !slices.Equal(cfg.Cmd, im.cmd) {
				t.Errorf("Cmd = %q, want %q", cfg.Cmd, im.cmd)
			}
			// The OCI labels of the build's version stamp (hack/version.sh --labels).
			stamp, err := exec.Command("bash", filepath.Join(root, "hack", "version.sh"), "--labels").Output()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Fields(string(stamp)) {
				k, v, _ := strings.Cut(l, "=")
				if cfg.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], v)
				}
			}
			if cfg.Labels["org.opencontainers.image.revision"] == "" || cfg.Labels["org.opencontainers.image.title"] != "sandgate "+im.name {
				t.Errorf("labels %v: no revision, or title not %q", cfg.Labels, "sandgate "+im.name)
			}

			want, err := exec.Command(filepath.Join(root, "bin", im.bin), im.version...).Output()
			if err != nil {
				t.Fatalf("bin/%s %v: %v", im.bin, im.version, err)
			}
			got := docker(t, append([]string{"run", "--rm", "--network", "none", ref}, im.version...)...)
			if got != string(want) || !strings.HasPrefix(got, "sandgate commit ") {
				t.Errorf("%s %v in the image printed %q, bin/%s prints %q", im.bin, im.version, got, im.bin, want)
			}

			c := containerName()
			docker(t, "create", "--name", c, "--network", "none", ref)
			t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", c).Run() })
			if b := fileFromImage(t, c, "/etc/ssl/certs/ca-certificates.crt"); !bytes.Equal(b, ca) {
				t.Errorf("the image's CA bundle (%d bytes) is not Debian's (%d bytes)", len(b), len(ca))
			}
			if b := fileFromImage(t, c, "/etc/passwd"); !strings.Contains(string(b), "sandgate:x:65532:65532:") {
				t.Errorf("/etc/passwd has no sandgate 65532 entry:\n%s", b)
			}
		})
	}

	t.Run("gateway-adapts-the-deploy-caddyfile", func(t *testing.T) {
		// The rendered ConfigMap gateway-config mounted where the
		// Deployment mounts it, the settings as the container's
		// environment; the caddy in the image adapts it as `caddy run`
		// will, and gives what bin/caddy gives.
		r := render(t, "portal")
		dir := writeConfigMap(t, r.configMap(t, "gateway-config"))
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		args := []string{"run", "--rm", "--network", "none", "-v", dir + ":/etc/caddy:ro"}
		for _, e := range gatewaySettingsEnv(t, r) {
			args = append(args, "-e", e)
		}
		args = append(args, refs["gateway"], "adapt", "--config", "/etc/caddy/Caddyfile")
		var got map[string]any
		if err := json.Unmarshal([]byte(docker(t, args...)), &got); err != nil {
			t.Fatalf("caddy adapt in the image: %v", err)
		}
		if want := adaptGateway(t, r); mustJSON(got) != mustJSON(want) {
			t.Errorf("the image adapted\n%s\nbin/caddy adapted\n%s", mustJSON(got), mustJSON(want))
		}
	})

	t.Run("gateway-runs", func(t *testing.T) {
		dir := t.TempDir()
		caddyfile := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(caddyfile, []byte("{\n\tadmin localhost:2019\n\tauto_https off\n}\n:8080 {\n\trespond \"ok\"\n}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c := containerName()
		docker(t, "run", "-d", "--name", c, "--network", "none", "-v", caddyfile+":/etc/caddy/Caddyfile:ro", refs["gateway"])
		t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", c).Run() })
		// caddy stop asks the admin API inside the container to stop the
		// server; it fails until the server is up.
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := exec.Command("docker", "exec", c, "/usr/bin/caddy", "stop", "--address", "localhost:2019").CombinedOutput()
			if err == nil {
				break
			}
			state := strings.TrimSpace(docker(t, "inspect", "-f", "{{.State.Status}}", c))
			if state == "exited" && err != nil && strings.Contains(logs(c), `"shutdown complete","exit_code":0`) {
				// The server stopped as asked and the container ended
				// before the exec'd caddy stop returned, so Docker killed
				// it (exit status 137; it failed CI once). The exit code
				// below still has to be 0.
				break
			}
			if state != "running" || time.Now().After(deadline) {
				t.Fatalf("caddy stop in the gateway container (%s): %v\n%s\nlog:\n%s", state, err, out, logs(c))
			}
			time.Sleep(100 * time.Millisecond) // polling for the admin endpoint
		}
		if code := strings.TrimSpace(docker(t, "wait", c)); code != "0" {
			t.Fatalf("the gateway exited with %s; log:\n%s", code, logs(c))
		}
		var autosave map[string]any
		if err := json.Unmarshal(fileFromImage(t, c, "/home/sandgate/.config/caddy/autosave.json"), &autosave); err != nil || autosave["apps"] == nil {
			t.Fatalf("autosave.json of the non-root gateway: %v %v", err, autosave)
		}
	})
}
