package nodeagent_test

// End to end for generation-managing nodes: the nodeagent binary (its
// helpers and preparers are the same binary, as in production) against
// the Core stand-in's WebSocket and machine API, on the real Docker
// engine. Releases are built from the test image's `docker save`
// tarball; loading it back re-tags the same image, so the shared engine
// gains nothing and nothing is ever deleted from it.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/helper"
	"github.com/sandgate/sandgate/nodeagent/internal/dockertest"
	"github.com/sandgate/sandgate/nodeagent/internal/fakecore"
	"github.com/sandgate/sandgate/nodeagent/lease"
	"github.com/sandgate/sandgate/nodeagent/preparer"
	"github.com/sandgate/sandgate/nodeagent/state"
)

var (
	agentOnce sync.Once
	agentBin  string
	agentErr  string
)

// sharedAgent builds the nodeagent binary once for the package's tests.
func sharedAgent(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodeagent-bin-")
		if err != nil {
			agentErr = err.Error()
			return
		}
		agentBin = filepath.Join(dir, "nodeagent")
		cmd := exec.Command("go", "build", "-o", agentBin, "./nodeagent/cmd/nodeagent")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Sprintf("go build nodeagent: %v\n%s", err, out)
		}
	})
	if agentErr != "" {
		t.Fatal(agentErr)
	}
	return agentBin
}

// denyMkdir is the releases' seccomp profile: everything allowed except
// mkdir, which fails with EPERM — visible from inside a sandbox.
const denyMkdir = `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}`

// gworld is one generation-managing node and its Core stand-in.
type gworld struct {
	t          *testing.T
	dir        string
	agent      string
	host       string
	image      string
	imageID    string
	core       *fakecore.Core
	machine    *fakecore.Machine
	nodeID     string
	install    string
	credential string
	config     string
	state      string
	node       *process
	gens       *genstate.Dir
}

func newGWorld(t *testing.T) *gworld {
	t.Helper()
	host := dockertest.Host(t)
	cli := dockertest.Client(t, host)
	img := dockertest.Image(t, cli)
	ins, err := cli.ImageInspect(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	// The world's directory is removed by the clean-up below, not by
	// t.TempDir: a preparer the node forked just as it was stopped still
	// shows the node's command line until it execs, so one wait for the
	// children can miss it and it then writes into a directory being
	// removed.
	dir, err := os.MkdirTemp("", "gworld-")
	if err != nil {
		t.Fatal(err)
	}
	w := &gworld{t: t, dir: dir, agent: sharedAgent(t), host: host, image: img, imageID: ins.ID,
		nodeID: uuid.NewString(), install: uuid.NewString(), credential: newCredential(t)}
	dockertest.RemoveLabelled(t, cli, docker.LabelNodeID, w.nodeID)
	w.core = fakecore.New(t, w.credential, false)
	w.machine = fakecore.NewMachine(t, w.nodeID, w.credential)
	w.core.Machine = w.machine
	w.state = filepath.Join(w.dir, "state")
	// Runs after the node is stopped (clean-ups run last first): helpers
	// and preparers outlive their node by design; wait for them before
	// the directory goes, and again after removing it, until it is gone
	// with no child left that could still write into it.
	t.Cleanup(func() {
		deadline := time.Now().Add(wait)
		for {
			for len(w.children()) > 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			err := os.RemoveAll(dir)
			if err == nil && len(w.children()) == 0 {
				if _, err := os.Lstat(dir); os.IsNotExist(err) {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Errorf("the world's directory %s could not be removed within %v: %v (children %v)", dir, wait, err, w.children())
				return
			}
		}
	})
	return w
}

// children returns the helpers and preparers working on this world's
// state directory.
func (w *gworld) children() []int {
	return w.processes(func(cl string) bool { return strings.Contains(cl, " helper ") || strings.Contains(cl, " preparer ") })
}

// processes returns the processes on this world's state directory whose
// command line (arguments joined by spaces) match accepts.
func (w *gworld) processes(match func(cmdline string) bool) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cl := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cl, w.state+" ") && match(cl) {
			out = append(out, pid)
		}
	}
	return out
}

// release publishes a release of the test image whose provider spec sets
// SPEC_RELEASE=<source>, binds generation g to it and returns its digest.
func (w *gworld) release(g int64, source string) string {
	w.t.Helper()
	dir := filepath.Join(w.dir, "rel-"+source)
	os.MkdirAll(dir, 0o755)
	tarPath := filepath.Join(dir, "image.tar")
	saveImage(w.t, w.host, w.image, tarPath)
	spec := fmt.Sprintf(`{"provider":"docker","image_ref":%q,"command":["sleep","3600"],"env":{"SPEC_RELEASE":%q}}`, w.image, source)
	write(w.t, filepath.Join(dir, "provider.json"), spec)
	write(w.t, filepath.Join(dir, "seccomp.json"), denyMkdir)
	w.machine.Publish(w.t, source, map[release.Kind]string{release.KindImage: tarPath,
		release.KindProviderSpec: filepath.Join(dir, "provider.json"), release.KindSeccomp: filepath.Join(dir, "seccomp.json")})
	return w.machine.Bind(w.t, g, source)
}

var (
	saveOnce sync.Once
	saveData []byte
	saveErr  error
)

