package integration

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/hack/gatewayproc"
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

// demoWait bounds each demo run and each command run beside it: a hang
// fails the test instead of holding the package until go test's timeout.
const demoWait = 2 * time.Minute

// netnsOf waits until process pid (unshare, then the demo it execs) is in
// a network namespace other than the test's own, and returns it as /proc
// shows it ("net:[<inode>]"): right after Start, unshare may not have
// left the test's namespace yet, and every process of that one must never
// be taken for the demo's.
func netnsOf(t *testing.T, pid int) string {
	t.Helper()
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(demoWait)
	for {
		ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil {
			t.Fatalf("the demo's network namespace: %v", err)
		}
		if ns != own {
			return ns
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still in the test's network namespace after 2 min", pid)
		}
		time.Sleep(time.Millisecond) // polling for unshare(2) to take effect
	}
}

// netnsPIDs returns the processes in network namespace ns.
func netnsPIDs(ns string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		if other, err := os.Readlink(p); err == nil && other == ns {
			if n, err := strconv.Atoi(strings.Split(p, "/")[2]); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// killNetnsAtCleanup kills, when the test ends, every process still in
// the demo's network namespace ns (its gateway included, were the demo to
// die without stopping it), so that a failed test leaves nothing running.
func killNetnsAtCleanup(t *testing.T, ns string) {
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil || ns == own {
		t.Fatalf("refusing to kill the processes of namespace %q: the test's own is %q (%v)", ns, own, err)
	}
	t.Cleanup(func() {
		for _, pid := range netnsPIDs(ns) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// demoRun is one demo a test runs: the binary built for the test, its
// command in a network namespace of its own with its loopback up
// (unshare -n, as root), so that the demo's fixed ports (30083–30086,
// 30090, 2019) are its own and no other test's pick, with TMPDIR tmp
// (where the demo makes its temporary directories), bounded by ctx (on
// its end the demo gets SIGTERM, then 20 s). The process is the demo
// itself (exec), so its PID names the namespace for nsenter.
type demoRun struct {
	root, bin, tmp string
	ctx            context.Context
	cmd            *exec.Cmd
	ns             string // the demo's network namespace, once started
}

// newDemo builds the demo and prepares its command with args, not
// started, within wait.
func newDemo(t *testing.T, wait time.Duration, args ...string) *demoRun {
	t.Helper()
	d := &demoRun{root: requirePeers(t), tmp: t.TempDir()}
	d.bin = buildDemo(t, d.root)
	var cancel context.CancelFunc
	d.ctx, cancel = context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	d.cmd = exec.CommandContext(d.ctx, "unshare", append([]string{"-n", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`, d.bin}, args...)...)
	d.cmd.Cancel = func() error { return d.cmd.Process.Signal(syscall.SIGTERM) }
	d.cmd.WaitDelay = 20 * time.Second
	d.cmd.Dir = d.root
	d.cmd.Env = append(os.Environ(), "TMPDIR="+d.tmp)
	return d
}

// start starts the demo, waits until it is in its own network namespace
// (netnsOf) and has the test's cleanup kill whatever is left there.
func (d *demoRun) start(t *testing.T) {
	t.Helper()
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.ns = netnsOf(t, d.cmd.Process.Pid)
	killNetnsAtCleanup(t, d.ns)
}

// beside returns a command run from the repository root in the started
// demo's network namespace (nsenter), within the demo's deadline.
func (d *demoRun) beside(args ...string) *exec.Cmd {
	c := exec.CommandContext(d.ctx, "nsenter", append([]string{"-t", strconv.Itoa(d.cmd.Process.Pid), "-n"}, args...)...)
	c.Dir = d.root
	return c
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

// leftovers lists what the demo left in its TMPDIR (its harness's and
// its execd stand-in's directories, were they not removed).
func leftovers(t *testing.T, tmp string) []string {
	t.Helper()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	return left
}

// TestDemoPrintsTheREADME: the demo (what `make demo` runs, with the
// built gateway and Caddyfile.example), in a network namespace of its own,
// exits 0 and prints on standard output exactly the block README.md shows,
// and removes its temporary directory.
func TestDemoPrintsTheREADME(t *testing.T) {
	d := newDemo(t, demoWait)
	var stderr gatewayproc.Output
	d.cmd.Stderr = &stderr
	out, err := d.cmd.Output()
	if err != nil {
		t.Fatalf("the demo: %v\n%s", err, stderr.String())
	}
	if want := readmeDemoOutput(t, d.root); string(out) != want {
		t.Fatalf("the demo printed\n%s\nREADME.md shows\n%s", out, want)
	}
	if left := leftovers(t, d.tmp); len(left) != 0 {
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
	d := newDemo(t, 3*demoWait, "-serve")
	cmd := d.cmd
	var stderr gatewayproc.Output
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.start(t)
	exited := make(chan error, 1)

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

	// The printed calls, as a user pastes them.
	got, err := d.beside("bash", "-e", "-c", strings.Join(help, "\n")).CombinedOutput()
	if err != nil {
		t.Fatalf("the printed calls failed: %v\n%s\nthe calls:\n%s", err, got, strings.Join(help, "\n"))
	}
	for _, want := range []string{`{"entries":[`, `"path":"/home/user/demo"`, `{"nodes":[{"node_id":"d3e0c0de-0000-4000-8000-000000000001"`, "Linux"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the printed calls' output lacks %q:\n%s", want, got)
		}
	}

	// A second demo in the same namespace.
	second := d.beside(d.bin)
	second.Env = append(os.Environ(), "TMPDIR="+d.tmp)
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
	if got, err := d.beside("bash", "-e", "-c", strings.Join(listDir, "\n")).CombinedOutput(); err != nil || !strings.Contains(string(got), `{"entries":[`) {
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
	case <-time.After(demoWait):
		t.Fatal("the demo did not end within 2 min of SIGINT")
	}
	if left := leftovers(t, d.tmp); len(left) != 0 {
		t.Fatalf("the demo left %v", left)
	}
}

// TestDemoSIGTERMWhileStarting: a SIGTERM to the demo once its gateway
// runs (while the harness starts the rest, or during the SDK session)
// stops everything it started: it exits 143, no process is left in its
// network namespace (the gateway was stopped, not orphaned) and its
// temporary directories are gone.
func TestDemoSIGTERMWhileStarting(t *testing.T) {
	d := newDemo(t, demoWait)
	cmd := d.cmd
	var out gatewayproc.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	d.start(t)
	ns := d.ns
	// The gateway is the demo's first child process (bin/caddy run).
	deadline := time.Now().Add(demoWait)
	for len(netnsPIDs(ns)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the demo started no gateway within 2 min:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond) // polling /proc for the child
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 143 {
		t.Fatalf("the demo after SIGTERM: %v, want exit status 143\n%s", err, out.String())
	}
	for _, p := range netnsPIDs(ns) {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		t.Errorf("process %d is still running in the demo's network namespace: %q", p, cmdline)
	}
	if left := leftovers(t, d.tmp); len(left) != 0 {
		t.Fatalf("the demo left %v in TMPDIR\n%s", left, out.String())
	}
}
