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
	CodeWriteTooLarge        Code = "WRITE_TOO_LARGE"

	CodeTokenMissing          Code = "TOKEN_MISSING"
	CodeTokenInvalid          Code = "TOKEN_INVALID"
	CodeTokenExpired          Code = "TOKEN_EXPIRED"
	CodeCredentialNotFound    Code = "CREDENTIAL_NOT_FOUND"
	CodeCredentialDisabled    Code = "CREDENTIAL_DISABLED"
	CodeCredentialUnavailable Code = "CREDENTIAL_UNAVAILABLE"

	CodeTargetMismatch        Code = "TARGET_MISMATCH"
	CodeSandboxDeleting       Code = "SANDBOX_DELETING"
	CodeSandboxExpired        Code = "SANDBOX_EXPIRED"
	CodeAuthorizerUnavailable Code = "AUTHORIZER_UNAVAILABLE"

	CodeClusterUnknown       Code = "CLUSTER_UNKNOWN"
	CodeSandboxNotFound      Code = "SANDBOX_NOT_FOUND"
	CodeSandboxNotReady      Code = "SANDBOX_NOT_READY"
	CodeIngressRouteRejected Code = "INGRESS_ROUTE_REJECTED"

	CodeFixedEntryUnreachable Code = "FIXED_ENTRY_UNREACHABLE"
	CodeSandboxUnreachable    Code = "SANDBOX_UNREACHABLE"
	CodeUpstreamTimeout       Code = "UPSTREAM_TIMEOUT"
	CodeGatewayBusy           Code = "GATEWAY_BUSY"
	CodeGatewayDraining       Code = "GATEWAY_DRAINING"

	CodeExecdRejected     Code = "EXECD_REJECTED"
	CodeExecdUnauthorized Code = "EXECD_UNAUTHORIZED"
	CodeExecdFailed       Code = "EXECD_FAILED"
	CodeExecdProtocol     Code = "EXECD_PROTOCOL"
	CodeFileNotFound      Code = "FILE_NOT_FOUND"
	CodeIsADirectory      Code = "IS_A_DIRECTORY"
	CodeNotADirectory     Code = "NOT_A_DIRECTORY"
	CodeCommandTimeout    Code = "COMMAND_TIMEOUT"
	CodeProcessNotFound   Code = "PROCESS_NOT_FOUND"
	CodeFileExists        Code = "FILE_EXISTS"
	CodePTYAttached       Code = "PTY_ATTACHED"
	CodeStdinUnavailable  Code = "STDIN_UNAVAILABLE"
	CodeWatcherNotFound   Code = "WATCHER_NOT_FOUND"
)

type codeInfo struct {
	class   Class
	connect connect.Code
	rest    int
	// gone: the code says the sandbox is not running (deleted, not ready,
	// its pod not answering), which GET /health reports as 502.
	gone bool
}

