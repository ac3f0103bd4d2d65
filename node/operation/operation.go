// Package operation is the registry of provider operation declarations
// (spec node-protocol.md "Provider requests"): for each provider type, which
// of the 15 operations it supports, and for each unsupported one an
// authored, safe reason.
//
// Both ends import it. nodeagent validates its provider against the
// registered declaration at start-up and whenever it loads a generation,
// and answers an undeclared operation with the declaration's evidence;
// Core's proxy (package nodecore/hub) looks up the declaration of the
// provider a node named in its hello and refuses an unsupported operation
// before anything is sent ("the Core proxy uses the same registered
// declaration, so unsupported operations are rejected before node parsing
// or native I/O").
//
// The registry is fixed at build time: a provider type is added by adding
// its declaration here, in one change that both ends pick up.
package operation

import (
	"fmt"

	"github.com/sandgate/sandgate/node/proto"
)

// Declaration is a provider's operation declaration: every one of the 15
// operations is either supported or unsupported with a reason of 1..256
// bytes of printable ASCII (proto.MaxUnsupportedReason), the text sent in
// an unsupported response's evidence. The zero Declaration supports every
// operation. A Declaration is immutable and safe for concurrent use.
type Declaration struct {
	unsupported map[proto.Operation]string
}

// Declare builds a declaration in which every operation is supported
// except those in unsupported, each mapped to its reason. It validates the
// complete declaration, as node start-up must before accepting work. Errors:
// an operation that is not one of the 15, or a reason that is empty, over
// 256 bytes or not printable ASCII (the error names the operation, and
// quotes no reason).
func Declare(unsupported map[proto.Operation]string) (Declaration, error) {
	d := Declaration{unsupported: make(map[proto.Operation]string, len(unsupported))}
	for op, reason := range unsupported {
		if !op.Valid() {
			return Declaration{}, fmt.Errorf("operation: declaration names unknown operation %q", op)
		}
		if !SafeReason(reason) {
			return Declaration{}, fmt.Errorf("operation: the reason for %q must be 1..%d bytes of printable ASCII", op, proto.MaxUnsupportedReason)
		}
		d.unsupported[op] = reason
	}
	return d, nil
}

// SafeReason reports whether s may be an unsupported reason: 1..256 bytes
// of printable ASCII (0x20..0x7e), the rule of proto.Unsupported.Reason.
func SafeReason(s string) bool {
	if len(s) == 0 || len(s) > proto.MaxUnsupportedReason {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Supported reports whether op is one of the 15 operations and declared
// supported.
func (d Declaration) Supported(op proto.Operation) bool {
	_, no := d.unsupported[op]
	return op.Valid() && !no
}

// Unsupported returns the unsupported evidence for op, the exact operation
// and its fixed reason, and true; or false when op is supported or is not
// an operation.
func (d Declaration) Unsupported(op proto.Operation) (proto.Unsupported, bool) {
	reason, ok := d.unsupported[op]
	if !ok {
		return proto.Unsupported{}, false
	}
	return proto.Unsupported{Operation: op, Reason: reason}, true
}

// Equal reports whether d and o declare the same operations unsupported
// with the same reasons.
func (d Declaration) Equal(o Declaration) bool {
	if len(d.unsupported) != len(o.unsupported) {
		return false
	}
	for op, r := range d.unsupported {
		if o.unsupported[op] != r {
			return false
		}
	}
	return true
}

// The Docker provider's unsupported operations and why (fixed, safe texts
// sent in unsupported responses).
var dockerUnsupported = map[proto.Operation]string{
	proto.OpSuspend: "the docker provider cannot suspend: docker commit keeps only the filesystem, " +
		"not the processes and memory of the sandbox, so a resume could not continue where it stopped",
	proto.OpResume: "the docker provider cannot resume from a snapshot: it never writes snapshots " +
		"because docker cannot capture a running sandbox",
	proto.OpDeleteSnapshot: "the docker provider writes no snapshots, so it has none to delete",
}

// registry holds the declaration of each provider type, validated once.
var registry = func() map[proto.Provider]Declaration {
	docker, err := Declare(dockerUnsupported)
	if err != nil {
		panic(err) // a bad built-in declaration is a build defect
	}
	return map[proto.Provider]Declaration{proto.ProviderDocker: docker}
}()

// For returns the registered declaration of provider p and true, or false
// when no declaration is registered for p.
//
// Registered: docker (every operation except suspend, resume and
// delete_snapshot, which Docker cannot carry out as the spec promises).
// microsandbox has no declaration in this build: there is no microsandbox
// provider yet, so Core refuses nothing in advance for such a node, and an
// unsupported answer from it has no declaration to match and is
// unconfirmed (proto.Classify); a microsandbox provider adds its
// declaration here.
func For(p proto.Provider) (Declaration, bool) {
	d, ok := registry[p]
	return d, ok
}
