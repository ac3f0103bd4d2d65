package cidr

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseAcceptsAndNormalises(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"203.0.113.10", "203.0.113.10/32"},
		{"203.0.113.10/32", "203.0.113.10/32"},
		{"10.1.2.3/16", "10.1.0.0/16"},
		{"0.0.0.0/0", "0.0.0.0/0"},
		{"255.255.255.255/0", "0.0.0.0/0"},
		{"192.168.1.129/25", "192.168.1.128/25"},
		{"0.0.0.0", "0.0.0.0/32"},
		{"1.2.3.4/31", "1.2.3.4/31"},
		{"1.2.3.5/31", "1.2.3.4/31"},
	} {
		p, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if p.String() != tc.want {
			t.Errorf("Parse(%q) = %s, want %s", tc.in, p, tc.want)
		}
	}
}

// TestParseRefusesWhatIngressNginxWouldMisparse lists the inputs that must
// never reach an object: each is refused with ErrInvalid.
func TestParseRefusesWhatIngressNginxWouldMisparse(t *testing.T) {
	for _, in := range []string{
		"",
		"1.2.3.4 5.6.7.8",       // missing comma
		"1.2.3.4/24/24",         // double mask
		"1.2.3.4/24,5.6.7.8",    // a list where one entry is expected
		" 1.2.3.4",              // whitespace
		"1.2.3.4\n",             // newline
		"1.2.3.4/",              // empty mask
		"/24",                   // no address
		"1.2.3.4/33",            // mask out of range
		"1.2.3.4/08",            // leading zero in mask
		"01.2.3.4",              // leading zero in octet
		"1.2.3",                 // three octets
		"1.2.3.4.5",             // five octets
		"256.1.1.1",             // octet out of range
		"::ffff:1.2.3.4",        // IPv4-mapped IPv6
		"2001:db8::/32",         // IPv6
		"1.2.3.4%eth0",          // zone
		"1.2.3.4/-1",            // sign
		"1.2.3.4/+8",            // sign
		"0x01.2.3.4",            // hex
		"1.2.3.4/255.255.255.0", // netmask form
		"1.2.3.4/32 ",           // trailing space
		"１.2.3.4",               // non-ASCII digit
		"1.2.3.4/24/",           // trailing slash
		"1.2.3.4/024",           // leading zero, long
		"255.255.255.255/320",   // too long
		"a.b.c.d",               // letters
		"1..2.3",                // empty octet
		"1.2.3.4;5.6.7.8",       // other separator
		"1.2.3.4/24,",           // trailing comma
		strings.Repeat("1", 19), // too long
		"\x001.2.3.4",           // NUL
		"1.2.3.4/3\u00a02",      // NBSP
		"10.0.0.0/8\r",          // CR
		"1.2.3.4/32/32",         // double mask, same
		"1.2.3.4,1.2.3.4",       // comma inside an entry
		"1.2.3.04",              // leading zero, last octet
		"1.2.3.4/ 8",            // space after slash
		"1.2.3.4 /8",            // space before slash
		"+1.2.3.4",              // sign in front
		"1.2.3.-4",              // negative octet
		"1.2.3.4/32\t",          // tab
		"1.2.3.4\x00/32",        // embedded NUL
		"[1.2.3.4]",             // brackets
		"1.2.3.4:80",            // port
		"http://1.2.3.4",        // URL
		"1.2.3.4/24#",           // comment
		"1.2.3.4/２４",            // full-width digits
		"1.2.3.4/24/24/24",      // triple mask
		"1.2.3.4/4294967328",    // overflow
		"0.0.0.0/00",            // leading zero on zero
		"00.0.0.0/0",            // leading zero octet
		"1.2.3.4/",              // dangling
		".1.2.3",                // leading dot
		"1.2.3.",                // trailing dot
	} {
		_, err := Parse(in)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

func TestNormalizeDedupsSortsAndReportsIndex(t *testing.T) {
	got, err := Normalize([]string{"198.51.100.7", "203.0.113.0/24", "10.0.0.1/8", "203.0.113.9/24", "10.0.0.0/8", "10.0.0.0/16", "9.255.255.255"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"9.255.255.255/32", "10.0.0.0/8", "10.0.0.0/16", "198.51.100.7/32", "203.0.113.0/24"}
	if !slices.Equal(got, want) {
		t.Fatalf("Normalize = %v, want %v", got, want)
	}
	if !IsNormalized(got) {
		t.Fatalf("IsNormalized(%v) = false", got)
	}

	empty, err := Normalize(nil)
	if err != nil || empty == nil || len(empty) != 0 {
		t.Fatalf("Normalize(nil) = %#v, %v; want empty non-nil", empty, err)
	}

	in := []string{"1.1.1.1", "2.2.2.2", "1.2.3.4/24/24"}
	before := slices.Clone(in)
	_, err = Normalize(in)
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Index != 2 || !errors.Is(err, ErrInvalid) {
		t.Fatalf("Normalize with a bad third entry = %v, want *EntryError{Index: 2} wrapping ErrInvalid", err)
	}
	if !slices.Equal(in, before) {
		t.Fatalf("Normalize modified its input: %v", in)
	}

	big := make([]string, MaxEntries+1)
	for i := range big {
		big[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	if _, err := Normalize(big); !errors.Is(err, ErrTooMany) {
		t.Fatalf("Normalize(%d entries) = %v, want ErrTooMany", len(big), err)
	}
	if _, err := Normalize(big[:MaxEntries]); err != nil {
		t.Fatalf("Normalize(%d entries) = %v, want nil", MaxEntries, err)
	}
}

func TestIsNormalizedRejectsNonCanonical(t *testing.T) {
	for _, set := range [][]string{
		{"1.2.3.4"},                     // no mask
		{"10.1.0.0/8"},                  // host bits
		{"2.2.2.2/32", "1.1.1.1/32"},    // order
		{"1.1.1.1/32", "1.1.1.1/32"},    // duplicate
		{"10.0.0.0/16", "10.0.0.0/8"},   // order by length
		{"1.1.1.1/32", "1.2.3.4/24/24"}, // invalid
		{"01.1.1.1/32"},                 // leading zero
	} {
		if IsNormalized(set) {
			t.Errorf("IsNormalized(%v) = true", set)
		}
	}
	if !IsNormalized(nil) || !IsNormalized([]string{}) {
		t.Error("IsNormalized(empty) = false")
	}
}

func TestEqualComparesNormalisedSets(t *testing.T) {
	if !Equal([]string{"1.1.1.1", "10.0.0.0/8"}, []string{"10.1.1.1/8", "1.1.1.1/32", "1.1.1.1"}) {
		t.Error("Equal of equivalent sets = false")
	}
	if Equal([]string{"1.1.1.1"}, []string{"1.1.1.2"}) {
		t.Error("Equal of different sets = true")
	}
	if Equal([]string{"bad"}, []string{"bad"}) {
		t.Error("Equal of two invalid sets = true")
	}
}

func TestAnnotationRoundTrip(t *testing.T) {
	v, err := FormatAnnotation([]string{"203.0.113.0/24", "198.51.100.7", "198.51.100.7/32"})
	if err != nil {
		t.Fatal(err)
	}
	if v != "198.51.100.7/32,203.0.113.0/24" {
		t.Fatalf("FormatAnnotation = %q", v)
	}
	set, canonical, err := ParseAnnotation(v)
	if err != nil || !canonical || !slices.Equal(set, []string{"198.51.100.7/32", "203.0.113.0/24"}) {
		t.Fatalf("ParseAnnotation(%q) = %v, %v, %v", v, set, canonical, err)
	}
	set, canonical, err = ParseAnnotation("203.0.113.0/24, 198.51.100.7")
	if err != nil || canonical || !slices.Equal(set, []string{"198.51.100.7/32", "203.0.113.0/24"}) {
		t.Fatalf("ParseAnnotation(hand-written) = %v, %v, %v; want normalised, not canonical", set, canonical, err)
	}
	for _, bad := range []string{"", "1.1.1.1,,2.2.2.2", "1.1.1.1 2.2.2.2", "1.2.3.4/24/24", "1.1.1.1,", "::1"} {
		if _, _, err := ParseAnnotation(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseAnnotation(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestCovers(t *testing.T) {
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	for _, tc := range []struct {
		outer, inner string
		want         bool
	}{
		{"10.0.0.0/8", "10.1.0.0/16", true},
		{"10.0.0.0/8", "10.0.0.0/8", true},
		{"10.1.0.0/16", "10.0.0.0/8", false},
		{"10.0.0.0/8", "11.0.0.0/16", false},
		{"0.0.0.0/0", "203.0.113.7/32", true},
	} {
		if got := Covers(p(tc.outer), p(tc.inner)); got != tc.want {
			t.Errorf("Covers(%s, %s) = %v, want %v", tc.outer, tc.inner, got, tc.want)
		}
	}
}

// nginxParse is how ingress-nginx reads one whitelist-source-range entry
// (internal/net.ParseIPNets): trim spaces, net.ParseCIDR, else net.ParseIP
// as a single address.
func nginxParse(s string) (*net.IPNet, bool) {
	s = strings.TrimSpace(s)
	if _, n, err := net.ParseCIDR(s); err == nil {
		return n, true
	}
	if ip := net.ParseIP(s); ip != nil {
		if ip4 := ip.To4(); ip4 != nil {
			return &net.IPNet{IP: ip4, Mask: net.CIDRMask(32, 32)}, true
		}
		return &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}, true
	}
	return nil, false
}

// FuzzParse checks, for any input, that an accepted entry is canonical
// after one round, stays one entry when ingress-nginx splits the annotation
// on commas, and means the same network to ingress-nginx as to us.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "10.0.0.0/8", "1.2.3.4/24/24", "1.2.3.4 5.6.7.8", "::ffff:1.2.3.4", "0.0.0.0/0", "01.2.3.4", "1.2.3.4/08", "255.255.255.255/32"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		c := p.String()
		if strings.ContainsAny(c, ", \t\n") {
			t.Fatalf("canonical %q contains a separator", c)
		}
		again, err := Parse(c)
		if err != nil || again != p {
			t.Fatalf("Parse(%q) = %v; Parse of its canonical %q = %v, %v", s, p, c, again, err)
		}
		n, ok := nginxParse(s)
		if !ok {
			t.Fatalf("we accept %q but ingress-nginx would not parse it", s)
		}
		ones, bits := n.Mask.Size()
		if bits != 32 || ones != p.Bits() || n.IP.To4() == nil || netip.AddrFrom4([4]byte(n.IP.To4())) != p.Addr() {
			t.Fatalf("%q: ingress-nginx reads %v, we read %v", s, n, p)
		}
	})
}

// FuzzParseAnnotation checks that any accepted annotation value is a
// normalised set that formats back to itself and that ingress-nginx reads
// as the same networks, entry by entry.
func FuzzParseAnnotation(f *testing.F) {
	for _, s := range []string{"1.2.3.4/32,10.0.0.0/8", "1.2.3.4 5.6.7.8", "a,,b", "1.1.1.1, 2.2.2.2", "1.2.3.4/24/24,1.1.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		set, _, err := ParseAnnotation(v)
		if err != nil {
			return
		}
		if !IsNormalized(set) {
			t.Fatalf("ParseAnnotation(%q) = %v, not normalised", v, set)
		}
		out, err := FormatAnnotation(set)
		if err != nil {
			t.Fatal(err)
		}
		set2, canonical, err := ParseAnnotation(out)
		if err != nil || !canonical || !slices.Equal(set, set2) {
			t.Fatalf("round trip of %q: %q → %v, %v, %v", v, out, set2, canonical, err)
		}
		for _, part := range strings.Split(v, ",") {
			if _, ok := nginxParse(part); !ok {
				t.Fatalf("we accept %q but ingress-nginx would not parse %q", v, part)
			}
		}
	})
}

// FuzzNormalize checks idempotence: normalising a normalised set is the
// identity.
func FuzzNormalize(f *testing.F) {
	f.Add("1.2.3.4", "1.2.3.4/32", "10.9.8.7/8")
	f.Add("0.0.0.0/0", "255.255.255.255", "1.2.3.4/24/24")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		n, err := Normalize([]string{a, b, c})
		if err != nil {
			return
		}
		n2, err := Normalize(n)
		if err != nil || !slices.Equal(n, n2) || !IsNormalized(n) {
			t.Fatalf("Normalize not idempotent: %v → %v, %v", n, n2, err)
		}
	})
}
