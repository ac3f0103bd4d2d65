package preparer

// The real preparer driven into its refusal paths: Run on a state
// directory set up for each case (plan drift, neither configuration nor
// plan, reclamation of changed, unknown or linked files, Core's definite
// refusals), and the generation manager killing a `nodeagent preparer`
// process (this test binary re-executed as one) at the attempt deadline
// of its clock.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodeagent/generation"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/helper"
	"github.com/sandgate/sandgate/nodeagent/internal/fakecore"
	"github.com/sandgate/sandgate/nodeagent/lease"
	"github.com/sandgate/sandgate/nodeagent/machineclient"
)

// asPreparer makes this test binary run preparer.Main when the
// Launcher starts it ("preparer" as its first argument) with this
// variable set.
const asPreparer = "SANDGATE_PREPARER_TEST_AS_PREPARER"

func TestMain(m *testing.M) {
	if os.Getenv(asPreparer) == "1" && len(os.Args) > 1 && os.Args[1] == Command {
		os.Exit(Main(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

// wait bounds every wait on another process or goroutine: a safety net,
// not a measurement.
const wait = 30 * time.Second

const (
	testInstallation = "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60"
	testDigest       = "1111111111111111111111111111111111111111111111111111111111111111"
	testImageID      = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

func testBinding(g int64) genstate.Binding {
	return genstate.Binding{InstallationID: testInstallation, Generation: g, SpecificationDigest: testDigest}
}

// newGens returns a new generations directory.
func newGens(t *testing.T) *genstate.Dir {
	t.Helper()
	d, err := genstate.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// prepared gives generation g of d a lease with its identity record, a
// version directory holding one file (the manifest, content body) and a
// published configuration recording it.
func prepared(t *testing.T, d *genstate.Dir, g int64, body string) {
	t.Helper()
	b := testBinding(g)
	if _, err := lease.Create(d.Path(), b.Want()); err != nil {
		t.Fatal(err)
	}
	dir := d.FilesPath(g)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, release.ManifestName), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	cfg := &genstate.Config{Binding: b, Source: "rel-one", Path: genstate.FilesName(g), Provider: proto.ProviderDocker,
		ImageRef: "sandgate-test/img:1", ImageID: testImageID,
		Files: []genstate.File{{Name: release.ManifestName, Kind: "manifest", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(body))}}}
	if err := d.PublishConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// listing returns every path below d's directory with its size, sorted:
// what a refusal must leave untouched.
func listing(t *testing.T, d *genstate.Dir) string {
	t.Helper()
	var out []string
	filepath.WalkDir(d.Path(), func(p string, e os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := e.Info()
		out = append(out, fmt.Sprintf("%s %d", strings.TrimPrefix(p, d.Path()), fi.Size()))
		return nil
	})
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// run runs a job of the real preparer on d, with no Core and no Docker
// (each case refuses before either is needed), and returns its exit status.
func run(t *testing.T, d *genstate.Dir, kind generation.JobKind, g int64, ls *lease.Lease) int {
	t.Helper()
	j := &Job{Kind: kind, Binding: testBinding(g), Generations: d, Lease: ls}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return ExitCode(Run(ctx, j), nil)
}

// TestPlanThatDriftedFromItsConfigurationIsRefused: a published
// configuration with a plan beside it (an interruption between publishing
// and clearing the plan) whose release differs: the preparation refuses
// and keeps both records.
func TestPlanThatDriftedFromItsConfigurationIsRefused(t *testing.T) {
	d := newGens(t)
	prepared(t, d, 4, "manifest bytes")
	if err := d.WritePlan(&genstate.Plan{Binding: testBinding(4), Source: "rel-other", Path: genstate.FilesName(4)}); err != nil {
		t.Fatal(err)
	}
	before := listing(t, d)
	if code := run(t, d, generation.JobPrepare, 4, nil); code != ExitRefused {
		t.Fatalf("exit %d, want %d (refused)", code, ExitRefused)
	}
	if after := listing(t, d); after != before {
		t.Fatalf("the refusal changed the directory:\n%s\n→\n%s", before, after)
	}
}

// TestNeitherConfigurationNorPlanIsRefused: a generation whose lease
// exists but which has neither a configuration nor a plan is never
// rebuilt: prepare and repair both refuse with provider_config_missing.
func TestNeitherConfigurationNorPlanIsRefused(t *testing.T) {
	d := newGens(t)
	if _, err := lease.Create(d.Path(), testBinding(5).Want()); err != nil {
		t.Fatal(err)
	}
	before := listing(t, d)
	for _, kind := range []generation.JobKind{generation.JobPrepare, generation.JobRepair} {
		code := run(t, d, kind, 5, nil)
		if code != ExitConfigMissing {
			t.Fatalf("%s: exit %d, want %d", kind, code, ExitConfigMissing)
		}
		if out := outcomeOfStatus(code); !out.Refused || out.Diagnostic != proto.DiagProviderConfigMissing {
			t.Fatalf("%s: outcome %+v", kind, out)
		}
	}
	if after := listing(t, d); after != before {
		t.Fatalf("the refusal changed the directory:\n%s\n→\n%s", before, after)
	}
}

// TestReclamationRefusesFilesItCannotVouchFor: a reclamation deletes
// nothing when the version directory holds a file whose bytes changed, a
// file it does not know, or a file with a second hard link; it refuses
// (the journal it wrote first stays, for the next authorised attempt) and
// writes no dropped marker.
func TestReclamationRefusesFilesItCannotVouchFor(t *testing.T) {
	for name, spoil := range map[string]func(t *testing.T, dir string){
		"changed bytes": func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, release.ManifestName), []byte("manifest bytEs"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"unknown file": func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "stray.tar"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"linked file": func(t *testing.T, dir string) {
			if err := os.Link(filepath.Join(dir, release.ManifestName), filepath.Join(t.TempDir(), "alias")); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := newGens(t)
			prepared(t, d, 6, "manifest bytes")
			spoil(t, d.FilesPath(6))
			ls, err := lease.Acquire(d.Path(), testBinding(6).Want(), lease.Exclusive)
			if err != nil {
				t.Fatal(err)
			}
			defer ls.Close()
			if code := run(t, d, generation.JobReclaim, 6, ls); code != ExitRefused {
				t.Fatalf("exit %d, want %d (refused)", code, ExitRefused)
			}
			l := d.Inspect(6)
			if l.Dropped != nil || l.Config == nil || l.Journal == nil {
				t.Fatalf("after the refusal: dropped %v, config %v, journal %v", l.Dropped, l.Config, l.Journal)
			}
			if _, err := os.Lstat(filepath.Join(d.FilesPath(6), release.ManifestName)); err != nil {
				t.Fatalf("a version file was deleted: %v", err)
			}
		})
	}
}

// TestCoresDefiniteRefusalsAreNotDownloadFailures: Core's machine API
// rejecting the node credential (401) or serving no runtime of the
// generation ends a preparation with its own exit status, before a plan
// is written, not with runtime_download_failed.
func TestCoresDefiniteRefusalsAreNotDownloadFailures(t *testing.T) {
	nodeID, credential := uuid.NewString(), "node-credential-"+uuid.NewString()
	m := fakecore.NewMachine(t, nodeID, credential)
	srv := httptest.NewServer(m)
	defer srv.Close()
	origin, _ := url.Parse(srv.URL)
	for _, c := range []struct {
		name string
		auth machineclient.Auth
		exit int
		diag string
	}{
		{"rejected credential", machineclient.Auth{NodeID: nodeID, Credential: "another-credential"}, ExitCredentialRejected, proto.DiagCredentialRejected},
		{"unknown generation", machineclient.Auth{NodeID: nodeID, Credential: credential}, ExitGenerationUnknown, proto.DiagGenerationUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newGens(t)
			j := &Job{Kind: generation.JobPrepare, Binding: testBinding(7), Generations: d,
				Core: machineclient.New(origin, nil), Auth: c.auth}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			code := ExitCode(Run(ctx, j), nil)
			if out := outcomeOfStatus(code); code != c.exit || out.Diagnostic != c.diag || out.Refused {
				t.Fatalf("exit %d (%+v), want %d %s", code, out, c.exit, c.diag)
			}
			if l := d.Inspect(7); l.Plan != nil || l.Lease {
				t.Fatalf("a plan or lease was written: %+v", l)
			}
		})
	}
}

// testClock is a manual clock for the generation manager.
type testClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []testWaiter
}

type testWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, testWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock on by d and fires every wait that ended.
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// noRunner is a Runner for a manager whose generations never become
// ready in the test.
type noRunner struct{}

func (noRunner) Run(context.Context, genstate.Binding, *proto.Request, time.Time, func()) (*proto.Response, error) {
	return nil, fmt.Errorf("no helper in this test")
}

func (noRunner) Probe(context.Context, genstate.Binding, func()) (helper.Probe, error) {
	return helper.Probe{}, fmt.Errorf("no helper in this test")
}

// reporting is the Launcher, reporting each job's outcome on outs.
type reporting struct {
	*Launcher
	outs chan generation.Outcome
}

func (r reporting) Run(ctx context.Context, job generation.Job, ls *lease.Lease) generation.Outcome {
	out := r.Launcher.Run(ctx, job, ls)
	r.outs <- out
	return out
}

// TestAttemptDeadlineKillsThePreparer: a preparation whose Core never
// answers is killed when the manager's clock reaches the 30-minute
// attempt deadline: the `nodeagent preparer` process goes away (Core sees
// its request abandoned) and the job ends provider_unavailable, the
// outcome of a killed preparer.
func TestAttemptDeadlineKillsThePreparer(t *testing.T) {
	arrived, abandoned := make(chan struct{}, 1), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != machine.ConfigPath {
			http.NotFound(w, r)
			return
		}
		arrived <- struct{}{}
		<-r.Context().Done() // held until the preparer is gone
		abandoned <- struct{}{}
	}))
	defer srv.Close()

	state := filepath.Join(t.TempDir(), "state")
	d, err := genstate.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	cred := filepath.Join(t.TempDir(), "node.credential")
	if err := os.WriteFile(cred, []byte("node-credential\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(asPreparer, "1")
	clock := &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	outs := make(chan generation.Outcome, 4)
	m, err := generation.New(generation.Config{InstallationID: testInstallation, Generations: d, Runner: noRunner{}, Clock: clock,
		Preparer: reporting{outs: outs, Launcher: &Launcher{Executable: os.Args[0], Settings: Settings{StateDir: state, NodeID: uuid.NewString(),
			CoreOrigin: srv.URL, CredentialFile: cred, DockerEndpoint: "unix:///nonexistent/docker.sock"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	m.SetDeployment(proto.Deployment{Generation: 8, SpecificationDigest: testDigest})

	select {
	case <-arrived: // the preparer runs and waits for Core
	case <-time.After(wait):
		t.Fatal("the preparer never asked Core for its configuration")
	}
	clock.Advance(generation.AttemptDeadline)
	select {
	case <-abandoned:
	case <-time.After(wait):
		t.Fatal("the preparer was not killed at the attempt deadline")
	}
	select {
	case out := <-outs:
		if out.OK || out.Busy || out.Refused || out.Diagnostic != proto.DiagProviderUnavailable {
			t.Fatalf("the killed preparation ended %+v, want failed provider_unavailable", out)
		}
	case <-time.After(wait):
		t.Fatal("the preparation did not end after the kill")
	}
}
