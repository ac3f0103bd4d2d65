// Package provider is the node's side of the Provider contract (spec
// node-protocol.md "Provider requests"): the interface a sandbox provider
// implements, the operation declaration it makes at start-up, the typed
// errors that become a response's error_code, and Execute, which runs one
// decoded request on a provider and builds the response.
//
// Core is the only lifecycle owner: nothing here retries an operation or
// starts work on its own.
package provider

import (
	"context"
	"errors"

	"github.com/sandgate/sandgate/node/operation"
	"github.com/sandgate/sandgate/node/proto"
)

// Call identifies what a request is about: the exact allocation reference
// and the deployment generation it belongs to.
type Call struct {
	// Reference is the request's exact (tenant_id, environment_id,
	// allocation_id).
	Reference proto.Reference
	// DeploymentGeneration is the request's deployment_generation (> 0).
	DeploymentGeneration int64
}

// Provider runs the 15 provider operations on one backend. Each method
// runs its operation once under ctx, whose deadline is the request's
// budget; it returns the operation's result (spec operation table) or an
// error. An *Error carries the response's error_code; any other error
// means the outcome is unknown and is answered with
// proto.ErrUnconfirmed (see Execute). Methods of operations the
// provider does not declare are never called.
type Provider interface {
	// Kind names the provider in hello (docker or microsandbox).
	Kind() proto.Provider
	// Declaration returns the provider's operation declaration; it must
	// not change after start-up.
	Declaration() Declaration
	// Probe checks whether the backend can take work now. It returns nil
	// when ready and otherwise an error that Diagnose classifies.
	Probe(ctx context.Context) error
	// Diagnose maps a Probe error to one fixed diagnostic code of
	// node/proto's table (never the error's text).
	Diagnose(err error) string

	// Create starts the sandbox of c from the bootstrap (result: info).
	Create(ctx context.Context, c Call, b proto.Bootstrap) (proto.Info, error)
	// GetInfo returns the sandbox as the provider sees it (result: info).
	GetInfo(ctx context.Context, c Call) (proto.Info, error)
	// Renew records a renewal of the sandbox (result: info).
	Renew(ctx context.Context, c Call) (proto.Info, error)
	// Kill ends the sandbox and everything it holds (no result).
	Kill(ctx context.Context, c Call) error
	// RunCommand runs one process in the sandbox (result: command).
	RunCommand(ctx context.Context, c Call, cmd proto.Command) (proto.CommandResult, error)
	// Observe samples the sandbox's resource use (result: sample).
	Observe(ctx context.Context, c Call, o proto.Observation) (proto.Sample, error)
	// Initial returns the sandbox's initial compute instance (result:
	// compute).
	Initial(ctx context.Context, c Call) (proto.Compute, error)
	// NewCompute starts compute generation generation, from snapshot when
	// it is not nil (result: compute).
	NewCompute(ctx context.Context, c Call, generation int64, snapshot *proto.Snapshot) (proto.Compute, error)
	// GetCompute returns the state of one compute instance (result: state).
	GetCompute(ctx context.Context, c Call, compute proto.ComputeRef) (proto.State, error)
	// KillCompute ends one compute instance (no result).
	KillCompute(ctx context.Context, c Call, compute proto.ComputeRef) error
	// ResumeCompute starts a stopped compute instance again (result:
	// state).
	ResumeCompute(ctx context.Context, c Call, compute proto.ComputeRef) (proto.State, error)
	// RunCommandCompute runs one process in one compute instance (result:
	// command).
	RunCommandCompute(ctx context.Context, c Call, compute proto.ComputeRef, cmd proto.Command) (proto.CommandResult, error)
	// Suspend writes the sandbox to a snapshot and stops it (result:
	// state).
	Suspend(ctx context.Context, c Call, s proto.Suspend) (proto.State, error)
	// Resume continues the sandbox from a snapshot, or with ObserveOnly
	// reports whether that already happened (result: state).
	Resume(ctx context.Context, c Call, r proto.Resume) (proto.State, error)
	// DeleteSnapshot removes a snapshot (no result).
	DeleteSnapshot(ctx context.Context, c Call, s proto.Snapshot) error
}

// Error is a definite provider failure: Code becomes the response's
// error_code. Receipt, set only by Create, is the exact-reference info
// receipt (CreateSettled) that proves the create attempt has a settled
// outcome although a later step failed. Cause is for the node's own log
// and never leaves the node.
type Error struct {
	// Code is the response's error_code.
	Code proto.ErrorCode
	// Receipt is the info receipt of a failed create, or nil.
	Receipt *proto.Info
	// Cause is the underlying error, or nil.
	Cause error
}

// Error returns "provider: <code>[: <cause>]". Callers must not send it to
// Core: the cause may hold backend text and host paths.
func (e *Error) Error() string {
	if e.Cause == nil {
		return "provider: " + string(e.Code)
	}
	return "provider: " + string(e.Code) + ": " + e.Cause.Error()
}

// Unwrap returns Cause.
func (e *Error) Unwrap() error { return e.Cause }

// Fail returns an *Error with code and cause (which may be nil).
func Fail(code proto.ErrorCode, cause error) *Error {
	return &Error{Code: code, Cause: cause}
}

// CodeOf returns the error_code err answers with: the Code of an *Error in
// its chain, and proto.ErrUnconfirmed for any other error (the outcome
// is unknown).
func CodeOf(err error) proto.ErrorCode {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return proto.ErrUnconfirmed
}

// Declaration is a provider's operation declaration (package
// node/operation, the registry both ends import).
type Declaration = operation.Declaration

// Declare builds and validates a declaration (operation.Declare): every
// operation supported except those in unsupported, each with its reason.
func Declare(unsupported map[proto.Operation]string) (Declaration, error) {
	return operation.Declare(unsupported)
}
