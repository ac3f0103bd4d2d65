// Package enrol is `nodeagent enrol` (spec node-protocol.md "Exact-match
// new installation"): a new host registers with Core using a one-time
// enrolment token and installs exactly the runtime Core selects for it,
// never a substitute.
//
// Every refusal happens before anything is written: the flags; the local
// prerequisites (not enrolled already, the state directory and the
// credential file's directory usable and private, Docker reachable, the
// backend fingerprint); the enrolment preview (Core's answer to the token,
// which it does not consume); the enrolled generation's runtime (its
// manifest downloaded and verified against the specification digest, the
// provider spec parsed, every other artifact present with its declared
// size). Only then is the token consumed (POST enrol) and the node's
// authenticated configuration read back; it must name the same enrolled
// generation. Registration is the last step that refuses: once Core has
// stored the node, the enrolment is completed here before anything else
// is checked, so Core never holds an enrolled node whose credential was
// thrown away. In this order: the state directory and installation ID,
// the credential file (mode 0600, never overwritten), the node identity;
// then the node's authenticated configuration is read back with the new
// credential and must name the same enrolled generation and runtime
// (otherwise ErrPreparation: enrolled, nothing installed); then the
// preparation of the enrolled generation (download, verification, docker
// load, final configuration), as the service's preparer would do it.
package enrol

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodeagent/config"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/generation"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/machineclient"
	"github.com/sandgate/sandgate/nodeagent/preparer"
	"github.com/sandgate/sandgate/nodeagent/state"
)

// ErrRefused wraps every refusal that happened before anything was
// written.
var ErrRefused = errors.New("enrol: refused, nothing was written")

// ErrPreparation: the node is enrolled (credential and identity written)
// but its runtime is not installed: reading its configuration back failed
// or did not match the preview, or preparing the runtime failed; the
// service retries it.
var ErrPreparation = errors.New("enrol: the node is enrolled, but preparing its runtime failed; nodeagent retries it when it runs")

// ErrEnrolmentUnknown: the enrolment request was sent but its answer was
// lost or unreadable, so whether Core registered the node (and used the
// token) is unknown; nothing was written on this host. The operator
// checks Core's enrolled nodes for this host's installation and removes a
// record whose credential nobody holds, then enrols again (with a new
// token if the old one is used).
var ErrEnrolmentUnknown = errors.New("enrol: the enrolment's answer was lost: Core may have registered this node and used the token; nothing was written here (check Core's enrolled nodes, remove a record nobody holds the credential of, and enrol again, with a new token if this one is used)")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
}

// Result is what an enrolment did.
type Result struct {
	// Identity is the identity written.
	Identity state.Identity
}

