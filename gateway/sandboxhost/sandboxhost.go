// Package sandboxhost reads E2B's sandbox host names: with E2B_DOMAIN set,
// the SDKs address envd as 49983-<sandboxID>.<domain> and a sandbox port as
// <port>-<sandboxID>.<domain> (the JS SDK's getHost, the Python SDK's
// get_host). A Table holds the domains one gateway serves and parses a
// request's Host against them, before anything else is done with the
// request (docs/dataplane.md "Host routing").
//
// Grammar (case-insensitive; the Host's own :port and one trailing dot are
// ignored):
//
//	host   = port "-" id "." domain
//	port   = 1*5DIGIT, no leading zero, 1..65535
//	id     = a DNS-1123 label (the sandbox ID: [a-z0-9] with inner "-", at most 63)
//	domain = one of the table's domains, matched as a whole suffix
//
// The first "-" ends the port, so an ID may contain "-". A Host with more
// labels than one before the domain, or under no configured domain, is
// refused with ErrNotServed.
package sandboxhost

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// EnvdPort is the port of the envd data plane in a host name.
const EnvdPort = 49983

// ErrNotServed: the Host is not <port>-<id>.<domain> for a domain of the
// table. Its error text names no more than the Host's domain part.
var ErrNotServed = errors.New("sandboxhost: host not served")

// ErrInvalidDomain: NewTable was given a domain that is not a DNS name.
var ErrInvalidDomain = errors.New("sandboxhost: invalid domain")

// Target is what a sandbox host names.
type Target struct {
	// Port is the sandbox port, 1..65535; EnvdPort is envd.
	Port int
	// SandboxID is the sandbox ID, a DNS-1123 label.
	SandboxID string
	// Domain is the configured domain the host matched, lower case.
	Domain string
}

// Table is a set of served domains. The zero value serves none. It is
// immutable and safe for concurrent use.
type Table struct {
	domains []string // lower case, no trailing dot, longest first
}

var (
	labelPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	portPattern  = regexp.MustCompile(`^[1-9][0-9]{0,4}$`)
)

// NewTable returns the table of domains. Each domain is a DNS name of one
// or more labels (letters, digits, inner hyphens; at most 253 bytes),
// case-insensitive, with an optional trailing dot; duplicates are errors.
// Errors wrap ErrInvalidDomain.
func NewTable(domains []string) (*Table, error) {
	t := &Table{}
	seen := map[string]bool{}
	for _, d := range domains {
		n := strings.TrimSuffix(strings.ToLower(d), ".")
		if len(n) == 0 || len(n) > 253 {
			return nil, fmt.Errorf("%w: %q is empty or longer than 253 bytes", ErrInvalidDomain, d)
		}
		for _, l := range strings.Split(n, ".") {
			if !labelPattern.MatchString(l) {
				return nil, fmt.Errorf("%w: %q has a label that is not letters, digits and inner hyphens", ErrInvalidDomain, d)
			}
		}
		if seen[n] {
			return nil, fmt.Errorf("%w: %q is listed twice", ErrInvalidDomain, d)
		}
		seen[n] = true
		t.domains = append(t.domains, n)
	}
	// Longest first, so a.b.example wins over example for x.a.b.example.
	for i := 1; i < len(t.domains); i++ {
		for j := i; j > 0 && len(t.domains[j]) > len(t.domains[j-1]); j-- {
			t.domains[j], t.domains[j-1] = t.domains[j-1], t.domains[j]
		}
	}
	return t, nil
}

// Domains returns the served domains, lower case, longest first.
func (t *Table) Domains() []string { return append([]string(nil), t.domains...) }

// Parse reads host (a request's Host header) by the package grammar. It
// returns ErrNotServed (wrapped, with the reason) for anything else;
// the Host itself is at most 255 bytes or refused unread.
func (t *Table) Parse(host string) (Target, error) {
	if len(host) > 255+6 {
		return Target{}, fmt.Errorf("%w: the host is longer than 255 bytes", ErrNotServed)
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, d := range t.domains {
		label, ok := strings.CutSuffix(host, "."+d)
		if !ok {
			continue
		}
		portStr, id, ok := strings.Cut(label, "-")
		switch {
		case !ok || strings.Contains(label, "."):
			return Target{}, fmt.Errorf("%w: under %s the host must be <port>-<sandbox ID>.%s", ErrNotServed, d, d)
		case !portPattern.MatchString(portStr):
			return Target{}, fmt.Errorf("%w: the port is not a number 1..65535", ErrNotServed)
		case !labelPattern.MatchString(id):
			return Target{}, fmt.Errorf("%w: the sandbox ID is not a DNS-1123 label", ErrNotServed)
		}
		port, _ := strconv.Atoi(portStr)
		if port > 65535 {
			return Target{}, fmt.Errorf("%w: the port is not a number 1..65535", ErrNotServed)
		}
		return Target{Port: port, SandboxID: id, Domain: d}, nil
	}
	return Target{}, fmt.Errorf("%w: the host is under no domain this gateway serves", ErrNotServed)
}
