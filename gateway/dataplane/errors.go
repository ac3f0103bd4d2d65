package dataplane

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/execd"
)

// Class is the failure class of spec §3.3: "a stable request-validation,
// credential, target, network, routing, or execution error is returned".
type Class string

// The failure classes.
const (
	// ClassRequest: the request itself is malformed or unsupported.
	ClassRequest Class = "request_validation"
	// ClassCredential: the token or the resource credential it names is not
	// acceptable.
	ClassCredential Class = "credential"
	// ClassTarget: the token is valid but does not authorise this target.
	ClassTarget Class = "target"
	// ClassRouting: no route to the sandbox: the credential's cluster is not
	// configured, or the cluster's ingress cannot resolve the sandbox.
	ClassRouting Class = "routing"
	// ClassNetwork: the fixed entry or the pod behind it could not be reached
	// in time.
	ClassNetwork Class = "network"
	// ClassExecution: execd refused or failed the operation.
	ClassExecution Class = "execution"
)

// Code is a stable sandgate error code. Each code has one class, one Connect
// code (what the SDK's typed exception is derived from) and one HTTP status
// for the REST /files routes. The table is documented in docs/errors.md.
type Code string

// The stable error codes.
const (
	CodeUnsupportedOperation Code = "UNSUPPORTED_OPERATION"
	CodeUnknownRoute         Code = "UNKNOWN_ROUTE"
	CodeReservedRoute        Code = "RESERVED_ROUTE"
	CodeMethodNotAllowed     Code = "METHOD_NOT_ALLOWED"
	CodeSandboxHeaderMissing Code = "SANDBOX_HEADER_MISSING"
	CodeSandboxIDInvalid     Code = "SANDBOX_ID_INVALID"
	CodeSandboxPortInvalid   Code = "SANDBOX_PORT_INVALID"
	CodeBadRequest           Code = "BAD_REQUEST"
	CodeCanceled             Code = "CANCELED"
	CodeUserUnknown          Code = "USER_UNKNOWN"

	CodeTokenMissing          Code = "TOKEN_MISSING"
	CodeTokenInvalid          Code = "TOKEN_INVALID"
	CodeTokenExpired          Code = "TOKEN_EXPIRED"
	CodeCredentialNotFound    Code = "CREDENTIAL_NOT_FOUND"
	CodeCredentialDisabled    Code = "CREDENTIAL_DISABLED"
	CodeCredentialUnavailable Code = "CREDENTIAL_UNAVAILABLE"

	CodeTargetMismatch Code = "TARGET_MISMATCH"

	CodeClusterUnknown       Code = "CLUSTER_UNKNOWN"
	CodeSandboxNotFound      Code = "SANDBOX_NOT_FOUND"
	CodeSandboxNotReady      Code = "SANDBOX_NOT_READY"
	CodeIngressRouteRejected Code = "INGRESS_ROUTE_REJECTED"

	CodeFixedEntryUnreachable Code = "FIXED_ENTRY_UNREACHABLE"
	CodeSandboxUnreachable    Code = "SANDBOX_UNREACHABLE"
	CodeUpstreamTimeout       Code = "UPSTREAM_TIMEOUT"

	CodeExecdRejected     Code = "EXECD_REJECTED"
	CodeExecdUnauthorized Code = "EXECD_UNAUTHORIZED"
	CodeExecdFailed       Code = "EXECD_FAILED"
	CodeExecdProtocol     Code = "EXECD_PROTOCOL"
	CodeFileNotFound      Code = "FILE_NOT_FOUND"
	CodeIsADirectory      Code = "IS_A_DIRECTORY"
	CodeNotADirectory     Code = "NOT_A_DIRECTORY"
	CodeCommandTimeout    Code = "COMMAND_TIMEOUT"
)

type codeInfo struct {
	class   Class
	connect connect.Code
	rest    int
}

