package sandgatecmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "sandgate-release",
		Usage: "publish --store <dir> <release dir> | manifest --source <name> --image <file> --provider-spec <file> [--seccomp <file>] <release dir>",
		Short: "Publishes node runtime releases into the gateway's immutable release store",
		Long: `
Manages the release store the sandbox_node_connect handler serves to nodes
(the nodes { releases <dir> } setting of the sandgate app).

  caddy sandgate-release manifest --source <name> --image <file>
        --provider-spec <file> [--seccomp <file>] <release dir>
      writes <release dir>/manifest.json for the named files of that
      directory (sizes and SHA-256 computed) and prints the release's
      specification digest. Refuses to replace an existing manifest.json.

  caddy sandgate-release publish --store <dir> <release dir>
      publishes the release in <release dir> (manifest.json and the
      artifacts it declares) and prints its source and specification
      digest. A new release is copied whole, checksums verified, and
      renamed into place. Re-publishing an existing release verifies that
      the manifest is byte-identical and that every stored and every given
      artifact matches its checksum, then adds only the missing declared
      artifacts, atomically. Any conflict adds nothing and exits 1.

The reference is docs/node-machine-api.md.`,
		CobraFunc: func(cmd *cobra.Command) {
			publish := &cobra.Command{
				Use:   "publish --store <dir> <release dir>",
				Short: "Publish a release directory into the store",
				Args:  cobra.ExactArgs(1),
				RunE: func(c *cobra.Command, args []string) error {
					return cmdPublish(c.OutOrStdout(), flagString(c, "store"), args[0])
				},
			}
			publish.Flags().String("store", "", "the release store directory (required)")
			manifest := &cobra.Command{
				Use:   "manifest --source <name> --image <file> --provider-spec <file> [--seccomp <file>] <release dir>",
				Short: "Write manifest.json for a release directory",
				Args:  cobra.ExactArgs(1),
				RunE: func(c *cobra.Command, args []string) error {
					return cmdManifest(c.OutOrStdout(), args[0], flagString(c, "source"), map[release.Kind]string{
						release.KindImage: flagString(c, "image"), release.KindProviderSpec: flagString(c, "provider-spec"),
						release.KindSeccomp: flagString(c, "seccomp"),
					})
				},
			}
			manifest.Flags().String("source", "", "the release's source name (required)")
			manifest.Flags().String("image", "", "the image tarball (docker save) in the release directory (required)")
			manifest.Flags().String("provider-spec", "", "the provider spec in the release directory (required)")
			manifest.Flags().String("seccomp", "", "the seccomp profile in the release directory (optional)")
			cmd.AddCommand(publish, manifest)
		},
	})
}

func flagString(c *cobra.Command, name string) string {
	v, _ := c.Flags().GetString(name)
	return v
}

// cmdPublish implements "caddy sandgate-release publish".
func cmdPublish(out io.Writer, store, dir string) error {
	if store == "" {
		return errors.New("--store is required")
	}
	s, err := releasestore.OpenStore(store)
	if err != nil {
		return err
	}
	res, err := s.Publish(dir)
	if err != nil {
		return fmt.Errorf("publish refused, nothing was added: %w", err)
	}
	switch {
	case res.Created:
		fmt.Fprintf(out, "published %s (new)\n", res.Source)
	case len(res.Added) > 0:
		fmt.Fprintf(out, "published %s: added %s\n", res.Source, strings.Join(res.Added, ", "))
	default:
		fmt.Fprintf(out, "published %s: already complete and identical, nothing added\n", res.Source)
	}
	if len(res.Missing) > 0 {
		fmt.Fprintf(out, "still missing from the store: %s\n", strings.Join(res.Missing, ", "))
	}
	fmt.Fprintf(out, "specification digest %s\n", res.Digest)
	return nil
}

// cmdManifest implements "caddy sandgate-release manifest".
func cmdManifest(out io.Writer, dir, source string, files map[release.Kind]string) error {
	switch {
	case source == "":
		return errors.New("--source is required")
	case files[release.KindImage] == "":
		return errors.New("--image is required")
	case files[release.KindProviderSpec] == "":
		return errors.New("--provider-spec is required")
	}
	if files[release.KindSeccomp] == "" {
		delete(files, release.KindSeccomp)
	}
	specName := files[release.KindProviderSpec]
	b, err := os.ReadFile(filepath.Join(dir, filepath.Base(specName)))
	if err != nil {
		return err
	}
	if _, err := release.ParseProviderSpec(b); err != nil {
		return err
	}
	raw, err := release.Build(source, dir, files)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, release.ManifestName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s\nspecification digest %s\n", filepath.Join(dir, release.ManifestName), release.Digest(raw))
	return nil
}