// Run enrols the node; see the package comment. out receives progress
// lines (never the token or the credential). Errors: ErrRefused-wrapped
// refusals (all before registration; nothing written),
// ErrEnrolmentUnknown (the registration's answer was lost; nothing
// written), ErrPreparation (enrolled, runtime not yet prepared, the
// Result is returned), or a failure while writing.
func Run(ctx context.Context, e *config.Enrolment, out io.Writer) (*Result, error) {
	cfg := e.Config
	origin, _ := url.Parse(e.Core) // checked by config.LoadEnrolment
	tlsConf, err := preparer.Settings{CAFile: cfg.CAFile}.TLS()
	if err != nil {
		return nil, refuse("%v", err)
	}

	// 1. Local prerequisites, nothing written.
	fmt.Fprintln(out, "checking this host: state directory, credential file, Docker")
	if err := checkLocal(cfg); err != nil {
		return nil, err
	}
	dk, err := docker.New(docker.Config{Endpoint: cfg.DockerEndpoint, NodeID: uuid.Nil.String()})
	if err != nil {
		return nil, refuse("docker: %v", err)
	}
	defer dk.Close()
	pctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timers.Probe))
	err = dk.Probe(pctx)
	var fingerprint string
	if err == nil {
		fingerprint, err = dk.Fingerprint(pctx)
	}
	cancel()
	if err != nil {
		return nil, refuse("the Docker engine at %s is not usable (%s)", cfg.DockerEndpoint, dk.Diagnose(err))
	}

	// 2. What Core would enrol this node with, and the exact runtime.
	core := machineclient.New(origin, tlsConf)
	fmt.Fprintln(out, "asking Core which runtime this node must install")
	preview, err := core.Preview(ctx, e.Token)
	if err != nil {
		return nil, refuse("enrolment preview: %v", err)
	}
	enrolled := preview.Enrolled
	rt, err := machineclient.FindRuntime(preview.Runtimes, enrolled.DeploymentGeneration, enrolled.SpecificationDigest)
	if err != nil {
		return nil, refuse("Core does not serve the runtime of the enrolled generation %d (a required retained version is missing; no other runtime is substituted): %v",
			enrolled.DeploymentGeneration, err)
	}
	fmt.Fprintf(out, "verifying release %s of generation %d\n", rt.Source, rt.Generation)
	if err := verifyRuntime(ctx, core, machineclient.Auth{Token: e.Token}, rt); err != nil {
		return nil, refuse("the runtime of generation %d: %v", rt.Generation, err)
	}

	// 3. Registration: consumes the token, and only for the previewed
	// generation (Core refuses without using the token when the
	// deployment changed meanwhile).
	installation := uuid.NewString()
	gm := true
	fmt.Fprintln(out, "enrolling with Core")
	resp, err := core.Enrol(ctx, &machine.EnrolRequest{EnrolmentToken: e.Token, InstallationID: installation,
		Provider: proto.ProviderDocker, BackendFingerprint: fingerprint, MaxActive: cfg.MaxActive,
		MaxRetained: cfg.MaxRetained, GenerationManagement: &gm, Enrolled: &enrolled})
	if errors.Is(err, machineclient.ErrEnrolmentChanged) {
		return nil, refuse("Core's deployment changed while this node verified generation %d: run nodeagent enrol again with the same token (it was not used)",
			enrolled.DeploymentGeneration)
	}
	if errors.Is(err, machineclient.ErrRefused) || errors.Is(err, machineclient.ErrAnswered) {
		// Core answered with a refusal: it registered nothing.
		return nil, refuse("enrolment: %v", err)
	}
	if err != nil {
		// No answer, or one that cannot be read: Core may have registered
		// the node and used the token. Nothing is written here, and this
		// is not reported as a refusal.
		return nil, fmt.Errorf("%w: %v", ErrEnrolmentUnknown, err)
	}
	auth := machineclient.Auth{NodeID: resp.NodeID, Credential: resp.Credential}

	// 4. Core has registered the node and the token is used: from here on
	// nothing refuses. The enrolment is completed on this host first, so
	// the credential Core issued is never thrown away (spec: every refusal
	// happens before registration). Writes, in order: state, installation
	// ID, credential, identity. The identity names the previewed
	// generation, the one Core registered (it refuses another with
	// enrolment_changed).
	st, err := state.Open(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if err := st.Store(state.InstallationIDRecord, []byte(installation+"\n")); err != nil {
		return nil, err
	}
	if err := writeCredential(cfg.CredentialFile, resp.Credential); err != nil {
		return nil, err
	}
	id := state.Identity{NodeID: resp.NodeID, InstallationID: installation, CoreOrigin: e.Core, Pool: resp.Pool,
		DeploymentGeneration: enrolled.DeploymentGeneration, SpecificationDigest: enrolled.SpecificationDigest}
	if err := st.StoreIdentity(&id); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "enrolled: node %s in pool %s; installing generation %d\n", id.NodeID, id.Pool, id.DeploymentGeneration)

	// The node's authenticated configuration, read back with the new
	// credential, must name the same enrolled generation and runtime
	// before anything is installed. A failure here leaves an enrolled node
	// whose runtime is not prepared: the service reads its configuration
	// and prepares it when it runs.
	nodeCfg, err := core.Config(ctx, auth, 0)
	if err != nil {
		return &Result{Identity: id}, fmt.Errorf("%w: reading the new node's configuration back: %v", ErrPreparation, err)
	}
	if nodeCfg.Enrolled != enrolled {
		return &Result{Identity: id}, fmt.Errorf("%w: Core's configuration names enrolled generation %d, not the previewed and registered %d; nothing was installed",
			ErrPreparation, nodeCfg.Enrolled.DeploymentGeneration, enrolled.DeploymentGeneration)
	}
	if rt2, err := machineclient.FindRuntime(nodeCfg.Runtimes, enrolled.DeploymentGeneration, enrolled.SpecificationDigest); err != nil || rt2 != rt {
		return &Result{Identity: id}, fmt.Errorf("%w: the node's configuration names another runtime than the preview; nothing was installed", ErrPreparation)
	}

	// 5. The enrolled generation, exactly.
	gens, err := genstate.Open(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	dkNode, err := docker.New(docker.Config{Endpoint: cfg.DockerEndpoint, NodeID: id.NodeID, State: st})
	if err != nil {
		return nil, err
	}
	defer dkNode.Close()
	job := &preparer.Job{Kind: generation.JobPrepare, Generations: gens, Core: core, Auth: auth, Runtime: &rt,
		Docker: dkNode, Log: out, Binding: genstate.Binding{InstallationID: installation,
			Generation: enrolled.DeploymentGeneration, SpecificationDigest: enrolled.SpecificationDigest}}
	jctx, jcancel := context.WithTimeout(ctx, generation.AttemptDeadline)
	defer jcancel()
	if err := preparer.Run(jctx, job); err != nil {
		return &Result{Identity: id}, fmt.Errorf("%w: %v", ErrPreparation, err)
	}
	return &Result{Identity: id}, nil
}