// codes is the single table behind Class, ConnectCode, RESTStatus and
// HealthStatus, chosen so that each code becomes the same SDK exception on
// every route of both SDKs (docs/errors.md):
//
//   - the Connect codes map through the SDKs' RPC tables (JS handleRpcError,
//     Python handle_rpc_exception): invalid_argument, unauthenticated,
//     not_found, unavailable, canceled and deadline_exceeded have typed
//     errors, everything else is the generic SandboxError/SandboxException;
//   - the REST statuses map through their REST tables (JS
//     handleEnvdApiError, Python handle_envd_api_exception), which know only
//     400, 401, 404, 429, 502 and 507: a code shown as a timeout
//     ("sandbox gone") is 502 there, never 503 or 504, which both SDKs
//     would show as a bare SandboxError;
//   - on a stream before its start event JS turns unavailable into
//     SandboxNotFoundError (handleProcessStartEvent), so there the
//     unavailable codes are sent as deadline_exceeded (see StreamCode).
var codes = map[Code]codeInfo{
	CodeUnsupportedOperation: {ClassRequest, connect.Unimplemented, http.StatusNotImplemented, false},
	CodeUnknownRoute:         {ClassRequest, connect.Unimplemented, http.StatusNotFound, false},
	CodeReservedRoute:        {ClassRequest, connect.NotFound, http.StatusNotFound, false},
	CodeMethodNotAllowed:     {ClassRequest, connect.Unimplemented, http.StatusMethodNotAllowed, false},
	CodeSandboxHeaderMissing: {ClassRequest, connect.InvalidArgument, http.StatusBadRequest, false},
	CodeSandboxIDInvalid:     {ClassRequest, connect.InvalidArgument, http.StatusBadRequest, false},
	CodeSandboxPortInvalid:   {ClassRequest, connect.InvalidArgument, http.StatusBadRequest, false},
	CodeBadRequest:           {ClassRequest, connect.InvalidArgument, http.StatusBadRequest, false},
	CodeCanceled:             {ClassRequest, connect.Canceled, 499, false},
	CodeUserUnknown:          {ClassRequest, connect.InvalidArgument, http.StatusBadRequest, false},
	// envd answers a write it has no room for with 507, which both SDKs
	// raise as NotEnoughSpaceError/NotEnoughSpaceException; 413 would be a
	// bare SandboxError. Only REST writes produce this code.
	CodeWriteTooLarge: {ClassRequest, connect.ResourceExhausted, http.StatusInsufficientStorage, false},

	CodeTokenMissing:          {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized, false},
	CodeTokenInvalid:          {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized, false},
	CodeTokenExpired:          {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized, false},
	CodeCredentialNotFound:    {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized, false},
	CodeCredentialDisabled:    {ClassCredential, connect.Unauthenticated, http.StatusUnauthorized, false},
	CodeCredentialUnavailable: {ClassCredential, connect.Unavailable, http.StatusBadGateway, false},

	CodeTargetMismatch:        {ClassTarget, connect.PermissionDenied, http.StatusForbidden, false},
	CodeSandboxDeleting:       {ClassTarget, connect.Unavailable, http.StatusBadGateway, true},
	CodeSandboxExpired:        {ClassTarget, connect.Unavailable, http.StatusBadGateway, true},
	CodeAuthorizerUnavailable: {ClassTarget, connect.Unavailable, http.StatusBadGateway, false},

	CodeClusterUnknown:       {ClassRouting, connect.Internal, http.StatusInternalServerError, false},
	CodeSandboxNotFound:      {ClassRouting, connect.Unavailable, http.StatusBadGateway, true},
	CodeSandboxNotReady:      {ClassRouting, connect.Unavailable, http.StatusBadGateway, true},
	CodeIngressRouteRejected: {ClassRouting, connect.Internal, http.StatusInternalServerError, false},

	CodeFixedEntryUnreachable: {ClassNetwork, connect.Unavailable, http.StatusBadGateway, false},
	CodeSandboxUnreachable:    {ClassNetwork, connect.Unavailable, http.StatusBadGateway, true},
	CodeUpstreamTimeout:       {ClassNetwork, connect.DeadlineExceeded, http.StatusBadGateway, false},
	// The gateway's bounds on concurrent upstream work (Config's
	// MaxUpstreamCalls…), full for the whole wait: unavailable and 502,
	// the SDKs' TimeoutError in every version ("try again later");
	// resource_exhausted would be RateLimitError in JS 2.51 but a bare
	// SandboxError in 2.25.
	CodeGatewayBusy: {ClassNetwork, connect.Unavailable, http.StatusBadGateway, false},
	// The gateway replica is shutting down (package drain): a stream or
	// transfer still running when its drain grace ran out, or one that
	// arrived after the shutdown began. unavailable and 502 like
	// GATEWAY_BUSY: the SDKs' TimeoutError, "retry", which a new call
	// does on another replica.
	CodeGatewayDraining: {ClassNetwork, connect.Unavailable, http.StatusBadGateway, false},

	CodeExecdRejected:     {ClassExecution, connect.InvalidArgument, http.StatusBadRequest, false},
	CodeExecdUnauthorized: {ClassExecution, connect.Internal, http.StatusInternalServerError, false},
	CodeExecdFailed:       {ClassExecution, connect.Internal, http.StatusInternalServerError, false},
	CodeExecdProtocol:     {ClassExecution, connect.Internal, http.StatusInternalServerError, false},
	CodeFileNotFound:      {ClassExecution, connect.NotFound, http.StatusNotFound, false},
	CodeIsADirectory:      {ClassExecution, connect.InvalidArgument, http.StatusBadRequest, false},
	CodeNotADirectory:     {ClassExecution, connect.InvalidArgument, http.StatusBadRequest, false},
	CodeCommandTimeout:    {ClassExecution, connect.DeadlineExceeded, http.StatusBadGateway, false},
	CodeProcessNotFound:   {ClassExecution, connect.NotFound, http.StatusNotFound, false},
	CodeFileExists:        {ClassExecution, connect.AlreadyExists, http.StatusConflict, false},
	// Another stream (of another replica, or of this one) holds the
	// terminal's one execd WebSocket.
	CodePTYAttached: {ClassExecution, connect.FailedPrecondition, http.StatusConflict, false},
	// SendInput's stdin or CloseStdin on a process without a writable
	// stdin: started without stdin: true, its stdin closed, or a PTY.
	CodeStdinUnavailable: {ClassExecution, connect.FailedPrecondition, http.StatusConflict, false},
	// GetWatcherEvents or RemoveWatcher of a watcher id that names none.
	CodeWatcherNotFound: {ClassExecution, connect.NotFound, http.StatusNotFound, false},
}

