package main

import "testing"

// TestParseSize checks -memory-limit's sizes: bytes, KiB, MiB and GiB, and
// the refusal of anything else.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"64MiB": 64 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "1048576": 1 << 20} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1MiB", "64MB", "64 MiB", "MiB", "1.5GiB", "9223372036854775807GiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}
