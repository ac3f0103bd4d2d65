package portroute

import (
	"net/http"
	"strings"
)

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
func HostOnlyCookies(h http.Header) {
	vals := h["Set-Cookie"]
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
