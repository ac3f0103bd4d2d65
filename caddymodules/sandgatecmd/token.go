// Package sandgatecmd is the gateway binary's own subcommands, registered
// with Caddy's command line: caddy sandgate-token (mint a data-plane access
// token), caddy sandgate-release (publish a release into the release store
// and write manifests) and caddy sandgate-version. Each is a thin adapter
// over a plain package (gateway/token, nodecore/releasestore, node/release,
// internal/version).
package sandgatecmd

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/gateway/token"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "sandgate-token",
		Usage: "--key <file> --algorithm <alg> --kid <kid> --credential <id> --sandbox <id> [--ttl <duration>] [--port <n> | --traffic]",
		Short: "Mints an X-Access-Token for the E2B data plane",
		Long: `
Mints a signed envd access token (a JWT) of the kind the e2b_dataplane
handler verifies, and prints it on standard output. Operators use it to test
a gateway; a Portal's control API mints the same tokens in production.

The key file is the HMAC secret or a PEM private key for the algorithm
(EdDSA, RS*, PS*, ES*). The token carries the claims credential_id,
sandbox_id, port (the logical envd service, 49983), iat and exp = now + ttl,
and the header kid. With --traffic it is the sandbox's traffic access token
instead (the e2b-traffic-access-token header of E2B_DOMAIN's port requests):
aud "traffic" and no port.`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().String("key", "", "key file: HMAC secret or PEM private key (required)")
			cmd.Flags().String("algorithm", "", "JWT algorithm pinned to the key, e.g. HS256 or EdDSA (required)")
			cmd.Flags().String("kid", "", "key ID written in the token header (required)")
			cmd.Flags().String("credential", "", "resource credential ID (required)")
			cmd.Flags().String("sandbox", "", "sandbox ID (required)")
			cmd.Flags().Duration("ttl", time.Hour, "token lifetime")
			cmd.Flags().Int("port", 49983, "logical envd service port claim")
			cmd.Flags().Bool("traffic", false, "mint the sandbox's traffic access token (aud traffic, no port) instead")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdMintToken)
		},
	})
}

// cmdMintToken implements "caddy sandgate-token". It returns exit code 1 and
// an error naming the missing flag or the key problem; the error never
// contains key material.
func cmdMintToken(fl caddycmd.Flags) (int, error) {
	keyFile, alg, kid := fl.String("key"), fl.String("algorithm"), fl.String("kid")
	cred, sbx := fl.String("credential"), fl.String("sandbox")
	for name, v := range map[string]string{"key": keyFile, "algorithm": alg, "kid": kid, "credential": cred, "sandbox": sbx} {
		if v == "" {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("--%s is required", name)
		}
	}
	ttl := fl.Duration("ttl")
	if ttl <= 0 {
		return caddy.ExitCodeFailedStartup, errors.New("--ttl must be positive")
	}
	key, err := token.LoadSigningKey(kid, alg, keyFile)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	tgt := token.Target{CredentialID: cred, SandboxID: sbx, Port: fl.Int("port")}
	if fl.Bool("traffic") {
		tgt = token.Target{CredentialID: cred, SandboxID: sbx, Audience: token.AudienceTraffic}
	}
	tok, err := key.Mint(tgt, ttl, time.Now())
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	fmt.Fprintln(os.Stdout, tok)
	return 0, nil
}
