package realpeers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/integration/harness"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// execdVersions are the execd builds the suites run against: the
// archive's HEAD and the version the released chart deploys.
var execdVersions = []string{"head", "v1.0.18"}

// jsPackages are the pinned JS SDKs (integration/js/package.json).
var jsPackages = []string{"e2b-2.51.0", "e2b-2.25.0"}

// sdkAttempt is one guarded call of a scenario.
type sdkAttempt struct {
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value"`
	Error *struct {
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"error"`
}

type commandResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
}

// peersResult is what the "peers" scenario prints, in JS
// (integration/js/sdk.mjs) and in Python (python/scenario.py) alike.
type peersResult struct {
	SandboxID            string        `json:"sandboxId"`
	Run                  commandResult `json:"run"`
	Write                struct{ Path string }
	Read                 string        `json:"read"`
	FilesList            []string      `json:"filesList"`
	SandboxList          []string      `json:"sandboxList"`
	EndAfterSetTimeoutMs int64         `json:"endAfterSetTimeoutMs"`
	ConnectedID          string        `json:"connectedId"`
	RunAgain             commandResult `json:"runAgain"`
	Kill                 sdkAttempt    `json:"kill"`
	KillAgain            sdkAttempt    `json:"killAgain"`
	ConnectAfterKill     sdkAttempt    `json:"connectAfterKill"`
}

// TestSDKSuitesAgainstTheRealPeers runs the "peers" scenario of each JS
// SDK and of the Python SDK through corectl and the gateway, in the
// six-operation mode and with extended_operations, against each execd
// version: create (the real controller makes the Pod, kwok runs it,
// the controller marks the BatchSandbox ready with the Pod IP), a command,
// a file written, read and listed, the sandbox list, setTimeout, connect,
// kill (the controller's deletion) and a connect after it.
func TestSDKSuitesAgainstTheRealPeers(t *testing.T) {
	requireTier(t)
	python := pythonInterpreter(t)
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			for _, mode := range []struct {
				name    string
				gateway *harness.Env
			}{{"six-operation", w.gateway}, {"extended_operations", w.extended}} {
				t.Run(mode.name, func(t *testing.T) {
					for _, pkg := range jsPackages {
						t.Run(pkg, func(t *testing.T) {
							seen := w.a.watchSandboxes(t)
							dir := "/home/user/" + mode.name + "-" + pkg
							var r peersResult
							runScenario(t, mode.gateway, "node", []string{"sdk.mjs", "peers"}, filepath.Join(w.root, "integration/js"), &r,
								"E2B_PACKAGE="+pkg, "SCENARIO_DIR="+dir)
							w.a.checkSession(t, r, dir, seen)
						})
					}
					t.Run("python-2.24.0", func(t *testing.T) {
						seen := w.a.watchSandboxes(t)
						dir := "/home/user/" + mode.name + "-python"
						var r peersResult
						runPythonScenario(t, mode.gateway, python, "peers", &r, "SCENARIO_DIR="+dir)
						w.a.checkSession(t, r, dir, seen)
					})
				})
			}
		})
	}
}

// pythonInterpreter returns $SANDGATE_PEERS_PYTHON, else /usr/bin/python3,
// failing t when it cannot import the SDK's Debian dependencies.
func pythonInterpreter(t *testing.T) string {
	t.Helper()
	python := os.Getenv(envPython)
	if python == "" {
		python = "/usr/bin/python3"
	}
	if out, err := exec.Command(python, "-c", "import httpx, httpcore, google.protobuf, attr, h2, wcmatch, rich").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import the Python SDK's dependencies (%v: %s): run bash hack/peers/python.sh", python, err, out)
	}
	return python
}

// runPythonScenario runs python/scenario.py's scenario with the
// interpreter python and the Python SDK's source from the peers' cache
// (runScenario).
func runPythonScenario(t *testing.T, gateway *harness.Env, python, scenario string, result any, env ...string) {
	t.Helper()
	src := filepath.Join(w.root, "integration/realpeers/python")
	runScenario(t, gateway, python, []string{"scenario.py", scenario}, src, result, append(env,
		"PYTHONPATH="+filepath.Join(w.bin, "python-sdk")+string(os.PathListSeparator)+src, "PYTHONDONTWRITEBYTECODE=1")...)
}

// runScenario runs name args in dir with the SDK environment (corectl,
// gateway, the API key) and env, and decodes the "result" it prints.
func runScenario(t *testing.T, gateway *harness.Env, name string, args []string, dir string, result any, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "E2B_API_URL="+w.api, "E2B_SANDBOX_URL="+gateway.Gateway, "E2B_API_KEY="+apiKey), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	out := struct {
		Result any `json:"result"`
	}{Result: result}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil {
		t.Fatalf("%s printed %q: %v", name, stdout.String(), err)
	}
	t.Logf("%s", stdout.String())
}

// checkSession checks a "peers" session: every operation answered as the
// SDK's contract says, the sandbox was a BatchSandbox the real controller
// made ready with a Pod IP of kwok's network, and kill removed it (and,
// once its owner was gone, its Pod).
func (c *compute) checkSession(t *testing.T, r peersResult, dir string, seen *sandboxWatch) {
	t.Helper()
	if sandbox.ValidateID(r.SandboxID) != nil || r.ConnectedID != r.SandboxID {
		t.Fatalf("ids %q %q", r.SandboxID, r.ConnectedID)
	}
	if r.Run != (commandResult{0, "created\n"}) || r.RunAgain != (commandResult{0, "connected\n"}) {
		t.Fatalf("commands %+v %+v", r.Run, r.RunAgain)
	}
	if r.Write.Path != dir+"/hello.txt" || r.Read != "hello peers\n" || strings.Join(r.FilesList, ",") != "hello.txt" {
		t.Fatalf("files: wrote %q, read %q, listed %q", r.Write.Path, r.Read, r.FilesList)
	}
	found := false
	for _, id := range r.SandboxList {
		found = found || id == r.SandboxID
	}
	if !found {
		t.Fatalf("the sandbox list %q lacks %s", r.SandboxList, r.SandboxID)
	}
	// setTimeout(120 s): the end moved to about 120 s from the call.
	if r.EndAfterSetTimeoutMs < 100_000 || r.EndAfterSetTimeoutMs > 125_000 {
		t.Fatalf("after setTimeout(120 s) the sandbox ends in %d ms", r.EndAfterSetTimeoutMs)
	}
	if !r.Kill.OK || !r.KillAgain.OK || string(r.KillAgain.Value) != "false" || r.ConnectAfterKill.OK {
		t.Fatalf("kill %+v / again %+v / connect after %+v", r.Kill, r.KillAgain, r.ConnectAfterKill)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := poll(ctx, "the deletion of BatchSandbox "+r.SandboxID, func() error {
		if !seen.deleted(r.SandboxID) {
			return fmt.Errorf("not watched yet")
		}
		return nil
	}); err != nil {
		t.Fatal(w.withLogs(err))
	}
	// There is no kube-controller-manager: collectGarbage deletes the
	// Pods whose owner is gone, as its garbage collector would; this
	// deletes any it has not reached yet, and kwok finishes their deletion.
	var pods corev1.PodList
	if err := c.client.List(ctx, &pods, client.InNamespace(c.namespace)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		for _, o := range pods.Items[i].OwnerReferences {
			if o.Kind == sandbox.GVK.Kind && o.Name == r.SandboxID {
				if err := c.client.Delete(ctx, &pods.Items[i]); client.IgnoreNotFound(err) != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := poll(ctx, "the Pods of "+r.SandboxID+" to go", func() error {
		var pods corev1.PodList
		if err := c.client.List(ctx, &pods, client.InNamespace(c.namespace)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			for _, o := range p.OwnerReferences {
				if o.Name == r.SandboxID {
					return fmt.Errorf("pod %s is still there (phase %s)", p.Name, p.Status.Phase)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(w.withLogs(err))
	}
	// The watch saw the deletion, so it saw every change before it.
	var eps []string
	if err := json.Unmarshal([]byte(seen.endpoints(r.SandboxID)), &eps); err != nil || len(eps) != 1 || !strings.HasPrefix(eps[0], c.podPrefix) {
		t.Fatalf("%s's controller never set the endpoints annotation of %s to a Pod IP of its kwok (saw %q)", c.id, r.SandboxID, seen.endpoints(r.SandboxID))
	}
	// corectl's readiness ping and the SDK's calls went through the real
	// Ingress to that Pod IP.
	ping, data := c.ingressSaw(t, r.SandboxID, eps[0]+":44772")
	if !ping || !data {
		t.Fatalf("%s's OpenSandbox Ingress's log shows ping=%v data=%v for %s at %s", c.id, ping, data, r.SandboxID, eps[0])
	}
}

// ingressSaw reads c's Ingress's log for the requests it proxied for
// sandbox id to target (any target when empty): a readiness ping
// (/<id>/44772/ping) and any other.
func (c *compute) ingressSaw(t *testing.T, id, target string) (ping, data bool) {
	t.Helper()
	b, err := os.ReadFile(c.ingressLog)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "/" + id + "/44772/"
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "ingress requested") || !strings.Contains(line, target) || !strings.Contains(line, prefix) {
			continue
		}
		if strings.Contains(line, prefix+"ping") {
			ping = true
		} else {
			data = true
		}
	}
	return ping, data
}

// sandboxWatch records the endpoints annotation the controller set on
// each BatchSandbox of the project namespace while a test ran, and which
// were deleted.
type sandboxWatch struct {
	mu   sync.Mutex
	eps  map[string]string
	gone map[string]bool
}

func (s *sandboxWatch) deleted(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone[id]
}

func (s *sandboxWatch) endpoints(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eps[id]
}

// endpointsAnnotation is where the OpenSandbox controller writes a ready
// BatchSandbox's Pod IPs (a JSON list).
const endpointsAnnotation = "sandbox.opensandbox.io/endpoints"

// watchSandboxes watches c's project namespace's BatchSandboxes until t
// ends.
func (c *compute) watchSandboxes(t *testing.T) *sandboxWatch {
	t.Helper()
	wc, err := client.NewWithWatch(c.kube.Config, client.Options{Scheme: c.client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
	wi, err := wc.Watch(context.Background(), list, client.InNamespace(c.namespace))
	if err != nil {
		t.Fatal(err)
	}
	s := &sandboxWatch{eps: map[string]string{}, gone: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			s.mu.Lock()
			if ep := u.GetAnnotations()[endpointsAnnotation]; ep != "" {
				s.eps[u.GetName()] = ep
			}
			if ev.Type == watch.Deleted {
				s.gone[u.GetName()] = true
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { wi.Stop(); <-done })
	return s
}
