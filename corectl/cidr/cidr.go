// Package cidr validates and normalises the IPv4 CIDR sets of sandbox
// network policies (spec §3.1.1 I–II, §5.2): the egress allowlist compiled
// into a NetworkPolicy and the ingress allowlist written to the managed
// Ingress's nginx.ingress.kubernetes.io/whitelist-source-range annotation.
//
// Normalised form (the form every read-back comparison uses, spec §3.1.1 II
// "normalizeIPv4CIDR"): each entry is an IPv4 prefix in dotted-quad
// notation with an explicit length ("203.0.113.7" becomes
// "203.0.113.7/32"), host bits cleared ("10.1.2.3/16" becomes
// "10.1.0.0/16"), duplicates removed, sorted by address and then by prefix
// length. Normalisation never merges overlapping prefixes.
//
// Parsing is deliberately stricter than ingress-nginx's, so that a value
// ingress-nginx would read differently from us (a missing comma, a double
// mask, spaces, IPv6 or IPv4-mapped IPv6, leading zeros, a zone) is refused
// here and never reaches an object.
package cidr

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// MaxEntries is the largest number of entries a set may have, before and
// after normalisation (512). It keeps a whitelist-source-range annotation
// under 10 KiB and a NetworkPolicy well under the apiserver's object limit.
const MaxEntries = 512

// maxEntryLen is the longest valid entry, "255.255.255.255/32" (18 bytes).
const maxEntryLen = len("255.255.255.255/32")

// AnnotationSeparator joins normalised entries in a
// whitelist-source-range annotation value (no spaces).
const AnnotationSeparator = ","

// Sentinel errors; every error of this package wraps exactly one.
var (
	// ErrInvalid: an entry is not an IPv4 address or IPv4 CIDR in the
	// strict form this package accepts.
	ErrInvalid = errors.New("cidr: invalid IPv4 CIDR")
	// ErrTooMany: a set has more than MaxEntries entries.
	ErrTooMany = errors.New("cidr: too many entries")
)

// EntryError locates an invalid entry of a set. It wraps ErrInvalid.
type EntryError struct {
	// Index is the zero-based position of the entry in the input.
	Index int
	// Reason says what is wrong, without repeating more than the first
	// 40 bytes of the entry.
	Reason string
}

// Error implements error: "entry <i>: <reason>".
func (e *EntryError) Error() string {
	return fmt.Sprintf("%s: entry %d: %s", ErrInvalid.Error(), e.Index, e.Reason)
}

// Unwrap returns ErrInvalid.
func (e *EntryError) Unwrap() error { return ErrInvalid }

// Parse parses one entry: "a.b.c.d" or "a.b.c.d/n" with four decimal
// octets 0–255 without leading zeros, and n a decimal 0–32 without leading
// zeros. Nothing else is accepted: no whitespace, no IPv6 (IPv4-mapped
// included), no zone, no second mask. Host bits are cleared. The error
// wraps ErrInvalid.
func Parse(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, fmt.Errorf("%w: empty", ErrInvalid)
	}
	if len(s) > maxEntryLen {
		return netip.Prefix{}, fmt.Errorf("%w: %q is longer than %d bytes", ErrInvalid, clip(s), maxEntryLen)
	}
	slashes := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c == '.':
		case c == '/':
			slashes++
		default:
			return netip.Prefix{}, fmt.Errorf("%w: %q contains %q (only digits, '.' and one '/')", ErrInvalid, clip(s), string(rune(c)))
		}
	}
	if slashes > 1 {
		return netip.Prefix{}, fmt.Errorf("%w: %q has more than one mask", ErrInvalid, clip(s))
	}
	var p netip.Prefix
	if slashes == 0 {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%w: %q is not an IPv4 address", ErrInvalid, clip(s))
		}
		p = netip.PrefixFrom(a, 32)
	} else {
		var err error
		p, err = netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%w: %q is not an IPv4 CIDR (address/0–32)", ErrInvalid, clip(s))
		}
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%w: %q is not IPv4", ErrInvalid, clip(s))
	}
	return p.Masked(), nil
}

// ErrNotNormalized: an entry with a mask whose host bits are set
// ("10.1.2.3/16"); it wraps ErrInvalid. See CheckNormalized.
var ErrNotNormalized = fmt.Errorf("%w: host bits set", ErrInvalid)

