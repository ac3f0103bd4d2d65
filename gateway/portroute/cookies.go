package portroute

import (
	"net/http"
	"net/textproto"
	"strings"

	"github.com/sandgate/sandgate/gateway/dataplane"
)

// GatewayHeaders are the header names only the gateway sets on what it
// answers (docs/errors.md): Sandgate-Error-Code, by which a client tells
// the gateway's own refusal (SANDBOX_NOT_FOUND, TOO_MANY_PORT_REQUESTS …)
// from an answer of the sandbox's server. ScrubAnswer removes them from a
// sandbox port's answer, so a tenant's server cannot forge a refusal.
var GatewayHeaders = []string{dataplane.ErrorHeader}

// ScrubAnswer readies h, the header of a sandbox port's answer, for the
// client: it removes the gateway's own header names (GatewayHeaders) and
// makes every cookie host-only (HostOnlyCookies). It covers a head (a
// final answer, a 1xx, a WebSocket's 101) and, called again once the body
// is copied, the trailers in h: those announced in the head and those
// under net/http's http.TrailerPrefix. Everything else is left as sent.
func ScrubAnswer(h http.Header) {
	for k, vals := range h {
		name := textproto.CanonicalMIMEHeaderKey(strings.TrimPrefix(k, http.TrailerPrefix))
		for _, g := range GatewayHeaders {
			if name == g {
				delete(h, k)
			}
		}
		if name == "Set-Cookie" {
			hostOnly(vals)
		}
	}
}

// HostOnlyCookies removes every Domain attribute from the Set-Cookie
// fields of h, the header of a sandbox port's answer (a final answer, a
// 1xx, a WebSocket's 101), and leaves everything else of each field as it
// was sent.
//
// Why: every sandbox port is a host under the same domain
// (<port>-<sandboxID>.<domain>). A cookie whose Domain is that domain (or
// any suffix of the host) is stored by a browser for the whole domain and
// sent to every other sandbox's ports, and a cookie tossed that way
// shadows another tenant's own cookie of the same name. Without a Domain
// attribute a cookie is host-only (RFC 6265 §5.3 step 6): it goes back to
// the host that set it and nowhere else. The attribute is recognised as a
// user agent does (RFC 6265 §5.2: the attribute name before "=",
// whitespace trimmed, case-insensitive), so a cookie a browser would scope
// to a domain is never passed on with that scope. Cookies set by scripts
// in the page (document.cookie) are not in any header and are not
// affected: docs/dataplane.md "Cookies" says what an operator does about
// them.
func HostOnlyCookies(h http.Header) { hostOnly(h["Set-Cookie"]) }

// hostOnly removes the Domain attributes of the Set-Cookie field values
// vals in place.
func hostOnly(vals []string) {
	for i, v := range vals {
		if !strings.Contains(strings.ToLower(v), "domain") {
			continue
		}
		parts := strings.Split(v, ";")
		kept := parts[:1] // name=value: a cookie's value holds no ';'
		for _, p := range parts[1:] {
			name, _, _ := strings.Cut(p, "=")
			if strings.EqualFold(strings.Trim(name, " \t"), "domain") {
				continue
			}
			kept = append(kept, p)
		}
		vals[i] = strings.Join(kept, ";")
	}
}
