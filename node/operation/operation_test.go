package operation

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
)

func TestDockerDeclaration(t *testing.T) {
	d, ok := For(proto.ProviderDocker)
	if !ok {
		t.Fatal("no declaration registered for docker")
	}
	unsupported := map[proto.Operation]bool{proto.OpSuspend: true, proto.OpResume: true, proto.OpDeleteSnapshot: true}
	for _, op := range proto.Operations {
		u, isUnsupported := d.Unsupported(op)
		if isUnsupported != unsupported[op] || d.Supported(op) == unsupported[op] {
			t.Errorf("%s: unsupported = %v, want %v", op, isUnsupported, unsupported[op])
		}
		if isUnsupported && (u.Operation != op || !SafeReason(u.Reason)) {
			t.Errorf("%s: evidence %+v", op, u)
		}
	}
	if d.Supported("snapshot") {
		t.Error("an unknown operation is supported")
	}
}

func TestNoMicrosandboxDeclaration(t *testing.T) {
	if _, ok := For(proto.ProviderMicrosandbox); ok {
		t.Fatal("a microsandbox declaration is registered, but there is no microsandbox provider")
	}
	if _, ok := For("other"); ok {
		t.Fatal("a declaration for an unknown provider")
	}
}

func TestDeclareRefusals(t *testing.T) {
	for name, in := range map[string]map[proto.Operation]string{
		"unknown operation": {"snapshot": "no"},
		"empty reason":      {proto.OpKill: ""},
		"long reason":       {proto.OpKill: strings.Repeat("x", proto.MaxUnsupportedReason+1)},
		"control character": {proto.OpKill: "no\nway"},
		"non-ASCII":         {proto.OpKill: "nein ü"},
	} {
		if _, err := Declare(in); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "nein") || strings.Contains(err.Error(), "xxxx") {
			t.Errorf("%s: the error quotes the reason: %v", name, err)
		}
	}
	d, err := Declare(map[proto.Operation]string{proto.OpKill: strings.Repeat("x", proto.MaxUnsupportedReason)})
	if err != nil || d.Supported(proto.OpKill) || !d.Supported(proto.OpInfo) {
		t.Fatalf("a 256-byte reason: %v", err)
	}
}

func TestEqual(t *testing.T) {
	a, _ := Declare(map[proto.Operation]string{proto.OpKill: "a"})
	b, _ := Declare(map[proto.Operation]string{proto.OpKill: "a"})
	c, _ := Declare(map[proto.Operation]string{proto.OpKill: "b"})
	e, _ := Declare(nil)
	if !a.Equal(b) || a.Equal(c) || a.Equal(e) || !e.Equal(Declaration{}) {
		t.Fatal("Equal")
	}
}