// Class returns the failure class of c.
func (c Code) Class() Class { return codes[c].class }

// ConnectCode returns the Connect code c is sent with on Connect routes.
func (c Code) ConnectCode() connect.Code { return codes[c].connect }

// StreamCode returns the Connect code c is sent with in the end-stream
// message of a server stream (Process/Start, Process/Connect): its
// ConnectCode, except that before the stream's start event unavailable is
// sent as deadline_exceeded. The JS SDKs turn unavailable at that point into
// SandboxNotFoundError, a NotFoundError, while every other route shows the
// code as TimeoutError; deadline_exceeded is TimeoutError in both SDKs
// there too (Python shows both codes as TimeoutException).
func (c Code) StreamCode(started bool) connect.Code {
	cc := codes[c].connect
	if !started && cc == connect.Unavailable {
		return connect.DeadlineExceeded
	}
	return cc
}

// SandboxGone reports whether c says the sandbox is not running (deleted,
// deleting, expired, not ready, its pod not answering): an answer about
// the sandbox, not a failure of the gateway or of what it depends on.
func (c Code) SandboxGone() bool { return codes[c].gone }

// RESTStatus returns the HTTP status c is sent with on the /files routes.
func (c Code) RESTStatus() int { return codes[c].rest }

// HealthStatus returns the HTTP status c is sent with on GET /health, whose
// 502 both SDKs' isRunning() read as "not running" and whose other errors
// they raise: 502 when the code says the sandbox is not running, 503 (so
// isRunning raises instead of answering false) for the other codes whose
// REST status is 502, and the REST status otherwise.
func (c Code) HealthStatus() int {
	switch info := codes[c]; {
	case info.gone:
		return http.StatusBadGateway
	case info.rest == http.StatusBadGateway:
		return http.StatusServiceUnavailable
	default:
		return info.rest
	}
}

// Error is a data-plane failure with its stable code. Message is shown to
// the SDK user as "<code>: <message>"; it never contains tokens or
// credentials.
type Error struct {
	// Code is the stable error code (see docs/errors.md).
	Code Code
	// Message says what failed, for the SDK user.
	Message string
	// cause is why a collaborator could not answer (the credential
	// source's or the authorizer's own reason, which quotes no body and no
	// header value; a broken execd stream's read error): logged with the
	// request, never sent to the SDK, where it could show internal
	// addresses.
	cause string
	// bound names the bound a GATEWAY_BUSY refusal met; "" otherwise.
	bound Bound
}

// Bound names one of the data plane's bounds on concurrent work, the
// directive that sets it: what a GATEWAY_BUSY refusal met (Outcome.Bound;
// the metric sandgate_dataplane_busy_total's label). The SDK sees one code
// for all of them (docs/errors.md); the bound tells an operator whether a
// tenant met its own share or the gateway its capacity.
type Bound string

