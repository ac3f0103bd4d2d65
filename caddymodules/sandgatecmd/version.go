package sandgatecmd

import (
	"fmt"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/internal/version"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "sandgate-version",
		Short: "Prints the sandgate commit this binary was built from",
		Long: `
Prints one line naming the sandgate commit compiled into this caddy binary,
its commit time, and whether the work tree had uncommitted changes:

  sandgate commit <40 hex> (<commit time>)[ with uncommitted changes]

"caddy version" prints Caddy's own version and "caddy build-info" the
module versions, where sandgate shows only as a local replacement; this
command is where the commit is. A binary built without hack/version.sh's
linker flags prints "sandgate commit unknown".`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) {
				fmt.Println(version.Get())
				return 0, nil
			})
		},
	})
}
