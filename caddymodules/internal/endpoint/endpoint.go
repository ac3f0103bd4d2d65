// Package endpoint holds the settings shared by sandgate's Caddy modules
// that ask an HTTP endpoint (the credential source "http" and the sandbox
// authorizer "http"): request headers, whose secret values stay out of the
// configuration (package secret), the answer cache's TTL and the request
// timeout, with their Caddyfile block.
package endpoint

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/caddymodules/internal/secret"
)

// Settings are an endpoint module's request settings; embed it in the
// module for its JSON fields.
type Settings struct {
	// Headers are sent with every request. Values may use placeholders
	// such as {env.NAME}, resolved at provision time. The value of a
	// header that carries a credential (Authorization, Cookie, or a name
	// with "token", "key", "auth", … in it: secret.SensitiveHeader) must
	// hold an {env.NAME} or {file./path} placeholder, e.g.
	// "Bearer {file./run/secrets/corectl}", so the secret stays out of the
	// configuration; a literal is refused.
	Headers http.Header `json:"headers,omitempty"`
	// CacheTTL is how long an answer is reused (the module states its
	// default and maximum).
	CacheTTL caddy.Duration `json:"cache_ttl,omitempty"`
	// Timeout bounds one request (the module states its default).
	Timeout caddy.Duration `json:"timeout,omitempty"`
}

// UnmarshalBlock reads one subdirective of the module's block at d's
// cursor, if it is one of the settings:
//
//	header <name> <value>
//	cache_ttl <duration>
//	timeout <duration>
//
// header may repeat; a sensitive header's literal value is refused. It
// reports whether the subdirective was a setting.
func (s *Settings) UnmarshalBlock(d *caddyfile.Dispenser) (bool, error) {
	switch d.Val() {
	case "header":
		var name, value string
		if err := argcount.Check(d, "header", 2, 2, "<name> <value>"); err != nil {
			return true, err
		}
		d.Args(&name, &value)
		if secret.SensitiveHeader(name) {
			if err := secret.Check("header "+name, value); err != nil {
				return true, d.Err(err.Error())
			}
		}
		if s.Headers == nil {
			s.Headers = http.Header{}
		}
		s.Headers.Add(name, value)
		return true, nil
	case "cache_ttl", "timeout":
		opt := d.Val()
		if err := argcount.Check(d, opt, 1, 1, "<duration>"); err != nil {
			return true, err
		}
		d.NextArg()
		dur, err := caddy.ParseDuration(d.Val())
		if err != nil {
			return true, d.Errf("bad %s %q: %v", opt, d.Val(), err)
		}
		target := &s.CacheTTL
		if opt == "timeout" {
			target = &s.Timeout
		}
		if *target != 0 {
			return true, d.Errf("%s already specified", opt)
		}
		*target = caddy.Duration(dur)
		return true, nil
	}
	return false, nil
}

// ResolveHeaders returns Headers with their placeholders resolved by repl;
// a sensitive header must resolve through an {env.*} or {file.*}
// placeholder (secret.Resolve). what names the module in errors; no
// value ever appears in one.
func (s *Settings) ResolveHeaders(repl *caddy.Replacer, what string) (http.Header, error) {
	out := http.Header{}
	for k, vs := range s.Headers {
		for _, v := range vs {
			if secret.SensitiveHeader(k) {
				resolved, err := secret.Resolve(repl, what+" header "+k, v)
				if err != nil {
					return nil, err
				}
				out.Add(k, resolved)
				continue
			}
			out.Add(k, repl.ReplaceAll(v, ""))
		}
	}
	return out, nil
}
