package preparer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/internal/crashpoint"
	"github.com/sandgate/sandgate/nodeagent/lease"
)

// prepare prepares the generation, or resumes its plan (see the package
// comment). A generation whose final configuration is published is not
// prepared again: an interrupted clearing of the plan is finished after
// the plan and the configuration are verified to agree.
func (j *Job) prepare(ctx context.Context) error {
	g := j.Binding.Generation
	l, err := j.local()
	if err == nil {
		err = unfinished(l)
	}
	if err != nil {
		return err
	}
	switch {
	case l.Config != nil:
		if l.Plan != nil {
			// Interrupted between publishing and clearing the plan: the
			// same plan and final identity, or a refusal.
			if l.Plan.Source != l.Config.Source || l.Plan.Path != l.Config.Path {
				return refuse("the plan of generation %d drifted from its published configuration", g)
			}
			if _, err := j.exclusive(); err != nil {
				return err
			}
			return j.Generations.Remove(g, genstate.RecordPlan)
		}
		return nil
	}

	if l.Lease && l.Plan == nil {
		// Installed, but neither a configuration nor an exact plan: the
		// configuration is never rebuilt.
		return &failure{exit: ExitConfigMissing, err: fmt.Errorf("generation %d has a lease but no provider configuration and no exact plan; preparation refused", g)}
	}

	// Core's configuration names the exact release of this generation;
	// the plan records it before anything else is written.
	rt, err := j.runtime(ctx)
	if err != nil {
		return err
	}
	plan := l.Plan
	if plan == nil {
		plan = &genstate.Plan{Binding: j.Binding, Source: rt.Source, Path: genstate.FilesName(g)}
		if err := j.Generations.WritePlan(plan); err != nil {
			return err
		}
		crashpoint.Hit(CrashPrepareAfterPlan)
	} else if plan.Source != rt.Source {
		return refuse("the plan of generation %d names another release than Core's configuration", g)
	}

	// The lease: created (and its identity record persisted) before the
	// first byte is downloaded, or the existing one, exclusively.
	if !l.Lease {
		if _, err := lease.Create(j.Generations.Path(), j.Binding.Want()); err != nil {
			return err
		}
	}
	if _, err := j.exclusive(); err != nil {
		return err
	}
	crashpoint.Hit(CrashPrepareAfterLease)

	files, m, err := j.download(ctx, rt)
	if err != nil {
		return err
	}
	crashpoint.Hit(CrashPrepareAfterDownload)

	specArt, _ := m.Of(release.KindProviderSpec)
	specBytes, err := lease.ReadPrivate(filepath.Join(j.Generations.FilesPath(g), specArt.Name), release.MaxProviderSpecSize)
	if err != nil {
		return err
	}
	spec, err := release.ParseProviderSpec(specBytes)
	if err != nil {
		return err
	}

	if !plan.ImportStarted {
		plan.ImportStarted = true
		if err := j.Generations.WritePlan(plan); err != nil {
			return err
		}
		crashpoint.Hit(CrashPrepareAfterImportStarted)
	}
	imgArt, _ := m.Of(release.KindImage)
	imageID, err := j.Docker.Import(ctx, filepath.Join(j.Generations.FilesPath(g), imgArt.Name), spec.ImageRef)
	if err != nil {
		return err
	}
	crashpoint.Hit(CrashPrepareAfterImport)

	cfg := &genstate.Config{Binding: j.Binding, Source: rt.Source, Path: genstate.FilesName(g),
		Provider: spec.Provider, ImageRef: spec.ImageRef, ImageID: imageID, Command: spec.Command, Env: spec.Env,
		User: spec.User, MemoryBytes: spec.MemoryBytes, NanoCPUs: spec.NanoCPUs, NetworkMode: spec.NetworkMode,
		Files: files}
	if j.Lease != nil { // held exclusively since before the download
		id := j.Lease.Identity()
		cfg.Lease = &genstate.LeaseFile{Device: id.Device, Inode: id.Inode}
	}
	if sc, ok := m.Of(release.KindSeccomp); ok {
		cfg.Seccomp = sc.Name
	}
	if err := j.Generations.PublishConfig(cfg); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return refuse("generation %d's configuration appeared meanwhile", g)
		}
		return err
	}
	crashpoint.Hit(CrashPrepareAfterConfig)
	return j.Generations.Remove(g, genstate.RecordPlan)
}

// download makes the version directory hold the release's manifest and
// every artifact it declares, verified, fetching only what is missing;
// it returns the version files (manifest first) and the manifest.
func (j *Job) download(ctx context.Context, rt machine.Runtime) ([]genstate.File, *release.Manifest, error) {
	dir, err := j.filesDir()
	if err != nil {
		return nil, nil, err
	}
	m, mb, err := j.manifest(ctx, dir, rt)
	if err != nil {
		return nil, nil, err
	}
	files := []genstate.File{{Name: release.ManifestName, Kind: "manifest", SHA256: j.Binding.SpecificationDigest, Size: int64(len(mb))}}
	for _, a := range m.Artifacts {
		if err := j.fetch(ctx, dir, artifactPath(rt, a.Name), a); err != nil {
			return nil, nil, fmt.Errorf("artifact %s: %w", a.Name, err)
		}
		files = append(files, genstate.File{Name: a.Name, Kind: string(a.Kind), SHA256: a.SHA256, Size: a.Size})
	}
	return files, m, nil
}
