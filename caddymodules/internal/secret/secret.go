// Package secret keeps secrets out of Caddy's configuration. Caddy serves
// its whole configuration on the admin API (GET /config/) and saves it to
// autosave.json, and `caddy adapt` prints it; a Caddyfile's {$VAR} is
// expanded into it while adapting. So a secret setting of sandgate's
// modules (a cluster's execd_access_token, a secret header of the HTTP
// credential source) holds a placeholder that Caddy's replacer resolves
// when the module is provisioned, {env.NAME} or {file./path}, never the
// value itself, and a value without one is refused. This is how Caddy's
// own DNS provider modules take their API tokens.
package secret

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// ErrLiteral is the error class of a secret setting written into the
// configuration in plain text.
var ErrLiteral = errors.New("a secret must not be written into the configuration")

// Check reports whether raw, the configured value of setting, keeps its
// secret out of the configuration: it is empty (no secret), or it is
// exactly one {env.NAME} or {file./path} placeholder, optionally after an
// HTTP authentication scheme and one space ("Bearer {env.NAME}"; the
// schemes are those of authSchemes). Any other text beside the placeholder
// ("literal{file./x}") would land in the configuration as written, so it is
// refused like a plain literal. Otherwise it returns an error wrapping
// ErrLiteral that names setting and says what to write instead; the value
// is never in the error.
func Check(setting, raw string) error {
	if raw == "" || onlyPlaceholder(raw) {
		return nil
	}
	return fmt.Errorf("%s: %w (the adapted JSON is served by GET /config/ and saved to autosave.json; a Caddyfile's {$VAR} is expanded into it): give it as {env.NAME} or {file./path/to/secret}, resolved when the gateway starts",
		setting, ErrLiteral)
}

// authSchemes are the HTTP authentication schemes (lower case) that may
// precede a secret's placeholder: the scheme names no secret.
var authSchemes = map[string]bool{"bearer": true, "basic": true, "token": true, "digest": true}

// onlyPlaceholder reports whether raw is one {env.NAME} or {file./path}
// placeholder with a non-empty name and no brace inside, optionally after
// one of authSchemes and a single space.
func onlyPlaceholder(raw string) bool {
	if scheme, rest, ok := strings.Cut(raw, " "); ok {
		if !authSchemes[strings.ToLower(scheme)] {
			return false
		}
		raw = rest
	}
	inner, ok := strings.CutPrefix(raw, "{")
	if !ok {
		return false
	}
	inner, ok = strings.CutSuffix(inner, "}")
	if !ok || strings.ContainsAny(inner, "{} ") {
		return false
	}
	name, ok := strings.CutPrefix(inner, "env.")
	if !ok {
		name, ok = strings.CutPrefix(inner, "file.")
	}
	return ok && name != ""
}

// Resolve checks raw with Check and returns it with its placeholders
// resolved by repl (at Provision time). A placeholder that resolves to
// nothing (an unset variable, an unreadable or empty file) is an error
// naming the placeholder, never a value. {file.*} reads at most 1 MiB and
// drops one trailing newline (Caddy's replacer).
func Resolve(repl *caddy.Replacer, setting, raw string) (string, error) {
	if err := Check(setting, raw); err != nil || raw == "" {
		return "", err
	}
	v, err := repl.ReplaceOrErr(raw, true, true)
	if err != nil {
		return "", fmt.Errorf("%s: %w", setting, err)
	}
	return v, nil
}

// CheckURLUserInfo refuses raw, the URL of setting (e.g. "authorizer
// http"), when it carries user info (https://user:password@host/): its
// password would be a secret written into the configuration. The error
// names setting, never the URL; a URL that does not parse is left to the
// caller. Modules call it while the Caddyfile is adapted, so the URL never
// reaches the adapted JSON, and in Provision for JSON configurations.
func CheckURLUserInfo(setting, raw string) error {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return fmt.Errorf("the %s URL must not carry user info (a secret in the configuration): send it in a header with an {env.NAME} or {file./path} placeholder", setting)
	}
	return nil
}

// SensitiveHeader reports whether an HTTP header named name carries a
// credential, so that its configured value must be a placeholder:
// Authorization, Proxy-Authorization, Cookie, and any header whose name
// contains "token", "secret", "key", "auth", "password" or "session"
// (case-insensitive), e.g. X-Api-Key.
func SensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	if n == "cookie" {
		return true
	}
	for _, w := range []string{"auth", "token", "secret", "key", "password", "session"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
