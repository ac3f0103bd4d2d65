package preparer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/internal/crashpoint"
	"github.com/sandgate/sandgate/nodeagent/lease"
)

// repair restores a prepared generation's missing bytes: it first asks
// Core's authenticated configuration for exactly this generation (the
// same digest and release, or a refusal), keeps the configuration and
// paths, verifies every existing version file, fetches only the missing
// ones from that release, and loads the image again when the
// engine lost it — which must give back the recorded image ID. A byte
// conflict or a different retained specification refuses; a missing
// configuration is prepared from its exact plan, or refused without one.
func (j *Job) repair(ctx context.Context) error {
	g := j.Binding.Generation
	l, err := j.local()
	if err == nil {
		err = unfinished(l)
	}
	if err != nil {
		return err
	}
	switch {
	case l.Config == nil && l.Plan != nil:
		return j.prepare(ctx)
	case l.Config == nil:
		return &failure{exit: ExitConfigMissing, err: fmt.Errorf("generation %d has no provider configuration and no exact plan; repair refused", g)}
	}
	if _, err := j.exclusive(); err != nil {
		return err
	}
	cfg := l.Config
	// Before any recovery, Core's authenticated configuration is asked for
	// exactly this generation: it must still bind it to this digest and
	// this release.
	rt, err := j.runtime(ctx)
	if err != nil {
		return err
	}
	if rt.Source != cfg.Source {
		return refuse("Core's configuration names another release for generation %d", g)
	}
	dir := j.Generations.FilesPath(g)
	if err := lease.CheckDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	// Every existing sibling file first: a conflict refuses before
	// anything is fetched.
	var missing []genstate.File
	for _, f := range cfg.Files {
		err := verifyFile(filepath.Join(dir, f.Name), artifactOf(f))
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrNotExist):
			missing = append(missing, f)
		default:
			return refuse("version file %s: %v", f.Name, err)
		}
	}
	if len(missing) > 0 {
		if _, err := j.filesDir(); err != nil {
			return err
		}
		for _, f := range missing {
			if f.Name == release.ManifestName {
				if _, _, err := j.manifest(ctx, dir, rt); err != nil {
					return err
				}
				continue
			}
			if err := j.fetch(ctx, dir, artifactPath(rt, f.Name), artifactOf(f)); err != nil {
				return fmt.Errorf("artifact %s: %w", f.Name, err)
			}
		}
		crashpoint.Hit(CrashRepairAfterDownload)
	}
	present, err := j.Docker.ImagePresent(ctx, cfg.ImageID)
	if err != nil {
		return err
	}
	if !present {
		img := ""
		for _, f := range cfg.Files {
			if f.Kind == string(release.KindImage) {
				img = f.Name
			}
		}
		id, err := j.Docker.Import(ctx, filepath.Join(dir, img), cfg.ImageRef)
		if err != nil {
			return err
		}
		if id != cfg.ImageID {
			return refuse("the reloaded image has another ID than the recorded one")
		}
		crashpoint.Hit(CrashRepairAfterImport)
	}
	return nil
}

func artifactOf(f genstate.File) release.Artifact {
	return release.Artifact{Name: f.Name, Kind: release.Kind(f.Kind), SHA256: f.SHA256, Size: f.Size}
}

// reclaim reclaims a generation Core authorised to drop (the node holds
// its exclusive lease and checked every reference while holding it): the
// journal, the native clean-up record (Docker images are never deleted),
// the verification of every remaining version file, their deletion, the
// dropped marker, the journal cleared. A restarted reclamation continues
// from its journal.
func (j *Job) reclaim(ctx context.Context) error {
	g := j.Binding.Generation
	l, err := j.local()
	if err != nil {
		return err
	}
	// The node passes the exclusive lease; only a plan written before the
	// preparation reached its lease goes without one.
	if j.Lease == nil && (l.Lease || l.Plan == nil || l.Config != nil) {
		return &failure{exit: ExitUsage, err: errors.New("reclamation needs the exclusive lease from the node")}
	}
	if l.Dropped != nil {
		// Finished but for clearing the records.
		if err := j.Generations.Remove(g, genstate.RecordJournal); err != nil {
			return err
		}
		return j.Generations.Remove(g, genstate.RecordPlan)
	}
	if l.Lease && l.Identity == nil {
		return lease.ErrIdentityMissing
	}
	journal := l.Journal
	if journal == nil {
		journal = &genstate.Journal{Binding: j.Binding}
		if err := j.Generations.WriteJournal(journal); err != nil {
			return err
		}
		crashpoint.Hit(CrashReclaimAfterJournal)
	}
	if !journal.NativeCleanupDone {
		// Docker's images belong to the host's shared engine: automatic
		// reclamation never deletes or prunes them. Nothing native to
		// remove; the step is recorded so a retry goes on from here.
		journal.NativeCleanupDone = true
		if err := j.Generations.WriteJournal(journal); err != nil {
			return err
		}
		crashpoint.Hit(CrashReclaimAfterNative)
	}
	if err := j.deleteVersionFiles(l); err != nil {
		return err
	}
	if err := j.Generations.WriteDropped(&genstate.Dropped{Binding: j.Binding}); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	crashpoint.Hit(CrashReclaimAfterDropped)
	if err := j.Generations.Remove(g, genstate.RecordJournal); err != nil {
		return err
	}
	return j.Generations.Remove(g, genstate.RecordPlan)
}