// CheckNormalized refuses an entry that Parse would have to rewrite into
// another network: a CIDR whose host bits are set, such as "10.1.2.3/16"
// (Parse makes it "10.1.0.0/16"; the caller may have meant 10.1.2.3/32).
// It accepts an entry Parse takes as spelled: "a.b.c.d/n" with host bits
// clear, and a bare address "a.b.c.d", which denotes exactly its /32 (the
// way E2B's SDKs and this API's examples name one host). Errors: Parse's,
// or one wrapping ErrNotNormalized that names the network the entry's
// mask gives.
func CheckNormalized(s string) error {
	p, err := Parse(s)
	if err != nil {
		return err
	}
	if strings.Contains(s, "/") && p.String() != s {
		return fmt.Errorf("%w: %q is not a normalised CIDR (its network is %s)", ErrNotNormalized, clip(s), p)
	}
	return nil
}

// clip shortens s for error messages.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Compare orders prefixes by address, then by prefix length; it is the
// order of normalised sets.
func Compare(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

// NormalizePrefixes parses every entry with Parse and returns the
// normalised set (deduplicated, sorted by Compare). A nil or empty input
// gives an empty, non-nil result. Errors: *EntryError (wrapping ErrInvalid)
// for the first invalid entry, or ErrTooMany when the input has more than
// MaxEntries entries; the input is not modified.
func NormalizePrefixes(in []string) ([]netip.Prefix, error) {
	if len(in) > MaxEntries {
		return nil, fmt.Errorf("%w: %d entries, at most %d", ErrTooMany, len(in), MaxEntries)
	}
	out := make([]netip.Prefix, 0, len(in))
	for i, s := range in {
		p, err := Parse(s)
		if err != nil {
			return nil, &EntryError{Index: i, Reason: strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")}
		}
		out = append(out, p)
	}
	slices.SortFunc(out, Compare)
	return slices.Compact(out), nil
}

// Normalize is NormalizePrefixes returning the canonical strings
// ("a.b.c.d/n"). A nil or empty input gives an empty, non-nil result.
func Normalize(in []string) ([]string, error) {
	ps, err := NormalizePrefixes(in)
	if err != nil {
		return nil, err
	}
	return Strings(ps), nil
}

// Strings formats prefixes as "a.b.c.d/n", in the given order.
func Strings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// IsNormalized reports whether set is already in normalised form: every
// entry is canonical ("a.b.c.d/n", host bits clear), strictly increasing by
// Compare, and there are at most MaxEntries.
func IsNormalized(set []string) bool {
	if len(set) > MaxEntries {
		return false
	}
	var prev netip.Prefix
	for i, s := range set {
		p, err := Parse(s)
		if err != nil || p.String() != s {
			return false
		}
		if i > 0 && Compare(prev, p) >= 0 {
			return false
		}
		prev = p
	}
	return true
}

// Equal reports whether two sets are equal after normalisation. Sets that
// do not normalise (invalid entries) are never equal to anything.
func Equal(a, b []string) bool {
	na, err := Normalize(a)
	if err != nil {
		return false
	}
	nb, err := Normalize(b)
	if err != nil {
		return false
	}
	return slices.Equal(na, nb)
}

// FormatAnnotation returns the whitelist-source-range value for a set:
// the normalised entries joined by AnnotationSeparator. The error is that
// of Normalize; an empty set gives "" (callers must then omit the
// annotation: an empty value does not restrict anything).
func FormatAnnotation(set []string) (string, error) {
	n, err := Normalize(set)
	if err != nil {
		return "", err
	}
	return strings.Join(n, AnnotationSeparator), nil
}

// ParseAnnotation decodes a whitelist-source-range value written by
// FormatAnnotation (or by hand): entries separated by commas, each parsed
// with Parse after trimming spaces and tabs around it (ingress-nginx trims
// them too). It returns the normalised set and whether the value was
// already exactly in normalised form (as FormatAnnotation writes it). An
// empty value, an empty entry ("a,,b"), or any entry that Parse refuses is
// an *EntryError wrapping ErrInvalid: such a value is not a determinable
// allowlist.
func ParseAnnotation(v string) (set []string, canonical bool, err error) {
	if v == "" {
		return nil, false, &EntryError{Index: 0, Reason: "empty annotation value"}
	}
	parts := strings.Split(v, AnnotationSeparator)
	if len(parts) > MaxEntries {
		return nil, false, fmt.Errorf("%w: %d entries, at most %d", ErrTooMany, len(parts), MaxEntries)
	}
	for i := range parts {
		parts[i] = strings.Trim(parts[i], " \t")
	}
	set, err = Normalize(parts)
	if err != nil {
		return nil, false, err
	}
	return set, strings.Join(set, AnnotationSeparator) == v, nil
}

// Covers reports whether outer contains every address of inner.
func Covers(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}
