package docker

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// Generation binds a Provider to one prepared deployment generation (spec
// node-protocol.md "Preparation and reclamation records": the final
// provider configuration of a generation records the immutable local
// image ID). A bound provider creates every container from ImageID with
// the generation's defaults, whatever image reference the create names,
// and its probe reports the generation's readiness.
type Generation struct {
	// ImageRef is the image reference the release's tarball tags; a
	// create's bootstrap.image must be ImageRef or ImageID.
	ImageRef string
	// ImageID is the local image ID ("sha256:…") every container runs.
	ImageID string
	// Command is the default entrypoint argv, used when a create names
	// none; empty means the image's.
	Command []string
	// Env are default environment variables; a create's env overrides
	// them name by name.
	Env map[string]string
	// User is the container user; empty means the image's.
	User string
	// MemoryBytes and NanoCPUs are the default limits, used when a create
	// sets none (0 = no limit).
	MemoryBytes, NanoCPUs int64
	// NetworkMode replaces Config.Network when not empty.
	NetworkMode string
	// Seccomp is the generation's verified seccomp profile (JSON); nil
	// when the generation has none.
	Seccomp []byte
	// SeccompMissing is true when the generation declares a seccomp
	// profile whose bytes are missing or changed: the provider is then a
	// not-ready placeholder that starts no container.
	SeccompMissing bool
}

// Probe errors of a bound provider (Diagnose maps them).
var (
	errImageMissing   = errors.New("docker: the generation's image is not in the engine")
	errSeccompMissing = errors.New("docker: the generation's seccomp profile is missing or changed")
)

// probeGeneration checks what a bound provider needs beyond the daemon:
// the image by its ID and the seccomp profile bytes.
func (p *Provider) probeGeneration(ctx context.Context) error {
	g := p.cfg.Generation
	if g == nil {
		return nil
	}
	if _, err := p.cli.ImageInspect(ctx, g.ImageID); err != nil {
		if cerrdefs.IsNotFound(err) {
			return errImageMissing
		}
		return err
	}
	if g.SeccompMissing {
		return errSeccompMissing
	}
	return nil
}

// errNotStartable is the cause of a create or new_compute a placeholder
// provider (seccomp profile missing) refuses: nothing is created, and the
// answer is unconfirmed so that Core observes instead of trusting it.
var errNotStartable = errors.New("docker: the generation's seccomp profile is missing; no container is started")

// errForeignImage is the cause of a create whose image is not the
// generation's.
var errForeignImage = errors.New("docker: the create names an image other than the generation's")

// bindCreate applies the generation to a create: the image must be the
// generation's (invalid otherwise), and the defaults fill what the create
// leaves unset.
func (g *Generation) bindCreate(b proto.Bootstrap) (image string, entrypoint []string, env map[string]string, nanoCPUs, memory int64, err error) {
	if b.Image != g.ImageRef && b.Image != g.ImageID {
		return "", nil, nil, 0, 0, provider.Fail(proto.ErrInvalid, errForeignImage)
	}
	if g.SeccompMissing {
		return "", nil, nil, 0, 0, provider.Fail(proto.ErrUnconfirmed, errNotStartable)
	}
	entrypoint = b.Entrypoint
	if len(entrypoint) == 0 {
		entrypoint = g.Command
	}
	env = maps.Clone(g.Env)
	if env == nil && len(b.Env) > 0 {
		env = map[string]string{}
	}
	maps.Copy(env, b.Env)
	nanoCPUs, memory = b.CPUMillis*1_000_000, b.MemoryBytes
	if nanoCPUs == 0 {
		nanoCPUs = g.NanoCPUs
	}
	if memory == 0 {
		memory = g.MemoryBytes
	}
	return g.ImageID, entrypoint, env, nanoCPUs, memory, nil
}

// securityOpt returns the container security options of the generation:
// its seccomp profile, inline, as the Docker CLI passes a profile file.
func (g *Generation) securityOpt() []string {
	if g == nil || g.Seccomp == nil {
		return nil
	}
	return []string{"seccomp=" + string(g.Seccomp)}
}

// network returns the network mode of the provider's containers.
func (p *Provider) network() string {
	if g := p.cfg.Generation; g != nil && g.NetworkMode != "" {
		return g.NetworkMode
	}
	return p.cfg.Network
}

