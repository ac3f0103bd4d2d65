// Package dockertest gives nodeagent's tests the real Docker engine that
// hack/docker/start.sh starts: its address from DOCKER_HOST, the imported
// busybox test image, a client, and clean-up of the containers a test
// made. A test that needs Docker fails, with a message saying how to
// start it, when DOCKER_HOST is unset or the engine does not answer; it
// never skips.
package dockertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// DefaultImage is the image hack/docker/start.sh imports (override with
// SANDGATE_TEST_IMAGE, as the script does).
const DefaultImage = "sandgate-test/busybox:1"

const howTo = "start the test engine with `DOCKER_HOST=$(bash hack/docker/start.sh)` and export DOCKER_HOST " +
	"(make test does this)"

// Host returns DOCKER_HOST, failing t when it is unset.
func Host(t testing.TB) string {
	t.Helper()
	h := os.Getenv("DOCKER_HOST")
	if h == "" {
		t.Fatal("DOCKER_HOST is unset: these tests run against a real Docker engine; " + howTo)
	}
	return h
}

// Client returns a client for host that the test closes, after checking
// that the engine answers.
func Client(t testing.TB, host string) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client for %s: %v", host, err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("the Docker engine at %s does not answer (%v); %s", host, err, howTo)
	}
	return cli
}

// Image returns the test image name, failing t when the engine does not
// have it.
func Image(t testing.TB, cli *client.Client) string {
	t.Helper()
	img := os.Getenv("SANDGATE_TEST_IMAGE")
	if img == "" {
		img = DefaultImage
	}
	if _, err := cli.ImageInspect(context.Background(), img); err != nil {
		t.Fatalf("the test image %s is missing (%v); %s", img, err, howTo)
	}
	return img
}

// RemoveLabelled force-removes, when t ends, every container that carries
// label=value (tests label their containers with a node ID of their own).
func RemoveLabelled(t testing.TB, cli *client.Client, label, value string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label+"="+value))})
		if err != nil {
			t.Errorf("clean-up: list containers: %v", err)
			return
		}
		for _, c := range list {
			if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
				t.Errorf("clean-up: remove %s: %v", c.ID, err)
			}
		}
	})
}

// Daemon is a dockerd a test owns, with its own socket, data root, exec
// root and pidfile under a fresh directory in /tmp, and no bridge, so it
// can be stopped and restarted without disturbing the shared engine.
type Daemon struct {
	t    testing.TB
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	// Host is the daemon's DOCKER_HOST address.
	Host string
}

// NewDaemon prepares a Daemon (not started); t's clean-up stops it and
// removes its directory. It fails t unless the test runs as root with
// dockerd installed.
func NewDaemon(t testing.TB) *Daemon {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test starts its own dockerd and must run as root")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Fatal("dockerd is not installed; hack/docker/start.sh installs Debian's docker.io")
	}
	// A short path: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("/tmp", "sgdk-")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{t: t, dir: dir, Host: "unix://" + filepath.Join(dir, "docker.sock")}
	t.Cleanup(func() {
		d.Stop()
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("remove %s: %v", dir, err)
		}
	})
	return d
}

// Start starts dockerd and waits until it answers (at most wait).
func (d *Daemon) Start(wait time.Duration) {
	d.t.Helper()
	log, err := os.OpenFile(filepath.Join(d.dir, "dockerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	defer log.Close()
	d.cmd = exec.Command("dockerd",
		"--data-root", filepath.Join(d.dir, "data"), "--exec-root", filepath.Join(d.dir, "exec"),
		"--pidfile", filepath.Join(d.dir, "docker.pid"), "-H", d.Host,
		"--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false")
	d.cmd.Stdout, d.cmd.Stderr = log, log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start dockerd: %v", err)
	}
	d.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(d.cmd, d.done)

	cli, err := client.NewClientWithOpts(client.WithHost(d.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		d.t.Fatal(err)
	}
	defer cli.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wait)
	for {
		pctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Ping(pctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-d.done:
			d.t.Fatalf("dockerd exited while starting; see %s/dockerd.log", d.dir)
		case <-deadline:
			d.t.Fatalf("dockerd did not answer within %v: %v", wait, err)
		case <-tick.C:
		}
	}
}

// Stop ends dockerd with SIGTERM and waits for it to exit (SIGKILL after
// a minute).
func (d *Daemon) Stop() {
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		d.cmd.Process.Kill()
		<-d.done
	}
	d.cmd = nil
}
