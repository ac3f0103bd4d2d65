// Package realpeers_test is the real-peer tier: the E2B SDKs (JS 2.25.0 and
// 2.51.0 from integration/js, Python 2.24.0 from its source archive) drive
// bin/corectl as the control API and bin/caddy as the data plane in front
// of the real OpenSandbox programs, not sandgate's stand-ins:
//
//	SDK → corectl → kube-apiserver ← OpenSandbox controller (BatchSandbox → Pod,
//	                                  status.ready, endpoints annotation, deletion)
//	                               ← kwok (the node, Pod Running, Pod IP 10.77.0.x)
//	SDK → gateway → OpenSandbox Ingress (URI mode) → execd on the Pod IP
//
// The chain has two compute clusters (cluster-a, cluster-b), each with its
// own kube-apiserver, controller, kwok (Pod networks 10.77.0.0/24 and
// 10.77.1.0/24) and Ingress (its fixed entry), served by one corectl and
// one gateway, with a credential bound to each.
//
// Everything runs in a network namespace the test creates (ip netns): the
// test binary runs itself again inside it, where the loopback carries
// 127.0.0.1 and both Pod networks, so a Pod IP kwok hands out reaches the
// execd listening in the namespace. No other address is used.
// execd runs in its own mount namespace with tmpfs on /home and /tmp, so
// the SDKs' files never land on the host, and its own PID namespace, so
// its commands end with it. Two gateways serve the data plane: one in the
// six-operation mode, one with extended_operations; a third, started by
// the E2B_DOMAIN test, routes by Host (*.sbx.test over TLS). corectl
// answers domain sbx.test for cluster-a, so the fixed-address sessions
// also show that a sandbox URL the user gives wins over it. The test
// binary run with envPortServer is the sandbox's business-port helper.
//
// The programs come from hack/peers/build.sh (SANDGATE_PEERS_BIN, set by
// `make test` when SANDGATE_PEERS names the upstream archives); without it
// every test skips with the line skipMessage. It needs root (ip netns,
// mount), bin/caddy and bin/corectl (make build), the JS SDKs (npm ci in
// integration/js), kube-apiserver and etcd (hack/kube/build.sh) and
// Debian's Python packages (hack/peers/python.sh).
package realpeers_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// testClient is the tests' HTTP client: http.DefaultClient's transport
// with a bound on every request, its response body read included, so a
// peer that hangs fails the request instead of holding the test until the
// package's -timeout. No request here is meant to take that long.
var testClient = &http.Client{Timeout: 2 * time.Minute}

// skipMessage is the one line printed (and every test's skip reason) when
// the tier is off.
const skipMessage = "real-peer tier off: set SANDGATE_PEERS to the directory of the OpenSandbox and E2B Python SDK archives " +
	"(make test builds them with hack/peers/build.sh), or SANDGATE_PEERS_BIN to the directory build.sh printed"

// Environment variables: the peers' directory, the interpreter
// hack/peers/python.sh printed, and the name of the network namespace the
// test binary runs in (set by the outer run for the inner one).
const (
	envPeersBin = "SANDGATE_PEERS_BIN"
	envPython   = "SANDGATE_PEERS_PYTHON"
	envNetns    = "SANDGATE_REALPEERS_NETNS"
)

// w is the running chain, started once for the package inside the
// network namespace; nil when the tier is off.
var w *world

func TestMain(m *testing.M) {
	if ports := os.Getenv(envPortServer); ports != "" {
		os.Exit(servePorts(ports))
	}
	ctrl.SetLogger(logr.Discard())
	bin := os.Getenv(envPeersBin)
	if bin == "" && os.Getenv("SANDGATE_PEERS") != "" {
		// The tier was asked for (make test and .ci/run export
		// SANDGATE_PEERS_BIN beside it): skipping would pass it unseen.
		fmt.Fprintln(os.Stderr, "realpeers: SANDGATE_PEERS is set but "+envPeersBin+" is not: run hack/peers/build.sh and set "+envPeersBin+" to the directory it prints")
		os.Exit(2)
	}
	if bin == "" {
		fmt.Println(skipMessage)
		os.Exit(m.Run())
	}
	if os.Getenv(envNetns) == "" {
		os.Exit(runInNetns())
	}
	var err error
	if w, err = startWorld(bin); err != nil {
		fmt.Fprintln(os.Stderr, "realpeers:", err)
		os.Exit(2)
	}
	code := m.Run()
	w.stop()
	os.Exit(code)
}

// requireTier skips t with skipMessage when the tier is off.
func requireTier(t *testing.T) {
	t.Helper()
	if w == nil {
		t.Skip(skipMessage)
	}
}

// runInNetns creates the network namespace sandgate-peers-<pid>, runs this
// test binary again inside it with the same arguments (envNetns set),
// deletes the namespace and returns the inner run's exit status. The inner
// run dies with this process (parent-death signal).
func runInNetns() int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "realpeers: the real-peer tier needs root (ip netns, mount)")
		return 2
	}
	name := fmt.Sprintf("sandgate-peers-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "realpeers: ip netns add %s: %v: %s\n", name, err, out)
		return 2
	}
	defer func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "realpeers: ip netns delete %s: %v: %s\n", name, err, out)
		}
	}()
	cmd := exec.Command("ip", append([]string{"netns", "exec", name, os.Args[0]}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), envNetns+"="+name)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "realpeers: running the tests in %s: %v\n", name, err)
		return 2
	}
	return 0
}
