package preparer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/generation"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/internal/crashpoint"
	"github.com/sandgate/sandgate/nodeagent/lease"
	"github.com/sandgate/sandgate/nodeagent/machineclient"
	"golang.org/x/sys/unix"
)

// Crash points between the durable steps of the jobs (package
// crashpoint; lease.CrashAfterLease lies between the lease and its
// identity record, CrashPrepareManifestWritten between the manifest's
// durable partial file and its rename into place).
const (
	CrashPrepareAfterLease         = "prepare.after-lease"
	CrashPrepareAfterPlan          = "prepare.after-plan"
	CrashPrepareManifestWritten    = "prepare.manifest-written"
	CrashPrepareAfterDownload      = "prepare.after-download"
	CrashPrepareAfterImportStarted = "prepare.after-import-started"
	CrashPrepareAfterImport        = "prepare.after-import"
	CrashPrepareAfterConfig        = "prepare.after-config"
	CrashRepairAfterDownload       = "repair.after-download"
	CrashRepairAfterImport         = "repair.after-import"
	CrashReclaimAfterJournal       = "reclaim.after-journal"
	CrashReclaimAfterNative        = "reclaim.after-native"
	CrashReclaimAfterFirstDelete   = "reclaim.after-first-delete"
	CrashReclaimAfterManifestGone  = "reclaim.after-manifest-delete"
	CrashReclaimAfterDelete        = "reclaim.after-delete"
	CrashReclaimAfterDropped       = "reclaim.after-dropped"
)

// PrepareCrashPoints, RepairCrashPoints and ReclaimCrashPoints list every
// crash point of a job in the order the job passes them.
var (
	PrepareCrashPoints = []string{CrashPrepareAfterPlan, lease.CrashAfterLease, CrashPrepareAfterLease,
		CrashPrepareManifestWritten, CrashPrepareAfterDownload, CrashPrepareAfterImportStarted, CrashPrepareAfterImport, CrashPrepareAfterConfig}
	RepairCrashPoints  = []string{CrashRepairAfterDownload, CrashRepairAfterImport}
	ReclaimCrashPoints = []string{CrashReclaimAfterJournal, CrashReclaimAfterNative, CrashReclaimAfterFirstDelete,
		CrashReclaimAfterManifestGone, CrashReclaimAfterDelete, CrashReclaimAfterDropped}
)

// Job is one preparer run.
type Job struct {
	// Kind is prepare, repair or reclaim.
	Kind generation.JobKind
	// Binding is the installation, generation and specification digest.
	Binding genstate.Binding
	// Generations is the node's generations directory.
	Generations *genstate.Dir
	// Core downloads from Core's machine API; Auth authenticates it.
	Core *machineclient.Client
	Auth machineclient.Auth
	// Runtime, when set, is the generation's runtime already read from
	// Core (enrolment); otherwise a prepare or repair asks Core's
	// configuration for exactly this generation.
	Runtime *machine.Runtime
	// Docker loads images and checks they are there; it is never asked to
	// delete one.
	Docker *docker.Provider
	// Lease is the exclusive lease the node took and the preparer
	// inherited; nil for a prepare of a generation without a lease (the
	// preparer creates it). Repair and reclaim require it.
	Lease *lease.Lease
	// Log receives the preparer's own log; nil discards.
	Log io.Writer
}

// failure is a classified end of a job.
type failure struct {
	exit int
	err  error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func refuse(format string, args ...any) error {
	return &failure{exit: ExitRefused, err: fmt.Errorf("refused: "+format, args...)}
}

// ExitCode returns the exit status that reports err (nil: ExitOK).
func ExitCode(err error, dk *docker.Provider) int {
	var f *failure
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &f):
		return f.exit
	case errors.Is(err, lease.ErrBusy):
		return ExitBusy
	case errors.Is(err, machineclient.ErrRefused):
		// A rejected credential and an unknown generation are Core's
		// definite answers, not failed transfers (spec: only transfer,
		// checksum and version-provenance failures are
		// runtime_download_failed).
		return ExitCredentialRejected
	case errors.Is(err, machineclient.ErrGenerationUnknown):
		return ExitGenerationUnknown
	case errors.Is(err, machineclient.ErrTransfer), errors.Is(err, release.ErrDigestMismatch),
		errors.Is(err, release.ErrChecksum):
		return ExitDownload
	case errors.Is(err, lease.ErrIdentityMissing), errors.Is(err, lease.ErrReplaced), errors.Is(err, lease.ErrUnsafe),
		errors.Is(err, lease.ErrMismatch), errors.Is(err, lease.ErrInvalid), errors.Is(err, lease.ErrExists),
		errors.Is(err, genstate.ErrInvalid), errors.Is(err, genstate.ErrMismatch), errors.Is(err, release.ErrInvalid),
		errors.Is(err, docker.ErrImageRefNotInTarball), errors.Is(err, docker.ErrImportMismatch):
		return ExitRefused
	case errors.Is(err, syscall.ENOSPC):
		return exitForDiagnostic(proto.DiagStorageFull)
	case dk != nil:
		return exitForDiagnostic(dk.Diagnose(err))
	}
	return exitForDiagnostic(proto.DiagProviderUnavailable)
}