// Import errors.
var (
	// ErrImageRefNotInTarball: the release's tarball does not tag the
	// provider spec's image_ref, or has no readable manifest.json.
	ErrImageRefNotInTarball = errors.New("docker: the image tarball does not tag the release's image_ref")
	// ErrImportMismatch: after the load, the engine does not hold the
	// image under the identity the tarball declares.
	ErrImportMismatch = errors.New("docker: the loaded image does not have the tarball's identity")
)

// maxTarManifest bounds manifest.json and index.json inside an image
// tarball, in bytes.
const maxTarManifest = 1 << 20

// TarballImageIDs reads a `docker save` tarball (the Docker 20.10 layout
// and the OCI layout of later versions) and returns the identities the
// image tagged ref may load as: its config digest ("sha256:…", the image
// ID of the classic image store) and, for OCI tarballs, its manifest
// digests (the image ID of the containerd image store). Errors:
// ErrImageRefNotInTarball, or the file's read error.
func TarballImageIDs(tarPath, ref string) ([]string, error) {
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var manifest, index []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrImageRefNotInTarball, err)
		}
		switch path.Clean(h.Name) {
		case "manifest.json":
			if manifest, err = readBounded(tr); err != nil {
				return nil, err
			}
		case "index.json":
			if index, err = readBounded(tr); err != nil {
				return nil, err
			}
		}
	}
	var entries []struct {
		Config   string
		RepoTags []string
	}
	if manifest == nil || json.Unmarshal(manifest, &entries) != nil {
		return nil, fmt.Errorf("%w: no readable manifest.json", ErrImageRefNotInTarball)
	}
	var ids []string
	for _, e := range entries {
		if !slices.Contains(e.RepoTags, ref) {
			continue
		}
		// "<hex>.json" (Docker 20.10) or "blobs/sha256/<hex>" (OCI).
		hex := strings.TrimSuffix(path.Base(e.Config), ".json")
		if !proto.IsDigest(hex) {
			return nil, fmt.Errorf("%w: the manifest's config is not a SHA-256 digest", ErrImageRefNotInTarball)
		}
		ids = append(ids, "sha256:"+hex)
	}
	if len(ids) != 1 {
		return nil, fmt.Errorf("%w: %d images carry the tag", ErrImageRefNotInTarball, len(ids))
	}
	if index != nil {
		var idx struct {
			Manifests []struct {
				Digest      string
				Annotations map[string]string
			}
		}
		if json.Unmarshal(index, &idx) == nil {
			for _, m := range idx.Manifests {
				if strings.HasPrefix(m.Digest, "sha256:") && proto.IsDigest(strings.TrimPrefix(m.Digest, "sha256:")) {
					ids = append(ids, m.Digest)
				}
			}
		}
	}
	return ids, nil
}

func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTarManifest+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTarManifest {
		return nil, fmt.Errorf("%w: manifest larger than %d bytes", ErrImageRefNotInTarball, maxTarManifest)
	}
	return b, nil
}

// loadError is an error message in the engine's load progress stream.
type loadError struct{ msg string }

func (e *loadError) Error() string { return "docker: load: " + e.msg }

// Import is the importer of a generation's preparation: it loads the
// `docker save` tarball at tarPath into the engine (the node never pulls)
// and returns the immutable local image ID of the image tagged ref, one of
// the identities TarballImageIDs names. Loading the same bytes again is
// harmless: the engine keeps one image per ID. Images are never deleted.
// Errors: ErrImageRefNotInTarball, ErrImportMismatch, or the engine's
// (Diagnose classifies them).
func (p *Provider) Import(ctx context.Context, tarPath, ref string) (string, error) {
	ids, err := TarballImageIDs(tarPath, ref)
	if err != nil {
		return "", err
	}
	f, err := os.Open(tarPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	resp, err := p.cli.ImageLoad(ctx, f, client.ImageLoadWithQuiet(true))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(io.LimitReader(resp.Body, 16<<20))
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("docker: read the load progress: %w", err)
		}
		if m.Error != "" {
			return "", &loadError{msg: m.Error}
		}
	}
	return p.resolve(ctx, ids)
}

// ImagePresent reports whether the engine holds image id.
func (p *Provider) ImagePresent(ctx context.Context, id string) (bool, error) {
	_, err := p.cli.ImageInspect(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// resolve returns the first of ids the engine knows.
func (p *Provider) resolve(ctx context.Context, ids []string) (string, error) {
	for _, id := range ids {
		ins, err := p.cli.ImageInspect(ctx, id)
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		if ins.ID == id || slices.Contains(ids, ins.ID) {
			return ins.ID, nil
		}
	}
	return "", ErrImportMismatch
}
