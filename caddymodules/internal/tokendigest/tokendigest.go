// Package tokendigest configures the bearer tokens a handler accepts by
// their SHA-256 digests only, so no token appears in the Caddyfile, the
// adapted JSON or Caddy's admin API. The internal node API
// (sandbox_node_api) and the fixed-entry probe relay (fixed_entry_probe)
// take their tokens this way.
package tokendigest

import (
	"crypto/sha256"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/nodecore/credential"
)

// UnmarshalBlock reads a handler directive whose only setting is the
// repeatable token_sha256. Syntax:
//
//	<directive> [<matcher>] {
//		token_sha256 <sha256 hex of a token>
//	}
//
// d must be positioned before the directive's name. It returns the digests
// as written (placeholders unexpanded). Errors: an argument after the
// directive, a token_sha256 without exactly one value or given twice, any
// other subdirective, and a block without token_sha256.
func UnmarshalBlock(d *caddyfile.Dispenser, directive string) ([]string, error) {
	d.Next() // directive name
	if err := argcount.Check(d, directive, 0, 0, ""); err != nil {
		return nil, err
	}
	var out []string
	for d.NextBlock(0) {
		switch d.Val() {
		case "token_sha256":
			if err := argcount.Check(d, "token_sha256", 1, 1, "<sha256 hex of a token>"); err != nil {
				return nil, err
			}
			d.NextArg()
			v := d.Val()
			for _, old := range out {
				if old == v {
					return nil, d.Err("token_sha256 already specified")
				}
			}
			out = append(out, v)
		default:
			return nil, d.Errf("unrecognized %s subdirective %q", directive, d.Val())
		}
	}
	if len(out) == 0 {
		return nil, d.Errf("%s needs at least one token_sha256", directive)
	}
	return out, nil
}

// Parse expands the placeholders of each configured digest ({env.*},
// {file.*}) and parses it as 64 lowercase hexadecimal digits. At least
// one is required. Errors name a bad digest by its index, never its value.
func Parse(values []string) ([][sha256.Size]byte, error) {
	if len(values) == 0 {
		return nil, fmt.Errorf("at least one token_sha256 is required")
	}
	repl := caddy.NewReplacer()
	out := make([][sha256.Size]byte, 0, len(values))
	for i, s := range values {
		d, err := credential.ParseDigest(repl.ReplaceAll(s, ""))
		if err != nil {
			return nil, fmt.Errorf("token_sha256[%d]: must be 64 lowercase hexadecimal digits", i)
		}
		out = append(out, d)
	}
	return out, nil
}
