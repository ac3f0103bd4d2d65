package dataplane

import "testing"

func TestParseFixedEntry(t *testing.T) {
	for raw, ok := range map[string]bool{
		"http://10.0.0.1:30090":          true,
		"https://entry.example.com/base": true,
		"ftp://entry.example.com":        false,
		"http://":                        false,
		"entry.example.com":              false,
		"http://entry.example.com/?a=b":  false,
		"http://entry.example.com/#f":    false,
		"http://user:pw@entry.example":   false,
		"http://[::1":                    false,
	} {
		u, err := ParseFixedEntry(raw)
		if (err == nil) != ok {
			t.Errorf("ParseFixedEntry(%q) = %v, %v; want ok=%v", raw, u, err, ok)
		}
	}
}

func TestCheckHost(t *testing.T) {
	for h, ok := range map[string]bool{
		"":                          true,
		"sandbox.cluster-a.example": true,
		"entry.example.com:30090":   true,
		"Entry.Example.com":         false,
		"entry.example.com:0":       false,
		"entry.example.com:65536":   false,
		"entry.example.com:080":     false,
		"entry_example.com":         false,
		"entry.example.com:":        false,
	} {
		got, err := CheckHost(h)
		if (err == nil) != ok || (ok && got != h) {
			t.Errorf("CheckHost(%q) = %q, %v; want ok=%v", h, got, err, ok)
		}
	}
}