// deleteVersionFiles checks every file of the version directory before the
// first deletion — each must be a known version file with its recorded
// bytes (or the partial download of one, no longer than declared), a
// private regular file with one link — then deletes them and the
// directory. Anything else refuses and deletes nothing.
func (j *Job) deleteVersionFiles(l genstate.Local) error {
	dir := j.Generations.FilesPath(j.Binding.Generation)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := lease.CheckDir(dir); err != nil {
		return err
	}
	known, err := j.knownFiles(l, dir)
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(dir, name)
		base, isPartial := strings.CutSuffix(name, partial)
		a, ok := known[base]
		switch {
		case !ok:
			return refuse("unknown file %s in the version directory; nothing deleted", name)
		case isPartial:
			f, err := openVersionFile(path, os.O_RDONLY, 0)
			if err != nil {
				return refuse("version file %s: %v", name, err)
			}
			err = checkPrivate(f)
			fi, _ := f.Stat()
			f.Close()
			if err != nil || fi.Size() > a.Size {
				return refuse("partial file %s is not ours or longer than declared; nothing deleted", name)
			}
		default:
			if err := verifyFile(path, a); err != nil {
				return refuse("version file %s: %v; nothing deleted", name, err)
			}
		}
		names = append(names, name)
	}
	// manifest.json goes last, after the other deletions are durable: a
	// generation without a configuration knows its files only from it, so
	// a retry after a crash must still find it while any other file is
	// left.
	slices.Sort(names)
	if i := slices.Index(names, release.ManifestName); i >= 0 {
		names = append(slices.Delete(names, i, i+1), release.ManifestName)
	}
	for i, name := range names {
		if name == release.ManifestName {
			if err := lease.SyncDir(dir); err != nil {
				return err
			}
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return err
		}
		if i == 0 {
			if err := lease.SyncDir(dir); err != nil {
				return err
			}
			crashpoint.Hit(CrashReclaimAfterFirstDelete)
		}
		if name == release.ManifestName {
			crashpoint.Hit(CrashReclaimAfterManifestGone)
		}
	}
	if err := os.Remove(dir); err != nil {
		return err
	}
	if err := lease.SyncDir(j.Generations.Path()); err != nil {
		return err
	}
	crashpoint.Hit(CrashReclaimAfterDelete)
	return nil
}

// knownFiles returns the version files the generation may hold: those of
// its configuration, or — a preparation that never published one — the
// manifest verified against the specification digest and the artifacts
// it declares. Without either, only the manifest's partial download is
// known.
func (j *Job) knownFiles(l genstate.Local, dir string) (map[string]release.Artifact, error) {
	known := map[string]release.Artifact{}
	if l.Config != nil {
		for _, f := range l.Config.Files {
			known[f.Name] = artifactOf(f)
		}
		return known, nil
	}
	known[release.ManifestName] = manifestArtifact(j.Binding.SpecificationDigest, release.MaxManifestSize)
	b, err := lease.ReadPrivate(filepath.Join(dir, release.ManifestName), release.MaxManifestSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return known, nil
	case err != nil:
		return nil, refuse("manifest: %v", err)
	}
	m, err := release.VerifyManifest(b, j.Binding.SpecificationDigest, "")
	if err != nil {
		return nil, refuse("the retained manifest does not match the specification: %v", err)
	}
	known[release.ManifestName] = manifestArtifact(j.Binding.SpecificationDigest, int64(len(b)))
	for _, a := range m.Artifacts {
		known[a.Name] = a
	}
	return known, nil
}