// The bounds a GATEWAY_BUSY names (docs/dataplane.md "Bounded cost per
// request and per tenant", "Requests in progress").
const (
	// BoundRequestsPerCredential: the credential's requests in progress
	// (max_requests_per_credential); the tenant's own share.
	BoundRequestsPerCredential Bound = "max_requests_per_credential"
	// BoundRequests: the gateway's requests in progress (max_requests).
	BoundRequests Bound = "max_requests"
	// BoundUpstreamCallsPerSandbox: the sandbox's calls reading execd's
	// answers (max_upstream_calls_per_sandbox).
	BoundUpstreamCallsPerSandbox Bound = "max_upstream_calls_per_sandbox"
	// BoundUpstreamCalls: the gateway's calls reading sandboxes' answers
	// (max_upstream_calls).
	BoundUpstreamCalls Bound = "max_upstream_calls"
	// BoundProcessCallsPerCredential: the credential's process lists and
	// selections by tag (max_process_calls_per_credential).
	BoundProcessCallsPerCredential Bound = "max_process_calls_per_credential"
	// BoundLargeLinesPerSandbox: the sandbox's command output over 64
	// KiB in progress (one at a time; fixed, no directive).
	BoundLargeLinesPerSandbox Bound = "large_lines_per_sandbox"
	// BoundLargeLines: the gateway's command output over 64 KiB in
	// progress (two at a time; fixed, no directive).
	BoundLargeLines Bound = "large_lines"
	// BoundPTYStreamsPerSandbox: the sandbox's PTY streams open at this
	// gateway process (eight; fixed, no directive).
	BoundPTYStreamsPerSandbox Bound = "pty_streams_per_sandbox"
	// BoundPTYStreams: the PTY streams open at this gateway process (256;
	// fixed, no directive).
	BoundPTYStreams Bound = "pty_streams"
	// BoundWatchStreamsPerSandbox: the sandbox's directory watches
	// (Filesystem/WatchDir streams) open at this gateway process (eight;
	// fixed, no directive).
	BoundWatchStreamsPerSandbox Bound = "watch_streams_per_sandbox"
	// BoundWatchStreams: the directory watches open at this gateway
	// process (256; fixed, no directive).
	BoundWatchStreams Bound = "watch_streams"
	// BoundWatchStreamsPerCredential: the credential's directory watches
	// open at this gateway process, over all its sandboxes (64; fixed, no
	// directive), so one tenant cannot take all of watch_streams.
	BoundWatchStreamsPerCredential Bound = "watch_streams_per_credential"
	// BoundWatchersPerSandbox: the directory watchers (CreateWatcher) a
	// sandbox holds, counted in the sandbox (64; fixed, no directive).
	BoundWatchersPerSandbox Bound = "watchers_per_sandbox"
	// BoundStdinWritesPerSandbox: the sandbox's stdin writes in progress
	// at this gateway process (one at a time, in the order they came;
	// fixed, no directive).
	BoundStdinWritesPerSandbox Bound = "stdin_writes_per_sandbox"
	// BoundStdinWritesPerCredential: the credential's stdin writes in
	// progress at this gateway process, over all its sandboxes (8; fixed,
	// no directive), so one tenant cannot take all of stdin_writes.
	BoundStdinWritesPerCredential Bound = "stdin_writes_per_credential"
	// BoundStdinWrites: the stdin writes in progress at this gateway
	// process (32; fixed, no directive).
	BoundStdinWrites Bound = "stdin_writes"
)

// Bounds lists every Bound, for a metric's label values.
var Bounds = []Bound{BoundRequestsPerCredential, BoundRequests, BoundUpstreamCallsPerSandbox, BoundUpstreamCalls,
	BoundProcessCallsPerCredential, BoundLargeLinesPerSandbox, BoundLargeLines, BoundPTYStreamsPerSandbox, BoundPTYStreams,
	BoundWatchStreamsPerSandbox, BoundWatchStreamsPerCredential, BoundWatchStreams, BoundWatchersPerSandbox,
	BoundStdinWritesPerSandbox, BoundStdinWritesPerCredential, BoundStdinWrites}

// busy is GATEWAY_BUSY at bound b with msg.
func busy(b Bound, msg string) *Error { return &Error{Code: CodeGatewayBusy, Message: msg, bound: b} }

// Error returns "<code>: <message>".
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

func fail(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }

// failCause is fail with the collaborator's error err as the logged cause.
func failCause(code Code, msg string, err error) *Error {
	return &Error{Code: code, Message: msg, cause: err.Error()}
}

// ErrorHeader is a response header that carries the stable code of a
// failed request, for operators and logs.
const ErrorHeader = "Sandgate-Error-Code"

// shape is how an operation reports errors.
type shape int

const (
	shapeUnary  shape = iota // Connect unary: HTTP status + {"code":"<string>"}
	shapeStream              // Connect server stream: 200 + end-stream error
	shapeREST                // envd REST: HTTP status + {"code":<int>}
	shapeHealth              // envd GET /health: as REST, with HealthStatus
)

// writeError renders e in the shape the SDK decodes for this operation
// (docs/wire-facts.md §E2.3, §E4.1, §E6.3).
func writeError(w http.ResponseWriter, sh shape, e *Error) {
	w.Header().Set(ErrorHeader, string(e.Code))
	msg := e.Error()
	switch sh {
	case shapeUnary:
		connect.WriteUnaryError(w, connect.Error{Code: e.Code.ConnectCode(), Message: msg})
	case shapeStream:
		_ = connect.NewStreamWriter(w).Close(&connect.Error{Code: e.Code.StreamCode(false), Message: msg})
	default:
		status := e.Code.RESTStatus()
		if sh == shapeHealth {
			status = e.Code.HealthStatus()
		}
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
	var own *Error
	if errors.As(err, &own) { // the data plane's own refusal (a large line's gate)
		return own
	}
	var e *execd.Error
	if !errors.As(err, &e) {
		f := fail(CodeExecdProtocol, what+": "+err.Error())
		if u := errors.Unwrap(err); u != nil {
			f.cause = u.Error() // a broken stream's read error, for the log
		}
		return f
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
