package cidr

import "testing"

// TestBreakParseRefusesAmbiguousForms: every form ingress-nginx or a
// NetworkPolicy could read differently is refused with ErrInvalid.
func TestBreakParseRefusesAmbiguousForms(t *testing.T) {
	for _, s := range []string{
		"10.0.0.1/32,10.0.0.2", "10.0.0.1 ", " 10.0.0.1", "10.0.0.1/33", "10.0.0.1/-1", "10.0.0.1/+8",
		"010.0.0.1", "10.0.0.01", "10.0.0.1/08", "10.0.0.1/", "/8", "10.0.0", "10.0.0.0.1", "10.0.0.256",
		"::ffff:10.0.0.1", "::/0", "0x0a.0.0.1", "10.0.0.1%eth0", "10.0.0.1/32/32", "１0.0.0.1", "10.0.0.1\x00",
		"4294967295", "10.1", "10.0.0.1/32\n",
	} {
		if p, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, p)
		}
	}
	for in, want := range map[string]string{"0.0.0.0/0": "0.0.0.0/0", "10.1.2.3/0": "0.0.0.0/0", "10.0.0.1": "10.0.0.1/32", "0.0.0.0": "0.0.0.0/32"} {
		p, err := Parse(in)
		if err != nil || p.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, v := range []string{"", ",", "10.0.0.0/8,", ",10.0.0.0/8", "10.0.0.0/8,,10.0.0.1", "10.0.0.0/8 10.0.0.1", "10.0.0.0/8;10.0.0.1"} {
		if set, _, err := ParseAnnotation(v); err == nil {
			t.Errorf("ParseAnnotation(%q) = %v, want an error", v, set)
		}
	}
}