// codes is the single table behind Class, ConnectCode and RESTStatus.
// REST statuses follow envd's /files semantics as the SDKs map them
// (e2b-wire.md §4.1): 400 invalid argument, 401 authentication, 404 file not
// found, 502 "sandbox gone".
var codes = map[Code]codeInfo{
	CodeUnsupportedOperation: {ClassRequest, connect.Unimplemented, http.StatusNotImplemented},
	CodeUnknownRoute:         {ClassRequest, connect.Unimplemented, http.StatusNotFound},
	CodeReservedRoute:        {ClassRequest, connect.NotFound, http.StatusNotFound},
	CodeMethodNotAllowed:     {ClassRequest, connect.Unimplemented, http.StatusMethodNotAllowed},
	CodeSandboxHeaderMissing: {ClassRequest, connect.InvalidArgument, http.StatusBadRequest},
	CodeSandboxIDInvalid:     {ClassRequest, connect.InvalidArgument, http.StatusBadRequest},
	CodeSandboxPortInvalid:   {ClassRequest, connect.InvalidArgument, http.StatusBadRequest},
	CodeBadRequest:           {ClassRequest, connect.InvalidArgument, http.StatusBadRequest},
	CodeCanceled:             {ClassRequest, connect.Canceled, 499},
	CodeUserUnknown:          {ClassRequest, connect.InvalidArgument, http.StatusBadRequest},

	CodeTokenMissing:          {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized},
	CodeTokenInvalid:          {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized},
	CodeTokenExpired:          {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized},
	CodeCredentialNotFound:    {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized},
	CodeCredentialDisabled:    {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized},
	CodeCredentialUnavailable: {ClassCredential, connect.Unavailable, http.StatusServiceUnavailable},

	CodeTargetMismatch: {ClassTarget, connect.PermissionDenied, http.StatusForbidden},

	CodeClusterUnknown:       {ClassRouting, connect.Internal, http.StatusInternalServerError},
	CodeSandboxNotFound:      {ClassRouting, connect.Unavailable, http.StatusBadGateway},
	CodeSandboxNotReady:      {ClassRouting, connect.Unavailable, http.StatusServiceUnavailable},
	CodeIngressRouteRejected: {ClassRouting, connect.Internal, http.StatusInternalServerError},

	CodeFixedEntryUnreachable: {ClassNetwork, connect.Unavailable, http.StatusBadGateway},
	CodeSandboxUnreachable:    {ClassNetwork, connect.Unavailable, http.StatusBadGateway},
	CodeUpstreamTimeout:       {ClassNetwork, connect.DeadlineExceeded, http.StatusGatewayTimeout},

	CodeExecdRejected:     {ClassExecution, connect.InvalidArgument, http.StatusBadRequest},
	CodeExecdUnauthorized: {ClassExecution, connect.Internal, http.StatusInternalServerError},
	CodeExecdFailed:       {ClassExecution, connect.Internal, http.StatusInternalServerError},
	CodeExecdProtocol:     {ClassExecution, connect.Internal, http.StatusInternalServerError},
	CodeFileNotFound:      {ClassExecution, connect.NotFound, http.StatusNotFound},
	CodeIsADirectory:      {ClassExecution, connect.InvalidArgument, http.StatusBadRequest},
	CodeNotADirectory:     {ClassExecution, connect.InvalidArgument, http.StatusBadRequest},
	CodeCommandTimeout:    {ClassExecution, connect.DeadlineExceeded, http.StatusGatewayTimeout},
}

// Class returns the failure class of c.
func (c Code) Class() Class { return codes[c].class }

// ConnectCode returns the Connect code c is sent with on Connect routes.
func (c Code) ConnectCode() connect.Code { return codes[c].connect }

// RESTStatus returns the HTTP status c is sent with on the /files routes.
func (c Code) RESTStatus() int { return codes[c].rest }

// Error is a data-plane failure with its stable code. Message is shown to
// the SDK user as "<code>: <message>"; it never contains tokens or
// credentials.
type Error struct {
	Code    Code
	Message string
}

// Error returns "<code>: <message>".
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

func fail(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }

// ErrorHeader is a response header that carries the stable code of a
// failed request, for operators and logs.
const ErrorHeader = "Sandgate-Error-Code"

// shape is how an operation reports errors.
type shape int

const (
	shapeUnary  shape = iota // Connect unary: HTTP status + {"code":"<string>"}
	shapeStream              // Connect server stream: 200 + end-stream error
	shapeREST                // envd REST: HTTP status + {"code":<int>}
)

// writeError renders e in the shape the SDK decodes for this operation
// (e2b-wire.md §2.3, §4.1, §6.3).
func writeError(w http.ResponseWriter, sh shape, e *Error) {
	w.Header().Set(ErrorHeader, string(e.Code))
	msg := e.Error()
	switch sh {
	case shapeUnary:
		connect.WriteUnaryError(w, connect.Error{Code: e.Code.ConnectCode(), Message: msg})
	case shapeStream:
		_ = connect.NewStreamWriter(w).Close(&connect.Error{Code: e.Code.ConnectCode(), Message: msg})
	default:
		status := e.Code.RESTStatus()
		body, _ := json.Marshal(struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}{status, msg})
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Del("Content-Length")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// fromExecd maps an execd client error to a stable code. what names the
// operation for the message ("list /home/user").
func fromExecd(err error, what string) *Error {
	var e *execd.Error
	if !errors.As(err, &e) {
		return fail(CodeExecdProtocol, what+": "+err.Error())
	}
	switch e.Kind {
	case execd.KindUnreachable:
		return fail(CodeFixedEntryUnreachable, what+": the cluster's fixed entry could not be reached")
	case execd.KindTimeout:
		return fail(CodeUpstreamTimeout, what+": the fixed entry did not answer in time")
	case execd.KindCanceled:
		return fail(CodeUpstreamTimeout, what+": canceled")
	case execd.KindSandboxNotFound:
		return fail(CodeSandboxNotFound, what+": the sandbox is not known to its cluster's ingress")
	case execd.KindSandboxNotReady:
		return fail(CodeSandboxNotReady, what+": the sandbox is not ready")
	case execd.KindSandboxUnreachable:
		return fail(CodeSandboxUnreachable, what+": the ingress could not reach the sandbox")
	case execd.KindBadRoute:
		return fail(CodeIngressRouteRejected, what+": the ingress refused the route")
	case execd.KindUnauthorized:
		return fail(CodeExecdUnauthorized, what+": execd refused the gateway's execd access token")
	case execd.KindNotFound:
		return fail(CodeFileNotFound, what+": "+e.Message)
	case execd.KindNoRoute:
		return fail(CodeExecdProtocol, what+": execd does not serve this operation")
	case execd.KindExecd:
		if e.Status == http.StatusBadRequest {
			return fail(CodeExecdRejected, what+": "+e.Message)
		}
		return fail(CodeExecdFailed, what+": "+e.Message)
	default:
		return fail(CodeExecdProtocol, what+": "+e.Message)
	}
}
