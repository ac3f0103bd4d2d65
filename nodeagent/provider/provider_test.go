package provider

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
)

func TestDeclare(t *testing.T) {
	d, err := Declare(map[proto.Operation]string{proto.OpSuspend: "cannot snapshot memory"})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range proto.Operations {
		if d.Supported(op) == (op == proto.OpSuspend) {
			t.Errorf("%s: supported = %v", op, d.Supported(op))
		}
	}
	if u, ok := d.Unsupported(proto.OpSuspend); !ok || u != (proto.Unsupported{Operation: proto.OpSuspend, Reason: "cannot snapshot memory"}) {
		t.Errorf("evidence %+v, %v", u, ok)
	}
	if d.Supported("reboot") {
		t.Error("an unknown operation is supported")
	}
	for name, bad := range map[string]map[proto.Operation]string{
		"unknown operation": {"reboot": "no"},
		"empty reason":      {proto.OpResume: ""},
		"control character": {proto.OpResume: "a\nb"},
		"non-ASCII":         {proto.OpResume: "naïve"},
		"too long":          {proto.OpResume: strings.Repeat("x", proto.MaxUnsupportedReason+1)},
	} {
		if _, err := Declare(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCodeOf(t *testing.T) {
	wrapped := errors.Join(errors.New("context"), Fail(proto.ErrOwnership, errors.New("labels differ")))
	if got := CodeOf(wrapped); got != proto.ErrOwnership {
		t.Errorf("wrapped: %q", got)
	}
	if got := CodeOf(errors.New("socket closed")); got != proto.ErrUnconfirmed {
		t.Errorf("plain error: %q", got)
	}
	if s := Fail(proto.ErrNotFound, nil).Error(); s != "provider: not_found" {
		t.Errorf("Error() = %q", s)
	}
}

// stub overrides the methods a test calls; any other call panics on the
// nil embedded Provider.
type stub struct {
	Provider
	decl   Declaration
	create func() (proto.Info, error)
	info   func() (proto.Info, error)
	calls  int
}

func (s *stub) Declaration() Declaration { return s.decl }

func (s *stub) Create(_ context.Context, _ Call, _ proto.Bootstrap) (proto.Info, error) {
	s.calls++
	return s.create()
}

func (s *stub) GetInfo(_ context.Context, _ Call) (proto.Info, error) {
	s.calls++
	return s.info()
}

func TestExecute(t *testing.T) {
	ref := proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: "a"}
	receipt := &proto.Info{Reference: ref, DeploymentGeneration: 1, State: proto.StateStopped, Image: "img"}
	decl, _ := Declare(map[proto.Operation]string{proto.OpSuspend: "no snapshots"})
	s := &stub{decl: decl,
		create: func() (proto.Info, error) {
			return proto.Info{}, &Error{Code: proto.ErrExists, Receipt: receipt}
		},
		info: func() (proto.Info, error) {
			return proto.Info{}, &Error{Code: proto.ErrNotFound, Receipt: receipt}
		},
	}
	req := func(op proto.Operation) *proto.Request {
		return &proto.Request{ID: "id-" + string(op), ConnectionID: "conn", Operation: op, Reference: ref, DeploymentGeneration: 1,
			Bootstrap: &proto.Bootstrap{Image: "img"}}
	}

	resp, err := Execute(context.Background(), s, req(proto.OpCreate))
	if err == nil || resp.ErrorCode != proto.ErrExists || resp.Info != receipt || resp.ID != "id-create" || resp.ConnectionID != "conn" {
		t.Fatalf("create: %+v, %v", resp, err)
	}
	resp, _ = Execute(context.Background(), s, req(proto.OpInfo))
	if resp.ErrorCode != proto.ErrNotFound || resp.Info != nil {
		t.Fatalf("only a failed create carries a receipt: %+v", resp)
	}
	s.info = func() (proto.Info, error) { return *receipt, nil }
	resp, err = Execute(context.Background(), s, req(proto.OpInfo))
	if err != nil || resp.ErrorCode != "" || resp.Info == nil || *resp.Info != *receipt {
		t.Fatalf("info: %+v, %v", resp, err)
	}
	s.info = func() (proto.Info, error) { return proto.Info{}, errors.New("connection reset") }
	if resp, _ = Execute(context.Background(), s, req(proto.OpInfo)); resp.ErrorCode != proto.ErrUnconfirmed {
		t.Fatalf("an untyped error: %+v", resp)
	}
	calls := s.calls
	resp, err = Execute(context.Background(), s, req(proto.OpSuspend))
	if err != nil || resp.ErrorCode != proto.ErrUnsupported || resp.Unsupported == nil || resp.Unsupported.Operation != proto.OpSuspend || s.calls != calls {
		t.Fatalf("undeclared: %+v, %v (calls %d → %d)", resp, err, calls, s.calls)
	}
}
