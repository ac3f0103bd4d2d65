package sandboxhost

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	tab, err := NewTable([]string{"sbx.example.com", "Example.COM.", "a.sbx.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	good := []struct {
		host string
		want Target
	}{
		{"49983-abc123.sbx.example.com", Target{49983, "abc123", "sbx.example.com"}},
		{"3000-abc-12.SBX.example.com:443", Target{3000, "abc-12", "sbx.example.com"}},
		{"1-x.example.com.", Target{1, "x", "example.com"}},
		{"65535-x.a.sbx.example.com", Target{65535, "x", "a.sbx.example.com"}},
	}
	for _, c := range good {
		got, err := tab.Parse(c.host)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.host, got, err, c.want)
		}
	}
	bad := []string{
		"", "example.com", "sbx.example.com", "3000.sbx.example.com", "3000-.sbx.example.com",
		"0-abc.sbx.example.com", "03000-abc.sbx.example.com", "65536-abc.sbx.example.com",
		"123456-abc.sbx.example.com", "3000-abc.x.y.example.org", "3000-ABC_.sbx.example.com",
		"3000-abc-.sbx.example.com", "x3000-abc.sbx.example.com", "3000-abc.evil.example.net",
		"3000-abc.sbx.example.com.evil.net", "b.3000-abc.sbx.example.com",
		string(make([]byte, 300)),
	}
	for _, h := range bad {
		if got, err := tab.Parse(h); !errors.Is(err, ErrNotServed) {
			t.Errorf("Parse(%q) = %+v, %v; want ErrNotServed", h, got, err)
		}
	}
}

func TestNewTableRefuses(t *testing.T) {
	for _, d := range [][]string{{""}, {"."}, {"a..b"}, {"-a.b"}, {"a_b.c"}, {"x.com", "X.com."}, {"*.x.com"}} {
		if _, err := NewTable(d); !errors.Is(err, ErrInvalidDomain) {
			t.Errorf("NewTable(%q) = %v; want ErrInvalidDomain", d, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	tab, _ := NewTable([]string{"sbx.example.com"})
	f.Add("3000-abc.sbx.example.com")
	f.Fuzz(func(t *testing.T, host string) {
		got, err := tab.Parse(host)
		if err != nil {
			return
		}
		if got.Port < 1 || got.Port > 65535 || !labelPattern.MatchString(got.SandboxID) || got.Domain != "sbx.example.com" {
			t.Fatalf("Parse(%q) = %+v", host, got)
		}
	})
}
