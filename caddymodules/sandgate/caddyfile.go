package sandgate

import (
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

func init() {
	httpcaddyfile.RegisterGlobalOption(AppName, parseGlobalOption)
}

// parseGlobalOption sets up the sandgate app from the global option block.
func parseGlobalOption(d *caddyfile.Dispenser, existing any) (any, error) {
	if existing != nil {
		d.Next() // the option name, so the error carries its file and line
		return nil, d.Err("the sandgate global option may appear only once")
	}
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: AppName, Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile sets up the app from Caddyfile tokens. Syntax (a
// global option):
//
//	sandgate {
//		token_key <kid> <algorithm> <file>
//		token_leeway <duration>
//		credentials <source> ...
//		cluster <id> <fixed_entry> {
//			execd_access_token <token>
//		}
//	}
//
// token_key may repeat (one per kid); cluster may repeat (one per ID).
// credentials takes a module of the sandgate.credentials namespace and its
// own syntax, e.g. "credentials file <path>" or "credentials http <url> {…}".
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "token_key":
			var k TokenKey
			if !d.Args(&k.KID, &k.Algorithm, &k.File) {
				return d.ArgErr()
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			for _, old := range a.TokenKeys {
				if old.KID == k.KID {
					return d.Errf("token_key %q already specified", k.KID)
				}
			}
			a.TokenKeys = append(a.TokenKeys, k)
		case "token_leeway":
			if a.TokenLeeway != 0 {
				return d.Err("token_leeway already specified")
			}
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("bad token_leeway %q: %v", d.Val(), err)
			}
			if dur <= 0 {
				return d.Errf("token_leeway must be positive")
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			a.TokenLeeway = caddy.Duration(dur)
		case "credentials":
			if a.CredentialsRaw != nil {
				return d.Err("credentials already specified")
			}
			if !d.NextArg() {
				return d.ArgErr()
			}
			name := d.Val()
			mod, err := caddyfile.UnmarshalModule(d, "sandgate.credentials."+name)
			if err != nil {
				return err
			}
			a.CredentialsRaw = caddyconfig.JSONModuleObject(mod, "source", name, nil)
		case "cluster":
			var id, entry string
			if !d.Args(&id, &entry) {
				return d.ArgErr()
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			if _, dup := a.Clusters[id]; dup {
				return d.Errf("cluster %q already specified", id)
			}
			c := &Cluster{FixedEntry: entry}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				switch d.Val() {
				case "execd_access_token":
					if c.ExecdAccessToken != "" {
						return d.Err("execd_access_token already specified")
					}
					if !d.NextArg() {
						return d.ArgErr()
					}
					c.ExecdAccessToken = d.Val()
					if d.NextArg() {
						return d.ArgErr()
					}
				default:
					return d.Errf("unrecognized cluster subdirective %q", d.Val())
				}
			}
			// A fixed entry given as a runtime placeholder ({env.X}) is
			// checked at provision time instead.
			if !strings.Contains(entry, "{") {
				if err := c.provision(caddy.NewReplacer()); err != nil {
					return d.Errf("cluster %q: %v", id, err)
				}
			}
			if a.Clusters == nil {
				a.Clusters = map[string]*Cluster{}
			}
			a.Clusters[id] = c
		default:
			return d.Errf("unrecognized sandgate subdirective %q", d.Val())
		}
	}
	return nil
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*App)(nil)
