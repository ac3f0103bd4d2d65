package integration

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildDemo builds integration/cmd/demo into the test's directory.
func buildDemo(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "demo")
	cmd := exec.Command("go", "build", "-o", bin, "./integration/cmd/demo")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./integration/cmd/demo: %v\n%s", err, out)
	}
	return bin
}

// inNewNetns returns a command that runs bin with args in a network
// namespace of its own with its loopback up (unshare -n, as root), so that
// the demo's fixed ports (30083–30086, 30090, 2019) are its own and no
// other test's pick; the process is bin itself (exec), so its PID names
// the namespace for nsenter. TMPDIR is tmp: the demo's temporary
// directory is made there.
func inNewNetns(root, tmp, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command("unshare", append([]string{"-n", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`, bin}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	return cmd
}

// readmeDemoOutput is the block README.md's "make demo" section shows as
// the demo's standard output.
func readmeDemoOutput(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```\nsandgate demo\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("README.md has no block starting with `sandgate demo`")
	}
	return "sandgate demo\n" + block
}

// leftovers lists what the demo left in its TMPDIR.
func leftovers(t *testing.T, tmp string) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(tmp, "sandgate-env-*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// TestDemoPrintsTheREADME: the demo (what `make demo` runs, with the
// built gateway and Caddyfile.example), in a network namespace of its own,
// exits 0 and prints on standard output exactly the block README.md shows,
// and removes its temporary directory.
func TestDemoPrintsTheREADME(t *testing.T) {
	root := requirePeers(t)
	bin := buildDemo(t, root)
	tmp := t.TempDir()
	cmd := inNewNetns(root, tmp, bin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the demo: %v\n%s", err, stderr.String())
	}
	if want := readmeDemoOutput(t, root); string(out) != want {
		t.Fatalf("the demo printed\n%s\nREADME.md shows\n%s", out, want)
	}
	if left := leftovers(t, tmp); len(left) != 0 {
		t.Fatalf("the demo left %v", left)
	}
}

// TestDemoServe: with -serve the demo keeps running after the session and
// prints calls to try; each of them, run as printed (from the repository
// root, in the demo's network namespace), answers: the ListDir through
// the gateway with a token from `bin/caddy sandgate-token`, the internal
// node API, the SDK session. A second demo started meanwhile stops before
// starting anything, naming the port the first one's gateway holds (a
// Caddy listener, which SO_REUSEPORT would let a second gateway share),
// and the first keeps serving. SIGINT then ends the first with status 0,
// its temporary directory removed.
func TestDemoServe(t *testing.T) {
	root := requirePeers(t)
	bin := buildDemo(t, root)
	tmp := t.TempDir()
	cmd := inNewNetns(root, tmp, bin, "-serve")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // an error once it exited

	// The help: the lines after "Try, from the repository root:", up to the
	// SDK session's last line.
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var help []string
	inHelp := false
	timeout := time.After(2 * time.Minute)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the demo ended before printing its calls: %v\n%s", <-exited, stderr.String())
			}
			if inHelp {
				help = append(help, l)
				done = strings.Contains(l, "console.log(")
			}
			inHelp = inHelp || strings.HasPrefix(l, "running until Ctrl-C")
		case <-timeout:
			t.Fatalf("no calls printed within 2 min:\n%s", stderr.String())
		}
	}
	pid := cmd.Process.Pid

	// The printed calls, as a user pastes them.
	try := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "bash", "-e", "-c", strings.Join(help, "\n"))
	try.Dir = root
	got, err := try.CombinedOutput()
	if err != nil {
		t.Fatalf("the printed calls failed: %v\n%s\nthe calls:\n%s", err, got, strings.Join(help, "\n"))
	}
	for _, want := range []string{`{"entries":[`, `"path":"/home/user/demo"`, `{"nodes":[{"node_id":"d3e0c0de-0000-4000-8000-000000000001"`, "Linux"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the printed calls' output lacks %q:\n%s", want, got)
		}
	}

	// A second demo in the same namespace.
	second := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", bin)
	second.Dir = root
	second.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := second.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 ||
		!strings.Contains(string(out), "demo: port 30083 (the gateway's data plane) is in use on 127.0.0.1") {
		t.Fatalf("a second demo beside the first: %v\n%s", err, out)
	}
	// The token and the ListDir: the printed lines up to the ListDir's body.
	var listDir []string
	for _, l := range help {
		listDir = append(listDir, l)
		if strings.Contains(l, `-d '{"path"`) {
			break
		}
	}
	again := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "bash", "-e", "-c", strings.Join(listDir, "\n"))
	again.Dir = root
	if got, err := again.CombinedOutput(); err != nil || !strings.Contains(string(got), `{"entries":[`) {
		t.Fatalf("the first demo after the second's refusal: %v\n%s", err, got)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the demo after SIGINT: %v, want exit status 0\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the demo did not end within 1 min of SIGINT")
	}
	if left := leftovers(t, tmp); len(left) != 0 {
		t.Fatalf("the demo left %v", left)
	}
}