// Run runs the job under the installation lock (waiting for it until ctx
// ends). Its error, classified by ExitCode, is the job's outcome.
func Run(ctx context.Context, j *Job) error {
	if j.Log == nil {
		j.Log = io.Discard
	}
	il, err := lease.LockInstallation(ctx, j.Generations.InstallLockPath())
	if err != nil {
		if ctx.Err() != nil {
			return &failure{exit: ExitBusy, err: err}
		}
		return err
	}
	defer il.Close()
	switch j.Kind {
	case generation.JobPrepare:
		return j.prepare(ctx)
	case generation.JobRepair:
		return j.repair(ctx)
	case generation.JobReclaim:
		return j.reclaim(ctx)
	}
	return &failure{exit: ExitUsage, err: fmt.Errorf("unknown job %q", j.Kind)}
}

// local reads the generation's records and refuses what cannot be
// verified or belongs to another binding.
func (j *Job) local() (genstate.Local, error) {
	l := j.Generations.Inspect(j.Binding.Generation)
	for _, err := range []error{l.IdentityErr, l.PlanErr, l.ConfigErr, l.JournalErr, l.DroppedErr} {
		if err != nil {
			return l, err
		}
	}
	if l.Lease && l.Identity == nil {
		return l, lease.ErrIdentityMissing
	}
	if b, ok := l.Binding(); ok && b != j.Binding {
		return l, refuse("generation %d is retained with another specification", j.Binding.Generation)
	}
	for _, b := range []*genstate.Binding{planBinding(l.Plan), configBinding(l.Config), journalBinding(l.Journal), droppedBinding(l.Dropped)} {
		if b != nil && *b != j.Binding {
			return l, refuse("a record of generation %d binds another specification", j.Binding.Generation)
		}
	}
	return l, nil
}

func planBinding(p *genstate.Plan) *genstate.Binding {
	if p == nil {
		return nil
	}
	return &p.Binding
}

func configBinding(c *genstate.Config) *genstate.Binding {
	if c == nil {
		return nil
	}
	return &c.Binding
}

func journalBinding(x *genstate.Journal) *genstate.Binding {
	if x == nil {
		return nil
	}
	return &x.Binding
}

func droppedBinding(x *genstate.Dropped) *genstate.Binding {
	if x == nil {
		return nil
	}
	return &x.Binding
}

// unfinished refuses a generation that is dropped or being reclaimed:
// neither is prepared or repaired.
func unfinished(l genstate.Local) error {
	switch {
	case l.Dropped != nil:
		return refuse("generation %d was dropped; it is never prepared again", l.Generation)
	case l.Journal != nil:
		return refuse("generation %d has an unfinished reclamation", l.Generation)
	}
	return nil
}

// exclusive returns the job's exclusive lease: the inherited one,
// verified, or (prepare of a generation with a lease the node did not
// pass) one taken now without blocking.
func (j *Job) exclusive() (*lease.Lease, error) {
	if j.Lease != nil {
		return j.Lease, nil
	}
	ls, err := lease.Acquire(j.Generations.Path(), j.Binding.Want(), lease.Exclusive)
	if err != nil {
		return nil, err
	}
	j.Lease = ls
	return ls, nil
}

// runtime returns the generation's runtime: the one given, or the one
// Core's configuration names for exactly this generation and digest.
func (j *Job) runtime(ctx context.Context) (machine.Runtime, error) {
	if j.Runtime != nil {
		if j.Runtime.Generation != j.Binding.Generation || j.Runtime.SpecificationDigest != j.Binding.SpecificationDigest {
			return machine.Runtime{}, refuse("the given runtime is another generation's")
		}
		return *j.Runtime, nil
	}
	return j.Core.Runtime(ctx, j.Auth, j.Binding.Generation, j.Binding.SpecificationDigest)
}

// filesDir creates (mode 0700) or checks the generation's private
// version directory.
func (j *Job) filesDir() (string, error) {
	dir := j.Generations.FilesPath(j.Binding.Generation)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := lease.CheckDir(dir); err != nil {
		return "", err
	}
	return dir, lease.SyncDir(j.Generations.Path())
}

// partial is the suffix of a file being downloaded.
const partial = ".partial"

