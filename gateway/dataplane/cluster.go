package dataplane

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseFixedEntry parses a cluster's fixed entry, the base URL of
// Cluster.FixedEntry: an http or https URL with a host and no query,
// fragment or user info (requests go to <fixed entry>/<sandboxID>/44772/...,
// so anything after the path would be lost or misread). The errors name
// the setting fixed_entry, as the configuration spells it.
func ParseFixedEntry(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("fixed_entry must be an http:// or https:// URL with a host")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, errors.New("fixed_entry must not have a query, fragment or user info")
	}
	return u, nil
}

// CheckHost checks a cluster's Host setting (Cluster.Host): "" (the fixed
// entry's own host and port), or a lowercase DNS name (an RFC 1123
// subdomain, at most 253 characters) with an optional ":<port>" of 1 to
// 65535. It returns h unchanged, or an error naming it.
func CheckHost(h string) (string, error) {
	if h == "" {
		return "", nil
	}
	name, port := h, ""
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		name, port = h[:i], h[i+1:]
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return "", fmt.Errorf("host %q: the port must be 1 to 65535", h)
		}
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("host %q must be a lowercase DNS name (RFC 1123 subdomain), optionally with :<port>", h)
	}
	return h, nil
}
