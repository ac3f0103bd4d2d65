package provider

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
)

func TestDeclare(t *testing.T) {
	d, err := Declare(map[nodeproto.Operation]string{nodeproto.OpSuspend: "cannot snapshot memory"})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range nodeproto.Operations {
		if d.Supported(op) == (op == nodeproto.OpSuspend) {
			t.Errorf("%s: supported = %v", op, d.Supported(op))
		}
	}
	if u, ok := d.Unsupported(nodeproto.OpSuspend); !ok || u != (nodeproto.Unsupported{Operation: nodeproto.OpSuspend, Reason: "cannot snapshot memory"}) {
		t.Errorf("evidence %+v, %v", u, ok)
	}
	if d.Supported("reboot") {
		t.Error("an unknown operation is supported")
	}
	for name, bad := range map[string]map[nodeproto.Operation]string{
		"unknown operation": {"reboot": "no"},
		"empty reason":      {nodeproto.OpResume: ""},
		"control character": {nodeproto.OpResume: "a\nb"},
		"non-ASCII":         {nodeproto.OpResume: "naïve"},
		"too long":          {nodeproto.OpResume: strings.Repeat("x", nodeproto.MaxUnsupportedReason+1)},
	} {
		if _, err := Declare(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCodeOf(t *testing.T) {
	wrapped := errors.Join(errors.New("context"), Fail(nodeproto.ErrOwnership, errors.New("labels differ")))
	if got := CodeOf(wrapped); got != nodeproto.ErrOwnership {
		t.Errorf("wrapped: %q", got)
	}
	if got := CodeOf(errors.New("socket closed")); got != nodeproto.ErrUnconfirmed {
		t.Errorf("plain error: %q", got)
	}
	if s := Fail(nodeproto.ErrNotFound, nil).Error(); s != "provider: not_found" {
		t.Errorf("Error() = %q", s)
	}
}

// stub overrides the methods a test calls; any other call panics on the
// nil embedded Provider.
type stub struct {
	Provider
	decl   Declaration
	create func() (nodeproto.Info, error)
	info   func() (nodeproto.Info, error)
	calls  int
}

func (s *stub) Declaration() Declaration { return s.decl }

func (s *stub) Create(_ context.Context, _ Call, _ nodeproto.Bootstrap) (nodeproto.Info, error) {
	s.calls++
	return s.create()
}

func (s *stub) GetInfo(_ context.Context, _ Call) (nodeproto.Info, error) {
	s.calls++
	return s.info()
}

func TestExecute(t *testing.T) {
	ref := nodeproto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: "a"}
	receipt := &nodeproto.Info{Reference: ref, DeploymentGeneration: 1, State: nodeproto.StateStopped, Image: "img"}
	decl, _ := Declare(map[nodeproto.Operation]string{nodeproto.OpSuspend: "no snapshots"})
	s := &stub{decl: decl,
		create: func() (nodeproto.Info, error) {
			return nodeproto.Info{}, &Error{Code: nodeproto.ErrExists, Receipt: receipt}
		},
		info: func() (nodeproto.Info, error) {
			return nodeproto.Info{}, &Error{Code: nodeproto.ErrNotFound, Receipt: receipt}
		},
	}
	req := func(op nodeproto.Operation) *nodeproto.Request {
		return &nodeproto.Request{ID: "id-" + string(op), ConnectionID: "conn", Operation: op, Reference: ref, DeploymentGeneration: 1,
			Bootstrap: &nodeproto.Bootstrap{Image: "img"}}
	}

	resp, err := Execute(context.Background(), s, req(nodeproto.OpCreate))
	if err == nil || resp.ErrorCode != nodeproto.ErrExists || resp.Info != receipt || resp.ID != "id-create" || resp.ConnectionID != "conn" {
		t.Fatalf("create: %+v, %v", resp, err)
	}
	resp, _ = Execute(context.Background(), s, req(nodeproto.OpInfo))
	if resp.ErrorCode != nodeproto.ErrNotFound || resp.Info != nil {
		t.Fatalf("only a failed create carries a receipt: %+v", resp)
	}
	s.info = func() (nodeproto.Info, error) { return *receipt, nil }
	resp, err = Execute(context.Background(), s, req(nodeproto.OpInfo))
	if err != nil || resp.ErrorCode != "" || resp.Info == nil || *resp.Info != *receipt {
		t.Fatalf("info: %+v, %v", resp, err)
	}
	s.info = func() (nodeproto.Info, error) { return nodeproto.Info{}, errors.New("connection reset") }
	if resp, _ = Execute(context.Background(), s, req(nodeproto.OpInfo)); resp.ErrorCode != nodeproto.ErrUnconfirmed {
		t.Fatalf("an untyped error: %+v", resp)
	}
	calls := s.calls
	resp, err = Execute(context.Background(), s, req(nodeproto.OpSuspend))
	if err != nil || resp.ErrorCode != nodeproto.ErrUnsupported || resp.Unsupported == nil || resp.Unsupported.Operation != nodeproto.OpSuspend || s.calls != calls {
		t.Fatalf("undeclared: %+v, %v (calls %d → %d)", resp, err, calls, s.calls)
	}
}
