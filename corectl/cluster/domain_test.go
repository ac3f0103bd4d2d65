package cluster

import (
	"errors"
	"strings"
	"testing"
)

// TestDomain: a cluster without domain takes the configuration's; its
// own wins; a domain that is not a DNS subdomain is refused.
func TestDomain(t *testing.T) {
	cfg, err := Parse([]byte("domain: sbx.example.com\n" + good))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := cfg.Lookup("cluster-4"); c.Domain != "sbx.example.com" {
		t.Fatalf("inherited domain = %q", c.Domain)
	}
	own := strings.Replace(good, "    fixedEntry:", "    domain: c4.example.com\n    fixedEntry:", 1)
	if cfg, err = Parse([]byte("domain: sbx.example.com\n" + own)); err != nil {
		t.Fatal(err)
	}
	if c, _ := cfg.Lookup("cluster-4"); c.Domain != "c4.example.com" {
		t.Fatalf("own domain = %q", c.Domain)
	}
	if cfg, err = Parse([]byte(good)); err != nil {
		t.Fatal(err)
	}
	if c, _ := cfg.Lookup("cluster-4"); c.Domain != "" {
		t.Fatalf("no domain configured, got %q", c.Domain)
	}
	for _, bad := range []string{"domain: '*.sbx.example.com'\n", "domain: Sbx_Example\n", "domain: '-x.example.com'\n"} {
		if _, err := Parse([]byte(bad + good)); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "domain") {
			t.Errorf("%q: %v, want ErrInvalidConfig naming domain", bad, err)
		}
	}
}