// verifyRuntime downloads the runtime's manifest and checks it against
// the specification digest and source, downloads and parses its provider
// spec (a docker spec), and checks every other artifact is served with
// its declared size. Nothing is written.
func verifyRuntime(ctx context.Context, core *machineclient.Client, auth machineclient.Auth, rt machine.Runtime) error {
	b, err := core.Get(ctx, rt.ManifestURL, auth, release.MaxManifestSize)
	if err != nil {
		return err
	}
	m, err := release.VerifyManifest(b, rt.SpecificationDigest, rt.Source)
	if err != nil {
		return err
	}
	base := rt.ManifestURL[:len(rt.ManifestURL)-len(release.ManifestName)]
	for _, a := range m.Artifacts {
		if a.Kind == release.KindProviderSpec {
			sb, err := core.Get(ctx, base+a.Name, auth, release.MaxProviderSpecSize)
			if err != nil {
				return err
			}
			if err := a.Verify(bytesReader(sb)); err != nil {
				return err
			}
			if _, err := release.ParseProviderSpec(sb); err != nil {
				return err
			}
			continue
		}
		size, err := core.Size(ctx, base+a.Name, auth)
		if err != nil {
			return fmt.Errorf("artifact %s: %w", a.Name, err)
		}
		if size != a.Size {
			return fmt.Errorf("artifact %s: Core serves %d bytes, the manifest declares %d", a.Name, size, a.Size)
		}
	}
	return nil
}

// writeCredential creates the credential file (mode 0600; an existing
// file is never overwritten) and fsyncs it and its directory.
func writeCredential(path, credential string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(credential + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// checkLocal checks, without writing, that the host can be enrolled.
func checkLocal(cfg *config.Config) error {
	identity := filepath.Join(cfg.StateDir, filepath.FromSlash(state.IdentityRecord))
	if _, err := os.Lstat(cfg.CredentialFile); err == nil {
		if _, err := os.Lstat(identity); errors.Is(err, fs.ErrNotExist) {
			// Step 4 writes the credential just before the identity.
			return refuse("the credential file %s exists but %s holds no node identity: an earlier enrol was cut off after it wrote the credential, and its token is used; remove the credential file and enrol with a new token (the file is never overwritten)",
				cfg.CredentialFile, cfg.StateDir)
		}
		return refuse("the credential file %s exists: this host looks enrolled already (it is never overwritten)", cfg.CredentialFile)
	}
	if err := writableDir(filepath.Dir(cfg.CredentialFile)); err != nil {
		return refuse("the credential file's directory: %v", err)
	}
	fi, err := os.Lstat(cfg.StateDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := writableDir(filepath.Dir(cfg.StateDir)); err != nil {
			return refuse("the state directory's parent: %v", err)
		}
	case err != nil:
		return refuse("state directory: %v", err)
	case !fi.IsDir():
		return refuse("state directory %s is not a directory", cfg.StateDir)
	case fi.Mode().Perm()&0o022 != 0:
		return refuse("state directory %s is writable by group or others", cfg.StateDir)
	default:
		if err := unix.Access(cfg.StateDir, unix.W_OK); err != nil {
			return refuse("state directory %s is not writable", cfg.StateDir)
		}
		if _, err := os.Lstat(identity); err == nil {
			return refuse("%s holds a node identity already: this host is enrolled", cfg.StateDir)
		}
		if _, err := os.Lstat(filepath.Join(cfg.StateDir, "node", "generations")); err == nil {
			return refuse("%s holds deployment generations already: use a fresh state directory", cfg.StateDir)
		}
	}
	return nil
}

// writableDir checks that dir is an existing directory we may write.
func writableDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("%s is not writable", dir)
	}
	return nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
