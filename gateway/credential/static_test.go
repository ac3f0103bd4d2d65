package credential

import (
	"context"
	"errors"
	"testing"
)

// TestStatic: an in-memory source answers as File does.
func TestStatic(t *testing.T) {
	s := Static{
		"on":  {ID: "on", Enabled: true, ProjectNamespace: "ns", ClusterID: "c"},
		"off": {ID: "off", ProjectNamespace: "ns", ClusterID: "c"},
	}
	if c, err := s.Lookup(context.Background(), "on"); err != nil || c.ClusterID != "c" {
		t.Fatalf("enabled: %+v %v", c, err)
	}
	if c, err := s.Lookup(context.Background(), "off"); !errors.Is(err, ErrDisabled) || c.ID != "off" {
		t.Fatalf("disabled: %+v %v", c, err)
	}
	if _, err := s.Lookup(context.Background(), "none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}