// saveImage writes the test image's `docker save` tarball to path.
func saveImage(t *testing.T, host, image, path string) {
	t.Helper()
	saveOnce.Do(func() {
		cli := dockertest.Client(t, host)
		rc, err := cli.ImageSave(context.Background(), []string{image})
		if err != nil {
			saveErr = err
			return
		}
		defer rc.Close()
		saveData, saveErr = io.ReadAll(rc)
	})
	if saveErr != nil {
		t.Fatal(saveErr)
	}
	if err := os.WriteFile(path, saveData, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeConfig writes the node's TOML: generation management on, the
// enrolled generation g with digest, short timers.
func (w *gworld) writeConfig(g int64, digest string) {
	w.t.Helper()
	cred := write(w.t, filepath.Join(w.dir, "node.credential"), w.credential+"\n")
	w.config = write(w.t, filepath.Join(w.dir, "nodeagent.toml"), fmt.Sprintf(`core_origin = %q
node_id = %q
installation_id = %q
credential_file = %q
state_dir = %q
docker_endpoint = %q
disk_path = %q
deployment_generation = %d
specification_digest = %q
generation_management = true
log_level = "debug"

[timers]
heartbeat = "200ms"
idle = "5s"
backoff_min = "50ms"
backoff_max = "200ms"
`, w.core.Origin.String(), w.nodeID, w.install, cred, w.state, w.host, w.dir, g, digest))
}

// start starts the node with extra environment variables (a crash point).
func (w *gworld) start(env ...string) *process {
	w.t.Helper()
	log := filepath.Join(w.dir, fmt.Sprintf("nodeagent-%s.log", uuid.NewString()[:8]))
	p := startEnv(w.t, log, env, w.agent, "--config", w.config)
	w.node = p
	w.t.Cleanup(func() {
		if w.t.Failed() {
			w.t.Logf("node log %s:\n%s", log, tail(p.output(), 6000))
		}
	})
	return p
}

// generations opens the node's generations directory.
func (w *gworld) generations() *genstate.Dir {
	w.t.Helper()
	if w.gens == nil {
		d, err := genstate.Open(w.state)
		if err != nil {
			w.t.Fatal(err)
		}
		w.gens = d
	}
	return w.gens
}

func (w *gworld) binding(g int64, digest string) genstate.Binding {
	return genstate.Binding{InstallationID: w.install, Generation: g, SpecificationDigest: digest}
}

func dep(target int64, digest string, serving *int64) proto.Deployment {
	return proto.Deployment{Generation: target, SpecificationDigest: digest, ServingGeneration: serving}
}

func ptr64(v int64) *int64 { return &v }

func ref() proto.Reference {
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	return proto.Reference{TenantID: "t-" + id, EnvironmentID: "e", AllocationID: "a-" + id}
}

// create creates a sandbox on generation g with the release's image.
func (w *gworld) create(a *fakecore.Auto, g int64, r proto.Reference) *proto.Response {
	w.t.Helper()
	return a.Do(proto.OpCreate, g, 60000, r, func(req *proto.Request) {
		req.Bootstrap = &proto.Bootstrap{Image: w.image}
	})
}

func (w *gworld) command(a *fakecore.Auto, g int64, r proto.Reference, script string) *proto.Response {
	w.t.Helper()
	return a.Do(proto.OpCommand, g, 60000, r, func(req *proto.Request) {
		req.Command = &proto.Command{Argv: []string{"sh", "-c", script}, TimeoutMS: 30000, MaxOutputBytes: 4096}
	})
}

func TestGenerationsPrepareServeRollAndReclaim(t *testing.T) {
	w := newGWorld(t)
	d1 := w.release(1, "rel-one")
	w.writeConfig(1, d1)
	w.start()
	a := w.core.Accept().Auto(dep(1, d1, nil), keepAll)
	if h := a.Hello(); !h.GenerationManagement || h.MaxRetained != 8 || h.DeploymentGeneration != 1 {
		t.Fatalf("hello: generation_management %v, max_retained %d, enrolled %d", h.GenerationManagement, h.MaxRetained, h.DeploymentGeneration)
	}
	a.WaitObservations(fakecore.State(1, proto.GenerationReady))

	// A sandbox on generation 1 runs the generation's image ID, its spec's
	// environment and its seccomp profile.
	r1 := ref()
	resp := w.create(a, 1, r1)
	if resp == nil || resp.ErrorCode != "" || resp.Info.Image != w.imageID {
		t.Fatalf("create on generation 1: %+v", resp)
	}
	resp = w.command(a, 1, r1, `echo "$SPEC_RELEASE"; mkdir /tmp/x`)
	if resp == nil || resp.ErrorCode != "" || string(resp.Command.Stdout) != "rel-one\n" || resp.Command.ExitCode == 0 {
		t.Fatalf("command on generation 1: %+v", resp)
	}
	// A generation the node does not hold: unconfirmed, nothing run.
	if resp := w.create(a, 5, ref()); resp == nil || resp.ErrorCode != proto.ErrUnconfirmed {
		t.Fatalf("create on an unknown generation: %+v", resp)
	}

	// The operator targets generation 2 and keeps serving 1.
	d2 := w.release(2, "rel-two")
	a.SetDeployment(dep(2, d2, ptr64(1)))
	obs := a.WaitObservations(fakecore.State(2, proto.GenerationReady))
	if obs[0].Generation != 2 || obs[1].Generation != 1 || obs[1].State != proto.GenerationReady {
		t.Fatalf("observations %+v: want target 2 then serving 1, both ready", obs)
	}
	r2 := ref()
	if resp := w.create(a, 2, r2); resp == nil || resp.ErrorCode != "" {
		t.Fatalf("create on generation 2: %+v", resp)
	}
	if resp := w.command(a, 2, r2, `echo "$SPEC_RELEASE"`); resp == nil || string(resp.Command.Stdout) != "rel-two\n" {
		t.Fatalf("command on generation 2: %+v", resp)
	}
	// The sandbox on generation 1 still answers on generation 1.
	if resp := w.command(a, 1, r1, `echo still`); resp == nil || string(resp.Command.Stdout) != "still\n" {
		t.Fatalf("command on generation 1 after the roll: %+v", resp)
	}

	// Serving flips to 2; Core keeps 1 while its sandbox lives, then lets
	// it go.
	inUse := true
	var mu sync.Mutex
	a.SetKeep(func(e proto.RetentionEntry) bool { mu.Lock(); defer mu.Unlock(); return e.Generation != 1 || inUse })
	a.SetDeployment(dep(2, d2, ptr64(2)))
	a.WaitObservations(func(obs []proto.GenerationObservation) bool { return len(a.Retentions()) > 0 })
	if _, err := w.generations().ReadDropped(1); err == nil {
		t.Fatal("generation 1 was dropped while Core kept it")
	}
	if resp := a.Do(proto.OpKill, 1, 60000, r1, nil); resp == nil || resp.ErrorCode != "" {
		t.Fatalf("kill on generation 1: %+v", resp)
	}
	mu.Lock()
	inUse = false
	mu.Unlock()
	a.WaitObservations(func(obs []proto.GenerationObservation) bool {
		_, err := w.generations().ReadDropped(1)
		return err == nil
	})
	// Dropped: version files gone, the lease, its identity record and the
	// final configuration kept; never used again.
	gens := w.generations()
	if _, err := os.Lstat(gens.FilesPath(1)); !os.IsNotExist(err) {
		t.Fatalf("version directory of the dropped generation: %v", err)
	}
	if _, err := gens.ReadConfig(1); err != nil {
		t.Fatalf("the final configuration of the dropped generation is gone: %v", err)
	}
	if _, err := lease.ReadIdentity(gens.Path(), 1); err != nil {
		t.Fatalf("the lease identity of the dropped generation is gone: %v", err)
	}
	if resp := w.create(a, 1, ref()); resp == nil || resp.ErrorCode != proto.ErrUnconfirmed {
		t.Fatalf("create on the dropped generation: %+v", resp)
	}
	// The image is still in the engine: Docker images are never deleted.
	cli := dockertest.Client(t, w.host)
	if _, err := cli.ImageInspect(context.Background(), w.imageID); err != nil {
		t.Fatalf("the image was removed: %v", err)
	}
	if resp := a.Do(proto.OpKill, 2, 60000, r2, nil); resp == nil || resp.ErrorCode != "" {
		t.Fatalf("kill on generation 2: %+v", resp)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// kill ends the node with SIGKILL and waits for it.
func (w *gworld) kill(p *process) {
	w.t.Helper()
	p.cmd.Process.Kill()
	p.exitCode(w.t)
}

// waitLog waits until the node's log contains s.
func (w *gworld) waitLog(p *process, s string) {
	w.t.Helper()
	w.until("the node logs "+s, func() bool { return strings.Contains(p.output(), s) })
}

// until polls cond every 20 ms until it holds, failing after wait.
func (w *gworld) until(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("waited %v until %s", wait, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// servedOnce checks that every artifact of source was transferred
// exactly once in total: an interrupted preparation fetched only what
// was missing, and nothing was prepared twice.
func (w *gworld) servedOnce(source string) {
	w.t.Helper()
	p, err := w.machine.Store.Release(source)
	if err != nil {
		w.t.Fatal(err)
	}
	w.machine.Mu.Lock()
	defer w.machine.Mu.Unlock()
	for _, a := range p.Manifest.Artifacts {
		path := "/api/v1/sandbox-node/releases/" + source + "/" + a.Name
		if got := w.machine.Served[path]; got != a.Size {
			w.t.Errorf("artifact %s: %d bytes served in total, want %d (once)", a.Name, got, a.Size)
		}
	}
}

func TestCrashAtEveryStepOfPreparation(t *testing.T) {
	for _, step := range preparer.PrepareCrashPoints {
		for _, who := range []string{"preparer", "node"} {
			t.Run(step+"/"+who, func(t *testing.T) {
				w := newGWorld(t)
				d1 := w.release(1, "rel-one")
				w.writeConfig(1, d1)
				env := "SANDGATE_CRASHPOINT=" + step
				if who == "node" {
					// The preparer kills the node at the step and goes on.
					env += "=killparent"
				}
				p := w.start(env)
				a := w.core.Accept().Auto(dep(1, d1, nil), nil)
				if who == "preparer" {
					// The preparer died at the step; the node reports the
					// failure, then dies too.
					a.WaitObservations(fakecore.State(1, proto.GenerationFailed))
					w.kill(p)
				} else {
					p.exitCode(t)
				}
				gens := w.generations()

				// Restart, without the crash point.
				w.start()
				a = w.core.Accept().Auto(dep(1, d1, nil), nil)
				if step == lease.CrashAfterLease && who == "preparer" {
					// Interrupted before the lease's identity record was
					// persisted: never taken over, kept for inspection.
					obs := a.WaitObservations(fakecore.State(1, proto.GenerationFailed))
					if obs[0].Diagnostic != proto.DiagProviderUnavailable {
						t.Fatalf("observation %+v", obs[0])
					}
					if _, err := os.Lstat(lease.Path(gens.Path(), 1)); err != nil {
						t.Fatalf("the lease is gone: %v", err)
					}
					if _, err := lease.ReadIdentity(gens.Path(), 1); err != lease.ErrIdentityMissing {
						t.Fatalf("identity record: %v", err)
					}
					plan, err := gens.ReadPlan(1)
					if err != nil || plan.ImportStarted {
						t.Fatalf("plan %+v, %v: want the first plan, kept", plan, err)
					}
					if _, err := os.Lstat(gens.FilesPath(1)); !os.IsNotExist(err) {
						t.Fatalf("something was downloaded for a generation whose lease cannot be verified: %v", err)
					}
					if resp := w.create(a, 1, ref()); resp == nil || resp.ErrorCode != proto.ErrUnconfirmed {
						t.Fatalf("create: %+v", resp)
					}
					return
				}
				a.WaitObservations(fakecore.State(1, proto.GenerationReady))
				if _, err := gens.ReadPlan(1); !os.IsNotExist(err) {
					t.Fatalf("the plan is still there: %v", err)
				}
				cfg, err := gens.ReadConfig(1)
				if err != nil || cfg.ImageID != w.imageID {
					t.Fatalf("configuration %+v, %v", cfg, err)
				}
				w.servedOnce("rel-one")
				r := ref()
				if resp := w.create(a, 1, r); resp == nil || resp.ErrorCode != "" {
					t.Fatalf("create after the crash: %+v", resp)
				}
				if resp := a.Do(proto.OpKill, 1, 60000, r, nil); resp == nil || resp.ErrorCode != "" {
					t.Fatalf("kill: %+v", resp)
				}
			})
		}
	}
}

// twoGenerations starts a node with generations 1 and 2 prepared, serving
// and targeting 2, Core keeping everything; it returns the Auto of the
// connection.
func (w *gworld) twoGenerations(env ...string) (*process, *fakecore.Auto, string, string) {
	w.t.Helper()
	d1 := w.release(1, "rel-one")
	d2 := w.release(2, "rel-two")
	w.writeConfig(1, d1)
	p := w.start(env...)
	a := w.core.Accept().Auto(dep(1, d1, nil), keepAll)
	a.WaitObservations(fakecore.State(1, proto.GenerationReady))
	a.SetDeployment(dep(2, d2, ptr64(2)))
	a.WaitObservations(fakecore.State(2, proto.GenerationReady))
	return p, a, d1, d2
}

// dropOne is Core's policy that lets generation 1 go.
func dropOne(e proto.RetentionEntry) bool { return e.Generation != 1 }

// keepAll is Core's policy that keeps every generation.
func keepAll(proto.RetentionEntry) bool { return true }

// interruptPreparation starts the node with crash point crash armed,
// targeting generation 1 (release d1) with every generation kept, waits
// until generation 1 is reported failed (the preparer died at crash) and
// kills the node.
func (w *gworld) interruptPreparation(crash string, d1 string) {
	w.t.Helper()
	p := w.start("SANDGATE_CRASHPOINT=" + crash)
	a := w.core.Accept().Auto(dep(1, d1, nil), keepAll)
	a.WaitObservations(fakecore.State(1, proto.GenerationFailed))
	w.kill(p)
}

// dropOneOnce is Core's policy that lets generation 1 go in one
// authorisation only: every later exchange keeps it.
func dropOneOnce() func(proto.RetentionEntry) bool {
	var once sync.Once
	return func(e proto.RetentionEntry) bool {
		drop := false
		if e.Generation == 1 {
			once.Do(func() { drop = true })
		}
		return !drop
	}
}

// untilReclaimed waits until generation 1's reclamation has finished:
// its dropped marker written and its journal cleared.
func (w *gworld) untilReclaimed() {
	w.t.Helper()
	gens := w.generations()
	w.until("generation 1 is reclaimed", func() bool {
		_, err := gens.ReadDropped(1)
		j, _ := gens.Exists(1, genstate.RecordJournal)
		return err == nil && !j
	})
}

// reclaimed checks generation 1 is dropped and cleaned: the marker, no
// journal, no version files, the lease, its identity record and the
// configuration kept.
func (w *gworld) reclaimed() {
	w.t.Helper()
	gens := w.generations()
	if _, err := gens.ReadDropped(1); err != nil {
		w.t.Fatalf("dropped marker: %v", err)
	}
	for _, r := range []genstate.Record{genstate.RecordJournal, genstate.RecordPlan} {
		if ok, _ := gens.Exists(1, r); ok {
			w.t.Fatalf("%s left behind", r)
		}
	}
	if _, err := os.Lstat(gens.FilesPath(1)); !os.IsNotExist(err) {
		w.t.Fatalf("version directory: %v", err)
	}
	if _, err := lease.ReadIdentity(gens.Path(), 1); err != nil {
		w.t.Fatalf("lease identity: %v", err)
	}
	if _, err := gens.ReadConfig(1); err != nil {
		w.t.Fatalf("configuration: %v", err)
	}
}

func TestCrashAtEveryStepOfReclamation(t *testing.T) {
	for _, step := range preparer.ReclaimCrashPoints {
		for _, who := range []string{"preparer", "node"} {
			t.Run(step+"/"+who, func(t *testing.T) {
				w := newGWorld(t)
				env := "SANDGATE_CRASHPOINT=" + step
				if who == "node" {
					env += "=killparent"
				}
				p, a, _, d2 := w.twoGenerations(env)
				if who == "preparer" {
					// One authorisation only: the node must not go on
					// after its preparer died until Core says so again.
					a.SetKeep(dropOneOnce())
				} else {
					a.SetKeep(dropOne)
				}
				if who == "preparer" {
					w.waitLog(p, `"msg":"preparer job ended","kind":"reclaim","generation":1,"ok":false`)
					w.kill(p)
				} else {
					p.exitCode(t)
				}
				gens := w.generations()
				journal, _ := gens.Exists(1, genstate.RecordJournal)
				_, derr := gens.ReadDropped(1)
				dropped := derr == nil

				// Restart: Core keeps everything at first. An unfinished
				// reclamation is only a retention candidate: never
				// advertised, used or prepared.
				w.start()
				a = w.core.Accept().Auto(dep(2, d2, ptr64(2)), keepAll)
				unfinished := journal || dropped
				for _, o := range a.Hello().Generations {
					if o.Generation == 1 && unfinished && who == "preparer" {
						t.Fatalf("generation 1 advertised after an interrupted reclamation: %+v", o)
					}
				}
				if unfinished && who == "preparer" {
					if resp := w.create(a, 1, ref()); resp == nil || resp.ErrorCode != proto.ErrUnconfirmed {
						t.Fatalf("create on a generation being reclaimed: %+v", resp)
					}
				}
				if who == "preparer" {
					// Nothing continues without a fresh authorisation. (A
					// preparer that outlived its node goes on under the
					// authorisation it was started with.)
					a.WaitObservations(func([]proto.GenerationObservation) bool { return len(a.Retentions()) >= 3 })
					if j, _ := gens.Exists(1, genstate.RecordJournal); j != journal {
						t.Fatal("the reclamation went on without a fresh authorisation")
					}
				}
				a.SetKeep(dropOne)
				w.untilReclaimed()
				w.reclaimed()
				if resp := w.create(a, 1, ref()); resp == nil || resp.ErrorCode != proto.ErrUnconfirmed {
					t.Fatalf("create on the dropped generation: %+v", resp)
				}
				a.WaitObservations(fakecore.State(2, proto.GenerationReady))
			})
		}
	}
}

func TestCrashDuringRepair(t *testing.T) {
	for _, who := range []string{"preparer", "node"} {
		t.Run(who, func(t *testing.T) {
			w := newGWorld(t)
			env := "SANDGATE_CRASHPOINT=" + preparer.CrashRepairAfterDownload
			if who == "node" {
				env += "=killparent"
			}
			d1 := w.release(1, "rel-one")
			w.writeConfig(1, d1)
			p := w.start(env)
			a := w.core.Accept().Auto(dep(1, d1, nil), nil)
			a.WaitObservations(fakecore.State(1, proto.GenerationReady))
			gens := w.generations()
			before, err := os.Stat(gens.RecordPath(1, genstate.RecordConfig))
			if err != nil {
				t.Fatal(err)
			}
			// The seccomp profile's bytes go missing: the provider is a
			// not-ready placeholder and a repair is queued.
			if err := os.Remove(filepath.Join(gens.FilesPath(1), "seccomp.json")); err != nil {
				t.Fatal(err)
			}
			if who == "preparer" {
				w.waitLog(p, `"msg":"preparer job ended","kind":"repair","generation":1,"ok":false`)
				w.kill(p)
			} else {
				p.exitCode(t)
			}
			w.start()
			a = w.core.Accept().Auto(dep(1, d1, nil), nil)
			a.WaitObservations(fakecore.State(1, proto.GenerationReady))
			after, err := os.Stat(gens.RecordPath(1, genstate.RecordConfig))
			if err != nil || !os.SameFile(before, after) || !before.ModTime().Equal(after.ModTime()) {
				t.Fatalf("repair rewrote the configuration: %v", err)
			}
			// Only the missing profile was fetched again.
			w.machine.Mu.Lock()
			reqs := maps.Clone(w.machine.Requests)
			w.machine.Mu.Unlock()
			if n := reqs["/api/v1/sandbox-node/releases/rel-one/seccomp.json"]; n != 2 {
				t.Fatalf("seccomp.json fetched %d times, want 2 (prepare, repair)", n)
			}
			if n := reqs["/api/v1/sandbox-node/releases/rel-one/image.tar"]; n != 1 {
				t.Fatalf("image.tar fetched %d times, want 1", n)
			}
			r := ref()
			if resp := w.command(a, 1, r, "true"); resp == nil || resp.ErrorCode != proto.ErrNotFound {
				t.Fatalf("command on a missing sandbox: %+v", resp)
			}
		})
	}
}

// helperPIDs returns the running helpers (not probes) of this node's
// state directory whose command line contains all of words.
func (w *gworld) helperPIDs(words ...string) []int {
	return w.processes(func(cl string) bool {
		if !strings.Contains(cl, " helper ") || strings.Contains(cl, "--probe") {
			return false
		}
		for _, wd := range words {
			if !strings.Contains(cl, wd) {
				return false
			}
		}
		return true
	})
}

// retentionsOf counts the retention requests so far that name g.
func retentionsOf(a *fakecore.Auto, g int64) int {
	n := 0
	for _, r := range a.Retentions() {
		for _, e := range r.Entries {
			if e.Generation == g {
				n++
			}
		}
	}
	return n
}

// A helper whose caller gave up, and then whose node died, keeps the
// generation's lease until it exits: Core's drop authorisations, on the
// old connection and on the new one, reclaim nothing until then.
func TestHelperOutlivesItsCallerAndTheNode(t *testing.T) {
	w := newGWorld(t)
	fifo := filepath.Join(w.dir, "hold")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	p, a, _, d2 := w.twoGenerations("SANDGATE_CRASHPOINT=" + helper.CrashAfterLease + ".command=hold:" + fifo)
	r := ref()
	if resp := w.create(a, 1, r); resp == nil || resp.ErrorCode != "" {
		t.Fatalf("create on generation 1: %+v", resp)
	}
	// The command's helper stops right after taking the lease; its
	// caller's budget (1 s) runs out first.
	resp := a.Do(proto.OpCommand, 1, 1000, r, func(req *proto.Request) {
		req.Command = &proto.Command{Argv: []string{"true"}, TimeoutMS: 1000, MaxOutputBytes: 16}
	})
	if resp == nil || resp.ErrorCode != proto.ErrCommandUnconfirmed {
		t.Fatalf("command whose helper outlives the budget: %+v", resp)
	}
	var pids []int
	w.until("one helper of generation 1 is left (the held one)", func() bool {
		pids = w.helperPIDs("--generation 1 ")
		return len(pids) == 1
	})
	// Its inherited lease descriptor is close-on-exec.
	info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/3", pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	var flags int64
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, _ = strconv.ParseInt(strings.TrimSpace(v), 8, 64)
		}
	}
	if flags&syscall.O_CLOEXEC == 0 {
		t.Fatalf("the helper's lease descriptor flags %o lack O_CLOEXEC", flags)
	}

	notReclaimed := func(a *fakecore.Auto, rounds int) {
		t.Helper()
		start := retentionsOf(a, 1)
		a.WaitObservations(func([]proto.GenerationObservation) bool { return retentionsOf(a, 1) >= start+rounds })
		for _, r := range []genstate.Record{genstate.RecordJournal, genstate.RecordDropped} {
			if ok, _ := w.generations().Exists(1, r); ok {
				t.Fatalf("%s written while a helper holds the lease", r)
			}
		}
	}
	// While the helper runs, its call holds a reference: the node does not
	// even propose generation 1 for retention.
	a.SetKeep(dropOne)
	before := retentionsOf(a, 1)
	beats := 0
	a.WaitObservations(func([]proto.GenerationObservation) bool { beats++; return beats >= 10 })
	if n := retentionsOf(a, 1); n != before {
		t.Fatalf("generation 1 proposed for retention %d times while its call's helper runs", n-before)
	}
	w.kill(p)
	if len(w.helperPIDs("--generation 1 ")) != 1 {
		t.Fatal("the helper died with its node")
	}
	p = w.start()
	a = w.core.Accept().Auto(dep(2, d2, ptr64(2)), dropOne)
	// The node tries (the exclusive lease, without blocking) and refuses.
	w.waitLog(p, `reclamation not started: lease","generation":1`)
	notReclaimed(a, 3)

	// The helper finishes: the next authorisation reclaims.
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	w.until("the held helper exits", func() bool { return len(w.helperPIDs("--generation 1 ")) == 0 })
	w.untilReclaimed()
	w.reclaimed()
}

// A helper killed after its operation ran, before it answered: the
// outcome is unknown (unconfirmed), and Core's observation finds what the
// operation did.
func TestHelperKilledBeforeItAnswers(t *testing.T) {
	w := newGWorld(t)
	d1 := w.release(1, "rel-one")
	w.writeConfig(1, d1)
	w.start("SANDGATE_CRASHPOINT=" + helper.CrashBeforeAnswer + ".create")
	a := w.core.Accept().Auto(dep(1, d1, nil), nil)
	a.WaitObservations(fakecore.State(1, proto.GenerationReady))
	r := ref()
	if resp := w.create(a, 1, r); resp == nil || resp.ErrorCode != proto.ErrUnconfirmed || resp.Info != nil {
		t.Fatalf("create whose helper was killed: %+v", resp)
	}
	info := a.Do(proto.OpInfo, 1, 60000, r, nil)
	if info == nil || info.ErrorCode != "" || info.Info.State != proto.StateRunning || info.Info.Image != w.imageID {
		t.Fatalf("info after the unconfirmed create: %+v", info)
	}
	if resp := a.Do(proto.OpKill, 1, 60000, r, nil); resp == nil || resp.ErrorCode != "" {
		t.Fatalf("kill: %+v", resp)
	}
}

// On a Docker engine of its own (so an image can be removed without
// touching the shared engine): preparation loads the release's image into
// an engine that never had it; when the engine loses it, the probe finds
// it missing, the node reports image_missing and never ready, and the
// repair loads the retained tarball again — the same image ID, nothing
// downloaded — even when the preparer or the node is killed right after
// the import.
func TestImageMissingIsRepairedOnAPrivateEngine(t *testing.T) {
	for _, who := range []string{"preparer", "node"} {
		t.Run(who, func(t *testing.T) {
			w := newGWorld(t)
			d1 := w.release(1, "rel-one")
			engine := dockertest.NewDaemon(t)
			engine.Start(wait)
			w.host = engine.Host
			w.writeConfig(1, d1)
			env := "SANDGATE_CRASHPOINT=" + preparer.CrashRepairAfterImport
			if who == "node" {
				env += "=killparent"
			}
			p := w.start(env)
			a := w.core.Accept().Auto(dep(1, d1, nil), nil)
			a.WaitObservations(fakecore.State(1, proto.GenerationReady))
			cli := dockertest.Client(t, engine.Host)
			cfg, err := w.generations().ReadConfig(1)
			if err != nil || cfg.ImageID != w.imageID {
				t.Fatalf("configuration %+v, %v: want the tarball's image ID %s", cfg, err, w.imageID)
			}
			// This engine is the test's own: removing its image disturbs no
			// one (the shared engine is never touched).
			if _, err := cli.ImageRemove(context.Background(), cfg.ImageID, image.RemoveOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			obs := a.WaitObservations(func(obs []proto.GenerationObservation) bool {
				return len(obs) > 0 && obs[0].Diagnostic == proto.DiagImageMissing
			})
			if obs[0].State == proto.GenerationReady {
				t.Fatalf("ready without its image: %+v", obs[0])
			}
			if who == "preparer" {
				w.waitLog(p, `"msg":"preparer job ended","kind":"repair","generation":1,"ok":false`)
				w.kill(p)
			} else {
				p.exitCode(t)
			}
			w.start()
			a = w.core.Accept().Auto(dep(1, d1, nil), nil)
			a.WaitObservations(fakecore.State(1, proto.GenerationReady))
			if _, err := cli.ImageInspect(context.Background(), cfg.ImageID); err != nil {
				t.Fatalf("the image is not back: %v", err)
			}
			w.servedOnce("rel-one")
			r := ref()
			if resp := w.create(a, 1, r); resp == nil || resp.ErrorCode != "" || resp.Info.Image != cfg.ImageID {
				t.Fatalf("create after the repair: %+v", resp)
			}
			if resp := a.Do(proto.OpKill, 1, 60000, r, nil); resp == nil || resp.ErrorCode != "" {
				t.Fatalf("kill: %+v", resp)
			}
		})
	}
}

// enrolment runs `nodeagent enrol` against the stand-in with the token
// in a file; it returns the exit status and the output.
func (w *gworld) enrolment(token, stateDir, credFile, dockerHost string) (int, string) {
	w.t.Helper()
	tf := write(w.t, filepath.Join(w.t.TempDir(), "token"), token+"\n")
	cmd := exec.Command(w.agent, "enrol", "--core", w.core.Origin.String(), "--token-file", tf,
		"--state-dir", stateDir, "--credential-file", credFile, "--docker-endpoint", dockerHost)
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), token) {
		w.t.Fatalf("the enrolment printed its token:\n%s", out)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return 0, string(out)
}

// nothingWritten checks an enrolment left no trace on the node.
func nothingWritten(t *testing.T, stateDir, credFile string) {
	t.Helper()
	for _, p := range []string{stateDir, credFile} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s exists after a refused enrolment (%v)", p, err)
		}
	}
}

func TestEnrolInstallsExactlyTheSelectedRuntimeOrRefusesBeforeWriting(t *testing.T) {
	w := newGWorld(t)
	d1 := w.release(1, "rel-one")
	token := randomHex(t, 16)
	w.machine.Mu.Lock()
	w.machine.Tokens[token] = true
	w.machine.Mu.Unlock()
	fresh := func() (string, string) {
		d := t.TempDir()
		return filepath.Join(d, "state"), filepath.Join(d, "node.credential")
	}
	requests := func() int {
		w.machine.Mu.Lock()
		defer w.machine.Mu.Unlock()
		n := 0
		for _, c := range w.machine.Requests {
			n += c
		}
		return n
	}

	t.Run("docker unreachable: refused before Core is asked", func(t *testing.T) {
		s, c := fresh()
		before := requests()
		code, out := w.enrolment(token, s, c, "unix:///nonexistent/docker.sock")
		if code != 4 || !strings.Contains(out, "docker_unreachable") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		nothingWritten(t, s, c)
		if requests() != before {
			t.Fatal("Core was asked before the local checks passed")
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		s, c := fresh()
		code, out := w.enrolment(randomHex(t, 16), s, c, w.host)
		if code != 4 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		nothingWritten(t, s, c)
	})
	t.Run("missing retained runtime: refused, token not consumed", func(t *testing.T) {
		w.machine.Mu.Lock()
		w.machine.Enrolled = machine.Generation{DeploymentGeneration: 7, SpecificationDigest: d1}
		w.machine.Mu.Unlock()
		defer func() {
			w.machine.Mu.Lock()
			w.machine.Enrolled = machine.Generation{DeploymentGeneration: 1, SpecificationDigest: d1}
			w.machine.Mu.Unlock()
		}()
		s, c := fresh()
		code, out := w.enrolment(token, s, c, w.host)
		if code != 4 || !strings.Contains(out, "missing") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		nothingWritten(t, s, c)
		w.machine.Mu.Lock()
		defer w.machine.Mu.Unlock()
		if w.machine.Enrolments != 0 || !w.machine.Tokens[token] {
			t.Fatal("the token was consumed by a refused enrolment")
		}
	})
	t.Run("runtime bytes that fail verification: refused, token not consumed", func(t *testing.T) {
		w.machine.Mu.Lock()
		w.machine.Corrupt["provider.json"] = true
		w.machine.Mu.Unlock()
		defer func() { w.machine.Mu.Lock(); delete(w.machine.Corrupt, "provider.json"); w.machine.Mu.Unlock() }()
		s, c := fresh()
		code, out := w.enrolment(token, s, c, w.host)
		if code != 4 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		nothingWritten(t, s, c)
		if w.machine.Enrolments != 0 {
			t.Fatal("enrolled with a runtime that failed verification")
		}
	})

	// Registration is the last refusal: a configuration read-back that
	// fails after Core stored the node completes the enrolment (the
	// credential Core issued and the identity are kept) and reports the
	// runtime not installed (exit 5), never "refused, nothing written".
	t.Run("read-back fails after registration: enrolled, credential kept", func(t *testing.T) {
		w.machine.Mu.Lock()
		w.machine.Tokens["readback-token"] = true
		w.machine.FailConfig = 1
		enrolments := w.machine.Enrolments
		w.machine.Mu.Unlock()
		s, c := fresh()
		code, out := w.enrolment("readback-token", s, c, w.host)
		if code != 5 || strings.Contains(out, "nothing was written") || !strings.Contains(out, "reading the new node's configuration back") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		w.machine.Mu.Lock()
		registered, left := w.machine.Enrolments-enrolments, w.machine.FailConfig
		w.machine.Mu.Unlock()
		if registered != 1 || left != 0 {
			t.Fatalf("%d registrations, %d failing reads left; want 1 and 0", registered, left)
		}
		b, err := os.ReadFile(c)
		if err != nil || strings.TrimSpace(string(b)) != w.credential {
			t.Fatalf("the issued credential was not kept: %v", err)
		}
		st, _ := state.Open(s)
		if id, err := st.Identity(); err != nil || id.NodeID != w.nodeID || id.DeploymentGeneration != 1 || id.SpecificationDigest != d1 {
			t.Fatalf("identity %+v, %v", id, err)
		}
		gens, _ := genstate.Open(s)
		if _, err := gens.ReadConfig(1); err == nil {
			t.Fatal("a runtime was installed from an unverified configuration")
		}
	})

	// An enrolment whose answer is lost after Core registered the node is
	// not a refusal: exit 6, nothing written, and the output says Core
	// may hold the node.
	t.Run("answer lost after registration: unknown, not refused", func(t *testing.T) {
		w.machine.Mu.Lock()
		w.machine.Tokens["lost-answer-token"] = true
		w.machine.DropEnrolAnswer = true
		enrolments := w.machine.Enrolments
		w.machine.Mu.Unlock()
		s, c := fresh()
		code, out := w.enrolment("lost-answer-token", s, c, w.host)
		if code != 6 || strings.Contains(out, "refused") || !strings.Contains(out, "may have registered") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		nothingWritten(t, s, c)
		w.machine.Mu.Lock()
		defer w.machine.Mu.Unlock()
		if w.machine.Enrolments != enrolments+1 {
			t.Fatal("the enrolment did not reach Core")
		}
	})

	// The enrolment itself.
	stateDir, credFile := fresh()
	code, out := w.enrolment(token, stateDir, credFile, w.host)
	if code != 0 {
		t.Fatalf("enrol: exit %d:\n%s", code, out)
	}
	fi, err := os.Stat(credFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential file: %v, mode %v", err, fi.Mode())
	}
	st, _ := state.Open(stateDir)
	id, err := st.Identity()
	if err != nil || id.NodeID != w.nodeID || id.DeploymentGeneration != 1 || id.SpecificationDigest != d1 {
		t.Fatalf("identity %+v, %v", id, err)
	}
	gens, _ := genstate.Open(stateDir)
	if cfg, err := gens.ReadConfig(1); err != nil || cfg.ImageID != w.imageID {
		t.Fatalf("the enrolled generation is not installed: %+v, %v", cfg, err)
	}

	t.Run("token reuse", func(t *testing.T) {
		s, c := fresh()
		code, out := w.enrolment(token, s, c, w.host)
		if code != 4 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		nothingWritten(t, s, c)
	})
	t.Run("already enrolled", func(t *testing.T) {
		w.machine.Mu.Lock()
		w.machine.Tokens["second-token"] = true
		w.machine.Mu.Unlock()
		code, out := w.enrolment("second-token", stateDir, credFile, w.host)
		if code != 4 || !strings.Contains(out, "enrolled already") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})

	// The service runs from what the enrolment stored.
	w.state, w.install = stateDir, id.InstallationID
	w.config = write(t, filepath.Join(w.dir, "enrolled.toml"), fmt.Sprintf(`generation_management = true
state_dir = %q
credential_file = %q
docker_endpoint = %q
disk_path = %q

[timers]
heartbeat = "200ms"
idle = "5s"
`, stateDir, credFile, w.host, w.dir))
	w.start()
	a := w.core.Accept().Auto(dep(1, d1, nil), nil)
	if h := a.Hello(); h.NodeID != w.nodeID || h.InstallationID != id.InstallationID || h.DeploymentGeneration != 1 || !h.GenerationManagement {
		t.Fatalf("hello %+v", h)
	}
	a.WaitObservations(fakecore.State(1, proto.GenerationReady))
	r := ref()
	if resp := w.create(a, 1, r); resp == nil || resp.ErrorCode != "" {
		t.Fatalf("create: %+v", resp)
	}
	if resp := a.Do(proto.OpKill, 1, 60000, r, nil); resp == nil || resp.ErrorCode != "" {
		t.Fatalf("kill: %+v", resp)
	}
	// The image went over the wire once in full; the enrolment's checks
	// asked only for its first byte.
	w.machine.Mu.Lock()
	img := "/api/v1/sandbox-node/releases/rel-one/image.tar"
	served, reqs := w.machine.Served[img], w.machine.Requests[img]
	w.machine.Mu.Unlock()
	rel, _ := w.machine.Store.Release("rel-one")
	imgArt, _ := rel.Manifest.Of(release.KindImage)
	if served != imgArt.Size+int64(reqs-1) {
		t.Fatalf("image.tar: %d bytes in %d requests; want one full transfer and 1-byte checks", served, reqs)
	}
	w.kill(w.node)

	// A wrong credential: Core refuses it, the node stops for good.
	os.WriteFile(credFile, []byte(randomHex(t, 20)+"\n"), 0o600)
	p := w.start()
	if code := p.exitCode(t); code != 3 {
		t.Fatalf("exit %d with a wrong credential, want 3:\n%s", code, p.output())
	}
}

// newCredential returns a node credential of the form enrolment issues:
// 43 characters of unpadded base64url (32 random bytes).
func newCredential(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Only an acknowledgment that matches the pending retention request
// exactly authorises a drop: unsolicited, stale, replayed, mixed,
// incomplete acknowledgments and ones for another connection delete
// nothing.
func TestRetentionAcksThatDeleteNothing(t *testing.T) {
	w := newGWorld(t)
	_, a, _, _ := w.twoGenerations()
	a.HoldAcks(true)
	first := a.NextHeld()
	for first.Entries[0].Generation != 1 {
		first = a.NextHeld()
	}
	decide := func(r *proto.Retention, keep bool) *proto.RetentionAck {
		ack := &proto.RetentionAck{ID: r.ID, ConnectionID: r.ConnectionID}
		for _, e := range r.Entries {
			ack.Entries = append(ack.Entries, proto.RetentionDecision{Generation: e.Generation, SpecificationDigest: e.SpecificationDigest, Keep: keep})
		}
		return ack
	}
	beats := func(n int) {
		seen := 0
		a.WaitObservations(func([]proto.GenerationObservation) bool { seen++; return seen >= n })
	}
	kept := func(what string) {
		t.Helper()
		beats(5)
		for _, r := range []genstate.Record{genstate.RecordJournal, genstate.RecordDropped} {
			if ok, _ := w.generations().Exists(1, r); ok {
				t.Fatalf("%s: %s written", what, r)
			}
		}
	}

	// Unsolicited: an id the node never sent.
	un := decide(first, false)
	un.ID = uuid.NewString()
	a.Send(un)
	kept("unsolicited")
	// For another connection.
	other := decide(first, false)
	other.ConnectionID = uuid.NewString()
	a.Send(other)
	kept("another connection")
	// Mixed: the pending id, an entry with another digest. The exchange is
	// over; the node asks again.
	mixed := decide(first, false)
	mixed.Entries[0].SpecificationDigest = strings.Repeat("e", 64)
	a.Send(mixed)
	kept("mixed")
	second := a.NextHeld()
	if second.Sequence != first.Sequence+1 || second.ID == first.ID {
		t.Fatalf("after a mixed ack the next retention has sequence %d (first %d)", second.Sequence, first.Sequence)
	}
	// Stale and replayed: the first request's exact answer, now.
	a.Send(decide(first, false))
	kept("stale")
	// Incomplete: one entry too many.
	inc := decide(second, false)
	inc.Entries = append(inc.Entries, proto.RetentionDecision{Generation: 99, SpecificationDigest: strings.Repeat("9", 64)})
	a.Send(inc)
	kept("incomplete")
	third := a.NextHeld()
	// The exact answer drops.
	a.Send(decide(third, false))
	w.untilReclaimed()
	w.reclaimed()
	// Replaying that answer changes nothing more; generation 2, pinned,
	// is never proposed.
	a.Send(decide(third, false))
	beats(5)
	for _, r := range a.Retentions() {
		for _, e := range r.Entries {
			if e.Generation == 2 {
				t.Fatalf("the target and serving generation was proposed for retention: %+v", r)
			}
		}
	}
	if _, err := w.generations().ReadConfig(2); err != nil {
		t.Fatalf("generation 2: %v", err)
	}
}