// fetch makes dir/name hold exactly the declared bytes: an existing
// complete file must verify (a conflict otherwise: nothing is
// overwritten); a missing one is downloaded into name.partial, resuming
// after the bytes already there, verified, then renamed into place.
// Bytes that fail verification are never used: a bad partial file is
// removed and the download reported failed.
func (j *Job) fetch(ctx context.Context, dir, path string, a release.Artifact) error {
	final := filepath.Join(dir, a.Name)
	if err := verifyFile(final, a); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return refuse("version file %s: %v", a.Name, err)
	}
	tmp := final + partial
	f, err := openPrivate(tmp)
	if err != nil {
		return err
	}
	derr := j.Core.Download(ctx, path, j.Auth, f, a.Size, `"sha256:`+a.SHA256+`"`)
	f.Close()
	if derr != nil {
		return derr
	}
	if err := verifyFile(tmp, a); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%w: %s", release.ErrChecksum, a.Name)
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return lease.SyncDir(dir)
}

// openVersionFile opens a file of the version directory without
// following a symlink and without blocking: a named pipe (or a device)
// planted there is opened at once and then refused by checkPrivate,
// instead of blocking the preparer until a writer appears.
func openVersionFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
}

// openPrivate opens (creating, mode 0600) a private file for appending
// download bytes; a symlink or a file with other links or owner is
// refused.
func openPrivate(path string) (*os.File, error) {
	f, err := openVersionFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symlink", lease.ErrUnsafe, filepath.Base(path))
		}
		return nil, err
	}
	if err := checkPrivate(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkPrivate refuses an open file that is not a regular file with one
// link, owned by us, private.
func checkPrivate(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", lease.ErrUnsafe, fi.Name())
	case !ok || st.Nlink != 1:
		return fmt.Errorf("%w: %s has several hard links", lease.ErrUnsafe, fi.Name())
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is owned by another user", lease.ErrUnsafe, fi.Name())
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%w: %s is open to group or others", lease.ErrUnsafe, fi.Name())
	}
	return nil
}

// verifyFile checks that path is a private regular file holding exactly
// a's bytes. A missing file is fs.ErrNotExist.
func verifyFile(path string, a release.Artifact) error {
	f, err := openVersionFile(path, os.O_RDONLY, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return fmt.Errorf("%w: %s is a symlink", lease.ErrUnsafe, filepath.Base(path))
		}
		return err
	}
	defer f.Close()
	if err := checkPrivate(f); err != nil {
		return err
	}
	return a.Verify(f)
}

// manifestArtifact describes manifest.json as a version file.
func manifestArtifact(digest string, size int64) release.Artifact {
	return release.Artifact{Name: release.ManifestName, Kind: "manifest", SHA256: digest, Size: size}
}

// manifest makes the version directory hold the release's verified
// manifest.json and returns it parsed: an existing one must verify
// against the specification digest (a conflict otherwise); a missing one
// is downloaded and verified (provenance).
func (j *Job) manifest(ctx context.Context, dir string, rt machine.Runtime) (*release.Manifest, []byte, error) {
	path := filepath.Join(dir, release.ManifestName)
	b, err := lease.ReadPrivate(path, release.MaxManifestSize)
	switch {
	case err == nil:
		m, verr := release.VerifyManifest(b, j.Binding.SpecificationDigest, rt.Source)
		if verr != nil {
			return nil, nil, refuse("the retained manifest does not match the specification: %v", verr)
		}
		return m, b, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, err
	}
	b, err = j.Core.Get(ctx, rt.ManifestURL, j.Auth, release.MaxManifestSize)
	if err != nil {
		return nil, nil, err
	}
	m, err := release.VerifyManifest(b, j.Binding.SpecificationDigest, rt.Source)
	if err != nil {
		return nil, nil, err
	}
	if err := writeVersionFile(dir, release.ManifestName, b); err != nil {
		return nil, nil, err
	}
	return m, b, nil
}

// writeVersionFile writes b as the version file name of dir the way a
// download does: into name.partial (private, fsync'd), then renamed into
// place without replacing anything, and the directory fsync'd. A crash
// in between leaves only the partial file of a known version file, which
// the next attempt rewrites and a reclamation may delete; never a
// temporary file of another name, which would block the reclamation.
func writeVersionFile(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+partial)
	f, err := openPrivate(tmp)
	if err != nil {
		return err
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(b, 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	crashpoint.Hit(CrashPrepareManifestWritten)
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, filepath.Join(dir, name), unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return refuse("version file %s appeared while it was written", name)
		}
		return err
	}
	return lease.SyncDir(dir)
}

// artifactPath returns the download path of an artifact of the runtime.
func artifactPath(rt machine.Runtime, name string) string {
	return strings.TrimSuffix(rt.ManifestURL, release.ManifestName) + name
}
